// Package toolcache points the common toolchains' download and build
// caches (npm, yarn, pnpm, pip, uv, Go, cargo, Gradle, Maven) at a
// directory of corral's own, so that package installs and builds work in a
// sandbox whose home directory is read-only, and so that no sandbox writes
// the host's own caches (~/.npm, ~/.cache/go-build, ~/go/pkg/mod,
// ~/.cargo/registry, ~/.cache/pip, ~/.m2, ~/.gradle): a poisoned build or
// module cache would run the sandbox's code on the host later.
//
// The directory is the tool_caches setting's (config.ToolCachesShared, ...):
// one per user under corral's state directory (Dir), shared by every
// session, or one per session. The backends bind it into the sandbox and
// set the tools' own variables with Env; what a caller set itself to a path
// the sandbox can write is kept.
package toolcache

import (
	"path/filepath"
	"slices"
	"strings"
)

// Dir returns the shared cache directory of the state directory stateDir
// (config.StateDir): stateDir/cache. It does not create it.
func Dir(stateDir string) string { return filepath.Join(stateDir, "cache") }

// Var is one variable that moves a tool's cache.
type Var struct {
	// Name is the variable, as the tool reads it.
	Name string
	// Sub is the subdirectory of the cache directory it points at.
	Sub string
}

// Vars are the variables Env sets, each to its own subdirectory.
// CARGO_HOME holds cargo's configuration and the programs `cargo install`
// makes as well as its registry: the user's config.toml is bound there
// read-only by the bwrap backend, and ~/.cargo/bin stays on PATH as it was.
// GRADLE_USER_HOME likewise holds gradle.properties and init scripts, which
// are not carried over (gradle.properties reads as empty in a sandbox
// anyway: it often holds credentials). GOPATH holds the checksum
// database's cache (GOPATH/pkg/sumdb, which a fresh user's go creates
// under ~/go: read-only in a sandbox, and a poisoned one would weaken the
// host's module verification) and what `go install` makes (GOPATH/bin,
// not on PATH). pnpm's store follows PNPM_HOME
// (PNPM_HOME/store): pnpm's own store-dir variable, npm_config_store_dir,
// makes npm warn about an unknown setting at every command.
var Vars = []Var{
	{"npm_config_cache", "npm"},
	{"YARN_CACHE_FOLDER", "yarn"},
	{"PNPM_HOME", "pnpm"},
	{"PIP_CACHE_DIR", "pip"},
	{"UV_CACHE_DIR", "uv"},
	{"GOCACHE", "go-build"},
	{"GOMODCACHE", "go-mod"},
	{"GOPATH", "go-path"},
	{"CARGO_HOME", "cargo"},
	{"GRADLE_USER_HOME", "gradle"},
}

// Maven has no variable of its own for its local repository: Env adds
// -Dmaven.repo.local=DIR/m2 to MAVEN_OPTS, which every mvn reads (MAVEN_ARGS
// needs Maven 3.9).
const (
	mavenVar   = "MAVEN_OPTS"
	mavenFlag  = "-Dmaven.repo.local="
	mavenSub   = "m2"
	goProxyVar = "GOPROXY"
	// goDefaultProxy is GOPROXY's value when nothing sets it (go help
	// environment).
	goDefaultProxy = "https://proxy.golang.org,direct"
)

// CargoConfigs are the names cargo reads its configuration from in
// CARGO_HOME, newest first.
var CargoConfigs = []string{"config.toml", "config"}

// CargoSub is CARGO_HOME's subdirectory of the cache directory.
const CargoSub = "cargo"

// Options are what Env needs to know about one sandbox.
type Options struct {
	// Root is the cache directory as the sandbox sees it (absolute, clean).
	Root string
	// Env is the command's environment after the environment policy
	// (hostview.FilterEnvPolicy): values read from it reach the sandbox
	// anyway, so nothing the policy withheld comes back through Env.
	Env []string
	// Keep reports whether a path (absolute, clean) the caller set one of
	// the variables to may stay: the sandbox can write it, and it lies in
	// none of the tools' default caches in the home directory (HomeCaches).
	// Nil keeps nothing.
	Keep func(path string) bool
	// GoSeed, when not empty, is a module cache's download directory
	// (GOMODCACHE/cache/download of the host) that the sandbox can read:
	// when Env moves GOMODCACHE it puts file://GoSeed first in GOPROXY, so
	// modules the host already has are copied from there, without network.
	GoSeed string
	// GoProxy is the GOPROXY to put after the seed when o.Env sets none:
	// the host's (HostGo), or "" for Go's default.
	GoProxy string
}

// Env returns the assignments ("NAME=value", for hostview.FilterEnv's set)
// that point the tools' caches into o.Root. Precedence, per variable: a
// value the caller (or a session's command, by export) set to an absolute
// path that o.Keep accepts stays as it is; anything else (unset, empty,
// relative, read-only in the sandbox, a default cache of the home
// directory, another cache directory of corral's that this sandbox does not
// have) is replaced by
// o.Root/<sub>. MAVEN_OPTS keeps its other flags. GOPROXY is touched only
// when GOMODCACHE is replaced and o.GoSeed is set.
func Env(o Options) []string {
	keep := func(v string) bool {
		return v != "" && filepath.IsAbs(v) && o.Keep != nil && o.Keep(filepath.Clean(v))
	}
	// A value that is already the one Env would set (a session's earlier
	// command saved it) stays as it is whatever o.Keep says: o.Keep, which
	// resolves symlinks, is spared on every command.
	ours := func(v, sub string) bool { return v == filepath.Join(o.Root, sub) }
	var set []string
	movedMod := false
	for _, v := range Vars {
		if val, _ := lookup(o.Env, v.Name); ours(val, v.Sub) || keep(val) {
			continue
		}
		set = append(set, v.Name+"="+filepath.Join(o.Root, v.Sub))
		movedMod = movedMod || v.Name == "GOMODCACHE"
	}
	opts, _ := lookup(o.Env, mavenVar)
	var other []string
	kept := false
	for _, f := range strings.Fields(opts) {
		if repo, ok := strings.CutPrefix(f, mavenFlag); ok {
			if (ours(repo, mavenSub) || keep(repo)) && !kept {
				kept = true
				other = append(other, f)
			}
			continue
		}
		other = append(other, f)
	}
	if !kept {
		other = append(other, mavenFlag+filepath.Join(o.Root, mavenSub))
		set = append(set, mavenVar+"="+strings.Join(other, " "))
	}
	if movedMod && o.GoSeed != "" {
		seed := "file://" + o.GoSeed
		proxy, ok := lookup(o.Env, goProxyVar)
		if !ok || proxy == "" {
			proxy = o.GoProxy
		}
		if proxy == "" {
			proxy = goDefaultProxy
		}
		if first, _, _ := strings.Cut(proxy, ","); first != seed {
			set = append(set, goProxyVar+"="+seed+","+proxy)
		}
	}
	return set
}

// Strip returns env without the variables of Vars whose value lies inside
// one of dirs, and without MAVEN_OPTS's -Dmaven.repo.local= flags that do:
// a session that ran with a cache saved them, and they lead into corral's
// own (hidden) directories where it now has none (tool_caches: off, the
// restricted profile). env is not changed.
func Strip(env []string, dirs []string) []string {
	inside := func(v string) bool {
		if !filepath.IsAbs(v) {
			return false
		}
		v = filepath.Clean(v)
		return slices.ContainsFunc(dirs, func(d string) bool { return within(v, d) })
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		if slices.ContainsFunc(Vars, func(v Var) bool { return v.Name == name }) && inside(val) {
			continue
		}
		if name == mavenVar {
			fs := slices.DeleteFunc(strings.Fields(val), func(f string) bool {
				repo, ok := strings.CutPrefix(f, mavenFlag)
				return ok && inside(repo)
			})
			if len(fs) == 0 {
				continue
			}
			kv = name + "=" + strings.Join(fs, " ")
		}
		out = append(out, kv)
	}
	return out
}

// lookup returns the value of name in env, the last one winning.
func lookup(env []string, name string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val, found = v, true
		}
	}
	return val, found
}

// within reports whether p is base or lies below it (clean absolute paths,
// compared by components).
func within(p, base string) bool {
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == base || strings.HasPrefix(p, base+"/")
}
