package kubernetes

import (
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/owner"
)

func TestDecide(t *testing.T) {
	self := owner.Self()
	dead := self
	dead.Start++ // a process of that pid that started at another time
	other := self
	other.Host = "elsewhere"
	for _, tc := range []struct {
		name, owner string
		all         bool
		kept        string // substring; "" means removed
	}{
		{"dead", dead.String(), false, ""},
		{"alive", self.String(), false, "in use by corral"},
		{"other host", other.String(), false, "another machine"},
		{"garbage", "x", false, "no valid owner"},
		{"all alive", self.String(), true, ""},
		{"all garbage", "", true, ""},
	} {
		got := decide(tc.owner, self, tc.all)
		if (tc.kept == "") != (got == "") || !strings.Contains(got, tc.kept) {
			t.Errorf("%s: decide = %q, want %q", tc.name, got, tc.kept)
		}
	}
}
