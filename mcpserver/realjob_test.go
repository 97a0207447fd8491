package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRealJob is the product's main job end to end: an MCP client that
// knows nothing of corral copies a real Go module into a workspace and,
// through corral's tools alone, under the workspace profile (no network,
// the module cache bound read-only), builds it, runs its tests, breaks a
// function with edit_file, finds it with search_files, sees the tests fail,
// mends it and sees them pass.
func TestRealJob(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the end-to-end job in -short mode")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap not installed (apt install bubblewrap); CI installs it")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Skip("no Go toolchain to build with inside the sandbox")
		}
	}
	corral := buildCorral(t)
	// The module: spf13/pflag, a dependency of corral itself, so it is in
	// the module cache of every machine that built corral.
	modcache := os.Getenv("GOMODCACHE")
	if modcache == "" {
		out, err := exec.Command(goBin, "env", "GOMODCACHE").Output()
		if err != nil {
			t.Skipf("go env GOMODCACHE: %v", err)
		}
		modcache = strings.TrimSpace(string(out))
	}
	src := filepath.Join(modcache, "github.com", "spf13", "pflag@v1.0.9")
	if _, err := os.Stat(src); err != nil {
		t.Skipf("module not in the module cache here (%v); CI builds corral first, which fetches it", err)
	}
	base := testDir(t)
	work := filepath.Join(base, "work")
	copyTree(t, src, filepath.Join(work, "pflag"))
	// A module cache of its own holding just that module, bound read-only:
	// the machine's whole cache grows past what corral's bind policy scans
	// for sockets (it refuses such a bind), and its size is the machine's.
	modcache = filepath.Join(base, "modcache")
	copyTree(t, src, filepath.Join(modcache, "github.com", "spf13", "pflag@v1.0.9"))

	env := append(os.Environ(),
		"CORRAL_PROFILE=workspace", "CORRAL_MEMORY_MB=0", "CORRAL_CPU_SECONDS=0", "CORRAL_MAX_PROCS=1024",
		"CORRAL_TIMEOUT=10m", "CORRAL_APPROVAL=off",
		fmt.Sprintf(`CORRAL_BINDS=[{"src":%q}]`, modcache),
		"XDG_STATE_HOME="+filepath.Join(base, "state"), "XDG_CONFIG_HOME="+filepath.Join(base, "config"))
	cmd := exec.Command(corral, "mcp", "--session", "real-job")
	cmd.Dir, cmd.Env = work, env
	client := mcp.NewClient(&mcp.Implementation{Name: "realjob-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to corral mcp: %v", err)
	}
	defer cs.Close()

	call := func(name string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		if res.StructuredContent != nil {
			sc, _ := json.Marshal(res.StructuredContent)
			b.WriteString("\n" + string(sc))
		}
		return b.String(), res.IsError
	}
	bash := func(command string) (string, int) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command, "timeout_s": 600}})
		if err != nil {
			t.Fatalf("bash %q: %v", command, err)
		}
		var out struct {
			ExitCode int    `json:"exit_code"`
			Output   string `json:"output"`
		}
		sc, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(sc, &out)
		if res.IsError {
			var msg strings.Builder
			for _, c := range res.Content {
				if tc, ok := c.(*mcp.TextContent); ok {
					msg.WriteString(tc.Text)
				}
			}
			t.Fatalf("bash %q: tool error: %s", command, msg.String())
		}
		return out.Output, out.ExitCode
	}

	goDir := filepath.Dir(goBin)
	if out, code := bash("cd pflag && export PATH=" + goDir + ":$PATH GOMODCACHE=" + modcache + " GOCACHE=$TMPDIR/gocache GOFLAGS=-mod=mod GOTOOLCHAIN=local GOPROXY=off && go build ./... && echo BUILD-OK"); code != 0 || !strings.Contains(out, "BUILD-OK") {
		t.Fatalf("go build: exit %d\n%s", code, out)
	}
	if out, code := bash("go test ./... > $TMPDIR/test.log 2>&1; s=$?; tail -5 $TMPDIR/test.log; exit $s"); !strings.Contains(out, "ok") || code != 0 {
		t.Fatalf("go test: exit %d\n%s", code, out)
	}
	// Find the function with search_files, break it with edit_file.
	out, isErr := call("search_files", map[string]any{"pattern": `^func \(b \*boolValue\) String\(\)`, "glob": "*.go"})
	if isErr || !strings.Contains(out, "bool.go:") {
		t.Fatalf("search_files: %s", out)
	}
	out, isErr = call("read_file", map[string]any{"path": "bool.go", "offset": 1, "limit": 80})
	if isErr || !strings.Contains(out, "func (b *boolValue) String() string") {
		// pflag names the receiver b; read it to edit exactly.
		t.Logf("read_file bool.go:\n%.2000s", out)
	}
	old := "func (b *boolValue) String() string { return strconv.FormatBool(bool(*b)) }"
	broken := "func (b *boolValue) String() string { return \"broken\" }"
	if out, isErr = call("edit_file", map[string]any{"path": "bool.go", "old_string": old, "new_string": broken}); isErr {
		t.Fatalf("edit_file: %s", out)
	}
	if out, code := bash("go test ./... > $TMPDIR/test.log 2>&1; s=$?; tail -5 $TMPDIR/test.log; exit $s"); code == 0 || !strings.Contains(out, "FAIL") {
		t.Fatalf("go test after breaking String: exit %d\n%s", code, out)
	}
	if out, isErr = call("edit_file", map[string]any{"path": "bool.go", "old_string": broken, "new_string": old}); isErr {
		t.Fatalf("edit_file back: %s", out)
	}
	if out, code := bash("go test ./... > $TMPDIR/test.log 2>&1; s=$?; tail -5 $TMPDIR/test.log; exit $s"); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("go test after mending: exit %d\n%s", code, out)
	}
	// The network really is off in the workspace profile.
	if out, code := bash("go env GOPROXY; (GOPROXY=https://proxy.golang.org go mod download golang.org/x/text@v0.1.0 2>&1 || true) | tail -1"); code != 0 || !strings.Contains(out, "dial") && !strings.Contains(out, "lookup") && !strings.Contains(out, "network") {
		t.Errorf("network reachable under workspace?\n%s", out)
	}
}

func buildCorral(t *testing.T) string {
	t.Helper()
	if pre := os.Getenv("CORRAL_TEST_BIN"); pre != "" {
		return pre
	}
	dir := testDir(t)
	bin := filepath.Join(dir, "corral")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/corral").CombinedOutput()
	if err != nil {
		t.Fatalf("building corral: %v\n%s", err, out)
	}
	return bin
}

func testDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("CORRAL_TEST_DIR")
	if root == "" {
		root = "/var/tmp"
	}
	d, err := os.MkdirTemp(root, "corral-realjob-*")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	d, _ = filepath.EvalSymlinks(d)
	return d
}

// copyTree copies a module out of the (read-only) module cache.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
