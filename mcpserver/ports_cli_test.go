package mcpserver

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPortCLI: `corral mcp` holds a session whose background dev servers
// listen inside their sandboxes; the ports setting forwards one by itself,
// `corral port` (another process) forwards the other until the session
// ends, and a port nobody listens on is a clear error.
func TestPortCLI(t *testing.T) {
	if !hasExec("python3") {
		t.Skip("python3 not installed (apt install python3); the test's dev server needs it")
	}
	const manual, auto = 18741, 18742
	c := newCLIEnv(t, fmt.Sprintf("profile: workspace\nports: [%d]\n", auto))
	var stderr syncBuffer
	cs, mcpCmd := c.stdioClient(t, &stderr, "--session", "portcli")
	page := marker()
	if err := os.WriteFile(filepath.Join(c.work, "index.html"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	ids := map[int]string{}
	for _, port := range []int{manual, auto} {
		r := callTool(t, cs, "bash", map[string]any{"command": fmt.Sprintf("exec python3 -m http.server %d --bind 127.0.0.1", port), "background": true}).ok(t)
		ids[port] = r.str("id")
	}
	waitPorts(t, cs, ids[manual], func(ps []any) bool { return hasPort(ps, manual) })
	r := waitPorts(t, cs, ids[auto], func(ps []any) bool { return portURL(ps, auto) != "" })
	get := func(url string) string {
		t.Helper()
		resp, err := (&http.Client{Timeout: time.Minute}).Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := get(portURL(r.data["ports"].([]any), auto)); got != page {
		t.Errorf("the ports setting's forward served %q, want %q", got, page)
	}

	// Nobody listens on 9: a clear error, exit status 125.
	out, err := c.command(t, nil, "port", "--session", "portcli", "9").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), `session "portcli" listens on port 9`) || !strings.Contains(string(out), fmt.Sprintf("127.0.0.1:%d", manual)) {
		t.Errorf("corral port for an idle port: %v %s", err, out)
	}

	port := c.command(t, nil, "port", "--session", "portcli", fmt.Sprint(manual))
	var portErr syncBuffer
	port.Stderr = &portErr
	stdout, _ := port.StdoutPipe()
	if err := port.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- port.Wait() }()
	defer port.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("corral port printed %q, %v (stderr %s)", line, err, portErr.String())
	}
	if got := get(url); got != page {
		t.Errorf("corral port's forward served %q, want %q", got, page)
	}

	// The session ends with the MCP server: corral port ends by itself.
	cs.Close()
	_ = mcpCmd.Wait()
	select {
	case err := <-exited:
		if err != nil || !strings.Contains(portErr.String(), "the forward ended") {
			t.Errorf("corral port ended with %v: %s", err, portErr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("corral port still runs after the session ended: %s", portErr.String())
	}
	// Each relay exits once its corral is gone (end of file on its
	// socket).
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := exec.Command("pgrep", "-f", fmt.Sprintf("corral-port-relay 127.0.0.1:(%d|%d)", manual, auto)).Output()
		if len(out) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relays left behind: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
