package sandbox

import (
	"errors"
	"strings"
	"syscall"
)

// What a failed Run says about the command, for the front ends' wording
// (one rule, held on every backend: a command that may have run is never
// reported as not run):
//
//   - not run, and safe to send again: ErrTransient, ErrHostChanged, or any
//     error of the causes IsTransient names;
//   - not run, and it will not run until a person acts: ErrUnavailable,
//     ErrPolicy, ErrBadRequest;
//   - may have run, in part or whole, outcome unknown: ErrMayHaveRun.
//
// ErrMayHaveRun wins over the others: a wrapped cause may match
// ErrUnavailable too (the engine was lost mid-command), so front ends
// test ErrMayHaveRun first.
var (
	// ErrMayHaveRun means the command was started (or may have been) and
	// corral lost track of it: its exit status is unknown and its effects
	// may be there. It is never safe to send the same command again
	// without looking at them first.
	ErrMayHaveRun = errors.New("the command may have run, in part or whole, but its outcome is unknown")

	// ErrTransient means nothing was run, for a passing cause (a resource
	// exhausted for a moment, a container that vanished and will be made
	// again): the same request may well succeed if sent again.
	ErrTransient = errors.New("a passing failure; nothing was run")

	// ErrNotStarted marks an error returned after Request.OnStart was
	// called for one the backend knows came before the command started
	// (bwrap failed while building the sandbox): nothing was run.
	ErrNotStarted = errors.New("the command was not started")
)

// MayHaveRun returns err marked as ErrMayHaveRun, with err's message
// unchanged; nil for nil.
func MayHaveRun(err error) error { return mark(err, ErrMayHaveRun) }

// NotStarted returns err marked as ErrNotStarted, with err's message
// unchanged; nil for nil.
func NotStarted(err error) error { return mark(err, ErrNotStarted) }

// Transient returns err marked as ErrTransient, with err's message
// unchanged; nil for nil.
func Transient(err error) error { return mark(err, ErrTransient) }

func mark(err, kind error) error {
	if err == nil || errors.Is(err, kind) {
		return err
	}
	return &marked{err: err, kind: kind}
}

// marked is an error that also matches kind (errors.Is), with the message
// of err alone.
type marked struct{ err, kind error }

func (e *marked) Error() string   { return e.err.Error() }
func (e *marked) Unwrap() []error { return []error{e.err, e.kind} }

// transientErrnos are causes that pass by themselves: a table full for a
// moment (open files, processes, memory, buffers), an interrupted call.
// Source: the errno meanings of errno(3), open(2), fork(2), clone(2).
var transientErrnos = []syscall.Errno{
	syscall.EMFILE, syscall.ENFILE, syscall.EAGAIN, syscall.ENOMEM, syscall.ENOBUFS, syscall.EINTR,
}

// IsTransient reports whether err is a passing failure: ErrTransient,
// ErrHostChanged, or an error whose chain holds one of the errnos of a
// full table (EMFILE, ENFILE, EAGAIN, ENOMEM, ENOBUFS) or EINTR. It says
// nothing about whether the command ran: test ErrMayHaveRun first.
func IsTransient(err error) bool {
	if errors.Is(err, ErrTransient) || errors.Is(err, ErrHostChanged) {
		return true
	}
	for _, e := range transientErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// IsTransientText reports whether msg, an error's text that crossed a
// process boundary and lost its chain (a helper's answer), names one of
// the passing causes IsTransient knows by their strerror(3) texts ("too
// many open files", ...).
func IsTransientText(msg string) bool {
	for _, e := range transientErrnos {
		if strings.Contains(msg, e.Error()) {
			return true
		}
	}
	return false
}
