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

// TestLeftoverDescribe: whose an object is, for corral cleanup's lines.
func TestLeftoverDescribe(t *testing.T) {
	for _, c := range []struct {
		lo   Leftover
		want string
	}{
		{Leftover{Kind: "pod", Name: "corral-a", Session: "s1"}, "session s1"},
		{Leftover{Kind: "pod", Name: "corral-a", Pool: PoolFree}, "warm pool, free"},
		{Leftover{Kind: "networkpolicy", Name: "corral-a", Pod: "corral-a"}, "pod corral-a"},
		{Leftover{Kind: "pvc", Name: "corral-a-ws", Pod: "corral-a"}, "pod corral-a"},
		{Leftover{Kind: "pod", Name: "corral-a"}, "one command"},
	} {
		if got := c.lo.Describe(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.lo, got, c.want)
		}
	}
}
