package sandbox

import (
	"errors"
	"testing"
)

func TestParseRunAs(t *testing.T) {
	for _, c := range []struct {
		in    string
		want  RunAs
		fixed bool
		bad   bool
	}{
		{in: "", fixed: false},
		{in: "  ", fixed: false},
		{in: "1000", want: RunAs{1000, 1000}, fixed: true},
		{in: "1000:100", want: RunAs{1000, 100}, fixed: true},
		{in: "nobody", want: RunAs{65534, 65534}, fixed: true},
		{in: "nobody:nogroup", want: RunAs{65534, 65534}, fixed: true},
		{in: "65534:nogroup", want: RunAs{65534, 65534}, fixed: true},
		{in: "0", bad: true},
		{in: "root", bad: true},
		{in: "1000:0", bad: true},
		{in: "nobody:root", bad: true},
		{in: "-5", bad: true},
		{in: "4294967295", bad: true},
		{in: "4294967294", bad: true},
		{in: "2147483647", bad: true},
		{in: "2147483646", want: RunAs{2147483646, 2147483646}, fixed: true},
		{in: "no-such-user-here", bad: true},
		{in: "1000:no-such-group-here", bad: true},
	} {
		got, fixed, err := ParseRunAs(c.in)
		if c.bad {
			if err == nil || !errors.Is(err, ErrBadRequest) {
				t.Errorf("ParseRunAs(%q) = %v, %v; want an ErrBadRequest", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want || fixed != c.fixed {
			t.Errorf("ParseRunAs(%q) = %v, %v, %v; want %v, %v", c.in, got, fixed, err, c.want, c.fixed)
		}
	}
}

func TestResolveRunAs(t *testing.T) {
	for _, c := range []struct {
		name       string
		fixed      RunAs
		isFixed    bool
		owner, grp int
		want       RunAs
	}{
		{"root's project: nobody", RunAs{}, false, 0, 0, NobodyRunAs},
		{"a person's project: the person", RunAs{}, false, 1000, 1000, RunAs{1000, 1000}},
		{"a person's project in root's group", RunAs{}, false, 1000, 0, RunAs{1000, NobodyRunAs.GID}},
		{"a system account's directory: nobody", RunAs{}, false, 33, 33, NobodyRunAs},
		{"nobody's directory: nobody", RunAs{}, false, 65534, 65534, NobodyRunAs},
		{"fixed wins", RunAs{2000, 2000}, true, 1000, 1000, RunAs{2000, 2000}},
		{"fixed wins over root", RunAs{2000, 3000}, true, 0, 0, RunAs{2000, 3000}},
	} {
		if got := ResolveRunAs(c.fixed, c.isFixed, c.owner, c.grp); got != c.want {
			t.Errorf("%s: ResolveRunAs = %v, want %v", c.name, got, c.want)
		}
	}
}
