package corral_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/backend/kubernetes"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/helperbin"
	"github.com/corralhq/corral/sandboxfs"
)

// staticHelper returns a static corral-helper: $CORRAL_TEST_HELPERS's
// (built by .ci/run), else one built here.
func staticHelper(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("CORRAL_TEST_HELPERS"); d != "" {
		return filepath.Join(d, "static")
	}
	out := filepath.Join(t.TempDir(), helperbin.Name)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/corral-helper")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building corral-helper: %v\n%s", err, b)
	}
	return out
}

// TestHostHandsTheHelper checks that the Host gives the kubernetes
// engine (what it uploads into pods) the helper it was given, and,
// without one, what its locator finds: here nothing beside the test
// binary or in an empty cache, so corral's own executable, with the
// helper.fallback event. The docker side runs end to end in
// cmd/corral's TestDockerRunsShippedHelper.
func TestHostHandsTheHelper(t *testing.T) {
	helper := staticHelper(t)
	h, err := corral.Open(corral.Options{StateDir: t.TempDir(), Settings: config.Defaults(), Helper: helper})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	in, err := h.Engine(kubernetes.Name)
	if err != nil {
		t.Fatal(err)
	}
	ke := kubernetes.EngineOf(in)
	if got, err := ke.Helper(); err != nil || got != helper {
		t.Fatalf("the kubernetes engine's helper = %q, %v; want %s", got, err, helper)
	}

	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	var logb bytes.Buffer
	h2, err := corral.Open(corral.Options{StateDir: t.TempDir(), Settings: config.Defaults(), Logger: slog.New(slog.NewTextHandler(&logb, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	in2, err := h2.Engine(kubernetes.Name)
	if err != nil {
		t.Fatal(err)
	}
	ke2 := kubernetes.EngineOf(in2)
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	got, err := ke2.Helper()
	if got != self && (err == nil || !strings.Contains(err.Error(), self)) {
		t.Fatalf("without a helper the kubernetes engine's = %q, %v; want corral's own executable %s", got, err, self)
	}
	if !strings.Contains(logb.String(), helperbin.FallbackEvent) {
		t.Errorf("no %s event for the fallback; log:\n%s", helperbin.FallbackEvent, logb.String())
	}
}

// TestFileServerRunsTheHelper checks that a session's file server (package
// sandboxfs, on bwrap) is the Host's helper executable: a read works, and
// a process of this user runs the helper's file while the server lives.
func TestFileServerRunsTheHelper(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is missing")
	}
	project, state, cfg := hostDirs(t)
	writeSettings(t, cfg, "cwd: "+project+"\nprofile: workspace\n")
	if err := os.WriteFile(filepath.Join(project, "f.txt"), []byte("from the helper\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A copy of its own, so that no other process runs this file.
	dir, err := os.MkdirTemp(filepath.Dir(project), "helper-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	helper := filepath.Join(dir, helperbin.Name)
	b, err := os.ReadFile(staticHelper(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(helper, b, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env(), Helper: helper})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s, err := h.Session("fs")
	if err != nil {
		t.Fatal(err)
	}
	fc, err := sandboxfs.For(s)
	if err != nil {
		t.Fatal(err)
	}
	r, err := fc.Read(context.Background(), filepath.Join(project, "f.txt"), 0, 0)
	if err != nil || !strings.Contains(r.Content, "from the helper") {
		t.Fatalf("read through the file server: %+v, %v", r, err)
	}
	if n := runningExe(helper); n == 0 {
		t.Fatalf("no process runs %s while the file server lives: it is not the helper", helper)
	}
}

// runningExe counts the processes whose executable is path.
func runningExe(path string) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if l, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && l == path {
			n++
		}
	}
	return n
}
