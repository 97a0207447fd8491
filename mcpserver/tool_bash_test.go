package mcpserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/sandbox"
)

// TestBash runs commands through the bash tool, in order: state carries
// over from one step to the next.
func TestBash(t *testing.T) {
	f := newFixture(t)
	cs := f.connect(nil)
	sub := filepath.Join(f.work, "sub")
	steps := []struct {
		name     string
		args     map[string]any
		exit     int
		output   []string // substrings of output
		cwd      string   // want, when set
		timedOut bool
		check    func(t *testing.T, r callResult)
	}{
		{name: "echo", args: map[string]any{"command": "echo hello"}, output: []string{"hello\n"}, cwd: f.work},
		{name: "exit code", args: map[string]any{"command": "echo out; echo err >&2; exit 3"}, exit: 3, output: []string{"out\n", "err\n"}},
		{name: "cd and export carry over", args: map[string]any{"command": "mkdir -p sub && cd sub && export GREETING=hi"}, cwd: sub},
		{name: "carried over", args: map[string]any{"command": "pwd; echo $GREETING"}, output: []string{sub + "\n", "hi\n"}, cwd: sub},
		{name: "pipe status", args: map[string]any{"command": "false | true | (exit 4)"}, exit: 4, check: func(t *testing.T, r callResult) {
			if ps, _ := r.data["pipe_status"].([]any); len(ps) != 3 || ps[0] != 1.0 || ps[2] != 4.0 {
				t.Errorf("pipe_status = %v, want [1 0 4]", r.data["pipe_status"])
			}
			if !strings.Contains(r.text, "pipeline: 1 0 4") {
				t.Errorf("text %q does not show the pipeline", r.text)
			}
		}},
		{name: "workdir for one command", args: map[string]any{"command": "pwd", "workdir": f.work}, output: []string{f.work + "\n"}, cwd: sub},
		{name: "relative workdir", args: map[string]any{"command": "cd .. && pwd", "workdir": "."}, output: []string{f.work + "\n"}, cwd: f.work},
		{name: "host is read-only", args: map[string]any{"command": "touch /etc/corral-test"}, exit: 1, output: []string{"Read-only file system"}},
		{name: "tmp is fresh: write", args: map[string]any{"command": "echo x > /tmp/f && echo x > $TMPDIR/keep"}},
		{name: "tmp is fresh: gone, TMPDIR kept", args: map[string]any{"command": "test ! -e /tmp/f && cat $TMPDIR/keep"}, output: []string{"x\n"}},
		{name: "no network under workspace", args: map[string]any{"command": "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"}, output: []string{"lo"}, check: func(t *testing.T, r callResult) {
			if strings.TrimSpace(r.str("output")) != "lo" {
				t.Errorf("interfaces = %q, want only lo", r.str("output"))
			}
		}},
		{name: "output cut in the middle", args: map[string]any{"command": "head -c 100000 /dev/zero | tr '\\0' a; echo; echo END"}, output: []string{"END\n", "bytes of output omitted"}, check: func(t *testing.T, r callResult) {
			if r.num("output_omitted_bytes") <= 0 || r.num("output_bytes") != 100005 {
				t.Errorf("output_bytes = %v, output_omitted_bytes = %v", r.num("output_bytes"), r.num("output_omitted_bytes"))
			}
		}},
		{name: "invalid UTF-8 replaced", args: map[string]any{"command": `printf 'a\377b'`}, output: []string{"a\uFFFDb"}, check: func(t *testing.T, r callResult) {
			if r.data["invalid_utf8"] != true {
				t.Errorf("invalid_utf8 = %v, want true", r.data["invalid_utf8"])
			}
		}},
		{name: "timeout", args: map[string]any{"command": "echo started; sleep 30", "timeout_s": 0.5}, timedOut: true, output: []string{"started"}, check: func(t *testing.T, r callResult) {
			if !strings.Contains(r.text, "timed out") || !strings.Contains(r.text, "timeout_s") {
				t.Errorf("text %q does not say it timed out and how to give it longer", r.text)
			}
			// 124, as corral run exits (it was 143, the SIGTERM that
			// ended it).
			if r.num("exit_code") != sandbox.ExitTimedOut || !strings.Contains(r.text, "exit code 124, timed out") {
				t.Errorf("exit_code = %v, text %q; want %d", r.num("exit_code"), r.text, sandbox.ExitTimedOut)
			}
			if r.num("duration_ms") > 10000 {
				t.Errorf("duration_ms = %v, want about 500", r.num("duration_ms"))
			}
		}},
		{name: "fractional timeout that is long enough", args: map[string]any{"command": "sleep 0.1; echo done", "timeout_s": 5.5}, output: []string{"done"}},
		{name: "not found is exit 127, not a tool error", args: map[string]any{"command": "no-such-command-xyz"}, exit: 127, output: []string{"not found"}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			r := callTool(t, cs, "bash", st.args)
			if r.isError {
				t.Fatalf("tool error: %s", r.text)
			}
			if st.timedOut {
				if r.data["timed_out"] != true {
					t.Errorf("timed_out = %v, want true", r.data["timed_out"])
				}
			} else if got := int(r.num("exit_code")); got != st.exit {
				t.Errorf("exit_code = %d, want %d (output %q)", got, st.exit, r.str("output"))
			}
			for _, w := range st.output {
				if !strings.Contains(r.str("output"), w) && !strings.Contains(r.text, w) {
					t.Errorf("output %q does not contain %q", r.str("output"), w)
				}
			}
			if st.cwd != "" && r.str("cwd") != st.cwd {
				t.Errorf("cwd = %q, want %q", r.str("cwd"), st.cwd)
			}
			if !strings.Contains(r.text, "[corral: ") {
				t.Errorf("text content %q lacks the status line", r.text)
			}
			if st.check != nil {
				st.check(t, r)
			}
		})
	}
}

// TestBadInput: every kind of bad argument is a tool error that says what
// is wrong, and the server keeps serving.
func TestBadInput(t *testing.T) {
	f := newFixture(t)
	cs := f.connect(nil)
	huge := strings.Repeat("x", 10<<20)
	tests := []struct {
		name string
		tool string
		args any
		want []string // substrings of the error text
	}{
		{"missing command", "bash", map[string]any{}, []string{"invalid arguments for bash", `missing properties: ["command"]`, "command: string (required)"}},
		{"no arguments at all", "bash", nil, []string{"invalid arguments for bash", "command"}},
		{"command of the wrong type", "bash", map[string]any{"command": 42}, []string{"invalid arguments for bash", "command", "string"}},
		{"timeout of the wrong type", "bash", map[string]any{"command": "true", "timeout_s": "soon"}, []string{"timeout_s", "number"}},
		{"unknown argument", "bash", map[string]any{"command": "true", "cmd": "x"}, []string{"unexpected additional properties", "cmd"}},
		{"empty command", "bash", map[string]any{"command": "  "}, []string{"command is empty"}},
		{"10 MB command", "bash", map[string]any{"command": huge}, []string{"command is 10.0 MiB long", "at most 128 KiB", "run_code"}},
		{"NUL byte", "bash", map[string]any{"command": "echo a\x00b"}, []string{"NUL byte"}},
		{"negative timeout", "bash", map[string]any{"command": "true", "timeout_s": -1}, []string{"timeout_s is -1", "greater than 0"}},
		{"zero timeout", "bash", map[string]any{"command": "true", "timeout_s": 0}, []string{"timeout_s is 0", "greater than 0"}},
		{"timeout beyond a day", "bash", map[string]any{"command": "true", "timeout_s": 1e12}, []string{"at most 86400 seconds", "background"}},
		{"NUL in workdir", "bash", map[string]any{"command": "true", "workdir": "a\x00b"}, []string{"workdir"}},
		{"workdir that does not exist", "bash", map[string]any{"command": "touch ran-here", "workdir": "buidl"}, []string{"buidl", "does not exist", "nothing was run"}},
		{"bash_output without id", "bash_output", map[string]any{}, []string{"invalid arguments for bash_output", "id: string (required)"}},
		{"bash_output of an unknown id", "bash_output", map[string]any{"id": "bg-99"}, []string{`no background process "bg-99"`, "none at all"}},
		{"bash_output negative offset", "bash_output", map[string]any{"id": "bg-1", "offset": -5}, []string{"offset is -5"}},
		{"bash_output offset of the wrong type", "bash_output", map[string]any{"id": "bg-1", "offset": 1.5}, []string{"offset", "integer"}},
		{"bash_kill of an unknown id", "bash_kill", map[string]any{"id": "bg-7"}, []string{`no background process "bg-7"`}},
		{"bash_kill with an empty id", "bash_kill", map[string]any{"id": ""}, []string{"id is empty"}},
		{"run_code unknown language", "run_code", map[string]any{"code": "x", "language": "cobol"}, []string{"invalid arguments for run_code", "language", "python | bash | node"}},
		{"run_code empty code", "run_code", map[string]any{"code": ""}, []string{"code is empty"}},
		{"run_code 10 MB of code", "run_code", map[string]any{"code": huge}, []string{"code is 10.0 MiB long", "at most 1.0 MiB"}},
		{"run_code NUL", "run_code", map[string]any{"code": "print(1)\x00"}, []string{"NUL byte"}},
		{"run_code negative timeout", "run_code", map[string]any{"code": "print(1)", "timeout_s": -3}, []string{"timeout_s is -3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := callTool(t, cs, tc.tool, tc.args)
			if !r.isError {
				t.Fatalf("%s(%.100v) succeeded (%q), want a tool error", tc.tool, tc.args, r.text)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.text, w) {
					t.Errorf("error %q does not contain %q", r.text, w)
				}
			}
			if len(r.text) > 2000 {
				t.Errorf("error is %d bytes long; it should not echo the argument", len(r.text))
			}
			// The server keeps serving.
			if got := bash(t, cs, "echo alive").str("output"); got != "alive\n" {
				t.Fatalf("after the bad call, bash echo alive = %q", got)
			}
		})
	}

	// A protocol error for a tool that does not exist, and the server
	// still serves.
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}}); err == nil {
		t.Error("calling an unknown tool succeeded")
	}
	bash(t, cs, "true")
}

// TestCommandLengthLimit: the longest command the bash tool accepts runs.
func TestCommandLengthLimit(t *testing.T) {
	f := newFixture(t)
	cs := f.connect(nil)
	prefix := ": "
	cmd := prefix + strings.Repeat("y", maxCommandBytes-len(prefix)-len("; echo ok")) + "; echo ok"
	r := bash(t, cs, cmd)
	if r.str("output") != "ok\n" {
		t.Errorf("a command of %d bytes gave %q, want ok", len(cmd), r.text)
	}
	r = callTool(t, cs, "bash", map[string]any{"command": cmd + " "})
	if !r.isError {
		t.Errorf("a command of %d bytes was accepted", len(cmd)+1)
	}
}

// TestProgress: a long command sends progress notifications with growing
// progress while it runs, when the client sent a progress token.
func TestProgress(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	cs := f.connect(&mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, req.Params)
		mu.Unlock()
	}})
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
		Name: "bash", Arguments: map[string]any{"command": "sleep 1; echo done", "timeout_s": 30},
		Meta: mcp.Meta{"progressToken": "tok-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := toResult(t, res); r.isError || r.str("output") != "done\n" {
		t.Fatalf("result = %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 3 {
		t.Fatalf("got %d progress notifications in 1 s at 100 ms intervals, want several", len(got))
	}
	for i, p := range got {
		if p.ProgressToken != "tok-1" || p.Total != 30 || !strings.Contains(p.Message, "bash: running for") {
			t.Errorf("notification %d = %+v", i, p)
		}
		if i > 0 && p.Progress <= got[i-1].Progress {
			t.Errorf("progress went from %v to %v; it must grow", got[i-1].Progress, p.Progress)
		}
	}
	n := len(got)
	mu.Unlock()
	// None without a token, and none after the result.
	bash(t, cs, "sleep 0.5")
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	if len(got) != n {
		t.Errorf("%d notifications arrived for a call without a progress token or after its result", len(got)-n)
	}
}

// TestCancel: an MCP cancellation ends the command's whole process tree,
// and the session serves the next command.
func TestCancel(t *testing.T) {
	f := newFixture(t)
	cs := f.connect(nil)
	mk := marker()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{
			"command": fmt.Sprintf("sleep %s & sleep %s; wait", mk, mk)}})
		done <- err
	}()
	waitProcesses(t, mk, 2, 10*time.Second)
	start := time.Now()
	cancel()
	if err := <-done; err == nil {
		t.Error("the cancelled call returned no error")
	}
	waitProcesses(t, mk, 0, 5*time.Second)
	t.Logf("the process tree was gone %s after the cancellation", time.Since(start).Round(time.Millisecond))
	if got := bash(t, cs, "echo next").str("output"); got != "next\n" {
		t.Errorf("after the cancellation, echo next = %q", got)
	}
}

// TestServerCloseEndsCalls: Close kills the commands of the calls in
// flight and returns once they are gone.
func TestServerCloseEndsCalls(t *testing.T) {
	f := newFixture(t)
	cs := f.connect(nil)
	mk := marker()
	done := make(chan callResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep " + mk}})
		if err != nil {
			done <- callResult{isError: true, text: err.Error()}
			return
		}
		done <- toResult(t, res)
	}()
	waitProcesses(t, mk, 1, 10*time.Second)
	f.srv.Close()
	if n := len(processesWith(mk)); n != 0 {
		t.Errorf("after Close returned, %d processes of the call remain: %v", n, psLines(mk))
	}
	r := <-done
	if !r.isError || !strings.Contains(r.text, "shutting down") || !strings.Contains(r.text, "were ended") {
		t.Errorf("the call ended with %+v, want a tool error saying corral is shutting down", r)
	}
}

// TestScratchPersistsAcrossServers: $TMPDIR is the session's, so it
// survives the MCP connection.
func TestScratchPersistsAcrossServers(t *testing.T) {
	f := newFixture(t)
	bash(t, f.connect(nil), "echo kept > $TMPDIR/file")
	if got := bash(t, f.connect(nil), "cat $TMPDIR/file").str("output"); got != "kept\n" {
		t.Errorf("$TMPDIR/file in a new connection = %q", got)
	}
	if _, err := os.Stat(filepath.Join(f.work, "file")); err == nil {
		t.Error("$TMPDIR is the working directory")
	}
}

// TestNextProgress: a notification whose time is not past the last one
// sent goes out just above it (two at the same time went out equal, which
// the protocol forbids).
func TestNextProgress(t *testing.T) {
	last, sent := 0.0, false
	for _, p := range []float64{0, 0.2, 0.2, 0.1, 0.3} {
		next := nextProgress(last, sent, p)
		if sent && next <= last {
			t.Errorf("after %v, %v went out as %v", last, p, next)
		}
		if next < p {
			t.Errorf("%v went out as %v", p, next)
		}
		last, sent = next, true
	}
}
