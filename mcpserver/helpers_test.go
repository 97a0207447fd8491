package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// testRoot is where test trees go: never /tmp, which the sandbox hides
// (every command gets a fresh one).
func testRoot() string {
	if d := os.Getenv("CORRAL_TEST_DIR"); d != "" {
		return d
	}
	return "/var/tmp"
}

// requireBwrap skips a test that needs real sandboxes where there are
// none.
func requireBwrap(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping sandbox test in -short mode")
	}
	if _, err := bwrap.LocateTool("bwrap", ""); err != nil {
		t.Skip("bwrap is not installed (apt install bubblewrap), so no sandbox can run here; CI installs it")
	}
}

// fixture is a session manager over real bwrap sandboxes in a fresh tree,
// and a Server over it.
type fixture struct {
	t     *testing.T
	base  string
	home  string
	work  string
	state string
	m     *session.Manager
	srv   *Server

	mu   sync.Mutex
	spec session.Spec
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	requireBwrap(t)
	base, err := os.MkdirTemp(testRoot(), "corral-mcp-*")
	if err != nil {
		t.Fatal(err)
	}
	base, _ = filepath.EvalSymlinks(base)
	f := &fixture{t: t, base: base, home: filepath.Join(base, "home")}
	f.work = filepath.Join(f.home, "work")
	f.state = filepath.Join(f.home, ".local", "state", "corral")
	for _, d := range []string{f.work, f.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", f.home)
	be := bwrap.New(bwrap.Options{StateDir: f.state, KillGrace: 500 * time.Millisecond})
	f.spec = session.Spec{
		Backend: be, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Limits: sandbox.Limits{MemoryMB: 2048, CPUSeconds: 60, MaxProcs: 256}, Workdir: f.work, TmpSizeMB: 64}, Timeout: 60 * time.Second, OutputLimit: 16 << 10, Env: []string{"HOME=" + f.home, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"},
	}
	f.m = session.NewManager(session.Options{StateDir: f.state, Resolve: f.resolve})
	f.srv, err = New(Options{Manager: f.m, DefaultSession: "test", Spec: f.resolve, ProgressInterval: 100 * time.Millisecond, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.srv.Close()
		f.m.Close()
		os.RemoveAll(base)
	})
	return f
}

// resolve returns the fixture's spec for every session.
func (f *fixture) resolve(string) (*session.Spec, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sp := f.spec
	return &sp, nil
}

// connect returns a client session over an in-memory transport to the
// fixture's server.
func (f *fixture) connect(opts *mcp.ClientOptions) *mcp.ClientSession {
	f.t.Helper()
	return connectTo(f.t, f.srv, "test", opts)
}

// connectTo returns a client session over an in-memory transport to srv's
// MCP server for session name; both ends close when the test ends.
func connectTo(t *testing.T, srv *Server, name string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCPServer(name).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

// callResult is a tool result as a test reads it.
type callResult struct {
	text    string         // the text content
	isError bool           // isError
	data    map[string]any // structuredContent
	raw     *mcp.CallToolResult
}

// callTool calls a tool and fails the test on a protocol error.
func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args any) callResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s, %.200v): protocol error %v", tool, args, err)
	}
	return toResult(t, res)
}

func toResult(t *testing.T, res *mcp.CallToolResult) callResult {
	t.Helper()
	r := callResult{isError: res.IsError, raw: res}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			r.text += tc.Text
		}
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &r.data); err != nil {
			t.Fatalf("structuredContent %s: %v", b, err)
		}
	}
	return r
}

// str and num read fields of structured content.
func (r callResult) str(k string) string {
	s, _ := r.data[k].(string)
	return s
}

func (r callResult) num(k string) float64 {
	n, ok := r.data[k].(float64)
	if !ok {
		return -1
	}
	return n
}

// ok fails the test unless the call succeeded.
func (r callResult) ok(t *testing.T) callResult {
	t.Helper()
	if r.isError {
		t.Fatalf("tool error: %s", r.text)
	}
	return r
}

// bash runs a foreground command and returns its result.
func bash(t *testing.T, cs *mcp.ClientSession, cmd string) callResult {
	t.Helper()
	return callTool(t, cs, "bash", map[string]any{"command": cmd}).ok(t)
}

// marker returns a number unique to one test, for finding its processes.
func marker() string {
	return fmt.Sprintf("%d.%04d", 100+rand.IntN(800), rand.IntN(10000))
}

// processesWith returns the pids of host processes whose command line
// holds s as one argument.
func processesWith(s string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	self := fmt.Sprint(os.Getpid())
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' || e.Name() == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(b, []byte{0}) {
			if string(arg) == s || strings.Contains(string(arg), "sleep "+s) {
				pids = append(pids, e.Name())
				break
			}
		}
	}
	return pids
}

// waitProcesses waits until the number of processes holding s is at
// least (want > 0) or exactly zero (want == 0), and fails after d.
func waitProcesses(t *testing.T, s string, want int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		n := len(processesWith(s))
		if (want > 0 && n >= want) || (want == 0 && n == 0) {
			return
		}
		if time.Now().After(deadline) {
			if want == 0 {
				t.Fatalf("%d processes with %q are still running after %s: %v", n, s, d, psLines(s))
			}
			t.Fatalf("no process with %q appeared within %s", s, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// psLines describes the processes holding s, for failure messages.
func psLines(s string) []string {
	var out []string
	for _, pid := range processesWith(s) {
		b, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		out = append(out, pid+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

// headerTransport adds headers to every request of an HTTP client.
type headerTransport struct {
	base http.RoundTripper
	h    http.Header
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range t.h {
		r.Header[k] = vs
	}
	return t.base.RoundTrip(r)
}

// httpClient returns an HTTP client that sends the given headers.
func httpClient(kv ...string) *http.Client {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &http.Client{Transport: &headerTransport{base: http.DefaultTransport, h: h}}
}

// hasExec reports whether a program is installed on the host (the
// sandbox sees the host's /usr read-only).
func hasExec(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}
