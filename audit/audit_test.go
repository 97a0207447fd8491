package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

func intp(n int) *int { return &n }

// lines returns the lines of the file p, checking each is valid UTF-8 and
// a JSON object.
func lines(t *testing.T, p string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if !utf8.Valid(sc.Bytes()) {
			t.Fatalf("%s: line is not valid UTF-8: %q", p, sc.Bytes())
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: line is not JSON: %v: %q", p, err, sc.Bytes())
		}
		out = append(out, m)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s does not end in a newline", p)
	}
	return out
}

func TestRecordFields(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	l, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 3, 4, 5, 6, 7, 890123456, time.FixedZone("X", 3600))
	err = l.Record(Entry{
		Time: start, Session: "tg:42", Tool: "bash",
		Arguments: json.RawMessage(`{"command":"go test ./...","timeout_s":30}`),
		ExitCode:  intp(1), DurationMS: 1234, Error: "",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(Entry{Session: "s", Tool: "read_file", Arguments: map[string]any{"path": "a.go"}, Error: "no such file"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(Entry{}); err != ErrClosed {
		t.Errorf("Record after Close = %v, want ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, %v", fi.Mode(), err)
	}
	if fi, _ := os.Stat(l.Path()); fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v", fi.Mode())
	}
	got := lines(t, l.Path())
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2", len(got))
	}
	first := got[0]
	if first["time"] != "2026-03-04T04:06:07.890123456Z" {
		t.Errorf("time = %v, want RFC 3339 with nanoseconds in UTC", first["time"])
	}
	want := map[string]any{
		"session": "tg:42", "tool": "bash", "exit_code": 1.0, "duration_ms": 1234.0,
		"arguments": map[string]any{"command": "go test ./...", "timeout_s": 30.0},
	}
	for k, v := range want {
		if fmt.Sprint(first[k]) != fmt.Sprint(v) {
			t.Errorf("%s = %v, want %v", k, first[k], v)
		}
	}
	for _, k := range []string{"error", "truncated"} {
		if _, ok := first[k]; ok {
			t.Errorf("first record has %s", k)
		}
	}
	second := got[1]
	if _, ok := second["exit_code"]; ok {
		t.Error("exit_code present without an exit code")
	}
	if second["error"] != "no such file" {
		t.Errorf("error = %v", second["error"])
	}
	if ts, _ := time.Parse(time.RFC3339Nano, second["time"].(string)); time.Since(ts) > time.Minute {
		t.Errorf("zero Time not replaced by now: %v", second["time"])
	}
}

func TestTruncation(t *testing.T) {
	huge := strings.Repeat("x", 10<<20)
	cases := map[string]any{
		"10 MB string field":  map[string]any{"command": huge},
		"10 MB raw JSON":      json.RawMessage(`{"content":"` + huge + `","path":"a"}`),
		"10 MB of not JSON":   []byte(huge),
		"many fields":         manyFields(5000, 100),
		"long array":          map[string]any{"a": make([]int, 100000)},
		"huge key":            map[string]any{huge: 1},
		"deep nesting":        json.RawMessage(strings.Repeat("[", 5000) + strings.Repeat("]", 5000)),
		"too deep for Go":     json.RawMessage(strings.Repeat("[", 20000) + strings.Repeat("]", 20000)),
		"multibyte":           map[string]any{"s": strings.Repeat("é", 10000)},
		"struct":              struct{ Command, Workdir string }{huge, "/w"},
		"unencodable":         map[string]any{"f": func() {}},
		"many escapes":        map[string]any{"s": strings.Repeat("\x01\"<", 100000)},
		"string":              huge,
		"invalid UTF-8 bytes": map[string]any{"s": strings.Repeat("\xff\xfe", 1<<20)},
	}
	dir := t.TempDir()
	l, err := Open(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for name, args := range cases {
		if err := l.Record(Entry{Session: huge, Tool: "write_file", Arguments: args, Error: huge}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for i, m := range lines(t, l.Path()) {
		a, _ := json.Marshal(m["arguments"])
		if len(a) > MaxArgumentsBytes {
			t.Errorf("record %d: arguments take %d bytes, more than %d", i, len(a), MaxArgumentsBytes)
		}
		for _, k := range []string{"session", "error"} {
			if s, _ := m[k].(string); len(s) > MaxStringBytes || !strings.Contains(s, "cut, 10485760 bytes") {
				t.Errorf("record %d: %s has %d bytes: %.60q", i, k, len(s), s)
			}
		}
		if m["truncated"] != true {
			t.Errorf("record %d: truncated not set", i)
		}
		line, _ := json.Marshal(m)
		if len(line) > 16<<10 {
			t.Errorf("record %d is %d bytes", i, len(line))
		}
	}
	// Strings are cut at character boundaries.
	args, cut := cutArguments(map[string]any{"s": strings.Repeat("é", 10000)})
	s := args.(map[string]any)["s"].(string)
	if !cut || !utf8.ValidString(s) || len(s) > MaxStringBytes {
		t.Errorf("multibyte cut: %v %d bytes valid=%v", cut, len(s), utf8.ValidString(s))
	}
	// Small arguments are kept as they are.
	args, cut = cutArguments(json.RawMessage(`{"n":12345678901234567890,"b":true,"x":null,"l":[1,"a"]}`))
	b, _ := json.Marshal(args)
	if cut || string(b) != `{"b":true,"l":[1,"a"],"n":12345678901234567890,"x":null}` {
		t.Errorf("small arguments changed: %s (cut %v)", b, cut)
	}
}

func manyFields(n, size int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[fmt.Sprintf("k%05d", i)] = strings.Repeat("v", size)
	}
	return m
}

func TestInvalidUTF8(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	bad := "a\xffb\xc3(c\xed\xa0\x80d\x00e\u2028"
	records := []Entry{
		{Session: bad, Tool: bad, Error: bad, Arguments: map[string]any{bad: bad, "l": []any{bad}}},
		{Tool: "bash", Arguments: json.RawMessage(`{"command":"` + "\xff\xfe" + `"}`)},
		{Tool: "bash", Arguments: []byte("\xff not json \xfe")},
		{Tool: "bash", Arguments: bad},
		{Tool: "bash", Arguments: map[string]any{"c": strings.Repeat("\xff", 3*MaxStringBytes)}},
	}
	for _, e := range records {
		if err := l.Record(e); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	got := lines(t, l.Path())
	if len(got) != len(records) {
		t.Fatalf("%d lines, want %d", len(got), len(records))
	}
	if s := got[0]["session"].(string); !strings.HasPrefix(s, "a\uFFFDb") {
		t.Errorf("session = %q", s)
	}
	var n int
	if _, err := Read(dir, func(Entry) error { n++; return nil }); err != nil || n != len(records) {
		t.Errorf("Read: %d records, %v", n, err)
	}
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 200
	for i := range n {
		if err := l.Record(Entry{Session: "s", Tool: "bash", Arguments: map[string]any{"i": i}, DurationMS: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var seen []int64
	for _, p := range files(dir) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if fi.Size() > 1000 {
			t.Errorf("%s is %d bytes, more than the limit", p, fi.Size())
		}
		for _, m := range lines(t, p) {
			seen = append(seen, int64(m["duration_ms"].(float64)))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+".4")); err == nil {
		t.Error("a fourth rotated file exists")
	}
	// The newest records are kept, in order, without gaps.
	if len(seen) == 0 || seen[len(seen)-1] != n-1 {
		t.Fatalf("records kept: %v", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] != seen[i-1]+1 {
			t.Fatalf("records out of order or missing: %v", seen)
		}
	}
	// A record larger than the limit is written alone.
	big := strings.Repeat("y", 1500)
	if err := l.Record(Entry{Tool: "bash", Arguments: map[string]any{"c": big}}); err != nil {
		t.Fatal(err)
	}
	if got := lines(t, l.Path()); len(got) != 1 {
		t.Errorf("big record shares its file with %d others", len(got)-1)
	}
}

// TestConcurrentWriters: goroutines sharing a Log and several Logs on one
// directory (as several processes would) lose no record and never mix two
// in a line, across rotations.
func TestConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	const logs, goroutines, each = 4, 4, 100
	var wg sync.WaitGroup
	var ls []*Log
	for w := range logs {
		l, err := Open(dir, 200<<10)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					id := fmt.Sprintf("%d-%d-%d", w, g, i)
					err := l.Record(Entry{Session: id, Tool: "bash", Arguments: map[string]any{"command": strings.Repeat("z", 100+i)}})
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, l := range ls {
		l.Close()
	}
	seen := map[string]int{}
	rotated := 0
	for _, p := range files(dir) {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if p != filepath.Join(dir, FileName) {
			rotated++
		}
		for _, m := range lines(t, p) {
			seen[m["session"].(string)]++
		}
	}
	if rotated == 0 {
		t.Error("the test never rotated")
	}
	if len(seen) != logs*goroutines*each {
		t.Errorf("%d distinct records, want %d", len(seen), logs*goroutines*each)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("record %s appears %d times", id, c)
		}
	}
}

func TestReadAndFollow(t *testing.T) {
	dir := t.TempDir()
	// Read and Follow on a directory without a log.
	pos, err := Read(filepath.Join(dir, "none"), func(Entry) error { t.Error("record in an empty log"); return nil })
	if err != nil {
		t.Fatal(err)
	}
	_ = pos

	l, err := Open(dir, 600)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rec := func(i int) {
		t.Helper()
		if err := l.Record(Entry{Session: "s", Tool: "bash", Arguments: map[string]any{"i": i}, DurationMS: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		rec(i)
	}
	var got []int64
	pos, err = Read(dir, func(e Entry) error { got = append(got, e.DurationMS); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Fatalf("Read = %v", got)
	}
	// Records written between Read and Follow, across a rotation, are
	// not missed.
	rec(5)
	rec(6)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan Entry, 100)
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, dir, pos, func(e Entry) error { ch <- e; return nil })
	}()
	// Write enough to rotate several times while following.
	go func() {
		for i := 7; i < 30; i++ {
			rec(i)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var followed []int64
	timeout := time.After(20 * time.Second)
	for len(followed) < 25 {
		select {
		case e := <-ch:
			followed = append(followed, e.DurationMS)
		case <-timeout:
			t.Fatalf("followed only %v", followed)
		}
	}
	for i, v := range followed {
		if v != int64(i+5) {
			t.Fatalf("followed %v, want 5..29 in order", followed)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Follow = %v", err)
	}
	if e := got; len(e) == 0 {
		t.Error("no records")
	}
}

func TestFollowFromNow(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan Entry, 10)
	stop := fmt.Errorf("stop")
	done := make(chan error, 1)
	// The log does not exist yet: Follow waits for it.
	go func() {
		done <- Follow(ctx, dir, Position{}, func(e Entry) error {
			ch <- e
			if e.Tool == "last" {
				return stop
			}
			return nil
		})
	}()
	time.Sleep(3 * FollowPoll / 2)
	l, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Record(Entry{Tool: "first"})
	l.Record(Entry{Tool: "last"})
	select {
	case err := <-done:
		if err != stop {
			t.Errorf("Follow = %v, want fn's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not stop")
	}
	if e := <-ch; e.Tool != "first" {
		t.Errorf("first record followed: %q", e.Tool)
	}
}

func TestDir(t *testing.T) {
	if got := Dir("/s/corral"); got != "/s/corral/audit" {
		t.Errorf("Dir = %q", got)
	}
}

// TestProcesses: writers in separate processes (this test binary run
// again) lose no record and never mix two in a line, across rotations.
func TestProcesses(t *testing.T) {
	if dir := os.Getenv("AUDIT_TEST_WRITER_DIR"); dir != "" {
		l, err := Open(dir, 150<<10)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for i := range 300 {
			id := fmt.Sprintf("%s-%d", os.Getenv("AUDIT_TEST_WRITER_ID"), i)
			if err := l.Record(Entry{Session: id, Tool: "bash", Arguments: map[string]any{"command": strings.Repeat("p", 200)}}); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	const procs = 4
	var cmds []*exec.Cmd
	for p := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestProcesses$")
		cmd.Env = append(os.Environ(), "AUDIT_TEST_WRITER_DIR="+dir, fmt.Sprintf("AUDIT_TEST_WRITER_ID=p%d", p))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer: %v", err)
		}
	}
	seen := map[string]int{}
	for _, p := range files(dir) {
		if _, err := os.Stat(p); err == nil {
			for _, m := range lines(t, p) {
				seen[m["session"].(string)]++
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+".1")); err != nil {
		t.Error("the writers never rotated")
	}
	if len(seen) != procs*300 {
		t.Errorf("%d distinct records, want %d", len(seen), procs*300)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("record %s appears %d times", id, c)
		}
	}
}

// TestSpecialFiles: a FIFO or a device where the audit log goes is refused
// at once, by the writer, Read and Follow (a FIFO blocked corral mcp in
// open(2) for good, SIGTERM ignored; /dev/zero made corral log read
// forever).
func TestSpecialFiles(t *testing.T) {
	for _, kind := range []string{"fifo", "device"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, FileName)
			if kind == "fifo" {
				if err := syscall.Mkfifo(p, 0o600); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				l, err := Open(dir, 1<<20)
				if err == nil {
					err = l.Record(Entry{Tool: "bash"})
					l.Close()
				}
				if !errors.Is(err, ErrNotRegular) {
					t.Errorf("writing: %v, want ErrNotRegular", err)
				}
				if _, err := Read(dir, func(Entry) error { return nil }); !errors.Is(err, ErrNotRegular) {
					t.Errorf("Read: %v, want ErrNotRegular", err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if err := Follow(ctx, dir, Position{}, func(Entry) error { return nil }); !errors.Is(err, ErrNotRegular) {
					t.Errorf("Follow: %v, want ErrNotRegular", err)
				}
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("the audit log's reader or writer hangs on a special file")
			}
		})
	}
}
