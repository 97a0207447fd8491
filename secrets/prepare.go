package secrets

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/atomicfile"
	"github.com/corralhq/corral/sandbox"
)

// SystemCABundles are the places distributions keep the system's PEM
// trust bundle (Debian and Ubuntu, Fedora and RHEL, openSUSE, Alpine and
// the BSD layout, RHEL's extracted bundle). Under secrets, each that
// exists in the sandbox (or image) gets the combined bundle over it.
var SystemCABundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
}

// CABundleVars are the variables set, under secrets, to the combined
// bundle's path: OpenSSL and Go (SSL_CERT_FILE), Node (NODE_EXTRA_CA_CERTS,
// added to its built-in roots), Python requests (REQUESTS_CA_BUNDLE, which
// otherwise uses certifi's own bundle), curl (CURL_CA_BUNDLE), git
// (GIT_SSL_CAINFO) and pip (PIP_CERT).
var CABundleVars = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT"}

// Prepared is what every backend needs to run a request with secrets:
// the resolved secrets for its egress proxy, and what changes in the
// sandbox's environment.
type Prepared struct {
	// Secrets hold the real values: for the egress pool only (egress.Pool.Get).
	Secrets []Secret
	// Env are "NAME=STANDIN" entries set in the sandbox.
	Env []string
	// Strip are variables removed from the sandbox's environment whatever
	// env_allow says: the env:VAR sources of the real values, and the
	// secrets' own names (set again to the stand-ins).
	Strip []string
	// Files are the file:/path sources: they must read as empty in a
	// sandbox.
	Files []string
}

// Prepare checks req's secrets against its profile (sandbox.CheckSecrets)
// and reads the real values from the caller's environment
// (req.PolicyEnv, else req.Env) or files, with stand-ins made under
// ProcessKey. It returns nil, nil when req declares none. Errors wrap
// sandbox.ErrBadRequest; none holds a real value.
func Prepare(req *sandbox.Request) (*Prepared, error) {
	if len(req.Secrets) == 0 {
		return nil, nil
	}
	if err := sandbox.CheckSecrets(req.Policy); err != nil {
		return nil, err
	}
	penv := req.PolicyEnv
	if penv == nil {
		penv = req.Env
	}
	secs, err := Resolve(req.Secrets, func(k string) (string, bool) { return hostview.LookupEnv(penv, k) }, ProcessKey())
	if err != nil {
		return nil, err
	}
	return planEnv(req.Secrets, secs), nil
}

// planEnv derives the environment changes of specs, resolved as secs.
func planEnv(specs []sandbox.Secret, secs []Secret) *Prepared {
	p := &Prepared{Secrets: secs, Env: Env(secs), Strip: SourceVars(specs)}
	for _, s := range secs {
		p.Strip = append(p.Strip, s.Name)
		if s.SecretName != "" {
			p.Strip = append(p.Strip, s.SecretName)
		}
	}
	for _, sp := range specs {
		for _, src := range sp.Sources() {
			if f, ok := sandbox.SourceFile(src); ok {
				p.Files = append(p.Files, f)
			}
		}
	}
	return p
}

// BundleEnv returns the CABundleVars entries pointing at path, the
// combined bundle as the sandbox sees it.
func BundleEnv(path string) []string {
	out := make([]string, len(CABundleVars))
	for i, v := range CABundleVars {
		out[i] = v + "=" + path
	}
	return out
}

// Bundle returns the trust bundle a sandbox with secrets gets: system (a
// PEM bundle, possibly empty) followed by caPEM, corral's CA certificate.
func Bundle(system, caPEM []byte) []byte {
	return bytes.Join([][]byte{bytes.TrimRight(system, "\n"), []byte("\n# corral sandbox CA (terminates TLS for hosts of declared secrets)\n"), caPEM}, nil)
}

// HostBundles returns the entries of SystemCABundles that exist on this
// host as regular files (symlinks resolved, without repeats) and the
// content of the first; nil, nil when there is none.
func HostBundles() (dests []string, system []byte) {
	for _, c := range SystemCABundles {
		r, err := filepath.EvalSymlinks(c)
		if err != nil {
			continue
		}
		if st, err := os.Stat(r); err != nil || !st.Mode().IsRegular() || slices.Contains(dests, r) {
			continue
		}
		if system == nil {
			if system, err = os.ReadFile(r); err != nil {
				continue
			}
		}
		dests = append(dests, r)
	}
	return dests, system
}

// HostTrustBundle is HostBundles and WriteBundle(dir, system, caPEM) with
// their answer kept, for a command's hot path: it is given again while the
// host's bundles (path, size, mtime, inode as stat(2) sees them after
// their symlinks), dir, caPEM and the written file stay as they were, so
// a command costs a few stat(2) calls instead of reading and hashing the
// bundle (about 200 KiB). path is "" when the host has no bundle. Errors
// are WriteBundle's.
func HostTrustBundle(dir string, caPEM []byte) (dests []string, path string, err error) {
	key := dir + "\x00" + string(caPEM) + "\x00" + hostBundlesStamp()
	hostTrust.mu.Lock()
	defer hostTrust.mu.Unlock()
	if hostTrust.key == key {
		if _, err := os.Stat(hostTrust.path); err == nil || hostTrust.path == "" {
			return slices.Clone(hostTrust.dests), hostTrust.path, nil
		}
	}
	dests, system := HostBundles()
	if len(dests) > 0 {
		if path, err = WriteBundle(dir, system, caPEM); err != nil {
			return nil, "", err
		}
	}
	hostTrust.key, hostTrust.dests, hostTrust.path = key, dests, path
	return slices.Clone(dests), path, nil
}

// hostTrust is HostTrustBundle's kept answer.
var hostTrust struct {
	mu        sync.Mutex
	key, path string
	dests     []string
}

// hostBundlesStamp says what stat(2) sees of SystemCABundles now.
func hostBundlesStamp() string {
	return stamp(SystemCABundles)
}

// statStamp is path (symlinks resolved) with its size, inode, mtime and
// device as stat(2) sees them; "" when it cannot be resolved.
func statStamp(path string) string {
	r, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	var st syscall.Stat_t
	if syscall.Stat(r, &st) != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d:%d:%d.%d:%d;", r, st.Size, st.Ino, st.Mtim.Sec, st.Mtim.Nsec, st.Dev)
}

// WriteBundle writes Bundle(system, caPEM) to dir/bundle-HASH.pem (0644:
// a sandbox reads it under its own identity; it holds public certificates
// only, never the CA's key), named by its content so a written bundle
// never changes under a running sandbox, and returns its path. dir is made
// 0700 when missing.
func WriteBundle(dir string, system, caPEM []byte) (string, error) {
	data := Bundle(system, caPEM)
	sum := sha256.Sum256(data)
	path := filepath.Join(dir, "bundle-"+hex.EncodeToString(sum[:8])+".pem")
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, data) {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := atomicfile.Write(path, data, 0o644, false); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}
