package mcpserver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/session"
)

// TestToolNames pins the tools' names: clients and users' prompts name
// them, so a rename is a breaking change.
func TestToolNames(t *testing.T) {
	m := session.NewManager(session.Options{StateDir: t.TempDir()})
	defer m.Close()
	srv, err := New(Options{Manager: m, DefaultSession: "x"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bash", "bash_output", "bash_kill", "run_code", "read_file", "write_file", "edit_file", "search_files", "workspace_diff"}
	var got []string
	for _, tool := range srv.Tools() {
		got = append(got, tool.Name())
		d := tool.Definition()
		if d.Description == "" || d.InputSchema == nil || d.Annotations == nil {
			t.Errorf("tool %s lacks a description, input schema or annotations", d.Name)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Tools() = %q, want %q", got, want)
	}

	// The same list, with input and output schemas, over MCP.
	ctx := context.Background()
	cs := connectTo(t, srv, "x", nil)
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, tool := range res.Tools {
		got = append(got, tool.Name)
		if tool.OutputSchema == nil {
			t.Errorf("tool %s has no output schema", tool.Name)
		}
	}
	slices.Sort(want) // the SDK lists tools by name
	if !slices.Equal(got, want) {
		t.Errorf("tools/list = %q, want %q", got, want)
	}
}

func TestNewRequiresOptions(t *testing.T) {
	m := session.NewManager(session.Options{StateDir: t.TempDir()})
	defer m.Close()
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no manager", Options{DefaultSession: "x"}, "Manager is required"},
		{"no session", Options{Manager: m}, "DefaultSession is required"},
		{"bad session", Options{Manager: m, DefaultSession: "a\nb"}, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestClosedServer: after Close, calls are answered with a tool error and
// nothing runs.
func TestClosedServer(t *testing.T) {
	m := session.NewManager(session.Options{StateDir: t.TempDir(), Resolve: func(string) (*session.Spec, error) {
		return nil, errors.New("must not be called")
	}})
	defer m.Close()
	srv, err := New(Options{Manager: m, DefaultSession: "x"})
	if err != nil {
		t.Fatal(err)
	}
	cs := connectTo(t, srv, "x", nil)
	srv.Close()
	r := callTool(t, cs, "bash", map[string]any{"command": "true"})
	if !r.isError || !strings.Contains(r.text, "shutting down") {
		t.Errorf("call after Close = %+v, want a tool error saying corral is shutting down", r)
	}
}
