package reexec

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestParseRlimits: RlimitsEnv's value, and what a helper refuses (it
// then runs nothing).
func TestParseRlimits(t *testing.T) {
	inf := uint64(unix.RLIM_INFINITY)
	for _, tc := range []struct {
		in   string
		want []Rlimit
		err  string
	}{
		{"", nil, ""},
		{"data=1073741824:1073741824,nproc=256:256,cpu=30:-1", []Rlimit{
			{"data", unix.RLIMIT_DATA, 1 << 30, 1 << 30}, {"nproc", unix.RLIMIT_NPROC, 256, 256}, {"cpu", unix.RLIMIT_CPU, 30, inf}}, ""},
		{"cpu=-1:-1", []Rlimit{{"cpu", unix.RLIMIT_CPU, inf, inf}}, ""},
		{"as=1:1", nil, "want data, nproc or cpu"},
		{"nofile=1:1", nil, "want data, nproc or cpu"},
		{"data", nil, "want data, nproc or cpu"},
		{"data=5", nil, "SOFT:HARD"},
		{"data=x:1", nil, "not a limit"},
		{"data=-2:1", nil, "not a limit"},
		{"data=1:18446744073709551615", nil, "not a limit"},
		{"data=2:1", nil, "soft limit is above the hard"},
		{"data=1:-1,data=1:1", nil, "twice"},
		{"data=1:1,", nil, "want data, nproc or cpu"},
	} {
		got, err := ParseRlimits(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), RlimitsEnv) {
				t.Errorf("ParseRlimits(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("ParseRlimits(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("ParseRlimits(%q)[%d] = %+v, want %+v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

// TestLowered: a helper only lowers its limits, never asking for a hard
// limit above its own (which needs CAP_SYS_RESOURCE, setrlimit(2)).
func TestLowered(t *testing.T) {
	inf := uint64(unix.RLIM_INFINITY)
	for _, tc := range []struct {
		cur  unix.Rlimit
		want Rlimit
		got  unix.Rlimit
	}{
		{unix.Rlimit{Cur: inf, Max: inf}, Rlimit{Soft: 30, Hard: inf}, unix.Rlimit{Cur: 30, Max: inf}},
		{unix.Rlimit{Cur: 32768, Max: 32768}, Rlimit{Soft: 256, Hard: 256}, unix.Rlimit{Cur: 256, Max: 256}},
		{unix.Rlimit{Cur: 100, Max: 200}, Rlimit{Soft: 256, Hard: 256}, unix.Rlimit{Cur: 200, Max: 200}},
		{unix.Rlimit{Cur: 10, Max: 20}, Rlimit{Soft: 30, Hard: inf}, unix.Rlimit{Cur: 20, Max: 20}},
	} {
		if got := lowered(tc.cur, tc.want); got != tc.got {
			t.Errorf("lowered(%+v, %+v) = %+v, want %+v", tc.cur, tc.want, got, tc.got)
		}
	}
}
