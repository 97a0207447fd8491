package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/internal/toolfixture"
)

// TestRealJob is the product's main job end to end: an MCP client that
// knows nothing of corral has a Go module with tests in its workspace and,
// through corral's tools alone, under the workspace profile (no network,
// the module's dependency bound read-only from outside the workspace),
// builds it, runs its tests, finds a function with search_files, breaks it
// with edit_file, sees the tests fail, mends it and sees them pass.
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
	// The job's modules are made here, so the test needs nothing an earlier
	// build left in a module cache: a module with tests in the workspace,
	// and a module it requires, kept outside the workspace and bound
	// read-only, as a dependency cache is.
	base := testDir(t)
	work := filepath.Join(base, "work")
	deps := filepath.Join(base, "deps")
	toolfixture.Write(t, filepath.Join(deps, "units"), realJobUnits)
	job := map[string]string{}
	for name, text := range realJobShapes {
		job[name] = strings.ReplaceAll(text, "@DEPS@", filepath.Join(deps, "units"))
	}
	toolfixture.Write(t, filepath.Join(work, "shapes"), job)

	env := append(os.Environ(),
		"CORRAL_PROFILE=workspace", "CORRAL_MEMORY_MB=0", "CORRAL_CPU_SECONDS=0", "CORRAL_MAX_PROCS=1024",
		"CORRAL_TIMEOUT=10m", "CORRAL_APPROVAL=off",
		fmt.Sprintf(`CORRAL_BINDS=[{"src":%q}]`, deps),
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
	if out, code := bash("cd shapes && export PATH=" + goDir + ":$PATH GOCACHE=$TMPDIR/gocache GOFLAGS=-mod=mod GOTOOLCHAIN=local GOPROXY=off && go build ./... && echo BUILD-OK"); code != 0 || !strings.Contains(out, "BUILD-OK") {
		t.Fatalf("go build: exit %d\n%s", code, out)
	}
	if out, code := bash("go test ./... > $TMPDIR/test.log 2>&1; s=$?; tail -5 $TMPDIR/test.log; exit $s"); !strings.Contains(out, "ok") || code != 0 {
		t.Fatalf("go test: exit %d\n%s", code, out)
	}
	// Find the function with search_files, break it with edit_file.
	out, isErr := call("search_files", map[string]any{"pattern": `^func \(r Rect\) Area\(\)`, "glob": "*.go"})
	if isErr || !strings.Contains(out, "shapes.go:") {
		t.Fatalf("search_files: %s", out)
	}
	old := "func (r Rect) Area() units.Area { return units.Area(r.W * r.H) }"
	if out, isErr = call("read_file", map[string]any{"path": "shapes.go", "offset": 1, "limit": 80}); isErr || !strings.Contains(out, old) {
		t.Fatalf("read_file shapes.go:\n%.2000s", out)
	}
	broken := "func (r Rect) Area() units.Area { return units.Area(r.W + r.H) }"
	if out, isErr = call("edit_file", map[string]any{"path": "shapes.go", "old_string": old, "new_string": broken}); isErr {
		t.Fatalf("edit_file: %s", out)
	}
	if out, code := bash("go test ./... > $TMPDIR/test.log 2>&1; s=$?; tail -5 $TMPDIR/test.log; exit $s"); code == 0 || !strings.Contains(out, "FAIL") {
		t.Fatalf("go test after breaking String: exit %d\n%s", code, out)
	}
	if out, isErr = call("edit_file", map[string]any{"path": "shapes.go", "old_string": broken, "new_string": old}); isErr {
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

// realJobUnits is the dependency: a module of its own, outside the
// workspace.
var realJobUnits = map[string]string{
	"go.mod": "module example.com/units\n\ngo 1.22\n",
	"units.go": `// Package units names the quantities shapes measure.
package units

import "strconv"

// Area is a surface in square units.
type Area float64

// String prints the area with its unit.
func (a Area) String() string { return strconv.FormatFloat(float64(a), 'f', -1, 64) + " sq" }
`,
}

// realJobShapes is the workspace's module; @DEPS@ becomes the directory
// of realJobUnits.
var realJobShapes = map[string]string{
	"go.mod": "module example.com/shapes\n\ngo 1.22\n\nrequire example.com/units v0.0.0\n\nreplace example.com/units => @DEPS@\n",
	"shapes.go": `// Package shapes measures plane figures.
package shapes

import (
	"math"

	"example.com/units"
)

// Rect is a rectangle W wide and H high.
type Rect struct{ W, H float64 }

// Area of the rectangle.
func (r Rect) Area() units.Area { return units.Area(r.W * r.H) }

// Circle is a circle of radius R.
type Circle struct{ R float64 }

// Area of the circle.
func (c Circle) Area() units.Area { return units.Area(math.Pi * c.R * c.R) }
`,
	"shapes_test.go": `package shapes

import "testing"

func TestArea(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"rect", Rect{W: 3, H: 4}.Area().String(), "12 sq"},
		{"square", Rect{W: 2, H: 2}.Area().String(), "4 sq"},
		{"unit circle", Circle{R: 1}.Area().String(), "3.141592653589793 sq"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, tc.got, tc.want)
		}
	}
}
`,
}
