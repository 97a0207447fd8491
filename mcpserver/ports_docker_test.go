package mcpserver

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/backend/docker"
	"github.com/corralhq/corral/internal/dockertest"
)

// TestPortsOnDocker: on docker (the workspace profile's container has no
// network but loopback) the ports setting forwards a background server of
// the session's container to the host, two connections at once, through
// an exec per connection; the forward ends when the server exits, and
// ForwardPort for a port nobody listens on says what does.
func TestPortsOnDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("docker test (-short)")
	}
	eng := dockertest.Engine(t)
	f := newFixture(t)
	st := docker.DefaultSettings
	st.Image = dockertest.Image(t, eng)
	e := docker.NewEngine(docker.Options{Helper: dockertest.StaticHelper(t)})
	t.Cleanup(func() { e.Close() })
	const port = 18751
	f.mu.Lock()
	f.spec.Backend = e.Backend(st)
	f.spec.Ports = []int{port}
	f.mu.Unlock()
	cs := f.connect(nil)
	page := marker()
	id := startPythonServer(t, f, cs, port, page)
	r := waitPorts(t, cs, id, func(ps []any) bool { return portURL(ps, port) != "" })
	url := portURL(r.data["ports"].([]any), port)
	if !strings.Contains(r.text, "the host reaches it at "+url) {
		t.Errorf("bash_output text does not give the URL %s: %q", url, r.text)
	}
	// Two clients at once.
	var wg sync.WaitGroup
	bodies := make([]string, 2)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := (&http.Client{Timeout: time.Minute}).Get(url)
			if err != nil {
				bodies[i] = err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			bodies[i] = string(b)
		}()
	}
	wg.Wait()
	for i, b := range bodies {
		if b != page {
			t.Errorf("client %d got %q, want %q", i, b, page)
		}
	}

	s, err := f.m.Open("test")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ForwardPort(9, 0); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", port)) || !strings.Contains(err.Error(), "port 9") {
		t.Errorf("ForwardPort for an idle port: %v", err)
	}

	callTool(t, cs, "bash_kill", map[string]any{"id": id}).ok(t)
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("tcp", host)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts connections after the server was killed", host)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
