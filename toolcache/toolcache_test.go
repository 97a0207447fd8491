package toolcache

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// writable is the Keep of the tests: paths under /work and /root-cache.
func writable(p string) bool {
	return within(p, "/work") || within(p, "/root-cache")
}

func value(set []string, name string) (string, bool) {
	return lookup(set, name)
}

func TestEnvPrecedence(t *testing.T) {
	set := Env(Options{Root: "/root-cache", Keep: writable, Env: []string{
		"GOCACHE=/work/.gocache",            // writable: kept
		"GOMODCACHE=/home/u/go/pkg/mod",     // read-only: replaced
		"npm_config_cache=relative/npm",     // relative: replaced
		"PIP_CACHE_DIR=",                    // empty: replaced
		"CARGO_HOME=/work/../home/u/.cargo", // cleaned before judged: replaced
		"MAVEN_OPTS=-Xmx1g -Dmaven.repo.local=/home/u/.m2/repository -Dfoo=bar",
	}})
	if _, ok := value(set, "GOCACHE"); ok {
		t.Errorf("GOCACHE set (%q) although the caller's value is writable", set)
	}
	for name, want := range map[string]string{
		"GOMODCACHE":        "/root-cache/go-mod",
		"GOPATH":            "/root-cache/go-path", // its pkg/sumdb: a fresh user has no ~/go
		"npm_config_cache":  "/root-cache/npm",
		"PIP_CACHE_DIR":     "/root-cache/pip",
		"CARGO_HOME":        "/root-cache/cargo",
		"YARN_CACHE_FOLDER": "/root-cache/yarn",
		"PNPM_HOME":         "/root-cache/pnpm",
		"UV_CACHE_DIR":      "/root-cache/uv",
		"GRADLE_USER_HOME":  "/root-cache/gradle",
		"MAVEN_OPTS":        "-Xmx1g -Dfoo=bar -Dmaven.repo.local=/root-cache/m2",
	} {
		if got, _ := value(set, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if _, ok := value(set, "GOPROXY"); ok {
		t.Errorf("GOPROXY set without a seed: %q", set)
	}
}

// TestEnvOwnValuesNotJudged: values that already are the ones Env sets (a
// session's earlier command saved them) stay without a call to Keep,
// which resolves symlinks on every command; the result is what Env gave
// the first time.
func TestEnvOwnValuesNotJudged(t *testing.T) {
	first := Env(Options{Root: "/c", Env: []string{"MAVEN_OPTS=-Xmx1g"}})
	calls := 0
	again := Env(Options{Root: "/c", Env: first, Keep: func(string) bool { calls++; return false }})
	if len(again) != 0 || calls != 0 {
		t.Errorf("with its own values Env set %q and asked Keep %d times", again, calls)
	}
}

func TestEnvKeepsWritableMavenRepo(t *testing.T) {
	set := Env(Options{Root: "/root-cache", Keep: writable, Env: []string{"MAVEN_OPTS=-Dmaven.repo.local=/work/m2 -Xmx1g"}})
	if v, ok := value(set, "MAVEN_OPTS"); ok {
		t.Errorf("MAVEN_OPTS = %q, want the caller's kept", v)
	}
	// Nil Keep keeps nothing.
	set = Env(Options{Root: "/c", Env: []string{"GOCACHE=/work/x"}})
	if v, _ := value(set, "GOCACHE"); v != "/c/go-build" {
		t.Errorf("GOCACHE = %q with nil Keep", v)
	}
}

func TestEnvGoSeed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		goProxy string
		want    string // "" means GOPROXY not set
	}{
		{"default proxy after the seed", nil, "", "file:///m/cache/download,https://proxy.golang.org,direct"},
		{"the go env file's proxy", nil, "https://corp.example/go", "file:///m/cache/download,https://corp.example/go"},
		{"the environment's proxy wins", []string{"GOPROXY=off"}, "https://corp.example/go", "file:///m/cache/download,off"},
		{"seed not put twice", []string{"GOPROXY=file:///m/cache/download,off"}, "", ""},
		{"modules not moved: GOPROXY untouched", []string{"GOMODCACHE=/work/mod"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := Env(Options{Root: "/root-cache", Keep: writable, Env: tc.env, GoSeed: "/m/cache/download", GoProxy: tc.goProxy})
			got, ok := value(set, "GOPROXY")
			if tc.want == "" && ok || tc.want != "" && got != tc.want {
				t.Errorf("GOPROXY = %q (set %v), want %q", got, ok, tc.want)
			}
		})
	}
}

func TestStrip(t *testing.T) {
	env := []string{
		"GOCACHE=/state/cache/go-build", "GOMODCACHE=/work/mod", "PATH=/state/cache/cargo/bin:/usr/bin",
		"MAVEN_OPTS=-Xmx1g -Dmaven.repo.local=/state/cache/m2", "CARGO_HOME=/state/cache/cargo",
	}
	got := Strip(env, []string{"/state"})
	want := []string{"GOMODCACHE=/work/mod", "PATH=/state/cache/cargo/bin:/usr/bin", "MAVEN_OPTS=-Xmx1g"}
	if !slices.Equal(got, want) {
		t.Errorf("Strip = %q, want %q", got, want)
	}
	if got := Strip([]string{"MAVEN_OPTS=-Dmaven.repo.local=/state/cache/m2"}, []string{"/state"}); len(got) != 0 {
		t.Errorf("MAVEN_OPTS of our flag alone = %q, want it gone", got)
	}
}

func TestHostGo(t *testing.T) {
	home := t.TempDir()
	if mod, proxy := HostGo(nil, home); mod != filepath.Join(home, "go/pkg/mod") || proxy != "" {
		t.Errorf("defaults = %q %q", mod, proxy)
	}
	if mod, _ := HostGo([]string{"GOPATH=/gp1:/gp2"}, home); mod != "/gp1/pkg/mod" {
		t.Errorf("GOPATH = %q", mod)
	}
	// go env -w writes the user configuration directory's go/env.
	file := filepath.Join(home, ".config", "go", "env")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("GOPROXY=https://corp.example/go\nGOMODCACHE=/fm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if mod, proxy := HostGo(nil, home); mod != "/fm" || proxy != "https://corp.example/go" {
		t.Errorf("go env file = %q %q", mod, proxy)
	}
	if mod, proxy := HostGo([]string{"GOMODCACHE=/em", "GOPROXY=direct"}, home); mod != "/em" || proxy != "direct" {
		t.Errorf("environment over the file = %q %q", mod, proxy)
	}
	if mod, proxy := HostGo([]string{"GOENV=off"}, home); mod != filepath.Join(home, "go/pkg/mod") || proxy != "" {
		t.Errorf("GOENV=off = %q %q", mod, proxy)
	}
}

func TestHomeCaches(t *testing.T) {
	got := HomeCaches("/home/u")
	for _, want := range []string{"/home/u/.npm", "/home/u/.cache", "/home/u/.cargo", "/home/u/.m2", "/home/u/.gradle", "/home/u/go"} {
		if !slices.Contains(got, want) {
			t.Errorf("HomeCaches = %q, want %s in it", got, want)
		}
	}
	if got := HomeCaches("/"); len(got) != 0 {
		t.Errorf("HomeCaches(/) = %q", got)
	}
}
