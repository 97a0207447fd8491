package bwrap

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/toolcache"
)

// toolCache binds req.CacheDir read-write at its own path and returns it
// (resolved), or "" when there is none or the profile writes nothing
// (restricted: tmpCacheEnv points the tools into /tmp). It lies in corral's state
// directory, which is hidden whole, so only this one directory of it is
// shown: one that lies elsewhere, or overlaps another writable directory of
// the sandbox (a command could swap it for a symlink before the next
// command), is refused with an error wrapping sandbox.ErrPolicy.
func (p *planner) toolCache(profile sandbox.Profile, scratch, sessionHome string) (string, error) {
	c := p.req.CacheDir
	if c == "" || !profile.Writable() {
		return "", nil
	}
	if !filepath.IsAbs(c) {
		return "", fmt.Errorf("%w: tool cache directory %q is not absolute", sandbox.ErrBadRequest, c)
	}
	r, err := p.res.EvalSymlinks(c)
	if err != nil || !p.res.IsDir(r) {
		return "", fmt.Errorf("%w: tool cache directory %s is missing or not a directory", sandbox.ErrPolicy, c)
	}
	if !slices.ContainsFunc(p.host.HiddenDirs, func(h string) bool { return within(r, h) && r != h }) {
		return "", fmt.Errorf("%w: tool cache directory %s lies outside corral's own directories", sandbox.ErrPolicy, r)
	}
	for _, w := range append(slices.Clone(p.writes), scratch, sessionHome) {
		if w != "" && (within(r, w) || within(w, r)) {
			return "", fmt.Errorf("%w: tool cache directory %s overlaps %s, which the sandbox writes too", sandbox.ErrPolicy, r, w)
		}
	}
	p.add(phaseReveal, mount{Kind: mBind, Src: r, Dest: r})
	p.cargoConfig(r)
	return r, nil
}

// cargoConfig binds the user's cargo configuration (config.toml, or the
// older config, in CARGO_HOME or ~/.cargo) read-only where cargo looks for
// it once CARGO_HOME is the cache's: cargo reads CARGO_HOME's after the
// .cargo/config.toml files of the working directory and its parents, so a
// project outside the home directory would lose the user's settings
// (source replacement, registries, build flags) otherwise. A config that is
// hidden in the sandbox stays hidden. The mount point is made by bwrap in
// the cache; one a command replaced with anything but a regular file is
// left alone, with a warning.
func (p *planner) cargoConfig(cache string) {
	home := ""
	if v, ok := hostview.LookupEnv(p.policyEnv(), "CARGO_HOME"); ok && filepath.IsAbs(v) {
		home = filepath.Clean(v)
	} else if p.host.Home != "" && p.host.Home != "/" {
		home = filepath.Join(p.host.Home, ".cargo")
	}
	dst := filepath.Join(cache, toolcache.CargoSub)
	if home == "" || within(home, cache) {
		return
	}
	if st, err := p.res.Lstat(dst); err == nil && !st.IsDir() {
		p.warn("your cargo configuration is not shown to cargo in the sandbox: %s is not a directory (`corral cache prune` empties the cache)", dst)
		return
	}
	for _, name := range toolcache.CargoConfigs {
		r, err := p.res.EvalSymlinks(filepath.Join(home, name))
		if err != nil {
			continue
		}
		if st, err := p.res.Stat(r); err != nil || !st.Mode().IsRegular() || p.hidden(r) || !p.visible(r) {
			continue
		}
		d := filepath.Join(dst, name)
		if st, err := p.res.Lstat(d); err == nil && !st.Mode().IsRegular() {
			p.warn("your cargo configuration %s is not shown to cargo in the sandbox: %s is not a regular file (`corral cache prune` empties the cache)", r, d)
			continue
		}
		p.add(phaseReveal, mount{Kind: mRoBind, Src: r, Dest: d})
	}
}

// tmpCache is where the tools' caches go in a sandbox that writes no
// cache of corral's (restricted, whose working directory is read-only
// too): the command's fresh /tmp, where an agent then works, so npm
// install, go build and pip work there and keep nothing. It is the docker
// backend's cache directory too (docker.CacheDir).
const tmpCache = "/tmp/.toolcache"

// tmpCacheEnv returns the tools' variables pointed into tmpCache
// (cacheEnv's rules), all but CARGO_HOME: cargo reads the user's
// configuration there, and a build without downloads (all that an
// offline sandbox can do) writes nothing to it.
func (p *planner) tmpCacheEnv(scratch, sessionHome string, env []string) []string {
	return slices.DeleteFunc(p.cacheEnv(tmpCache, scratch, sessionHome, false, env), func(kv string) bool {
		return strings.HasPrefix(kv, "CARGO_HOME=")
	})
}

// cacheEnv returns the tool cache's variables for env, the command's
// filtered environment (toolcache.Env). A value the command's environment
// sets is kept when the sandbox can write it (the working directory and
// read-write binds, the scratch directory and session home when writable,
// the cache itself, /tmp and /dev/shm) and it lies in none of the tools'
// default caches in the home directory (toolcache.HomeCaches). Go's modules are seeded from the host's module cache when the
// sandbox can read it, unless the GOPROXY that would follow carries a
// credential.
func (p *planner) cacheEnv(cache, scratch, sessionHome string, writable bool, env []string) []string {
	roots := append(slices.Clone(p.writes), cache, "/tmp", "/dev/shm")
	if writable {
		for _, d := range []string{scratch, sessionHome} {
			if d != "" {
				roots = append(roots, d)
			}
		}
	}
	// Resolved only when a value must be judged (toolcache.Env spares
	// those it would set anyway).
	hostCaches := sync.OnceValue(func() []string {
		hc := toolcache.HomeCaches(p.host.Home)
		for _, h := range slices.Clone(hc) {
			if r, err := p.res.EvalSymlinks(h); err == nil && r != h {
				hc = append(hc, r)
			}
		}
		return hc
	})
	keep := func(v string) bool {
		if r, err := p.res.EvalSymlinks(v); err == nil {
			v = r
		}
		if slices.ContainsFunc(hostCaches(), func(h string) bool { return within(v, h) }) {
			return false
		}
		return slices.ContainsFunc(roots, func(w string) bool { return within(v, w) })
	}
	mod, proxy := toolcache.HostGo(p.policyEnv(), p.host.Home)
	seed := ""
	if mod != "" {
		if r, err := p.res.EvalSymlinks(filepath.Join(mod, "cache", "download")); err == nil && p.readable(r) {
			seed = r
		}
	}
	if _, secret := hostview.CredentialInValue(proxy); secret {
		seed = ""
	}
	return toolcache.Env(toolcache.Options{Root: cache, Env: env, Keep: keep, GoSeed: seed, GoProxy: proxy})
}

// readable reports whether the sandbox can list directory r (resolved): it
// is shown, and the identity that holds the sandbox may read and enter it.
// When corral runs as root that identity is an unprivileged one (run_as),
// which the directories on the way to a mounted path let through (see
// runas.go); below the deepest mount that holds r, every directory must let
// others in, since run_as may be any user.
func (p *planner) readable(r string) bool {
	if p.hidden(r) || !p.visible(r) || !p.res.IsDir(r) {
		return false
	}
	if p.host.UID != 0 {
		return unix.Access(r, unix.R_OK|unix.X_OK) == nil
	}
	base := "/"
	for _, b := range p.bound {
		if within(r, b) && len(b) > len(base) {
			base = b
		}
	}
	for d := r; ; d = filepath.Dir(d) {
		st, err := p.res.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 || d == r && st.Mode().Perm()&0o004 == 0 {
			return false
		}
		if d == base || d == "/" {
			return true
		}
	}
}
