package mcpserver

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// waitPorts polls bash_output until id's ports satisfy ok, and returns
// that result; a condition loop with a generous deadline.
func waitPorts(t *testing.T, cs *mcp.ClientSession, id string, ok func(ports []any) bool) callResult {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := callTool(t, cs, "bash_output", map[string]any{"id": id, "offset": 0}).ok(t)
		ports, _ := r.data["ports"].([]any)
		if ok(ports) {
			return r
		}
		if r.data["running"] == false || time.Now().After(deadline) {
			t.Fatalf("%s: ports never as wanted: %s", id, r.text)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func portURL(ports []any, port int) string {
	for _, p := range ports {
		m, _ := p.(map[string]any)
		if n, _ := m["port"].(float64); int(n) == port {
			u, _ := m["url"].(string)
			return u
		}
	}
	return ""
}

func hasPort(ports []any, port int) bool {
	for _, p := range ports {
		m, _ := p.(map[string]any)
		if n, _ := m["port"].(float64); int(n) == port {
			return true
		}
	}
	return false
}

func startPythonServer(t *testing.T, f *fixture, cs *mcp.ClientSession, port int, page string) string {
	t.Helper()
	if !hasExec("python3") {
		t.Skip("python3 not installed (apt install python3); the test's dev server needs it")
	}
	if err := os.WriteFile(filepath.Join(f.work, "index.html"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	r := callTool(t, cs, "bash", map[string]any{"command": fmt.Sprintf("exec python3 -m http.server %d --bind 127.0.0.1", port), "background": true}).ok(t)
	return r.str("id")
}

// TestPortsSetting: with the ports setting, a background server is
// forwarded to the host once it listens, bash_output says the URL, the
// page is served there, and the forward ends with the process.
func TestPortsSetting(t *testing.T) {
	f := newFixture(t)
	const port = 18731
	f.spec.Ports = []int{port}
	cs := f.connect(nil)
	page := marker()
	id := startPythonServer(t, f, cs, port, page)
	r := waitPorts(t, cs, id, func(ps []any) bool { return portURL(ps, port) != "" })
	url := portURL(r.data["ports"].([]any), port)
	if !strings.Contains(r.text, "the host reaches it at "+url) {
		t.Errorf("bash_output text does not give the URL %s: %q", url, r.text)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != page {
		t.Errorf("GET %s = %q, want %q", url, body, page)
	}
	callTool(t, cs, "bash_kill", map[string]any{"id": id}).ok(t)
	// The forward ends with the process: the host port closes and the
	// relay exits.
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	relay := "corral-port-relay 127.0.0.1:" + fmt.Sprint(port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("tcp", host)
		if err == nil {
			c.Close()
		}
		out, _ := exec.Command("pgrep", "-f", relay).Output()
		if err != nil && len(out) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the server was killed: %s accepts connections (%v), relay processes %q", host, err == nil, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPortsNotForwarded: without the ports setting bash_output says the
// port listens and how a person forwards it; nothing is opened on the host.
func TestPortsNotForwarded(t *testing.T) {
	f := newFixture(t)
	const port = 18732
	cs := f.connect(nil)
	id := startPythonServer(t, f, cs, port, "x")
	r := waitPorts(t, cs, id, func(ps []any) bool { return hasPort(ps, port) })
	if u := portURL(r.data["ports"].([]any), port); u != "" {
		t.Errorf("port forwarded without the ports setting: %s", u)
	}
	if want := fmt.Sprintf("corral port --session test %d", port); !strings.Contains(r.text, want) {
		t.Errorf("bash_output text %q does not say %q", r.text, want)
	}
}
