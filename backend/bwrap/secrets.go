package bwrap

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
	"github.com/corralhq/corral/secrets/gitcred"
)

// SystemCABundles and CABundleVars are package secrets' lists (shared
// with the docker backend).
var (
	SystemCABundles = secrets.SystemCABundles
	CABundleVars    = secrets.CABundleVars
)

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
	// JavaStore is a host file (0644) holding a PKCS#12 trust store of
	// the system bundle's certificates and corral's CA
	// (secrets.TrustStore); "" when the host has no Java trust store.
	JavaStore string
	// JavaStoreDests are the Java trust stores (secrets.JavaTrustStores,
	// symlinks resolved, without repeats) that exist: JavaStore is bound
	// read-only over each, so JVMs whose cacerts lead there trust
	// corral's CA.
	JavaStoreDests []string
	// Helper is corral's helper executable on the host (Options.FindHelper,
	// else corral's own; symlinks resolved): it is bound read-only at the
	// same path in the sandbox and serves as git's credential helper there
	// (package secrets/gitcred); "" leaves git without it.
	Helper string
	// Copies are the secrets' credential files (sandbox.Secret.Files),
	// each substituted copy bound read-only over its path.
	Copies []secrets.FileCopy
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
	env = hostview.FilterEnv(env, f.Strip)
	set := slices.Clone(f.Env)
	if f.Bundle != "" && len(f.BundleDests) > 0 {
		for _, d := range f.BundleDests {
			p.add(phaseReveal, mount{Kind: mRoBind, Src: f.Bundle, Dest: d})
		}
		p.reach = append(p.reach, f.Bundle)
		for _, v := range CABundleVars {
			set = append(set, v+"="+f.BundleDests[0])
		}
	}
	if f.JavaStore != "" && len(f.JavaStoreDests) > 0 {
		for _, d := range f.JavaStoreDests {
			p.add(phaseReveal, mount{Kind: mRoBind, Src: f.JavaStore, Dest: d})
		}
		p.reach = append(p.reach, f.JavaStore)
		// Named as the trust store too, for JDKs with a cacerts of
		// their own.
		set = append(set, "JAVA_TOOL_OPTIONS="+secrets.JavaToolOptions(netproxy.JavaToolOptions(egress.HTTPPort), f.JavaStoreDests[0]))
	}
	if f.Helper != "" && filepath.IsAbs(f.Helper) {
		// Bound even where the path is visible already: the executable
		// may live under /tmp or a hidden directory (a test binary does),
		// and one more read-only bind costs nothing.
		p.add(phaseReveal, mount{Kind: mRoBind, Src: f.Helper, Dest: f.Helper})
		set = append(set, gitcred.Env(f.Helper, p.req.Secrets)...)
	}
	for _, c := range f.Copies {
		// At the file itself, and, when the entry is a symlink (a
		// ~/.netrc kept in a dotfiles directory), at the entry too: the
		// home's view may leave the link out (credential files are
		// masked), and the copy at its target alone would leave no
		// ~/.netrc to read.
		dests := []string{c.Path}
		if c.Given != "" && c.Given != c.Path {
			dests = append(dests, c.Given)
		}
		for _, d := range dests {
			if why := p.credentialFileDest(d); why != "" {
				return nil, nil, fmt.Errorf("%w: secret %s: files entry %s %s; name a file the sandbox sees (for example ~/.netrc), or drop it from files", sandbox.ErrBadRequest, c.Secret, d, why)
			}
			// Bound in the reveal phase, after the masks: the copy wins
			// over the default hiding of credential files such as
			// ~/.netrc.
			p.add(phaseReveal, mount{Kind: mRoBind, Src: c.Copy, Dest: d})
		}
	}
	if f.Bundle == "" || len(f.BundleDests) == 0 {
		p.warn("secrets: no system CA bundle found (%v); clients in the sandbox will not trust corral's certificate authority", SystemCABundles)
	}
	return env, set, nil
}

// credentialFileDest returns why a secret's credential file cannot appear
// at path r in this sandbox, or "": not in corral's own directories
// (hidden whole, and holding the real state), not in the kernel's
// filesystems (/proc, /sys, /dev, made fresh), and not in a directory the
// sandbox can write, where a command could move the bound copy aside and
// put its own file in its place.
func (p *planner) credentialFileDest(r string) string {
	for _, h := range p.host.HiddenDirs {
		if within(r, h) {
			return "lies in corral's own directory " + h
		}
	}
	for _, k := range []string{"/proc", "/sys", "/dev"} {
		if within(r, k) {
			return "lies in " + k + ", which a sandbox gets fresh from the kernel"
		}
	}
	for _, w := range p.writes {
		if within(r, w) {
			return "lies in " + w + ", which the sandbox can write"
		}
	}
	return ""
}

// secretFilesDir is where the substituted credential files are written
// (secrets.CredentialFiles): in corral's state directory, hidden from
// every sandbox.
func (b *Backend) secretFilesDir() string { return filepath.Join(b.opts.StateDir, "secretfiles") }

// ownSecretCopies gives a RunAs identity its own copy of each credential
// file the plan binds (Src in secretFilesDir; secrets.OwnCopy: NAME-uUID,
// 0600 and owned by ra), so that bwrap, holding ra, can open it and no
// other identity can read it.
func (b *Backend) ownSecretCopies(plan *Plan, ra sandbox.RunAs) error {
	dir := b.secretFilesDir()
	for i, m := range plan.Mounts {
		if m.Kind != mRoBind || filepath.Dir(m.Src) != dir {
			continue
		}
		own, err := secrets.OwnCopy(m.Src, ra.UID, ra.GID)
		if err != nil {
			return fmt.Errorf("%w: secrets: a credential file for %s: %v", sandbox.ErrUnavailable, ra, err)
		}
		plan.Mounts[i].Src = own
	}
	return nil
}

// prepareSecrets resolves req's secrets (secrets.Prepare: reading the
// real values from the caller's environment or files) and writes the
// trust bundle and, where the host has a Java trust store, a trust store
// for JVMs (secrets.HostJavaTrust). Errors wrap sandbox.ErrBadRequest (a
// value cannot be read or used: the message names the secret, never the
// value) or sandbox.ErrUnavailable (no CA).
func (b *Backend) prepareSecrets(req *sandbox.Request) ([]secrets.Secret, *SecretFacts, error) {
	prep, err := secrets.Prepare(req)
	if err != nil || prep == nil {
		return nil, nil, err
	}
	ca, err := b.egressPool().CA()
	if err != nil {
		return nil, nil, err
	}
	f := &SecretFacts{Env: prep.Env, Strip: prep.Strip, Files: prep.Files}
	if f.BundleDests, f.Bundle, err = secrets.HostTrustBundle(filepath.Join(b.opts.StateDir, "trust"), ca.CertPEM()); err != nil {
		return nil, nil, fmt.Errorf("%w: secrets: writing the trust bundle: %v", sandbox.ErrUnavailable, err)
	}
	if f.JavaStoreDests, f.JavaStore, err = secrets.HostJavaTrust(filepath.Join(b.opts.StateDir, "trust"), ca.CertPEM()); err != nil {
		return nil, nil, fmt.Errorf("%w: secrets: writing the Java trust store: %v", sandbox.ErrUnavailable, err)
	}
	f.Helper = b.helperExecutable()
	if slices.ContainsFunc(req.Secrets, func(s sandbox.Secret) bool { return len(s.Files) > 0 }) {
		home, _ := os.UserHomeDir()
		if r, err := filepath.EvalSymlinks(home); err == nil {
			home = r
		}
		if f.Copies, err = secrets.CredentialFiles(b.secretFilesDir(), home, req.Secrets, prep.Secrets); err != nil {
			return nil, nil, err
		}
	}
	return prep.Secrets, f, nil
}

// helperExecutable returns the executable that serves the helper modes
// inside sandboxes (Options.FindHelper, else corral's own), symlinks
// resolved (SecretFacts.Helper), or "" when it cannot be found.
func (b *Backend) helperExecutable() string {
	exe := ""
	if b.opts.FindHelper != nil {
		exe = b.opts.FindHelper()
		b.helperFound.Store(true)
	}
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return ""
		}
	}
	r, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return ""
	}
	return r
}

// helperIfFound is helperExecutable when the helper was asked for already
// in this process, else "": what Host.PinFiles pins besides corral's own
// executable, without making a command that needs no helper look for one.
func (b *Backend) helperIfFound() string {
	if !b.helperFound.Load() {
		return ""
	}
	return b.helperExecutable()
}
