package session

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

// countingBackend counts its Runs and runs nothing: the turn tests ask
// only whether a command was started.
type countingBackend struct{ runs atomic.Int32 }

func (*countingBackend) Name() string       { return "counting" }
func (*countingBackend) DefaultCwd() string { return "/" }
func (b *countingBackend) Run(context.Context, *sandbox.Request) (*sandbox.Result, error) {
	b.runs.Add(1)
	return &sandbox.Result{}, nil
}

// waitEvent waits for the event msg on events, failing after a minute.
func waitEvent(t *testing.T, events <-chan string, msg string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case m := <-events:
			if m == msg {
				return
			}
		case <-deadline:
			t.Fatalf("no %s event within a minute", msg)
		}
	}
}

// TestFlockContext: a wait for a held lock ends when its context does,
// with the context's cause, holding nothing; the abandoned wait lets the
// lock go as soon as it gets it, so the next taker is not held off.
func TestFlockContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	waits := 0
	free, err := flockContext(context.Background(), path, syscall.LOCK_EX, func() { waits++ })
	if err != nil || waits != 0 {
		t.Fatalf("a free lock: %v, waiting called %d times", err, waits)
	}
	cause := errors.New("called off")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := flockContext(ctx, path, syscall.LOCK_EX, func() { waits++; cancel(cause) })
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, cause) {
			t.Errorf("the called-off wait returned %v, want %v", err, cause)
		}
	case <-time.After(time.Minute):
		t.Fatal("the wait did not end with its context")
	}
	if waits != 1 {
		t.Errorf("waiting called %d times, want 1", waits)
	}
	if _, ok := tryLock(path); ok {
		t.Fatal("the lock was free while its holder held it")
	}
	free()
	// The abandoned wait gets the lock and lets it go at once.
	deadline := time.Now().Add(time.Minute)
	for {
		if release, ok := tryLock(path); ok {
			release()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a minute after its holder let go, the lock is still held (by the abandoned wait)")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestQueuedExecEndsWithoutRunning (issue 27, item 9): a command queued
// behind the session's running one, in another process (the lock file
// held) or in this one (the session's mutex held), ends at once when its
// context ends or a signal comes on its Signals, with a
// *WaitCancelledError, and its sandbox is never started. That it waits
// is read from the session.lock.wait event, never guessed from time.
func TestQueuedExecEndsWithoutRunning(t *testing.T) {
	state := t.TempDir()
	be := &countingBackend{}
	events := make(chan string, 256) // Events drops what does not fit
	m := NewManager(Options{StateDir: state, Logger: slog.New(testkit.Events{C: events}), Resolve: func(string) (*Spec, error) {
		return &Spec{Backend: be, Timeout: time.Minute}, nil
	}})
	defer m.Close()
	s, err := m.Open("q")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		hold func() func()
		sig  bool
	}{
		{"lock file held, context ended", func() func() {
			r, err := lockFile(filepath.Join(s.Dir(), "lock"))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}, false},
		{"lock file held, signal", func() func() {
			r, err := lockFile(filepath.Join(s.Dir(), "lock"))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}, true},
		{"mutex held, context ended", func() func() { s.mu.Lock(); return s.mu.Unlock }, false},
		{"mutex held, signal", func() func() { s.mu.Lock(); return s.mu.Unlock }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := tc.hold()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sigs := make(chan os.Signal, 2)
			done := make(chan error, 1)
			go func() {
				_, err := s.Exec(ctx, ExecRequest{Command: "touch ran", Signals: sigs})
				done <- err
			}()
			waitEvent(t, events, "session.lock.wait")
			if tc.sig {
				sigs <- syscall.SIGINT
			} else {
				cancel()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("the queued command did not end")
			}
			release()
			var wc *WaitCancelledError
			if !errors.As(err, &wc) || !errors.Is(err, ErrCancelledWaiting) {
				t.Fatalf("Exec returned %v, want a *WaitCancelledError", err)
			}
			if tc.sig && wc.Signal != syscall.SIGINT {
				t.Errorf("Signal = %v, want SIGINT", wc.Signal)
			}
			if !tc.sig && !errors.Is(err, context.Canceled) {
				t.Errorf("%v does not wrap context.Canceled", err)
			}
			if n := be.runs.Load(); n != 0 {
				t.Errorf("the backend ran %d sandboxes for a command that waited", n)
			}
		})
	}
	// The control: with nothing held, the command is started.
	if _, err := s.Exec(context.Background(), ExecRequest{Command: "true"}); err == nil || be.runs.Load() != 1 {
		t.Errorf("a command with the turn free: %v, %d runs, want 1 (and the error of a shell that never ran)", err, be.runs.Load())
	}
}

// resultBackend runs nothing and returns its result: a sandbox that ended
// before the session's shell began (the shell's start mark never came).
type resultBackend struct{ res sandbox.Result }

func (*resultBackend) Name() string       { return "result" }
func (*resultBackend) DefaultCwd() string { return "/" }
func (b *resultBackend) Run(context.Context, *sandbox.Request) (*sandbox.Result, error) {
	r := b.res
	return &r, nil
}

// TestSignalBeforeShellBegan (issue 27, item 9): a signal that ended the
// sandbox once the turn was had but before the shell began (a ^C at the
// sandbox's birth) is "did not run" with that signal (the CLI's 130/143),
// not "the sandbox could not be set up" (125) nor a result; a sandbox that
// failed on its own, with no signal, is still unavailable.
func TestSignalBeforeShellBegan(t *testing.T) {
	be := &resultBackend{}
	m := NewManager(Options{StateDir: t.TempDir(), Resolve: func(string) (*Spec, error) {
		return &Spec{Backend: be, Timeout: time.Minute}, nil
	}})
	defer m.Close()
	s, err := m.Open("birth")
	if err != nil {
		t.Fatal(err)
	}
	be.res = sandbox.Result{ExitCode: 143, Signal: int(syscall.SIGTERM)}
	res, err := s.Exec(context.Background(), ExecRequest{Command: "touch ran"})
	var wc *WaitCancelledError
	if !errors.As(err, &wc) || !wc.AtStart || wc.Signal != syscall.SIGTERM || !errors.Is(err, ErrCancelledWaiting) {
		t.Fatalf("Exec = %+v, %v; want a *WaitCancelledError at start with SIGTERM", res, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "did not run") || !strings.Contains(msg, "SIGTERM") || !strings.Contains(msg, "safe to run it again") {
		t.Errorf("the error does not say what happened: %s", msg)
	}
	be.res = sandbox.Result{ExitCode: 1}
	if _, err := s.Exec(context.Background(), ExecRequest{Command: "true"}); !errors.Is(err, sandbox.ErrUnavailable) || errors.As(err, &wc) {
		t.Errorf("a sandbox that failed with no signal: %v, want sandbox.ErrUnavailable", err)
	}
}
