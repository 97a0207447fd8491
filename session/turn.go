package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrCancelledWaiting means a foreground command was called off while it
// waited for its turn (the session's earlier command still ran): nothing
// of it was run, so sending it again is safe. Session.Exec returns it
// inside a *WaitCancelledError.
var ErrCancelledWaiting = errors.New("cancelled while waiting for the session's running command to end, so nothing was run")

// WaitCancelledError is Session.Exec's error for a command whose wait for
// its turn ended first: the foreground commands of a session run one at a
// time, in a process and across processes (flock(2) on the session's
// lock file), and a command queued behind another ends at once when its
// context ends or a signal comes on ExecRequest.Signals, without running.
// errors.Is finds ErrCancelledWaiting in it, and Cause's errors
// (context.Canceled or context.DeadlineExceeded among them) when the
// context ended.
type WaitCancelledError struct {
	// Signal is the signal that came on ExecRequest.Signals while the
	// command waited (a person's ^C, a kill), or nil when its context
	// ended.
	Signal os.Signal
	// AtStart says that Signal came once the turn was had, while the
	// command's sandbox was being made, and ended it before the shell
	// began (Exec knows: the shell says it began before the command
	// runs).
	AtStart bool
	// Cause is context.Cause of the command's context when that ended
	// the wait, else nil.
	Cause error
}

// Error says what stopped the wait and that nothing was run.
func (e *WaitCancelledError) Error() string {
	switch {
	case e.Signal != nil && e.AtStart:
		return fmt.Sprintf("the command did not run: %s ended its sandbox while it was being made, before the shell began; nothing was run, so it is safe to run it again", signalName(e.Signal))
	case e.Signal != nil:
		return fmt.Sprintf("the command did not run: %s came while it waited for the session's running command to end; nothing was run, so it is safe to run it again", signalName(e.Signal))
	case e.Cause != nil:
		return fmt.Sprintf("the command did not run: it was cancelled (%v) while it waited for the session's running command to end; nothing was run, so it is safe to run it again", e.Cause)
	}
	return "the command did not run: " + ErrCancelledWaiting.Error()
}

// Unwrap returns ErrCancelledWaiting and, when the context ended the
// wait, its cause.
func (e *WaitCancelledError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrCancelledWaiting, e.Cause}
	}
	return []error{ErrCancelledWaiting}
}

// signalName names sig as kill(1) does ("SIGTERM"), or as Go prints it.
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if n := unix.SignalName(s); n != "" {
			return n
		}
	}
	return sig.String()
}

// takeTurn waits for the session's foreground turn, first in this process
// (s.mu) and then across processes (flock(2) on the session's lock file),
// until ctx ends or a signal comes on sigs; then it returns a
// *WaitCancelledError and holds nothing. On success the caller runs its
// command and then calls the returned function, which lets the turn go.
//
// A signal that comes while the command waits is taken off sigs (it is
// the command's own, and the command will not run). One that comes at the
// instant the turn is had counts as having come before: the command does
// not run then either; a later one stays on sigs for the backend, which
// passes it on to the command.
func (s *Session) takeTurn(ctx context.Context, sigs <-chan os.Signal) (func(), error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// caught receives the signal that ended the wait, when one did; the
	// watcher has stopped once it is closed.
	caught := make(chan os.Signal, 1)
	stop := make(chan struct{})
	go func() {
		defer close(caught)
		if sigs == nil {
			return
		}
		select {
		case sig := <-sigs:
			caught <- sig
			cancel(ErrCancelledWaiting)
		case <-stop:
		}
	}()
	// stopWatching stops the watcher and returns the signal it took, if
	// any.
	stopWatching := func() os.Signal {
		close(stop)
		return <-caught
	}
	// notRun is the error for a wait that sig, or else ctx's end, ended.
	notRun := func(sig os.Signal) error {
		e := &WaitCancelledError{Signal: sig}
		if sig == nil {
			e.Cause = context.Cause(ctx)
		}
		s.m.log.Info("session.lock.cancelled", "session", s.name, "signal", fmt.Sprint(e.Signal), "cause", fmt.Sprint(e.Cause))
		return e
	}
	waiting := func() {
		s.m.log.Info("session.lock.wait", "session", s.name, "pid", os.Getpid())
	}

	if !s.mu.TryLock() {
		waiting()
		waiting = nil // said once
		locked := make(chan struct{})
		go func() { s.mu.Lock(); close(locked) }()
		select {
		case <-locked:
		case <-wctx.Done():
			go func() { <-locked; s.mu.Unlock() }()
			return nil, notRun(stopWatching())
		}
	}
	if s.isClosed() {
		s.mu.Unlock()
		stopWatching()
		return nil, ErrClosed
	}
	release, err := flockContext(wctx, filepath.Join(s.dir, "lock"), unix.LOCK_EX, waiting)
	sig := stopWatching()
	if err != nil {
		s.mu.Unlock()
		if wctx.Err() != nil {
			return nil, notRun(sig)
		}
		return nil, err
	}
	// A signal the watcher took, or an end of ctx, at the instant the
	// turn was had came before the command: it does not run.
	if sig != nil || ctx.Err() != nil {
		release()
		s.mu.Unlock()
		return nil, notRun(sig)
	}
	return func() { release(); s.mu.Unlock() }, nil
}
