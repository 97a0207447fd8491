package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunCode(t *testing.T) {
	f := newFixture(t)
	cs := f.connect(nil)
	tests := []struct {
		name   string
		need   string // program the host must have
		args   map[string]any
		exit   int
		output string // substring
	}{
		{"python by default", "python3", map[string]any{"code": "import os\nprint('py', 6*7)\nprint(os.getcwd())"}, 0, "py 42\n" + f.work + "\n"},
		{"python error exit", "python3", map[string]any{"code": "import sys\nsys.exit('boom')", "language": "python"}, 1, "boom"},
		{"python traceback", "python3", map[string]any{"code": "1/0", "language": "python"}, 1, "ZeroDivisionError"},
		{"bash", "bash", map[string]any{"code": "set -e\nx=$((2+3))\necho \"sum $x\"\n", "language": "bash"}, 0, "sum 5\n"},
		{"node", "node", map[string]any{"code": "console.log('node', [1,2].length)", "language": "node"}, 0, "node 2\n"},
		{"quotes and unicode survive", "python3", map[string]any{"code": "print(\"it's \\\"é\\\"\")"}, 0, "it's \"é\"\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !hasExec(tc.need) {
				t.Skipf("%s is not installed on this machine", tc.need)
			}
			r := callTool(t, cs, "run_code", tc.args).ok(t)
			if int(r.num("exit_code")) != tc.exit || !strings.Contains(r.str("output"), tc.output) {
				t.Errorf("run_code = exit %v, output %q; want exit %d, output with %q", r.num("exit_code"), r.str("output"), tc.exit, tc.output)
			}
		})
	}

	t.Run("script files are removed", func(t *testing.T) {
		callTool(t, cs, "run_code", map[string]any{"code": "echo hi", "language": "bash"}).ok(t)
		s, err := f.m.Open("test")
		if err != nil {
			t.Fatal(err)
		}
		left, _ := os.ReadDir(filepath.Join(s.ScratchDir(), ".corral-code"))
		if len(left) != 0 {
			t.Errorf("script files left behind: %v", left)
		}
	})

	// The sandbox writes the scratch directory: a link it leaves where the
	// scripts go must not lead corral's write out of it (a link to a
	// directory the host's shell sources scripts from).
	t.Run("a link at the script directory leads nowhere", func(t *testing.T) {
		s, err := f.m.Open("test")
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(f.base, "sourced-by-the-host")
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(s.ScratchDir(), ".corral-code")
		bash(t, cs, "rm -rf "+dir+" && ln -s "+target+" "+dir+" && echo linked")
		r := callTool(t, cs, "run_code", map[string]any{"code": "echo still-runs", "language": "bash"}).ok(t)
		if !strings.Contains(r.str("output"), "still-runs") {
			t.Errorf("run_code after the link: %q", r.str("output"))
		}
		if left, _ := os.ReadDir(target); len(left) != 0 {
			t.Errorf("the script went where the sandbox's link leads: %v", left)
		}
	})

	t.Run("same limits: the timeout", func(t *testing.T) {
		r := callTool(t, cs, "run_code", map[string]any{"code": "sleep 30", "language": "bash", "timeout_s": 0.3}).ok(t)
		if r.data["timed_out"] != true {
			t.Errorf("timed_out = %v", r.data["timed_out"])
		}
	})

	t.Run("same limits: memory", func(t *testing.T) {
		if !hasExec("python3") {
			t.Skip("python3 is not installed on this machine")
		}
		r := callTool(t, cs, "run_code", map[string]any{"code": "b = bytearray(4 << 30)\nprint('allocated')"}).ok(t)
		if r.num("exit_code") == 0 || strings.Contains(r.str("output"), "allocated") {
			t.Errorf("4 GiB under a 2048 MiB limit: %s", r.text)
		}
	})

	t.Run("missing interpreter is a clear tool error", func(t *testing.T) {
		// A session whose PATH holds no interpreter.
		bash(t, cs, "export PATH=/nonexistent")
		defer bash(t, cs, "export PATH=/usr/local/bin:/usr/bin:/bin")
		for _, lang := range []string{"python", "node"} {
			r := callTool(t, cs, "run_code", map[string]any{"code": "x", "language": lang})
			if !r.isError || !strings.Contains(r.text, lang+" is not installed in the sandbox") || !strings.Contains(r.text, "not run") {
				t.Errorf("run_code %s without the interpreter = %+v", lang, r)
			}
		}
	})

	t.Run("a script's own exit 127 is its result", func(t *testing.T) {
		r := callTool(t, cs, "run_code", map[string]any{"code": "echo nope >&2; exit 127", "language": "bash"}).ok(t)
		if r.num("exit_code") != 127 {
			t.Errorf("exit_code = %v", r.num("exit_code"))
		}
	})
}

func TestScriptCommand(t *testing.T) {
	py, _ := interpreterFor("python")
	got := scriptCommand(py, "/s/it's.py")
	want := `if command -v python3 >/dev/null 2>&1; then python3 '/s/it'\''s.py'; elif command -v python >/dev/null 2>&1; then python '/s/it'\''s.py'; else printf '%s\n' 'corral-run_code: no interpreter: python3 python' >&2; exit 127; fi`
	if got != want {
		t.Errorf("scriptCommand =\n%s\nwant\n%s", got, want)
	}
}
