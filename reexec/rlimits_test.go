package reexec

import (
	"os"
	"os/exec"
	"strconv"
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

// limitsHelper prints, from the helper itself, its limits of data, nproc
// and cpu (soft:hard, -1 unlimited) and whether RlimitsEnv is still in
// its environment.
const limitsHelper = "__reexec-test-limits"

func init() {
	Register(limitsHelper, func([]string) int {
		var out []string
		for _, r := range []int{unix.RLIMIT_DATA, unix.RLIMIT_NPROC, unix.RLIMIT_CPU} {
			var l unix.Rlimit
			if err := unix.Getrlimit(r, &l); err != nil {
				return 1
			}
			n := func(v uint64) string {
				if v == unix.RLIM_INFINITY {
					return "-1"
				}
				return strconv.FormatUint(v, 10)
			}
			out = append(out, n(l.Cur)+":"+n(l.Max))
		}
		_, set := os.LookupEnv(RlimitsEnv)
		os.Stdout.WriteString(strings.Join(out, " ") + " " + strconv.FormatBool(set) + "\n")
		return 0
	})
}

// TestInitAppliesRlimits: a helper started with RlimitsEnv holds those
// limits (never above its own) before its mode runs and hides the
// variable from what it starts; one given a value it cannot read runs
// nothing.
func TestInitAppliesRlimits(t *testing.T) {
	var nproc unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &nproc); err != nil {
		t.Fatal(err)
	}
	run := func(v string) (string, error) {
		cmd := exec.Command(os.Args[0], limitsHelper)
		cmd.Env = append(os.Environ(), RlimitsEnv+"="+v)
		out, err := cmd.Output()
		return string(out), err
	}
	out, err := run("data=536870912:536870912,nproc=100:100,cpu=30:-1")
	if err != nil {
		t.Fatal(err)
	}
	cpuHard := "-1"
	var cpu unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_CPU, &cpu); err == nil && cpu.Max != unix.RLIM_INFINITY {
		cpuHard = strconv.FormatUint(cpu.Max, 10)
	}
	nprocWant := "100:100"
	if nproc.Max < 100 {
		nprocWant = strconv.FormatUint(nproc.Max, 10) + ":" + strconv.FormatUint(nproc.Max, 10)
	}
	if want := "536870912:536870912 " + nprocWant + " 30:" + cpuHard + " false\n"; out != want {
		t.Errorf("the helper's limits: %q, want %q", out, want)
	}
	// Unreadable: exit 125, the mode never ran.
	out, err = run("as=1:1")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || out != "" || !strings.Contains(string(ee.Stderr), RlimitsEnv) {
		t.Errorf("a bad %s: %q, %v, want exit 125 and nothing run", RlimitsEnv, out, err)
	}
}
