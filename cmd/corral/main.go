// Command corral runs an AI agent's shell commands, code and file edits
// inside a sandbox. Each verb lives in its own file of this package; the
// work is done by the packages under the module root.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/startdir"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"

	// The helper modes, registered at init.
	_ "github.com/corralhq/corral/egress/inside"
	_ "github.com/corralhq/corral/inside"
	_ "github.com/corralhq/corral/portfwd"
	_ "github.com/corralhq/corral/sandboxfs"
)

// main runs the CLI. corral's executable also serves as its own helpers,
// registered with reexec and dispatched here first thing, before
// the command line, settings or backends are touched: the allowlist
// forwarder and trampoline (package egress/inside), the file server
// (package sandboxfs, on CORRAL_SANDBOXFS), the port relay (package
// portfwd) and the docker helpers (package inside). The CLI then leaves
// its working directory for "/" (package startdir).
func main() {
	reexec.Init()
	// corral does not stay in the directory it was started in, usually
	// the project its sandboxes write: a crash there would leave a core
	// in their reach (issue 26). Paths given relative to it are resolved
	// by package startdir.
	if err := startdir.Leave("/"); err != nil {
		fmt.Fprintf(stderr, "corral: %v\n", err)
		os.Exit(sandbox.ExitCorralError)
	}
	os.Exit(realMain())
}

// exitError carries an exit status out of a cobra command without os.Exit
// below main. A nil Err means the status is the sandboxed command's own and
// nothing is printed.
type exitError struct {
	Code int
	Err  error
}

// Error implements error.
func (e *exitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

// Unwrap returns the error behind the status, if any.
func (e *exitError) Unwrap() error { return e.Err }

// caughtSignal is the cause (context.Cause) of the context realMain
// cancels when corral gets SIGTERM or SIGHUP: that signal, so a command
// ended before it ran can exit with 128+N for it.
type caughtSignal struct{ sig syscall.Signal }

// Error names the signal.
func (c caughtSignal) Error() string { return c.sig.String() + " signal received" }

// Is makes it a context.Canceled, as signal.NotifyContext's cause is.
func (c caughtSignal) Is(target error) bool { return target == context.Canceled }

// signalContext is signal.NotifyContext with the signal as the cause
// (caughtSignal), which NotifyContext gives only in words.
func signalContext(parent context.Context, sigs ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	go func() {
		select {
		case s := <-ch:
			if sig, ok := s.(syscall.Signal); ok {
				cancel(caughtSignal{sig})
			} else {
				cancel(nil)
			}
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel(nil) }
}

// signalOf returns the signal behind err, a command ended before it ran
// (session.WaitCancelledError): the one that came while it waited, or the
// one that cancelled corral's context (caughtSignal).
func signalOf(err error) (syscall.Signal, bool) {
	var wc *session.WaitCancelledError
	if !errors.As(err, &wc) {
		return 0, false
	}
	if s, ok := wc.Signal.(syscall.Signal); ok {
		return s, true
	}
	var cs caughtSignal
	if errors.As(wc.Cause, &cs) {
		return cs.sig, true
	}
	return 0, false
}

func realMain() int {
	// SIGTERM and SIGHUP (a closed terminal) end corral cleanly: running
	// sandboxes end and containers are removed.
	ctx, stop := signalContext(context.Background(), syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	g := &globalOptions{}
	root := newRootCmd(g)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(stderr, "corral: %v\n", ee.Err)
			if hint := outcomeHint(ee.Err); hint != "" {
				fmt.Fprintln(stderr, hint)
			}
		}
		return ee.Code
	}
	fmt.Fprintf(stderr, "corral: %v\n", err)
	if hint := outcomeHint(err); hint != "" {
		fmt.Fprintln(stderr, hint)
	}
	return sandbox.ExitCorralError
}

// outcomeHint is the line that says what a failure means for the command
// (sandbox/outcome.go): that it may have run, or that nothing ran for a
// passing cause and running it again is safe; "" when the message says
// enough.
func outcomeHint(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, sandbox.ErrMayHaveRun):
		if strings.Contains(msg, "may have run") {
			return ""
		}
		return "corral: the command may have run, in part or whole: look at its effects before running it again"
	case sandbox.IsTransient(err):
		return "corral: nothing was run, for a passing cause: running it again is safe"
	}
	return ""
}
