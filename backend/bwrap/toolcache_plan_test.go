package bwrap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/sandbox"
)

// cacheFix adds corral's tool cache (in its state directory) and the
// user's cargo configuration to a planFix.
func cacheFix(t *testing.T) (*planFix, string) {
	t.Helper()
	f := newPlanFix(t)
	cache := filepath.Join(f.state, "cache")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.home, ".cargo", "config.toml"), []byte("[build]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f, cache
}

func TestPlanToolCache(t *testing.T) {
	f, cache := cacheFix(t)
	plan := f.build(t, func(r *sandbox.Request) { r.CacheDir = cache })
	checkPlanOrder(t, plan.Mounts)
	i := planFind(plan.Mounts, mBind, cache)
	if i < 0 || plan.Mounts[i].Src != cache {
		t.Fatalf("the cache is not bound read-write at its own path:%s", planDump(plan.Mounts))
	}
	// After whatever hides corral's state directory, and nothing of that
	// directory but the cache is writable.
	for j, m := range plan.Mounts {
		if (m.Kind == mBind || m.Kind == mDevBind) && within(m.Dest, f.state) && !within(m.Dest, cache) {
			t.Errorf("mount %d (%s) writes corral's state outside the cache", j, planM(m))
		}
		if j > i && m.Dest == cache {
			t.Errorf("mount %d (%s) covers the cache", j, planM(m))
		}
	}
	cfg := filepath.Join(cache, "cargo", "config.toml")
	if k := planFind(plan.Mounts, mRoBind, cfg); k < i || plan.Mounts[k].Src != filepath.Join(f.home, ".cargo", "config.toml") {
		t.Errorf("the user's cargo configuration is not bound read-only into CARGO_HOME:%s", planDump(plan.Mounts))
	}
	for name, want := range map[string]string{
		"GOCACHE": cache + "/go-build", "GOMODCACHE": cache + "/go-mod", "npm_config_cache": cache + "/npm",
		"PIP_CACHE_DIR": cache + "/pip", "CARGO_HOME": cache + "/cargo", "GRADLE_USER_HOME": cache + "/gradle",
		"YARN_CACHE_FOLDER": cache + "/yarn", "PNPM_HOME": cache + "/pnpm", "MAVEN_OPTS": "-Dmaven.repo.local=" + cache + "/m2",
	} {
		if got, _ := hostview.LookupEnv(plan.Env, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if !strings.Contains(strings.Join(plan.Own, " "), cache) {
		t.Errorf("Own = %q, want the cache (idmapped for a root caller)", plan.Own)
	}
}

func TestPlanToolCacheRestricted(t *testing.T) {
	f, cache := cacheFix(t)
	plan := f.build(t, func(r *sandbox.Request) {
		r.CacheDir = cache
		r.Profile = sandbox.ProfileRestricted
		// Saved by a session that ran with the cache.
		r.Env = append(r.Env, "GOCACHE="+cache+"/go-build", "MAVEN_OPTS=-Xmx1g -Dmaven.repo.local="+cache+"/m2")
	})
	if planFind(plan.Mounts, mBind, cache) >= 0 || planFind(plan.Mounts, mRoBind, cache) >= 0 {
		t.Errorf("the cache is mounted under restricted:%s", planDump(plan.Mounts))
	}
	// The caches go to the command's fresh /tmp (the session's saved
	// GOCACHE leads into a hidden directory); CARGO_HOME stays unset
	// (cargo reads the user's configuration in ~/.cargo).
	for name, want := range map[string]string{
		"GOCACHE": tmpCache + "/go-build", "GOMODCACHE": tmpCache + "/go-mod", "npm_config_cache": tmpCache + "/npm",
		"PIP_CACHE_DIR": tmpCache + "/pip", "GRADLE_USER_HOME": tmpCache + "/gradle", "MAVEN_OPTS": "-Xmx1g -Dmaven.repo.local=" + tmpCache + "/m2",
	} {
		if got, _ := hostview.LookupEnv(plan.Env, name); got != want {
			t.Errorf("%s = %q under restricted, want %q", name, got, want)
		}
	}
	if v, ok := hostview.LookupEnv(plan.Env, "CARGO_HOME"); ok {
		t.Errorf("CARGO_HOME = %q under restricted, want it unset", v)
	}
	// tool_caches: off sets nothing.
	plan = f.build(t, func(r *sandbox.Request) { r.Profile = sandbox.ProfileRestricted })
	if v, ok := hostview.LookupEnv(plan.Env, "GOCACHE"); ok {
		t.Errorf("GOCACHE = %q under restricted without a cache directory, want it unset", v)
	}
}

func TestPlanToolCacheRefusals(t *testing.T) {
	f, _ := cacheFix(t)
	inWork := filepath.Join(f.inner, "cache") // hidden, but inside the writable working directory
	for _, d := range []string{inWork} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, dir, workdir string
		want               error
	}{
		{"outside corral's directories", f.data, "", sandbox.ErrPolicy},
		{"corral's state directory itself", f.state, "", sandbox.ErrPolicy},
		{"missing", filepath.Join(f.state, "nope"), "", sandbox.ErrPolicy},
		{"relative", "cache", "", sandbox.ErrBadRequest},
		{"inside the writable working directory", inWork, f.work, sandbox.ErrPolicy},
		{"holding the scratch directory", f.hidden, "", sandbox.ErrPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkedPlan(t, f.req(func(r *sandbox.Request) {
				r.CacheDir = tc.dir
				r.ScratchDir = f.scratch
				if tc.workdir != "" {
					r.Workdir = tc.workdir
				}
			}), f.host())
			if !errors.Is(err, tc.want) {
				t.Errorf("BuildPlan = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestPlanToolCacheCallersValues: a variable the command's environment
// sets stays where the sandbox can write it, unless it is the host's own
// cache; a value that carries a credential is withheld and not brought
// back through MAVEN_OPTS or GOPROXY.
func TestPlanToolCacheCallersValues(t *testing.T) {
	f, cache := cacheFix(t)
	mod := filepath.Join(f.home, "go", "pkg", "mod")
	if err := os.MkdirAll(filepath.Join(mod, "cache", "download"), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(f.home, "project")
	plan := f.build(t, func(r *sandbox.Request) {
		r.CacheDir = cache
		r.Env = append(r.Env,
			"GOCACHE="+work+"/.gocache",                 // writable: kept
			"npm_config_cache="+f.home+"/.npm",          // read-only dot entry: replaced
			"PIP_CACHE_DIR=/tmp/pip",                    // the fresh /tmp: kept
			"MAVEN_OPTS=-Dmaven.repo.local="+work+"/m2", // writable: kept
			"GOPROXY=https://proxy.example",
		)
	})
	for name, want := range map[string]string{
		"GOCACHE": work + "/.gocache", "npm_config_cache": cache + "/npm", "PIP_CACHE_DIR": "/tmp/pip",
		"MAVEN_OPTS": "-Dmaven.repo.local=" + work + "/m2",
		// The host's module cache is readable: modules come from there first.
		"GOPROXY": "file://" + mod + "/cache/download,https://proxy.example",
	} {
		if got, _ := hostview.LookupEnv(plan.Env, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	// The working directory is the home directory: ~/go is writable, but
	// the host's module cache there is never the sandbox's.
	plan = f.build(t, func(r *sandbox.Request) {
		r.CacheDir = cache
		r.Workdir = f.home
		r.Env = append(r.Env, "GOMODCACHE="+mod)
	})
	if got, _ := hostview.LookupEnv(plan.Env, "GOMODCACHE"); got != cache+"/go-mod" {
		t.Errorf("GOMODCACHE = %q with the home directory writable, want corral's", got)
	}

	// A GOPROXY with a password is withheld, and so is the seed that
	// would have been put before it.
	secret := "GOPROXY=https://user:hunter2@goproxy.example"
	plan = f.build(t, func(r *sandbox.Request) {
		r.CacheDir = cache
		r.Env = append(r.Env, secret, "MAVEN_OPTS=-Dx=https://user:hunter2@repo.example")
	})
	for _, kv := range plan.Env {
		if strings.Contains(kv, "hunter2") {
			t.Errorf("a withheld credential came back: %s", kv)
		}
	}
	if got, ok := hostview.LookupEnv(plan.Env, "GOPROXY"); ok {
		t.Errorf("GOPROXY = %q, want none (the caller's carries a credential)", got)
	}
}
