package sandbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

func TestOutcome(t *testing.T) {
	lost := fmt.Errorf("%w: docker backend: the engine went away", ErrUnavailable)
	cases := []struct {
		name                       string
		err                        error
		mayHaveRun, transient, una bool
		msg                        string
	}{
		{"unavailable", lost, false, false, true, lost.Error()},
		{"lost mid-command", MayHaveRun(lost), true, false, true, lost.Error()},
		{"marked twice", MayHaveRun(MayHaveRun(lost)), true, false, true, lost.Error()},
		{"emfile at fork", fmt.Errorf("starting bwrap: %w", &os.PathError{Op: "fork/exec", Path: "/usr/bin/bwrap", Err: syscall.EMFILE}), false, true, false, "starting bwrap: fork/exec /usr/bin/bwrap: too many open files"},
		{"eagain wrapped in unavailable", fmt.Errorf("%w: %w", ErrUnavailable, syscall.EAGAIN), false, true, true, ""},
		{"vanished container", Transient(lost), false, true, true, lost.Error()},
		{"host changed", fmt.Errorf("%w: /x went away", ErrHostChanged), false, true, false, ""},
		{"not started", NotStarted(lost), false, false, true, lost.Error()},
		{"permanent errno", fmt.Errorf("x: %w", syscall.EPERM), false, false, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(tc.err, ErrMayHaveRun); got != tc.mayHaveRun {
				t.Errorf("ErrMayHaveRun: %v", got)
			}
			if got := IsTransient(tc.err); got != tc.transient {
				t.Errorf("IsTransient: %v", got)
			}
			if got := errors.Is(tc.err, ErrUnavailable); got != tc.una {
				t.Errorf("ErrUnavailable: %v", got)
			}
			if tc.msg != "" && tc.err.Error() != tc.msg {
				t.Errorf("message %q, want %q", tc.err.Error(), tc.msg)
			}
		})
	}
	if MayHaveRun(nil) != nil || NotStarted(nil) != nil || Transient(nil) != nil {
		t.Error("marking nil is not nil")
	}
}
