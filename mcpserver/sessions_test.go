package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

func TestValidSessionName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"tg:12345", true},
		{"dir:/home/u/src/proj", true},
		{"chat with spaces é", true},
		{"", false},
		{strings.Repeat("a", 256), true},
		{strings.Repeat("a", 257), false},
		{"a\nb", false},
		{"a\x00b", false},
		{"\xff", false},
	} {
		if err := ValidSessionName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidSessionName(%.40q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestDirSessionName(t *testing.T) {
	if got := DirSessionName("/home/u/src/proj/"); got != "dir:/home/u/src/proj" {
		t.Errorf("DirSessionName = %q", got)
	}
	long := "/" + strings.Repeat("é", 200) + "/end"
	got := DirSessionName(long)
	if err := ValidSessionName(got); err != nil || !strings.HasSuffix(got, "/end") || !strings.HasPrefix(got, "dir:…") {
		t.Errorf("DirSessionName(long) = %q, %v", got, err)
	}
}

func TestDefaultSessionName(t *testing.T) {
	rule := DefaultSessionName("fallback")
	header := func(v string) *mcp.RequestExtra { return &mcp.RequestExtra{Header: http.Header{SessionHeader: {v}}} }
	for _, tc := range []struct {
		name    string
		extra   *mcp.RequestExtra
		want    string
		wantErr string
	}{
		{"stdio: no extra", nil, "fallback", ""},
		{"no header", &mcp.RequestExtra{Header: http.Header{}}, "fallback", ""},
		{"header", header("tg:42"), "tg:42", ""},
		{"bad header", header("a\tb"), "", "does not name a session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rule(&mcp.CallToolRequest{Extra: tc.extra})
			if got != tc.want || (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("rule = %q, %v; want %q, %q", got, err, tc.want, tc.wantErr)
			}
		})
	}
	if _, err := DefaultSessionName("")(&mcp.CallToolRequest{}); err == nil || !strings.Contains(err.Error(), SessionHeader) {
		t.Errorf("no fallback: %v, want an error naming the header", err)
	}
}

func TestToolError(t *testing.T) {
	hostChanged := fmt.Errorf("%w (4 attempts, the last: bwrap: Can't mkdir parents for /home/x/.aws: Read-only file system)", sandbox.ErrHostChanged)
	// A passing change on the host is not a machine that cannot sandbox.
	if m := toolError(hostChanged).Error(); strings.Contains(m, "no sandbox can be had") || strings.Contains(m, "corral doctor") {
		t.Errorf("toolError(%v) = %q, words it as a machine without a sandbox", hostChanged, m)
	}
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{context.Canceled, []string{"cancelled", "every process it started were ended"}},
		{&session.WaitCancelledError{Cause: context.Canceled}, []string{"cancelled while it waited", "nothing was run", "call the tool again"}},
		{&session.WaitCancelledError{Signal: syscall.SIGKILL, AtStart: true}, []string{"did not run", "SIGKILL ended its sandbox", "nothing was run", "call the tool again"}},
		{session.ErrClosed, []string{"has been closed", "nothing was run"}},
		{fmt.Errorf("%w: bwrap not found; apt install bubblewrap", sandbox.ErrUnavailable), []string{"no sandbox can be had", "bwrap not found; apt install bubblewrap", "corral doctor"}},
		{hostChanged, []string{"nothing was run", "the host's mounts changed", "Read-only file system", "call the tool again"}},
		{fmt.Errorf("%w: the working directory / is refused", sandbox.ErrPolicy), []string{"refused by corral's sandbox policy", "the working directory / is refused", "nothing was run"}},
		{fmt.Errorf("%w: empty command", sandbox.ErrBadRequest), []string{"empty command"}},
		{&config.ValueError{Key: "memory_mb", Value: "lots", Reason: "is not a number"}, []string{"corral's settings are invalid", "memory_mb", "corral config list"}},
		{errors.New("disk on fire"), []string{"corral failed: disk on fire"}},
		// A cause that may match ErrUnavailable does not make a command
		// that was started into one that did not run.
		{sandbox.MayHaveRun(fmt.Errorf("%w: docker backend: the engine went away", sandbox.ErrUnavailable)), []string{"may have run", "ook at its effects", "the engine went away"}},
		{sandbox.Transient(fmt.Errorf("%w: docker backend: container c is gone or stopped; the next command starts a new one", sandbox.ErrUnavailable)), []string{"nothing was run", "call the tool again", "gone or stopped"}},
		{fmt.Errorf("starting bwrap: %w", &os.PathError{Op: "fork/exec", Path: "/usr/bin/bwrap", Err: syscall.EMFILE}), []string{"nothing was run", "too many open files", "call the tool again"}},
		{&ToolError{Msg: "as is"}, []string{"as is"}},
	} {
		got := toolError(tc.err)
		var te *ToolError
		if !errors.As(got, &te) {
			t.Errorf("toolError(%v) = %T, want *ToolError", tc.err, got)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(got.Error(), w) {
				t.Errorf("toolError(%v) = %q, want it to contain %q", tc.err, got, w)
			}
		}
		if (errors.Is(tc.err, sandbox.ErrMayHaveRun) || sandbox.IsTransient(tc.err)) && (strings.Contains(got.Error(), "no sandbox can be had") || strings.Contains(got.Error(), "tell them")) {
			t.Errorf("toolError(%v) = %q, sends the agent to a person", tc.err, got)
		}
		if errors.Is(tc.err, sandbox.ErrMayHaveRun) && strings.Contains(got.Error(), "nothing was run") {
			t.Errorf("toolError(%v) = %q, says nothing ran", tc.err, got)
		}
		if !errors.Is(got, tc.err) && te.Err != nil {
			t.Errorf("toolError(%v) does not wrap it", tc.err)
		}
	}
}

// TestUnavailableSandbox: a backend that cannot build sandboxes gives a
// tool error that says nothing ran and who can fix it.
func TestUnavailableSandbox(t *testing.T) {
	dir := t.TempDir()
	m := session.NewManager(session.Options{StateDir: dir, Resolve: func(string) (*session.Spec, error) {
		return &session.Spec{Backend: unavailable{}, Policy: sandbox.Policy{Workdir: dir}, Timeout: 5e9}, nil
	}})
	defer m.Close()
	srv, err := New(Options{Manager: m, DefaultSession: "u"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cs := connectTo(t, srv, "u", nil)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"bash", map[string]any{"command": "true"}},
		{"run_code", map[string]any{"code": "print(1)"}},
	} {
		r := callTool(t, cs, tc.tool, tc.args)
		if !r.isError || !strings.Contains(r.text, "no sandbox can be had") || !strings.Contains(r.text, "corral doctor") {
			t.Errorf("%s with no sandbox = %+v", tc.tool, r)
		}
	}
}

// unavailable is a backend for which no sandbox can be had.
type unavailable struct{}

func (unavailable) Name() string       { return "bwrap" }
func (unavailable) DefaultCwd() string { return "" }
func (unavailable) Run(context.Context, *sandbox.Request) (*sandbox.Result, error) {
	return nil, fmt.Errorf("%w: bwrap is missing; install bubblewrap", sandbox.ErrUnavailable)
}
