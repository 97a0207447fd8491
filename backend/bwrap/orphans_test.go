package bwrap

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/procfs"
)

// TestSweepOrphans: a bwrap whose owning corral process is gone is ended;
// one whose owner lives (this test), and a bwrap without an owner (not
// corral's), are left alone.
func TestSweepOrphans(t *testing.T) {
	requireBwrap(t)
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	start := func(owner string) *exec.Cmd {
		cmd := exec.Command("bwrap", "--ro-bind", "/", "/", "--unshare-pid", "--unshare-user", "--", "sleep", "300")
		cmd.Env = append([]string{}, bwrapEnv...)
		if owner != "" {
			cmd.Env = append(cmd.Env, ownerVar+"="+owner)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The whole process group: bwrap's sandbox child (no
		// --die-with-parent here) is in it too.
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		return cmd
	}
	st, _ := procfs.StartTime(os.Getpid())
	orphan := start(fmt.Sprintf("%d:12345", gone.Process.Pid))
	owned := start(fmt.Sprintf("%d:%d", os.Getpid(), st))
	foreign := start("")
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	// cmd.Start returns once bwrap is executing: its comm and environment
	// are bwrap's.
	if n := SweepOrphans(); n < 1 {
		t.Errorf("SweepOrphans ended %d, want the orphan (and its sandbox)", n)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("the orphaned bwrap still runs a minute after the sweep")
	}
	for name, c := range map[string]*exec.Cmd{"owned": owned, "foreign": foreign} {
		if err := c.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("the %s bwrap was ended: %v", name, err)
		}
	}
}

// TestSweepDue is the policy of Options.SweepEvery.
func TestSweepDue(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		last  time.Time
		ok    bool
		every time.Duration
		want  bool
	}{
		{"no interval sweeps always", now, true, 0, true},
		{"never swept", time.Time{}, false, time.Minute, true},
		{"swept just now", now, true, time.Minute, false},
		{"swept within the interval", now.Add(-59 * time.Second), true, time.Minute, false},
		{"interval passed", now.Add(-time.Minute), true, time.Minute, true},
		{"stamp from the future", now.Add(time.Hour), true, time.Minute, true},
	} {
		if got := sweepDue(tc.last, tc.ok, now, tc.every); got != tc.want {
			t.Errorf("%s: sweepDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSweepIfDue: the stamp file decides, and is read afresh every time
// (an old or future stamp makes the next process sweep, not a remembered
// answer); a sweep refreshes it.
func TestSweepIfDue(t *testing.T) {
	dir := t.TempDir()
	stamp := filepath.Join(dir, sweepStamp)
	sweeps := 0
	sweep := func() int { sweeps++; return 0 }
	now := time.Now().Truncate(time.Second)
	steps := []struct {
		name    string
		setup   func()
		every   time.Duration
		wantRan bool
	}{
		{"no stamp", func() {}, time.Minute, true},
		{"fresh stamp", func() {}, time.Minute, false},
		{"fresh stamp, no interval", func() {}, 0, true},
		{"stamp aged past the interval", func() { os.Chtimes(stamp, now.Add(-2*time.Minute), now.Add(-2*time.Minute)) }, time.Minute, true},
		{"refreshed by that sweep", func() {}, time.Minute, false},
		{"stamp from the future", func() { os.Chtimes(stamp, now.Add(time.Hour), now.Add(time.Hour)) }, time.Minute, true},
		{"stamp removed", func() { os.Remove(stamp) }, time.Minute, true},
	}
	for _, s := range steps {
		s.setup()
		before := sweeps
		_, ran := sweepIfDue(dir, s.every, now, sweep)
		if ran != s.wantRan || (sweeps > before) != s.wantRan {
			t.Errorf("%s: ran=%v (sweeps %d -> %d), want %v", s.name, ran, before, sweeps, s.wantRan)
		}
		if s.wantRan && s.every > 0 {
			if fi, err := os.Stat(stamp); err != nil || !fi.ModTime().Equal(now) {
				t.Errorf("%s: stamp after the sweep: %v %v, want mtime %v", s.name, fi, err, now)
			}
		}
	}
}
