package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
	"github.com/corralhq/corral/secrets/gitcred"
)

// Paths in the pod under the allowlist profile: the files in the HelperDir
// emptyDir (the root filesystem is read-only, so nothing can be placed
// over the image's own trust bundles as the docker backend binds them;
// HelperDir is read-only for the commands), the sockets in an emptyDir of
// their own.
var (
	// NetDir holds the tunnel's sockets (inside/tunnel): http.sock and
	// socks.sock, where the docker container's forwarder finds corral's
	// proxy. The tunnel runs in the commands' container and makes them,
	// so this emptyDir is writable there; HelperDir, read-only there,
	// cannot hold it.
	NetDir = "/.corral-net"
	// TrustBundle is the trust bundle of a pod with secrets: the image's
	// system bundle (else the host's) followed by corral's CA
	// certificate; secrets.CABundleVars point at it.
	TrustBundle = HelperDir + "/trust/ca-bundle.pem"
	// JavaTrustStore is the same certificates as a PKCS#12 trust store
	// (secrets.TrustStore), named by JAVA_TOOL_OPTIONS.
	JavaTrustStore = HelperDir + "/trust/cacerts"
	// NodeShimPath is the Node preload (netproxy.NodeShim) that
	// NODE_OPTIONS names; /dev, where the other backends bind it
	// (egress.NodeShimDir), is the runtime's and not writable here.
	NodeShimPath = HelperDir + "/node/" + netproxy.NodeShimName
)

// egressPlan is what the allowlist profile adds to a pod: the proxy's
// policy and, with secrets, what they change.
type egressPlan struct {
	policy netproxy.Policy
	// prep holds the secrets (real values: for the proxy only); nil
	// without secrets.
	prep *secrets.Prepared
	// files are the secrets' credential files (podFiles).
	files []podFile
	// key identifies the plan in the pod's settings hash: the allow and
	// deny entries and the secrets' names, hosts and stand-ins (never a
	// real value).
	key string
}

// planEgress returns req's egress plan: nil (and no error) unless the
// profile is allowlist. Secrets under another profile are refused
// (sandbox.CheckSecrets), with an error wrapping sandbox.ErrBadRequest. A
// secret's hosts are allowed egress, as on the other backends. Its
// credential files are copied with stand-ins into filesDir
// (secrets.CredentialFiles) and read back for the pod (podFiles).
func planEgress(req *sandbox.Request, filesDir string) (*egressPlan, error) {
	if err := sandbox.CheckSecrets(req.Policy); err != nil {
		return nil, err
	}
	if req.Profile != sandbox.ProfileAllowlist {
		return nil, nil
	}
	pol := netproxy.Policy{Allow: append(slices.Clone(req.NetworkAllow), sandbox.SecretHosts(req.Secrets)...), Deny: req.NetworkDeny}
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("%w: network allowlist: %w", sandbox.ErrBadRequest, err)
	}
	prep, err := secrets.Prepare(req)
	if err != nil {
		return nil, err
	}
	files, err := podFiles(req, prep, filesDir)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "allow=%q deny=%q\n", pol.Allow, pol.Deny)
	if prep != nil {
		for _, s := range prep.Secrets {
			fmt.Fprintf(h, "%s|%q|%q|%s|%s|%s\n", s.Name, s.Hosts, s.Headers, s.StandIn, s.SecretName, s.SecretStandIn)
		}
	}
	for _, f := range files {
		// The stand-in copy's content: a changed file makes a new pod,
		// as a changed secret does.
		fmt.Fprintf(h, "file %s %x\n", f.dest, sha256.Sum256(f.data))
	}
	return &egressPlan{policy: pol, prep: prep, files: files, key: hex.EncodeToString(h.Sum(nil))[:16]}, nil
}

// podFile is one of a secret's credential files as a pod gets it.
type podFile struct {
	// secret and given name it in messages (given: the host path, "~/"
	// expanded).
	secret, given string
	// dest is its path in the pod: below HOME (Home), where the caller's
	// home has it (secrets.HomeDest).
	dest string
	// data is the copy's content: the file with stand-ins for the real
	// values (secrets.CredentialFiles checks that none survived).
	data []byte
}

// podFiles returns the credential files of req's secrets (nil when none
// lists files): each copied with stand-ins into dir, on the host, then
// read back, to be copied into the pod (Engine.prepareEgress). Only files
// of the caller's home can be given: a pod's root filesystem is
// read-only, so a file elsewhere (/etc/npmrc) is refused, naming it.
// Errors wrap sandbox.ErrBadRequest (secrets.ErrUnusable: the entry is
// named, never a value) or sandbox.ErrUnavailable.
func podFiles(req *sandbox.Request, prep *secrets.Prepared, dir string) ([]podFile, error) {
	if !slices.ContainsFunc(req.Secrets, func(s sandbox.Secret) bool { return len(s.Files) > 0 }) {
		return nil, nil
	}
	if dir == "" {
		return nil, fmt.Errorf("%w: kubernetes backend: secrets with files need a directory for their copies (Options.SecretFilesDir), and none was configured", sandbox.ErrUnavailable)
	}
	home, _ := os.UserHomeDir()
	homeReal := home
	if r, err := filepath.EvalSymlinks(home); err == nil {
		homeReal = r
	}
	copies, err := secrets.CredentialFiles(dir, homeReal, req.Secrets, prep.Secrets)
	if err != nil {
		return nil, err
	}
	var out []podFile
	for _, c := range copies {
		dest, inHome := secrets.HomeDest(c.Given, home, homeReal, Home)
		if !inHome {
			return nil, fmt.Errorf("%w: kubernetes backend: secret %s's file %s is not in your home directory: a pod's root filesystem is read-only, so only files of the home can be given (they appear below HOME, %s)", sandbox.ErrBadRequest, c.Secret, c.Given, Home)
		}
		data, err := os.ReadFile(c.Copy)
		if err != nil {
			return nil, fmt.Errorf("%w: secret %s: reading the copy of %s: %v", sandbox.ErrUnavailable, c.Secret, c.Given, err)
		}
		out = append(out, podFile{secret: c.Secret, given: c.Given, dest: dest, data: data})
	}
	return out, nil
}

// proxyEnv is what every command of an allowlist pod gets: egress.Env's
// variables (HTTP(S)_PROXY, ALL_PROXY, NO_PROXY, npm, pip, yarn, Java)
// with the Node preload at NodeShimPath; with secrets also the trust
// bundle's variables (secrets.BundleEnv), JAVA_TOOL_OPTIONS naming
// JavaTrustStore, and corral's git credential helper (gitcred.Env).
func proxyEnv(specs []sandbox.Secret) []string {
	env := netproxy.ProxyEnv(egress.HTTPPort, egress.SOCKSPort, NodeShimPath)
	if len(specs) == 0 {
		return env
	}
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "JAVA_TOOL_OPTIONS="); ok {
			// JVMs read the default store's place from properties only.
			env[i] = "JAVA_TOOL_OPTIONS=" + v + " -Djavax.net.ssl.trustStore=" + JavaTrustStore + " -Djavax.net.ssl.trustStoreType=PKCS12"
		}
	}
	env = append(env, secrets.BundleEnv(TrustBundle)...)
	return append(env, gitcred.Env(inside.Path, specs)...)
}

// withoutProxyEnv returns env without the entries proxyEnv (with and
// without secrets) or egress.Env set, where they still hold those
// values: a session that ran under allowlist saved them, and they must
// not follow it to another profile.
func withoutProxyEnv(env []string, specs []sandbox.Secret) []string {
	ours := append(proxyEnv(specs), proxyEnv(nil)...)
	return egress.WithoutEnv(slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return slices.Contains(ours, kv)
	}))
}
