package waitloop

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// started starts argv and returns it with the channel its Wait result
// arrives on.
func started(t *testing.T, argv ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return cmd, done
}

// A process that would sleep for an hour ends only through the handlers,
// so each verdict below is decided by the event, never by timing.
func TestWait(t *testing.T) {
	t.Run("exits by itself", func(t *testing.T) {
		cmd, done := started(t, "/bin/sh", "-c", "exit 3")
		out := Wait(context.Background(), done, time.Hour, nil, Handlers{Timeout: func() { t.Error("timeout called") }})
		code, sig := ExitOf(cmd.ProcessState.Sys().(syscall.WaitStatus))
		if out.TimedOut || out.Cancelled || code != 3 || sig != 0 {
			t.Errorf("Wait = %+v, ExitOf = %d, %d; want exit 3 and no event", out, code, sig)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		cmd, done := started(t, "sleep", "3600")
		calls := 0
		out := Wait(context.Background(), done, time.Millisecond, nil, Handlers{Timeout: func() { calls++; _ = cmd.Process.Kill() }})
		code, sig := ExitOf(cmd.ProcessState.Sys().(syscall.WaitStatus))
		if !out.TimedOut || out.Cancelled || calls != 1 || sig != int(syscall.SIGKILL) || code != sandbox.ExitSignalBase+9 {
			t.Errorf("Wait = %+v after %d calls, ExitOf = %d, %d; want timed out, 137, SIGKILL", out, calls, code, sig)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		cmd, done := started(t, "sleep", "3600")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		calls := 0
		out := Wait(ctx, done, 0, nil, Handlers{Cancel: func() { calls++; _ = cmd.Process.Kill() }})
		if out.TimedOut || !out.Cancelled || calls != 1 || out.Err == nil {
			t.Errorf("Wait = %+v after %d calls; want cancelled once with Wait's error", out, calls)
		}
	})
	t.Run("signals counted", func(t *testing.T) {
		cmd, done := started(t, "sleep", "3600")
		sigs := make(chan os.Signal, 2)
		sigs <- syscall.SIGINT
		sigs <- syscall.SIGTERM
		var got []int
		out := Wait(context.Background(), done, 0, sigs, Handlers{Signal: func(s os.Signal, n int) {
			got = append(got, n)
			if n == 2 {
				_ = cmd.Process.Signal(s)
			}
		}})
		code, sig := ExitOf(cmd.ProcessState.Sys().(syscall.WaitStatus))
		if len(got) != 2 || got[0] != 1 || got[1] != 2 || out.TimedOut || out.Cancelled || sig != int(syscall.SIGTERM) || code != 143 {
			t.Errorf("Wait = %+v, handler saw %v, ExitOf = %d, %d; want 1, 2 and SIGTERM", out, got, code, sig)
		}
	})
}
