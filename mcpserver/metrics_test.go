package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// TestOutcomeOf classifies calls as toolError words them: may-have-run
// first, whatever else the cause matches.
func TestOutcomeOf(t *testing.T) {
	wrapped := func(err error) error { return toolError(fmt.Errorf("running: %w", err)) }
	for _, c := range []struct {
		name           string
		err            error
		isError, asked bool
		want           string
	}{
		{"ran", nil, false, false, OutcomeOK},
		{"the tool's own error result", nil, true, false, OutcomeError},
		{"an approval question", nil, false, true, OutcomeAsked},
		{"the floor", &ToolError{Msg: "refused", Err: errRefused}, false, false, OutcomeDenied},
		{"the sandbox policy", wrapped(sandbox.ErrPolicy), false, false, OutcomeDenied},
		{"lost mid-command", wrapped(sandbox.MayHaveRun(fmt.Errorf("%w: engine gone", sandbox.ErrUnavailable))), false, false, OutcomeMayHaveRun},
		{"cancelled", wrapped(context.Canceled), false, false, OutcomeCancelled},
		{"cancelled waiting", wrapped(session.ErrCancelledWaiting), false, false, OutcomeCancelled},
		{"bad input", badInput("no such path"), false, false, OutcomeInvalid},
		{"EMFILE", wrapped(syscall.EMFILE), false, false, OutcomeTransient},
		{"no sandbox here", wrapped(sandbox.ErrUnavailable), false, false, OutcomeUnavailable},
		{"state unwritable", wrapped(session.ErrStateUnwritable), false, false, OutcomeUnavailable},
		{"anything else", wrapped(errors.New("boom")), false, false, OutcomeError},
	} {
		if got := outcomeOf(c.err, c.isError, c.asked); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if deniedKind(toolError(sandbox.ErrPolicy)) != "policy" || deniedKind(&ToolError{Err: errRefused}) != "approval" {
		t.Error("denied kinds")
	}
}
