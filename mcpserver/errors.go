package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// ToolError is a failed tool call, worded for the model: what went wrong
// and what to do about it. A tool handler returns one (or any error, which
// toolError words); the client receives a CallToolResult with isError set
// and Msg as its text. Tool execution errors belong in the result, not in
// a JSON-RPC error, so that the model sees them and can correct itself (MCP
// specification 2025-11-25, server/tools, "Error Handling").
type ToolError struct {
	// Msg is the whole message the model reads.
	Msg string
	// Err is the underlying error, if any (for errors.Is and the logs).
	Err error
}

// Error returns Msg.
func (e *ToolError) Error() string { return e.Msg }

// Unwrap returns Err.
func (e *ToolError) Unwrap() error { return e.Err }

// badInput returns a ToolError about an argument: what is wrong with it and
// what to send instead.
func badInput(format string, args ...any) *ToolError {
	return &ToolError{Msg: fmt.Sprintf(format, args...), Err: sandbox.ErrBadRequest}
}

// toolError words err for the model. A *ToolError is returned as is; the
// sentinel errors of the sandbox, session and config packages become
// messages that say whether anything ran and who can fix what.
func toolError(err error) error {
	var te *ToolError
	if errors.As(err, &te) {
		return te
	}
	msg := err.Error()
	var out string
	switch {
	case errors.Is(err, sandbox.ErrMayHaveRun):
		// First: the cause may match ErrUnavailable too, and "nothing was
		// run" would send the agent to run it twice.
		msg = strip(msg, sandbox.ErrUnavailable)
		out = msg
		if !strings.Contains(msg, "may have run") {
			out = "the command may have run, in part or whole, but its outcome is unknown: " + msg
		}
		if !strings.Contains(msg, "look at its effects") {
			out += ". Look at its effects before running it again"
		}
	case errors.Is(err, session.ErrCancelledWaiting):
		// Before context.Canceled, which it may wrap too: here nothing
		// ran at all.
		out = "the call was cancelled while it waited for the session's running command to end, so nothing was run; call the tool again to run it"
		if wc := (*session.WaitCancelledError)(nil); errors.As(err, &wc) && wc.AtStart {
			// Its sandbox was ended by a signal from outside (a kill of
			// corral's processes on the host) before the shell began.
			out = msg + "; call the tool again to run it"
		}
	case errors.Is(err, context.Canceled):
		out = "the call was cancelled; the command and every process it started were ended"
	case errors.Is(err, context.DeadlineExceeded):
		out = "the call ran out of time; the command and every process it started were ended"
	case errors.Is(err, session.ErrClosed):
		out = "this session has been closed (corral is shutting down, or the MCP session it belonged to has ended), so nothing was run"
	case errors.Is(err, session.ErrStateUnwritable):
		out = msg + ". Only the person running corral can fix this; tell them"
	case errors.Is(err, session.ErrStateUnreadable):
		out = msg + ". Call the tool again: a passing cause (too many open files) clears by itself; if it fails the same way, tell the person running corral (the session's state directory needs them)"
	case sandbox.IsTransient(err):
		// Before ErrUnavailable: a passing cause is the agent's to retry,
		// not a person's to fix.
		out = "nothing was run: " + strip(msg, sandbox.ErrUnavailable) + ". This passes by itself; call the tool again (if it fails the same way several times, tell the person running corral)"
	case errors.Is(err, sandbox.ErrUnavailable):
		out = "no sandbox can be had on this machine, so nothing was run: " + strip(msg, sandbox.ErrUnavailable) +
			". Only the person running corral can fix this (`corral doctor` says how); tell them"
	case errors.Is(err, sandbox.ErrPolicy):
		out = "refused by corral's sandbox policy, so nothing was run: " + strip(msg, sandbox.ErrPolicy) +
			". The policy is the person's setting: choose another path, or ask them"
	case errors.Is(err, sandbox.ErrBadRequest):
		out = strip(msg, sandbox.ErrBadRequest)
	case errors.Is(err, config.ErrInvalid), errors.Is(err, config.ErrUnknownKey):
		out = "corral's settings are invalid, so nothing was run: " + msg +
			". Only the person running corral can fix them (`corral config list`); tell them"
	default:
		out = "corral failed: " + msg
	}
	var oe *session.OutputError
	if errors.As(err, &oe) {
		out += "\nWhat the command wrote before that:\n" + oe.Output
	}
	return &ToolError{Msg: out, Err: err}
}

// strip removes a sentinel's text ("bad request: ") from the front of msg.
func strip(msg string, sentinel error) string {
	return strings.TrimPrefix(msg, sentinel.Error()+": ")
}
