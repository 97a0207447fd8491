package session

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/procfs"
	"github.com/corralhq/corral/portfwd"
	"github.com/corralhq/corral/sandbox"
)

// listenDeadline bounds the wait for a server in a sandbox to listen: a
// condition loop, generous for a loaded machine.
const listenDeadline = 60 * time.Second

// waitListening polls until a background process of s listens on port.
func waitListening(t *testing.T, s *Session, port int) *PortTarget {
	t.Helper()
	deadline := time.Now().Add(listenDeadline)
	for {
		pt, err := s.FindPort(port)
		if err == nil {
			return pt
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listened on port %d within %v: %v", port, listenDeadline, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitDone waits for a forward to end, failing after a generous deadline.
func waitDone(t *testing.T, f *portfwd.Forward, what string) {
	t.Helper()
	select {
	case <-f.Done():
	case <-time.After(listenDeadline):
		t.Fatalf("the forward did not end when %s", what)
	}
}

// checkGone checks that the forward's host port is closed and its relay
// process gone.
func checkGone(t *testing.T, f *portfwd.Forward) {
	t.Helper()
	if c, err := net.Dial("tcp", f.Addr().String()); err == nil {
		c.Close()
		t.Errorf("host port %s still accepts connections after the forward ended", f.Addr())
	}
	if !procfs.Gone(f.RelayPID()) {
		t.Errorf("relay process %d is still there after the forward ended", f.RelayPID())
	}
}

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed (apt install python3); the test's dev server needs it")
	}
}

// startServer starts `python3 -m http.server PORT` as a background
// process of s serving a page that names marker, and waits for it to
// listen.
func startServer(t *testing.T, f *fixture, s *Session, port int, marker string) (*Process, *PortTarget) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.work, "index.html"), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := s.Start(StartRequest{Command: fmt.Sprintf("exec python3 -m http.server %d --bind 127.0.0.1", port)})
	if err != nil {
		t.Fatal(err)
	}
	return p, waitListening(t, s, port)
}

func get(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: listenDeadline}
	r, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// TestPortForward: a dev server in a session's background sandbox serves
// a page to host clients, two at once, through the forward; a command in
// the sandbox cannot reach the host port; closing the session ends the
// forward and leaves no listener or relay.
func TestPortForward(t *testing.T) {
	needPython(t)
	f := newFixture(t)
	s := f.open("ports")
	marker := fmt.Sprintf("hello from the sandbox %d", time.Now().UnixNano())
	_, pt := startServer(t, f, s, 8123, marker)
	if pt.Addr.String() != "127.0.0.1:8123" {
		t.Errorf("target = %s, want 127.0.0.1:8123", pt.Addr)
	}
	// The server is not on the host's network.
	if c, err := net.Dial("tcp", "127.0.0.1:8123"); err == nil {
		c.Close()
		t.Log("something on the host listens on 8123 too; the forward below must still reach the sandbox's")
	}
	fw, _, err := s.ForwardPort(8123, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, fw.URL()); got != marker {
		t.Errorf("GET through the forward = %q, want %q", got, marker)
	}

	// Two connections at once: both are open before either is answered.
	var conns []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", fw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for i := len(conns) - 1; i >= 0; i-- {
		if _, err := fmt.Fprintf(conns[i], "GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = conns[i].SetReadDeadline(time.Now().Add(listenDeadline))
		b, err := io.ReadAll(bufio.NewReader(conns[i]))
		if err != nil || !strings.Contains(string(b), marker) {
			t.Errorf("connection %d got %q, %v", i, b, err)
		}
	}

	// From inside, the host port is the sandbox's own loopback, where
	// nothing listens; a listener of the command's own is reachable, so
	// the check can tell.
	hostPort := strconv.Itoa(int(fw.Addr().Port()))
	r := f.exec(s, `python3 -c '
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
socket.create_connection(l.getsockname()).close(); print("own ok")
try:
    socket.create_connection(("127.0.0.1", `+hostPort+`), timeout=10); print("reached host")
except OSError as e:
    print("refused", e.errno)
'`)
	if out := r.Output.Text; !strings.Contains(out, "own ok") || !strings.Contains(out, "refused") {
		t.Errorf("inside the sandbox, connecting to the host port %s: %q", hostPort, out)
	}

	s.Close()
	waitDone(t, fw, "the session closed")
	checkGone(t, fw)
	if got := s.Forwards(); len(got) != 0 {
		t.Errorf("forwards after Close: %d", len(got))
	}
}

// TestPortForwardEndsWithServer: when the server's process exits the
// forward ends by itself.
func TestPortForwardEndsWithServer(t *testing.T) {
	needPython(t)
	f := newFixture(t)
	s := f.open("ports-exit")
	p, _ := startServer(t, f, s, 8124, "x")
	fw, _, err := s.ForwardPort(8124, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, fw.URL()); got != "x" {
		t.Errorf("GET = %q", got)
	}
	if err := s.Kill(p.ID); err != nil {
		t.Fatal(err)
	}
	waitDone(t, fw, "the server exited")
	checkGone(t, fw)
	if !strings.Contains(fw.Reason(), "exited") {
		t.Errorf("reason = %q", fw.Reason())
	}
}

// TestPortNotListening: a port nobody listens on is a clear error that
// names the session, the port and what does listen.
func TestPortNotListening(t *testing.T) {
	needPython(t)
	f := newFixture(t)
	s := f.open("ports-none")
	if _, err := s.FindPort(8125); err == nil || !strings.Contains(err.Error(), "no running background process") {
		t.Errorf("FindPort with no background process: %v", err)
	}
	startServer(t, f, s, 8125, "x")
	_, _, err := s.ForwardPort(9, 0)
	if err == nil {
		t.Fatal("forwarding a port nobody listens on worked")
	}
	for _, want := range []string{`session "ports-none"`, "port 9", "127.0.0.1:8125", "http.server"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got := s.Forwards(); len(got) != 0 {
		t.Errorf("a failed forward is kept: %d", len(got))
	}
}

// TestPortForwardAllowlist: under allowlist the sandbox's network
// namespace is the session's egress namespace, owned by a user namespace
// of its own (not the sandbox's): the forward enters that one.
func TestPortForwardAllowlist(t *testing.T) {
	needPython(t)
	f := newFixture(t)
	f.spec.Profile = sandbox.ProfileAllowlist
	f.spec.NetworkAllow = []string{"example.com"}
	f.spec.Env = append(f.spec.Env, "GORACE=atexit_sleep_ms=0")
	s := f.open("ports-al")
	marker := fmt.Sprintf("allowlist page %d", time.Now().UnixNano())
	startServer(t, f, s, 8126, marker)
	fw, _, err := s.ForwardPort(8126, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, fw.URL()); got != marker {
		t.Errorf("GET through the forward = %q, want %q", got, marker)
	}
	s.Close()
	waitDone(t, fw, "the session closed")
	checkGone(t, fw)
}

// TestPortForwardReview: under review mode (the working directory behind
// the session's layer) a background server is forwarded as well, and
// serves the file it sees in the layer.
func TestPortForwardReview(t *testing.T) {
	needPython(t)
	f := newFixture(t)
	f.spec.Review = true
	s := f.open("ports-review")
	marker := fmt.Sprintf("layer page %d", time.Now().UnixNano())
	// Written through the session: it lands in the layer, not the host.
	f.exec(s, "printf %s '"+marker+"' > index.html")
	if _, err := os.Stat(filepath.Join(f.work, "index.html")); err == nil {
		t.Fatal("review mode wrote to the host's working directory")
	}
	if _, err := s.Start(StartRequest{Command: "exec python3 -m http.server 8127 --bind 127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	waitListening(t, s, 8127)
	fw, _, err := s.ForwardPort(8127, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, fw.URL()); got != marker {
		t.Errorf("GET through the forward = %q, want %q", got, marker)
	}
	s.Close()
	waitDone(t, fw, "the session closed")
	checkGone(t, fw)
}

// A port on IPv4 and IPv6 is listed once, whatever the order of the lists
// (docker's come tcp then tcp6, unsorted: a review found 8000 listed
// twice there), ordered by port.
func TestPortInfosOncePerPort(t *testing.T) {
	v4, v6 := netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("::")
	ls := []portfwd.Listener{{Addr: v4, Port: 8000}, {Addr: v4, Port: 3000}, {Addr: v6, Port: 8000}, {Addr: v6, Port: 3000}}
	got := portInfos(ls, map[int]string{3000: "http://127.0.0.1:3000/"})
	want := []PortInfo{{Port: 3000, URL: "http://127.0.0.1:3000/"}, {Port: 8000}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("portInfos = %v, want %v", got, want)
	}
}
