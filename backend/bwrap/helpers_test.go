package bwrap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// requireBwrap skips unless bwrap is installed and usable. CI installs it,
// so nothing is skipped there.
func requireBwrap(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping sandbox test in -short mode")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap not installed (apt install bubblewrap); CI installs it")
	}
}

// testBase returns a directory for test trees outside /tmp, since the
// sandbox puts a fresh tmpfs on /tmp and would hide a tree made there.
func testBase(t testing.TB) string {
	t.Helper()
	base := os.Getenv("CORRAL_TEST_DIR")
	if base == "" {
		base = "/var/tmp"
	}
	d, err := os.MkdirTemp(base, "corral-test-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	d, _ = filepath.EvalSymlinks(d)
	return d
}

// env is a fake user for a test: a home directory with planted secrets, a
// state dir, a workspace, and a backend that sees HOME pointing there.
type env struct {
	t       *testing.T
	tb      testing.TB
	base    string
	home    string
	work    string
	state   string
	backend *Backend
	envv    []string
}

func newEnv(t *testing.T) *env { return newEnvTB(t, t) }

func newBenchEnv(b *testing.B) *env {
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skip("bwrap not installed (apt install bubblewrap)")
	}
	return newEnvTB(b, nil)
}

func newEnvTB(tb testing.TB, t *testing.T) *env {
	tb.Helper()
	if t != nil {
		requireBwrap(t)
	}
	base := testBase(tb)
	e := &env{t: t, tb: tb, base: base, home: filepath.Join(base, "home"), work: filepath.Join(base, "home", "project"), state: filepath.Join(base, "home", ".local", "state", "corral")}
	for _, d := range []string{e.work, e.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Setenv("HOME", e.home)
	e.backend = New(Options{StateDir: e.state, HiddenDirs: []string{filepath.Join(e.home, ".config", "corral")}})
	e.envv = []string{"HOME=" + e.home, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	return e
}

// write creates a file under the fake home (rel path) with content.
func (e *env) write(rel, content string) string {
	e.t.Helper()
	p := filepath.Join(e.home, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

type out struct {
	res            *sandbox.Result
	stdout, stderr string
}

func (o out) String() string {
	return fmt.Sprintf("exit=%d limit=%q warnings=%q\nstdout:\n%s\nstderr:\n%s", o.res.ExitCode, o.res.LimitHit, o.res.Warnings, o.stdout, o.stderr)
}

// sh runs a shell script in a sandbox with the given request tweaks.
func (e *env) sh(script string, tweak ...func(*sandbox.Request)) out {
	e.t.Helper()
	var so, se bytes.Buffer
	req := &sandbox.Request{
		Argv:   []string{"/bin/sh", "-c", script},
		Env:    e.envv,
		Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits}, Stdout: &so,
		Stderr:  &se,
		Timeout: 60 * time.Second,
	}
	for _, f := range tweak {
		f(req)
	}
	res, err := e.backend.Run(context.Background(), req)
	if err != nil {
		e.t.Fatalf("Run(%q): %v", script, err)
	}
	return out{res, so.String(), se.String()}
}

// lifelineProcess starts a holder's stand-in: cat reading the returned
// pipe's read end, so it lives until the write end (a holder's life) is
// closed, as corral's holders do.
func lifelineProcess(t *testing.T) (*exec.Cmd, *os.File) {
	t.Helper()
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cat")
	cmd.Stdin = lifeR
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lifeR.Close()
	return cmd, lifeW
}
