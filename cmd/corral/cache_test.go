package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/toolfixture"
)

// TestToolCacheSharedAndPruned: a module one session downloads is in the
// next session's cache (tool_caches: shared, the default) once its source
// is gone; `corral cache prune` empties the cache, and the module is gone
// for the next command. Under tool_caches: session, sessions do not share,
// and prune empties each session's own.
func TestToolCacheSharedAndPruned(t *testing.T) {
	requireBwrap(t)
	toolfixture.Tool(t, "go")
	c := newCLI(t)
	toolfixture.GoModule(t, filepath.Join(c.work, "app"), true)
	proxy := filepath.Join(c.work, "proxy")
	env := []string{"PATH=" + toolfixture.SystemPath, "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOSUMDB=off",
		"CORRAL_PROFILE=workspace", "CORRAL_MEMORY_MB=0", "CORRAL_CPU_SECONDS=0"}
	download := func(goproxy string) string {
		return "cd " + filepath.Join(c.work, "app") + " && GOPROXY=" + goproxy + " go mod download -json " + toolfixture.GoDep + "@" + toolfixture.GoDepVersion
	}
	fetch := download("file://" + proxy)
	offline := download("off")
	run := func(extra []string, sess, cmd string) (int, string) {
		t.Helper()
		code, so, se := c.run(append(append([]string{}, env...), extra...), "run", "--session", sess, "--", cmd)
		return code, so + se
	}

	code, so, se := c.run(env, "cache", "path")
	cache := filepath.Join(c.home, ".local", "state", "corral", "cache")
	if code != 0 || strings.TrimSpace(so) != cache {
		t.Fatalf("cache path: %d %q %q, want %s", code, so, se, cache)
	}

	toolfixture.GoProxy(t, proxy)
	if code, out := run(nil, "a", fetch); code != 0 || !strings.Contains(out, filepath.Join(cache, "go-mod")) {
		t.Fatalf("session a: %d\n%s", code, out)
	}
	if err := os.RemoveAll(proxy); err != nil {
		t.Fatal(err)
	}
	if code, out := run(nil, "b", offline); code != 0 {
		t.Fatalf("session b did not find session a's module in the shared cache: %d\n%s", code, out)
	}
	code, so, se = c.run(env, "cache", "prune")
	if code != 0 || !strings.Contains(so, "emptied "+cache) {
		t.Fatalf("cache prune: %d %q %q", code, so, se)
	}
	if ents, err := os.ReadDir(cache); err != nil || len(ents) != 0 {
		t.Errorf("the cache after prune: %v %v", ents, err)
	}
	if code, out := run(nil, "b", offline); code == 0 || !strings.Contains(out, "GOPROXY=off") {
		t.Errorf("after prune the module is still found: %d\n%s", code, out)
	}

	// A cache per session.
	perSession := []string{"CORRAL_TOOL_CACHES=session"}
	toolfixture.GoProxy(t, proxy)
	if code, out := run(perSession, "c", fetch); code != 0 || strings.Contains(out, cache) {
		t.Fatalf("session c: %d (want its own cache, not %s)\n%s", code, cache, out)
	}
	if err := os.RemoveAll(proxy); err != nil {
		t.Fatal(err)
	}
	if code, out := run(perSession, "c", offline); code != 0 {
		t.Fatalf("session c lost its own cache: %d\n%s", code, out)
	}
	if code, out := run(perSession, "d", offline); code == 0 {
		t.Errorf("session d found session c's module:\n%s", out)
	}
	if code, so, se := c.run(env, "cache", "prune"); code != 0 || strings.Count(so, "emptied ") < 3 {
		t.Fatalf("cache prune: %d %q %q, want the shared cache and two sessions' emptied", code, so, se)
	}
	if code, out := run(perSession, "c", offline); code == 0 {
		t.Errorf("after prune session c still finds the module:\n%s", out)
	}
}
