package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/audit"
)

func TestLogCmd(t *testing.T) {
	c := newCLI(t)
	// No log yet: nothing to show, no error.
	if code, out, errOut := c.run(nil, "log"); code != 0 || out != "" {
		t.Fatalf("log without a log: %d %q %q", code, out, errOut)
	}
	dir := audit.Dir(filepath.Join(c.home, ".local", "state", "corral"))
	l, err := audit.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	zero, one := 0, 1
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	records := []audit.Entry{
		{Time: base, Session: "tg:1", Tool: "bash", Arguments: map[string]any{"command": "go test ./...", "timeout_s": 60}, ExitCode: &one, DurationMS: 1500},
		{Time: base.Add(time.Second), Session: "tg:2", Tool: "read_file", Arguments: map[string]any{"path": "main.go"}, DurationMS: 3},
		{Time: base.Add(2 * time.Second), Session: "cli", Tool: "bash", Arguments: map[string]any{"command": "rm -rf /\nx"}, ExitCode: &zero, Error: "refused: rm-root"},
	}
	for _, e := range records {
		if err := l.Record(e); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errOut := c.run(nil, "log")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("log: %d %q %q", code, out, errOut)
	}
	for i, want := range []string{
		`tg:1 .* bash .* exit 1 .* 1.5s  command="go test ./..." timeout_s=60$`,
		`tg:2 .* read_file .* exit - .* 3ms  path=main.go$`,
		`cli .* bash .* exit 0 .* command="rm -rf /\\nx"  error: refused: rm-root$`,
	} {
		if !regexpMatch(want, lines[i]) {
			t.Errorf("line %d = %q, want it to match %q", i, lines[i], want)
		}
	}

	code, out, _ = c.run(nil, "log", "--session", "tg:*", "--json")
	var got []audit.Entry
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e audit.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
		got = append(got, e)
	}
	if code != 0 || len(got) != 2 || got[0].Session != "tg:1" || got[1].Session != "tg:2" || !got[0].Time.Equal(base) {
		t.Errorf("--session 'tg:*' --json: %d %+v", code, got)
	}
	if code, out, _ = c.run(nil, "log", "--session", "cli", "-n", "5"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Errorf("--session cli: %d %q", code, out)
	}
	if code, out, _ = c.run(nil, "log", "-n", "2"); code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "tg:2") {
		t.Errorf("-n 2: %d %q", code, out)
	}
	if code, _, errOut = c.run(nil, "log", "--session", "[x"); code != 125 || !strings.Contains(errOut, "glob") {
		t.Errorf("bad glob: %d %q", code, errOut)
	}

	// -f shows the last records, then new ones, across rotation, and ends
	// on SIGINT with status 0.
	cmd := exec.Command(corralBin, "log", "-f", "-n", "1", "--session", "tg:*")
	cmd.Env = c.env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	next := func() string {
		t.Helper()
		ch := make(chan string, 1)
		go func() {
			if sc.Scan() {
				ch <- sc.Text()
			} else {
				ch <- "EOF"
			}
		}()
		select {
		case s := <-ch:
			return s
		case <-time.After(15 * time.Second):
			t.Fatal("corral log -f printed nothing")
		}
		return ""
	}
	if s := next(); !strings.Contains(s, "tg:2") {
		t.Errorf("first line of -f: %q", s)
	}
	small, err := audit.Open(dir, 300) // rotates at every record
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	for i := range 3 {
		small.Record(audit.Entry{Session: "cli", Tool: "bash"})
		small.Record(audit.Entry{Session: fmt.Sprintf("tg:new%d", i), Tool: "bash"})
		time.Sleep(2 * audit.FollowPoll)
	}
	for i := range 3 {
		if s := next(); !strings.Contains(s, fmt.Sprintf("tg:new%d", i)) {
			t.Errorf("followed line %d: %q", i, s)
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("log -f after SIGINT: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("log -f did not end on SIGINT")
	}
}

func TestFormatEntry(t *testing.T) {
	code := 137
	e := audit.Entry{
		Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Session: "s\x1b[31m", Tool: "bash",
		Arguments: map[string]any{"zz": true, "command": strings.Repeat("a ", 200), "workdir": "/w"},
		ExitCode:  &code, DurationMS: 125_000,
	}
	s := formatEntry(e)
	if strings.ContainsAny(s, "\x1b\n") {
		t.Errorf("control characters in %q", s)
	}
	if !strings.Contains(s, "exit 137") || !strings.Contains(s, "2m5s") || !strings.Contains(s, `command="a a`) || !strings.HasSuffix(s, "…") {
		t.Errorf("formatEntry = %q", s)
	}
	for in, want := range map[any]string{nil: "", "x": "x", json.Number("5"): "5"} {
		if got := shortArgs(in); got != want {
			t.Errorf("shortArgs(%v) = %q, want %q", in, got, want)
		}
	}
}

func regexpMatch(pattern, s string) bool {
	ok, err := regexp.MatchString(pattern, s)
	return err == nil && ok
}
