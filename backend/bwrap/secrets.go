package bwrap

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// SystemCABundles are the places distributions keep the system's PEM
// trust bundle (Debian and Ubuntu, Fedora and RHEL, openSUSE, Alpine and
// the BSD layout, RHEL's extracted bundle). Under secrets, each that
// exists in the sandbox gets the combined bundle bound over it.
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

// SecretFacts are what a plan with secrets needs, prepared by the backend
// (Backend.prepareSecrets): nil in Host when the request has none.
type SecretFacts struct {
	// Env are "NAME=STANDIN" entries set in the sandbox.
	Env []string
	// Strip are variables removed from the sandbox's environment whatever
	// env_allow says: the env:VAR sources of the real values, and the
	// secrets' own names (set again to the stand-ins).
	Strip []string
	// Files are the file:/path sources: they read as empty in a sandbox
	// (as Host.SecretFiles).
	Files []string
	// Bundle is a host file (0644) holding the system bundle followed by
	// corral's CA certificate; "" when none could be made.
	Bundle string
	// BundleDests are the system bundle paths (SystemCABundles, symlinks
	// resolved, without repeats) that exist: Bundle is bound read-only
	// over each, and CABundleVars name the first.
	BundleDests []string
}

// planSecrets applies f to a plan: it returns the environment with the
// stripped variables removed and the entries to set, and adds the bundle
// mounts. Under other profiles than allowlist it refuses (CheckSecrets).
func (p *planner) planSecrets(env []string) ([]string, []string, error) {
	if err := sandbox.CheckSecrets(p.req.Policy); err != nil {
		return nil, nil, err
	}
	if len(p.req.Secrets) == 0 {
		return env, nil, nil
	}
	f := p.host.Secrets
	if f == nil {
		return nil, nil, fmt.Errorf("%w: the request declares secrets but the backend prepared none", sandbox.ErrBadRequest)
	}
	env = sandbox.FilterEnv(env, f.Strip)
	set := slices.Clone(f.Env)
	if f.Bundle != "" && len(f.BundleDests) > 0 {
		for _, d := range f.BundleDests {
			p.add(phaseReveal, mount{Kind: mRoBind, Src: f.Bundle, Dest: d})
		}
		p.reach = append(p.reach, f.Bundle)
		for _, v := range CABundleVars {
			set = append(set, v+"="+f.BundleDests[0])
		}
	} else {
		p.warn("secrets: no system CA bundle found (%v); clients in the sandbox will not trust corral's certificate authority", SystemCABundles)
	}
	return env, set, nil
}

// prepareSecrets resolves req's secrets (reading the real values from the
// caller's environment or files) and writes the trust bundle. Errors wrap
// sandbox.ErrBadRequest (a value cannot be read or used: the message names
// the secret, never the value) or sandbox.ErrUnavailable (no CA).
func (b *Backend) prepareSecrets(req *sandbox.Request) ([]secrets.Secret, *SecretFacts, error) {
	if len(req.Secrets) == 0 {
		return nil, nil, nil
	}
	if err := sandbox.CheckSecrets(req.Policy); err != nil {
		return nil, nil, err
	}
	penv := req.PolicyEnv
	if penv == nil {
		penv = req.Env
	}
	secs, err := secrets.Resolve(req.Secrets, func(k string) (string, bool) { return sandbox.LookupEnv(penv, k) }, secrets.ProcessKey())
	if err != nil {
		return nil, nil, err
	}
	ca, err := b.egressPool().CA()
	if err != nil {
		return nil, nil, err
	}
	f := &SecretFacts{Env: secrets.Env(secs)}
	f.Strip = append(secrets.SourceVars(req.Secrets), func() []string {
		n := make([]string, len(secs))
		for i, s := range secs {
			n[i] = s.Name
		}
		return n
	}()...)
	for _, sp := range req.Secrets {
		if p, ok := sp.FromFile(); ok {
			f.Files = append(f.Files, p)
		}
	}
	var system []byte
	for _, c := range SystemCABundles {
		r, err := filepath.EvalSymlinks(c)
		if err != nil {
			continue
		}
		if st, err := os.Stat(r); err != nil || !st.Mode().IsRegular() || slices.Contains(f.BundleDests, r) {
			continue
		}
		if system == nil {
			if system, err = os.ReadFile(r); err != nil {
				continue
			}
		}
		f.BundleDests = append(f.BundleDests, r)
	}
	if len(f.BundleDests) > 0 {
		if f.Bundle, err = writeBundle(filepath.Join(b.opts.StateDir, "trust"), system, ca.CertPEM()); err != nil {
			return nil, nil, fmt.Errorf("%w: secrets: writing the trust bundle: %v", sandbox.ErrUnavailable, err)
		}
	}
	return secs, f, nil
}

// writeBundle writes system followed by caPEM to dir/bundle-HASH.pem
// (0644: bwrap reads it as the sandbox's identity; it holds public
// certificates only), named by its content so a written bundle never
// changes under a running sandbox, and returns its path.
func writeBundle(dir string, system, caPEM []byte) (string, error) {
	data := bytes.Join([][]byte{bytes.TrimRight(system, "\n"), []byte("\n# corral sandbox CA (terminates TLS for hosts of declared secrets)\n"), caPEM}, nil)
	sum := sha256.Sum256(data)
	path := filepath.Join(dir, "bundle-"+hex.EncodeToString(sum[:8])+".pem")
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, data) {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := writeFileAtomic(path, data, 0o644); err != nil {
		return "", err
	}
	return path, nil
}
