package bwrap

import (
	"fmt"
	"os"
	"os/exec"
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
