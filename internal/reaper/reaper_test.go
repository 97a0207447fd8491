package reaper

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/reexec"
)

// TestMain lets the test binary serve as the reaper (Mode), as corral's
// main does.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

func TestDescendants(t *testing.T) {
	procs := []Proc{
		{Pid: 1, PPid: 0}, {Pid: 10, PPid: 1}, {Pid: 11, PPid: 10}, {Pid: 12, PPid: 11},
		{Pid: 13, PPid: 10}, {Pid: 20, PPid: 1}, {Pid: 21, PPid: 20},
		// A loop from a table read while pids moved.
		{Pid: 30, PPid: 31}, {Pid: 31, PPid: 30},
	}
	for _, tc := range []struct {
		root int
		want []int
	}{
		{10, []int{11, 13, 12}},
		{20, []int{21}},
		{12, nil},
		{99, nil},
		{30, []int{31}},
		{1, []int{10, 20, 11, 13, 21, 12}},
	} {
		var got []int
		for _, p := range Descendants(tc.root, procs) {
			got = append(got, p.Pid)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Descendants(%d) = %v, want %v", tc.root, got, tc.want)
		}
	}
}

// mark is a sleep duration no other process uses: it names a test's
// processes in /proc.
func mark(t *testing.T) string {
	return fmt.Sprintf("%d", 8000000+os.Getpid()%100000*10+len(t.Name())%10)
}

// running lists the processes whose command line is "sleep m".
func running(m string) []string {
	var out []string
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ") == "sleep "+m {
			out = append(out, filepath.Base(filepath.Dir(f)))
		}
	}
	return out
}

// escapes is a script whose processes leave its session and process
// group every way a daemon does: setsid, a double fork into a new
// session, a background job with SIGTERM ignored.
func escapes(m string) string {
	return `setsid sleep ` + m + ` & (setsid sh -c 'sleep ` + m + ` & exit 0' &) ; (trap '' TERM; sleep ` + m + `) & sleep 0.1; echo up`
}

func start(t *testing.T, script string, stdout *bytes.Buffer) *Command {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(Spec{Exe: exe, Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: os.Environ(), Stdout: stdout, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNormalExitEndsTheRest: the command's first process exits by itself;
// everything it started, in whatever session, is killed and reaped before
// Wait returns, and Wait has its status.
func TestNormalExitEndsTheRest(t *testing.T) {
	m := mark(t)
	var out bytes.Buffer
	c := start(t, escapes(m)+`; exit 7`, &out)
	ws, killed, err := c.Wait()
	if err != nil || ws.ExitStatus() != 7 || out.String() != "up\n" {
		t.Fatalf("Wait: status %d, err %v, output %q", ws.ExitStatus(), err, out.String())
	}
	if killed < 3 {
		t.Errorf("killed %d, want the 3 sleeps", killed)
	}
	if left := running(m); len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
}

// TestSignalEndsAll: Signal reaches the processes outside the command's
// session too; SIGKILL ends them all.
func TestSignalEndsAll(t *testing.T) {
	m := mark(t)
	var out bytes.Buffer
	// A handler, unlike an ignored signal, is not inherited across exec:
	// the top shell survives SIGTERM, and its children do not unless
	// they ignore it themselves.
	c := start(t, `trap 'echo term' TERM; `+escapes(m)+`; while :; do wait; done`, &out)
	waitFor(t, m, 3)
	if err := c.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, 1) // the one that ignores SIGTERM
	if err := c.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ws, _, err := c.Wait()
	if err != nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL || !strings.Contains(out.String(), "term") {
		t.Fatalf("Wait: %v %v, output %q", ws, err, out.String())
	}
	if left := running(m); len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
}

// waitFor waits until n processes "sleep m" run (a minute at most).
func waitFor(t *testing.T, m string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(running(m)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("want %d of sleep %s, have %v", n, m, running(m))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKillParent: a command's `kill $PPID` (its reaper) does not set its
// processes loose, and the command still gets the default SIGTERM.
func TestKillParent(t *testing.T) {
	m := mark(t)
	var out bytes.Buffer
	c := start(t, escapes(m)+`; kill -TERM $PPID; kill -HUP $PPID; sh -c 'kill -TERM $$; echo survived'; exit 4`, &out)
	ws, killed, err := c.Wait()
	if err != nil || ws.ExitStatus() != 4 || killed < 3 || strings.Contains(out.String(), "survived") {
		t.Fatalf("Wait: %v, killed %d, %v, output %q", ws, killed, err, out.String())
	}
	if left := running(m); len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
}

// TestStarterGone: when the control pipe ends (corral or the agent went
// away), the helper kills the command and everything it started.
func TestStarterGone(t *testing.T) {
	m := mark(t)
	var out bytes.Buffer
	c := start(t, escapes(m)+`; wait`, &out)
	waitFor(t, m, 3)
	c.ctl.Close()
	ws, _, err := c.Wait()
	if err != nil || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("Wait: %v %v", ws, err)
	}
	if left := running(m); len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
}

// TestStartError: a program that cannot be run is a *StartError saying
// whether it is missing.
func TestStartError(t *testing.T) {
	exe, _ := os.Executable()
	for _, tc := range []struct {
		path     string
		notExist bool
	}{{"/corral-no-such-program", true}, {"/", false}} {
		_, err := Start(Spec{Exe: exe, Path: tc.path, Argv: []string{tc.path}, Env: os.Environ()})
		var se *StartError
		if !errors.As(err, &se) || se.NotExist != tc.notExist {
			t.Errorf("%s: err %v, want a StartError with NotExist %v", tc.path, err, tc.notExist)
		}
	}
}

// TestCPUHard: a reaper started with Spec.CPUSeconds gives its command
// RLIMIT_CPU soft at that value and hard a second more, which the command
// cannot raise again, whatever the limits its starter holds then: a
// container's agent holds the soft limit alone (reexec.CommandCPU), which
// a command may have raised through prlimit(2), so the inherited limits
// prove nothing. Without it the command keeps what it inherits and can
// lift its soft limit to an unlimited hard one.
func TestCPUHard(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `grep '^Max cpu time' /proc/self/limits; if ulimit -St unlimited 2>/dev/null; then echo raised; fi`
	for _, tc := range []struct {
		name       string
		env        string // the reaper's own limits, as a container's helpers get them
		secs       uint64
		soft, hard string
		raised     bool
	}{
		{"soft limit inherited, made hard", "cpu=100:-1", 100, "100", "101", false},
		{"the starter's soft limit raised by a command", "", 100, "100", "101", false},
		{"never above the hard limit held", "cpu=50:60", 100, "60", "60", false},
		{"no CPUSeconds: as inherited", "cpu=100:-1", 0, "100", "unlimited", true},
	} {
		var out bytes.Buffer
		env := os.Environ()
		if tc.env != "" {
			env = append(env, reexec.RlimitsEnv+"="+tc.env)
		}
		c, err := Start(Spec{Exe: exe, Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: env, Stdout: &out, Stderr: os.Stderr, CPUSeconds: tc.secs})
		if err != nil {
			t.Fatal(err)
		}
		if ws, _, err := c.Wait(); err != nil || ws.ExitStatus() != 0 {
			t.Fatalf("%s: Wait: %v %v", tc.name, ws, err)
		}
		f := strings.Fields(out.String())
		if len(f) < 5 || f[3] != tc.soft || f[4] != tc.hard || strings.Contains(out.String(), "raised") != tc.raised {
			t.Errorf("%s: %q, want soft %s, hard %s, raised %v", tc.name, out.String(), tc.soft, tc.hard, tc.raised)
		}
	}
}

func TestCPULimit(t *testing.T) {
	const inf = ^uint64(0)
	for _, tc := range []struct {
		in   [2]uint64
		secs uint64
		want [2]uint64
	}{
		{[2]uint64{30, inf}, 30, [2]uint64{30, 31}},
		{[2]uint64{inf, inf}, 30, [2]uint64{30, 31}}, // a soft limit raised meanwhile
		{[2]uint64{10, 20}, 30, [2]uint64{20, 20}},   // never above the hard limit held
		{[2]uint64{30, 30}, 30, [2]uint64{30, 30}},
	} {
		got := cpuLimit(unix.Rlimit{Cur: tc.in[0], Max: tc.in[1]}, tc.secs)
		if got.Cur != tc.want[0] || got.Max != tc.want[1] {
			t.Errorf("cpuLimit(%v, %d) = %+v, want %v", tc.in, tc.secs, got, tc.want)
		}
	}
}
