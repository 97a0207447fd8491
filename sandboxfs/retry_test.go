package sandboxfs

import (
	"errors"
	"fmt"
	"testing"
)

// An edit that may have reached a server that then hung or died is not
// sent again: made twice it would fail (its old text is gone) although it
// was made. Everything else is asked again.
func TestRetryable(t *testing.T) {
	notSent := fmt.Errorf("%w: broken pipe", errNotSent)
	hung := fmt.Errorf("no answer in %s", callTimeout)
	died := errors.New("the file server exited")
	for _, tc := range []struct {
		op   string
		err  error
		want bool
	}{
		{"edit", hung, false}, {"edit", died, false}, {"edit", notSent, true},
		{"read", hung, true}, {"write", died, true}, {"search", hung, true},
	} {
		if got := retryable(tc.op, tc.err); got != tc.want {
			t.Errorf("retryable(%s, %v) = %v, want %v", tc.op, tc.err, got, tc.want)
		}
	}
}
