package bwrap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/toolfixture"
	"github.com/corralhq/corral/sandbox"
)

// plantCaches gives the fake user the caches a developer has: npm's, Go's
// build and module caches (the module cache holding example.com/dep, which
// the Go test then finds through corral's seed), pip's, cargo's registry
// and configuration, Maven's and Gradle's.
func plantCaches(t *testing.T, e *env) {
	t.Helper()
	toolfixture.Write(t, e.home, map[string]string{
		".npm/_cacache/index-v5/00/00/entry":     "npm index entry\n",
		".cache/go-build/README":                 "This directory holds cached build artifacts from the Go build system.\n",
		".cache/pip/http-v2/0/entry":             "pip http cache entry\n",
		".cargo/registry/index/entry":            "cargo index entry\n",
		".cargo/config.toml":                     toolfixture.CargoConfig,
		".m2/repository/org/x/x-1.jar":           "jar\n",
		".gradle/caches/modules-2/entry":         "gradle cache entry\n",
		"go/pkg/mod/cache/download/placeholder":  "\n",
		"go/pkg/mod/example.com/other@v1/x.go":   "package other\n",
		".local/share/pnpm/store/v10/entry.json": "{}\n",
	})
	toolfixture.GoProxy(t, filepath.Join(e.home, "go", "pkg", "mod", "cache", "download"))
}

// TestToolCachesRealTools installs and builds with the real toolchains in
// sandboxes under every profile that writes, for a user with caches of
// their own and for one without ~/.cache at all: npm installs a packed
// tarball, pip installs a wheel into a venv, go builds and tests a module
// (and one with a dependency, which for the user with caches comes from
// their module cache through the seed, with GOPROXY=off), cargo builds a
// crate with a vendored path dependency offline. The fake home directory
// (the host's caches in it) must come out byte for byte as it went in, and
// the tools must have written corral's cache.
func TestToolCachesRealTools(t *testing.T) {
	requireBwrap(t)
	for _, user := range []struct {
		name   string
		caches bool
	}{{"fresh user", false}, {"user with caches", true}} {
		t.Run(user.name, func(t *testing.T) {
			e := newEnv(t)
			newWorld(t, e) // the allowlist profile's proxies; the other profiles ignore them
			cache := filepath.Join(e.state, "cache")
			if err := os.MkdirAll(cache, 0o700); err != nil {
				t.Fatal(err)
			}
			if user.caches {
				plantCaches(t, e)
			}
			if _, err := os.Stat(filepath.Join(e.home, ".cache")); user.caches == (err != nil) {
				t.Fatalf("~/.cache exists: %v, want %v", err == nil, user.caches)
			}
			before := toolfixture.TreeHash(t, e.home, e.state, e.work)
			for _, profile := range []sandbox.Profile{sandbox.ProfileNetwork, sandbox.ProfileWorkspace, sandbox.ProfileAllowlist} {
				t.Run(string(profile), func(t *testing.T) {
					tc := &toolCase{e: e, cache: cache, profile: profile, caches: user.caches}
					t.Run("npm", tc.npm)
					t.Run("pip", tc.pip)
					t.Run("go", tc.goBuild)
					t.Run("go with a dependency", tc.goDep)
					t.Run("cargo", tc.cargo)
				})
			}
			if after := toolfixture.TreeHash(t, e.home, e.state, e.work); after != before {
				t.Errorf("the home directory (the host's own caches) changed")
			}
		})
	}
}

// toolCase runs one tool's script in a sandbox of one profile.
type toolCase struct {
	e       *env
	cache   string
	profile sandbox.Profile
	caches  bool // the user has caches of their own (plantCaches)
}

// dir returns a new directory for one tool's project: under the working
// directory, or, for outside, beside the home directory.
func (c *toolCase) dir(t *testing.T, tool string, outside bool) string {
	t.Helper()
	base := c.e.work
	if outside {
		base = c.e.base
	}
	d := filepath.Join(base, "tools-"+string(c.profile), tool)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// run runs script in workdir (which it may write) under the case's profile
// with the tool cache, no resource limits and env added to the fake
// user's environment; it fails the test unless the script exits 0, and
// returns its stdout and its stdout and stderr together.
func (c *toolCase) run(t *testing.T, workdir, script string, env ...string) (stdout, all string) {
	t.Helper()
	saved := c.e.envv
	defer func() { c.e.envv = saved }()
	c.e.envv = append(append([]string{}, saved...), "PATH="+toolfixture.SystemPath)
	c.e.envv = append(c.e.envv, env...)
	c.e.t = t
	o := c.e.sh("set -e\n"+script, func(r *sandbox.Request) {
		if c.profile == sandbox.ProfileAllowlist {
			allowlist(r)
		}
		r.Profile = c.profile
		r.Workdir = workdir
		r.CacheDir = c.cache
		r.Limits = sandbox.Limits{}
		r.Timeout = 5 * time.Minute
	})
	if o.res.ExitCode != 0 {
		t.Fatalf("%s", o)
	}
	return o.stdout, o.stdout + o.stderr
}

// inCache fails the test unless the last line of stdout names a directory
// inside the cache.
func (c *toolCase) inCache(t *testing.T, what, stdout string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if last := lines[len(lines)-1]; !within(last, c.cache) {
		t.Errorf("%s = %q, want it in corral's cache %s", what, last, c.cache)
	}
}

func (c *toolCase) npm(t *testing.T) {
	toolfixture.Tool(t, "npm")
	toolfixture.Tool(t, "node")
	d := c.dir(t, "npm", false)
	toolfixture.NpmPackage(t, filepath.Join(d, "tiny"))
	toolfixture.Write(t, d, map[string]string{"package.json": `{"name": "app", "version": "1.0.0", "license": "MIT"}` + "\n"})
	out, _ := c.run(t, d, `npm pack ./tiny >/dev/null
npm install --no-audit --no-fund ./tiny-1.0.0.tgz
node -e 'if (require("tiny") !== 42) process.exit(1)'
npm config get cache`, "npm_config_update_notifier=false")
	c.inCache(t, "npm's cache", out)
	if _, err := os.Stat(filepath.Join(c.cache, "npm", "_cacache")); err != nil {
		t.Errorf("npm wrote nothing to corral's cache: %v", err)
	}
}

func (c *toolCase) pip(t *testing.T) {
	toolfixture.RequireVenv(t)
	d := c.dir(t, "pip", false)
	wheels := filepath.Join(d, "wheels")
	if err := os.MkdirAll(wheels, 0o755); err != nil {
		t.Fatal(err)
	}
	toolfixture.Wheel(t, wheels)
	out, all := c.run(t, d, `python3 -m venv v
v/bin/pip install --no-index --find-links wheels tinywheel 2>&1
v/bin/python -c 'import tinywheel; assert tinywheel.VALUE == 42'
v/bin/pip cache dir`, "PIP_DISABLE_PIP_VERSION_CHECK=1")
	// Without a writable cache pip carries on, saying so.
	if strings.Contains(all, "cache has been disabled") || strings.Contains(all, "not writable") {
		t.Errorf("pip had no writable cache:\n%s", all)
	}
	c.inCache(t, "pip's cache", out)
}

// goEnv are the Go settings of the tests: no network, no toolchain
// switch, go.sum written as needed.
var goEnv = []string{"GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOSUMDB=off"}

func (c *toolCase) goBuild(t *testing.T) {
	toolfixture.Tool(t, "go")
	d := c.dir(t, "go", false)
	toolfixture.GoModule(t, d, false)
	out, _ := c.run(t, d, `go build -o hello . && ./hello
go test ./...
go env GOCACHE`, append(goEnv, "GOPROXY=off")...)
	c.inCache(t, "GOCACHE", out)
}

func (c *toolCase) goDep(t *testing.T) {
	toolfixture.Tool(t, "go")
	d := c.dir(t, "godep", false)
	toolfixture.GoModule(t, d, true)
	proxy := "GOPROXY=off" // the user's module cache has it: corral's seed goes first
	if !c.caches {
		toolfixture.GoProxy(t, filepath.Join(d, "proxy"))
		proxy = "GOPROXY=file://" + filepath.Join(d, "proxy")
	}
	out, all := c.run(t, d, `go build -o hello . && ./hello
go test ./...
go env GOMODCACHE`, append(goEnv, proxy)...)
	if !strings.Contains(all, "42") {
		t.Errorf("the program did not print 42:\n%s", all)
	}
	c.inCache(t, "GOMODCACHE", out)
}

func (c *toolCase) cargo(t *testing.T) {
	toolfixture.Tool(t, "cargo")
	// Outside the home directory, where cargo finds the user's
	// config.toml only in CARGO_HOME, which corral moved.
	d := c.dir(t, "cargo", true)
	toolfixture.CargoCrate(t, d)
	out, all := c.run(t, d, `cargo run --offline -q
echo "$CARGO_HOME"`)
	if !strings.Contains(out, "42") {
		t.Errorf("the crate did not print 42:\n%s", all)
	}
	if read := strings.Contains(out, toolfixture.CargoConfigMark); read != c.caches {
		t.Errorf("cargo read the user's configuration: %v, want %v\n%s", read, c.caches, all)
	}
	c.inCache(t, "CARGO_HOME", out)
}
