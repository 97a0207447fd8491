package bwrap

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestChildExited: a running child has not exited; one that exited has,
// and its status is still there for its own wait; one already collected
// (ECHILD) counts as exited.
func TestChildExited(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if ended, err := childExited(pid); err != nil || ended {
		t.Fatalf("running child: ended=%v err=%v", ended, err)
	}
	cmd.Process.Kill()
	var info unix.Siginfo
	// Wait for the exit without collecting it.
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if ended, err := childExited(pid); err != nil || !ended {
		t.Fatalf("exited child: ended=%v err=%v", ended, err)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Sys().(interface{ Signaled() bool }).Signaled() == false {
		t.Fatalf("the exit status was not left for the child's own wait: %v", err)
	}
	if ended, err := childExited(pid); err != nil || !ended {
		t.Fatalf("collected child: ended=%v err=%v", ended, err)
	}
}
