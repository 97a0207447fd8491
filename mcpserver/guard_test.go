package mcpserver_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Approval over a real client: the floor is refused whatever the client
// answers; a pattern is put to the person through elicitation, and runs
// only when approved; a client that cannot ask gets a refusal. Each call
// leaves one audit line.
func TestApprovalAndAudit(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap not installed (apt install bubblewrap); CI installs it")
	}
	corral := buildCorral(t)
	base := testDir(t)
	work := filepath.Join(base, "work")
	os.MkdirAll(work, 0o755)
	state := filepath.Join(base, "state")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(answer *bool) *mcp.ClientSession {
		cmd := exec.Command(corral, "mcp", "--session", "guard")
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "CORRAL_PROFILE=workspace", "CORRAL_APPROVAL=ask", "XDG_STATE_HOME="+state, "XDG_CONFIG_HOME="+filepath.Join(base, "config"))
		var opts *mcp.ClientOptions
		if answer != nil {
			opts = &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				if !strings.Contains(req.Params.Message, "git reset --hard") {
					t.Errorf("elicitation message: %q", req.Params.Message)
				}
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": *answer}}, nil
			}}
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "guard-test", Version: "1"}, opts).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	run := func(cs *mcp.ClientSession, command string) (string, bool) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String(), res.IsError
	}
	yes, no := true, false
	risky := "git init -q . 2>/dev/null; git reset --hard 2>/dev/null; echo RAN"
	for _, tc := range []struct {
		name   string
		answer *bool
		ran    bool
	}{{"approved", &yes, true}, {"declined", &no, false}, {"cannot ask", nil, false}} {
		cs := connect(tc.answer)
		out, isErr := run(cs, risky)
		if ran := strings.Contains(out, "RAN") && !isErr; ran != tc.ran {
			t.Errorf("%s: ran=%v, want %v: %s", tc.name, ran, tc.ran, out)
		}
		if out, isErr := run(cs, "rm -rf --no-preserve-root /"); !isErr || !strings.Contains(out, "hard floor") {
			t.Errorf("%s: floor not refused: %s", tc.name, out)
		}
		cs.Close()
	}
	// The audit log has the calls, with sessions and tools.
	data, err := os.ReadFile(filepath.Join(state, "corral", "audit", "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 6 {
		t.Fatalf("audit has %d lines:\n%s", len(lines), data)
	}
	var e struct {
		Session, Tool string
		Arguments     map[string]any
	}
	json.Unmarshal([]byte(lines[0]), &e)
	if e.Session != "guard" || e.Tool != "bash" || !strings.Contains(e.Arguments["command"].(string), "git reset") {
		t.Errorf("audit line: %s", lines[0])
	}
}
