package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// TestOutcomeHint: the CLI says what a failure means for the command: a
// passing cause is safe to run again, a lost command may have run, and a
// person's fix gets no such line.
func TestOutcomeHint(t *testing.T) {
	emfile := fmt.Errorf("starting bwrap: %w", &os.PathError{Op: "fork/exec", Path: "/usr/bin/bwrap", Err: syscall.EMFILE})
	lost := fmt.Errorf("%w: docker backend: the engine went away", sandbox.ErrUnavailable)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{emfile, "running it again is safe"},
		{sandbox.Transient(lost), "running it again is safe"},
		{sandbox.MayHaveRun(lost), "may have run"},
		{sandbox.MayHaveRun(fmt.Errorf("it may have run, in part or whole")), ""},
		{sandbox.MayHaveRun(fmt.Errorf("%w", syscall.EMFILE)), "may have run"},
		{lost, ""},
		{fmt.Errorf("%w: /x", sandbox.ErrPolicy), ""},
	} {
		got := outcomeHint(tc.err)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("outcomeHint(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
