package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/internal/reaper"
	"github.com/corralhq/corral/reexec"
)

// TestMain runs the helper's own main when the test binary is started as
// the helper (CORRAL_HELPER_TEST_MAIN=1), so the tests below run the very
// main they test.
func TestMain(m *testing.M) {
	if os.Getenv("CORRAL_HELPER_TEST_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

func runHelper(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CORRAL_HELPER_TEST_MAIN=1")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running the helper: %v", err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func TestNoModeExits2(t *testing.T) {
	_, stderr, code := runHelper(t)
	if code != 2 || !strings.Contains(stderr, "corral starts it") || !strings.Contains(stderr, inside.ModeAgent) {
		t.Fatalf("no mode: exit %d, stderr %q; want 2 and the modes named", code, stderr)
	}
}

func TestRunsAMode(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, []byte("corral\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runHelper(t, inside.ModeSHA256, f)
	sum := sha256.Sum256([]byte("corral\n"))
	if code != 0 || strings.TrimSpace(out) != hex.EncodeToString(sum[:]) {
		t.Fatalf("%s: exit %d, out %q, stderr %q", inside.ModeSHA256, code, out, stderr)
	}
}

// TestModesInsideSandboxes names the modes the helper must answer to: the
// ones corral hands a sandbox, container or pod. The host's own modes (the
// bwrap layer holder) are not among them.
func TestModesInsideSandboxes(t *testing.T) {
	got := strings.Join(reexec.Modes(), " ")
	for _, m := range []string{inside.ModeAgent, inside.ModeRelay, reaper.Mode, inside.ModePause, inside.ModeTar, inside.ModeUntar, "__corral-tunnel", "__corral-net-forward", "__corral-git-credential", "CORRAL_SANDBOXFS=serve", "corral-port-relay"} {
		if !strings.Contains(" "+got+" ", " "+m+" ") {
			t.Errorf("mode %s is missing from the helper (has %s)", m, got)
		}
	}
	if strings.Contains(got, "layer-hold") {
		t.Errorf("the helper has a host mode: %s", got)
	}
}
