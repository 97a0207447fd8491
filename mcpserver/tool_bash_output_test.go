package mcpserver

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/sandbox"
)

// waitEnded polls bash_output from offset 0 until id has ended, and
// returns the last result.
func waitEnded(t *testing.T, cs *mcp.ClientSession, id string) callResult {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := callTool(t, cs, "bash_output", map[string]any{"id": id, "offset": 0}).ok(t)
		if r.data["running"] == false {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still runs: %s", id, r.text)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBackground starts background commands with bash and follows them
// with bash_output and bash_kill.
func TestBackground(t *testing.T) {
	f := newFixture(t)
	cs := f.connect(nil)

	t.Run("output, exit code, default offsets", func(t *testing.T) {
		r := callTool(t, cs, "bash", map[string]any{"command": "for i in 1 2 3; do echo line$i; sleep 0.1; done; exit 5", "background": true}).ok(t)
		id := r.str("id")
		if id == "" || r.data["running"] != true || r.data["exit_code"] != nil {
			t.Fatalf("background start = %+v", r.data)
		}
		if !strings.Contains(r.text, "bash_output") || !strings.Contains(r.text, id) {
			t.Errorf("start text %q does not say how to follow it", r.text)
		}
		end := waitEnded(t, cs, id)
		if end.str("output") != "line1\nline2\nline3\n" || end.num("exit_code") != 5 || end.num("next_offset") != 18 {
			t.Errorf("ended = %+v", end.data)
		}
		if !strings.Contains(end.text, "has ended with exit code 5") {
			t.Errorf("text %q does not say it ended", end.text)
		}
		// Without offset, reading continues where the last call stopped:
		// here at the end, so nothing more.
		again := callTool(t, cs, "bash_output", map[string]any{"id": id}).ok(t)
		if again.str("output") != "" || again.num("offset") != 18 {
			t.Errorf("continued read = %+v, want nothing from offset 18", again.data)
		}
		// From an explicit offset.
		mid := callTool(t, cs, "bash_output", map[string]any{"id": id, "offset": 6}).ok(t)
		if mid.str("output") != "line2\nline3\n" {
			t.Errorf("read from offset 6 = %q", mid.str("output"))
		}
	})

	t.Run("default offset follows a running process", func(t *testing.T) {
		r := callTool(t, cs, "bash", map[string]any{"command": "echo first; sleep 0.5; echo second", "background": true}).ok(t)
		id := r.str("id")
		var all string
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			o := callTool(t, cs, "bash_output", map[string]any{"id": id}).ok(t)
			all += o.str("output")
			if o.data["running"] == false {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if all != "first\nsecond\n" {
			t.Errorf("output read piecewise = %q, want each line once", all)
		}
	})

	t.Run("background does not change cwd or variables", func(t *testing.T) {
		r := callTool(t, cs, "bash", map[string]any{"command": "cd / && export BG=1 && pwd", "background": true}).ok(t)
		waitEnded(t, cs, r.str("id"))
		fg := bash(t, cs, "pwd; echo \"[$BG]\"")
		if fg.str("output") != f.work+"\n[]\n" {
			t.Errorf("after a background cd and export: %q", fg.str("output"))
		}
	})

	t.Run("background with a timeout", func(t *testing.T) {
		r := callTool(t, cs, "bash", map[string]any{"command": "sleep 30", "background": true, "timeout_s": 0.3}).ok(t)
		end := waitEnded(t, cs, r.str("id"))
		if end.data["timed_out"] != true || !strings.Contains(end.text, "its timeout ended it") || end.num("exit_code") != sandbox.ExitTimedOut {
			t.Errorf("ended = %+v %q", end.data, end.text)
		}
	})

	t.Run("bash_kill ends the whole tree", func(t *testing.T) {
		mk := marker()
		r := callTool(t, cs, "bash", map[string]any{"command": "sleep " + mk + " & sleep " + mk + " & wait", "background": true}).ok(t)
		id := r.str("id")
		waitProcesses(t, mk, 2, 10*time.Second)
		k := callTool(t, cs, "bash_kill", map[string]any{"id": id}).ok(t)
		if k.data["was_running"] != true || k.num("exit_code") == 0 {
			t.Errorf("bash_kill = %+v", k.data)
		}
		if n := len(processesWith(mk)); n != 0 {
			t.Errorf("after bash_kill returned, %d processes remain: %v", n, psLines(mk))
		}
		o := callTool(t, cs, "bash_output", map[string]any{"id": id}).ok(t)
		if o.data["running"] != false {
			t.Errorf("bash_output after bash_kill = %+v", o.data)
		}
		// Killing it again is harmless and says so.
		k2 := callTool(t, cs, "bash_kill", map[string]any{"id": id}).ok(t)
		if k2.data["was_running"] != false || !strings.Contains(k2.text, "already ended") {
			t.Errorf("second bash_kill = %+v %q", k2.data, k2.text)
		}
	})

	t.Run("more output than one chunk", func(t *testing.T) {
		r := callTool(t, cs, "bash", map[string]any{"command": "head -c 100000 /dev/zero | tr '\\0' b", "background": true}).ok(t)
		id := r.str("id")
		waitEnded(t, cs, id)
		first := callTool(t, cs, "bash_output", map[string]any{"id": id, "offset": 0}).ok(t)
		if first.data["more"] != true || len(first.str("output")) != 64<<10 {
			t.Fatalf("first chunk: %d bytes, more = %v", len(first.str("output")), first.data["more"])
		}
		rest := callTool(t, cs, "bash_output", map[string]any{"id": id}).ok(t)
		if len(rest.str("output")) != 100000-64<<10 || rest.data["more"] == true {
			t.Errorf("second chunk: %d bytes, more = %v", len(rest.str("output")), rest.data["more"])
		}
	})
}

// TestSessionEndKillsBackground: background processes end when the
// Manager closes (corral mcp and serve close it on the way out).
func TestSessionEndKillsBackground(t *testing.T) {
	f := newFixture(t)
	cs := f.connect(nil)
	mk := marker()
	callTool(t, cs, "bash", map[string]any{"command": "sleep " + mk, "background": true}).ok(t)
	waitProcesses(t, mk, 1, 10*time.Second)
	f.srv.Close()
	f.m.Close()
	waitProcesses(t, mk, 0, 5*time.Second)
}
