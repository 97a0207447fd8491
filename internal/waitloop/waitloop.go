// Package waitloop is the wait of a started command that corral's process
// backends (backend/bwrap, backend/local) share: until the process is
// reaped, a timeout, the caller's cancellation and a person's signals are
// handed to the backend, which alone knows how to end its command.
package waitloop

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// Handlers are a backend's answers to the events of a running command. Each
// is called from Wait's goroutine; a nil one ignores its event.
type Handlers struct {
	// Timeout is called once, when the timeout has passed.
	Timeout func()
	// Cancel is called once, when ctx is done.
	Cancel func()
	// Signal is called for each signal received from the signals channel;
	// n counts them from 1 (the first is usually passed on, the second
	// ends everything).
	Signal func(sig os.Signal, n int)
}

// Outcome is how the wait ended.
type Outcome struct {
	// Err is what done delivered (exec.Cmd.Wait's error).
	Err error
	// TimedOut and Cancelled say whether Handlers.Timeout and
	// Handlers.Cancel were called.
	TimedOut, Cancelled bool
}

// Wait waits for done (which the caller's goroutine sends exec.Cmd.Wait's
// result on) and meanwhile calls h on the command's events: the timeout
// (none when timeout <= 0), ctx's end, and signals (none when signals is
// nil). It returns when done delivers, never before: the handlers must end
// the command.
func Wait(ctx context.Context, done <-chan error, timeout time.Duration, signals <-chan os.Signal, h Handlers) Outcome {
	var out Outcome
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	ctxDone := ctx.Done()
	n := 0
	for {
		select {
		case out.Err = <-done:
			return out
		case <-timer:
			out.TimedOut = true
			timer = nil
			if h.Timeout != nil {
				h.Timeout()
			}
		case <-ctxDone:
			out.Cancelled = true
			ctxDone = nil
			if h.Cancel != nil {
				h.Cancel()
			}
		case sig := <-signals:
			n++
			if h.Signal != nil {
				h.Signal(sig, n)
			}
		}
	}
}

// ExitOf returns a reaped process's exit status as corral reports it: its
// exit code, or ExitSignalBase plus the signal that ended it (the shell's
// convention, bash(1) EXIT STATUS) with that signal.
func ExitOf(ws syscall.WaitStatus) (code, signal int) {
	if ws.Signaled() {
		sig := int(ws.Signal())
		return sandbox.ExitSignalBase + sig, sig
	}
	return ws.ExitStatus(), 0
}
