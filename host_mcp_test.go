package corral_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/testkit"
)

// TestMCPCallReadsSettingsOnce: one MCP bash call (foreground or
// background) and one run_code call check the settings file for a change
// once and resolve the session's settings once (the approval policy, the
// progress total and the command all come from that one answer), and a
// settings file changed between two calls takes effect at the second.
func TestMCPCallReadsSettingsOnce(t *testing.T) {
	project, state, cfg := hostDirs(t)
	// The local backend: this counts what the Host does per call, not
	// what a sandbox costs; approval on (the default) so it is consulted.
	writeSettings(t, cfg, "backend: local\ncwd: "+project+"\n")
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv, err := h.MCPServer(corral.MCPOptions{DefaultSession: "once"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCPServer("once").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "once-test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cs.Close(); ss.Wait() }()
	call := func(tool string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		return text.String(), res.IsError
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"bash", map[string]any{"command": "echo one-$((40+2))"}, "one-42"},
		{"bash", map[string]any{"command": "echo two", "timeout_s": 30}, "two"},
		{"bash", map[string]any{"command": "sleep 0", "background": true}, "started bg-"},
		{"run_code", map[string]any{"language": "bash", "code": "echo three-$((1+2))"}, "three-3"},
	} {
		stats0, specs0 := h.Counts()
		text, isErr := call(tc.tool, tc.args)
		if isErr || !strings.Contains(text, tc.want) {
			t.Fatalf("%s %v: error %v, %q; want %q", tc.tool, tc.args, isErr, text, tc.want)
		}
		stats, specs := h.Counts()
		if stats-stats0 != 1 || specs-specs0 != 1 {
			t.Errorf("%s %v: the settings file checked %d times and the settings resolved %d times; want once each", tc.tool, tc.args, stats-stats0, specs-specs0)
		}
	}
	// An edited file is read at the next call (here one that names no
	// backend corral has), still at one check.
	writeSettings(t, cfg, "backend: nonsense\ncwd: "+project+"\n")
	stats0, _ := h.Counts()
	text, isErr := call("bash", map[string]any{"command": "echo four"})
	if !isErr || !strings.Contains(text, `backend: "nonsense" is not one of`) {
		t.Errorf("bash after the settings changed: error %v, %q; want the bad backend setting refused", isErr, text)
	}
	if stats, _ := h.Counts(); stats-stats0 != 1 {
		t.Errorf("bash after the settings changed: the file checked %d times; want once", stats-stats0)
	}
}

// TestDeprecatedSettingLogged: a settings file that sets a key with no
// effect (degraded_mode) still opens, and the Host logs
// config.deprecated when it reads it (at Open, and again only when the
// file changes), so a long-running MCP server's log says it is ignored.
func TestDeprecatedSettingLogged(t *testing.T) {
	project, state, cfg := hostDirs(t)
	writeSettings(t, cfg, "cwd: "+project+"\ndegraded_mode: fail\n")
	ev := testkit.NewEvents(64)
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env(), Logger: slog.New(ev)})
	if err != nil {
		t.Fatalf("Open with degraded_mode set: %v", err)
	}
	defer h.Close()
	count := func() int {
		n := 0
		for {
			select {
			case m := <-ev.C:
				if m == "config.deprecated" {
					n++
				}
			default:
				return n
			}
		}
	}
	if n := count(); n != 1 {
		t.Errorf("Open logged config.deprecated %d times; want once", n)
	}
	if _, err := h.Spec("a"); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("a command under unchanged settings logged config.deprecated %d times; want none", n)
	}
	writeSettings(t, cfg, "cwd: "+project+"\n")
	if _, err := h.Spec("a"); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("settings without degraded_mode logged config.deprecated %d times", n)
	}
}
