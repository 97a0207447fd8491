package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
)

// testDir returns a fresh directory short enough for socket paths, under
// $CORRAL_TEST_DIR or /var/tmp.
func testDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("CORRAL_TEST_DIR")
	if base == "" || len(base) > 48 {
		base = "/var/tmp"
	}
	d, err := os.MkdirTemp(base, "eg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

var policy = netproxy.Policy{Allow: []string{"*.allowed.test"}, Deny: []string{"bad.allowed.test"}}

// get asks the HTTP proxy of srv for http://host/ and returns the status.
func get(t *testing.T, srv *netproxy.Server, host string) int {
	t.Helper()
	c, err := net.Dial("unix", srv.HTTPSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host, host)
	var code int
	if _, err := fmt.Fscanf(c, "HTTP/1.1 %d", &code); err != nil {
		t.Fatal(err)
	}
	return code
}

func TestPoolSharesAndReleases(t *testing.T) {
	dir := filepath.Join(testDir(t), "net")
	p := NewPool(Options{Dir: dir, Linger: -1})
	defer p.Close()

	a, relA, err := p.Get(policy, "s1")
	if err != nil {
		t.Fatal(err)
	}
	b, relB, err := p.Get(policy, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("two leases of one session and policy got two servers")
	}
	other, relO, err := p.Get(policy, "s2")
	if err != nil {
		t.Fatal(err)
	}
	if other == a {
		t.Error("two sessions share a server (their log records would carry one name)")
	}
	wider, relW, err := p.Get(netproxy.Policy{Allow: []string{"*.allowed.test", "more.test"}}, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if wider == a {
		t.Error("two policies share a server")
	}
	if fi, err := os.Stat(filepath.Dir(a.HTTPSocket())); err != nil || fi.Mode().Perm() != 0o700 || filepath.Dir(filepath.Dir(a.HTTPSocket())) != dir {
		t.Errorf("socket directory %s: %v %v, want a 0700 directory under %s", filepath.Dir(a.HTTPSocket()), fi.Mode(), err, dir)
	}
	if code := get(t, a, "bad.allowed.test"); code != http.StatusForbidden {
		t.Errorf("denied host answered %d, want 403", code)
	}

	relA()
	relA() // a second call does nothing
	if _, err := os.Stat(a.HTTPSocket()); err != nil {
		t.Errorf("the server closed while a lease remained: %v", err)
	}
	relB()
	if _, err := os.Stat(filepath.Dir(a.HTTPSocket())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket directory left after the last lease: %v", err)
	}
	// A new Get starts a new server.
	c, relC, err := p.Get(policy, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Error("a closed server was handed out again")
	}
	relC()
	relO()
	relW()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left in %s: %v", dir, ents)
	}
}

func TestPoolLinger(t *testing.T) {
	p := NewPool(Options{Dir: filepath.Join(testDir(t), "net"), Linger: 200 * time.Millisecond})
	defer p.Close()
	a, rel, err := p.Get(policy, "s")
	if err != nil {
		t.Fatal(err)
	}
	rel()
	b, rel, err := p.Get(policy, "s")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the next command within Linger got a new server")
	}
	rel()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(a.HTTPSocket()); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an unused server outlived Linger")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPoolClose(t *testing.T) {
	dir := filepath.Join(testDir(t), "net")
	p := NewPool(Options{Dir: dir})
	a, rel, err := p.Get(policy, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(a.HTTPSocket())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left the socket directory: %v", err)
	}
	rel() // after Close: harmless
	if _, _, err := p.Get(policy, "s"); !errors.Is(err, ErrClosed) || !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("Get after Close = %v, want ErrClosed (ErrUnavailable)", err)
	}
}

// attachment is an io.Closer with an Alive method, for TestPoolAttach.
type attachment struct {
	closed atomic.Int32
	dead   atomic.Bool
}

func (a *attachment) Close() error { a.closed.Add(1); return nil }
func (a *attachment) Alive() bool  { return !a.dead.Load() }

// TestPoolAttach: an attachment starts once per server, is started anew
// when it reports itself dead, and is closed with its server (linger or
// Close); a start error reaches the caller and nothing is kept.
func TestPoolAttach(t *testing.T) {
	p := NewPool(Options{Dir: filepath.Join(testDir(t), "net"), Linger: -1})
	srv, rel, err := p.Get(policy, "s")
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	start := func() (io.Closer, error) { starts++; return &attachment{}, nil }
	v1, err := p.Attach(srv, "x", start)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := p.Attach(srv, "x", start); err != nil || v != v1 || starts != 1 {
		t.Errorf("second Attach = %v, %v after %d starts; want the first value, one start", v, err, starts)
	}
	boom := errors.New("boom")
	if _, err := p.Attach(srv, "y", func() (io.Closer, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("Attach with a failing start = %v", err)
	}
	v1.(*attachment).dead.Store(true)
	v2, err := p.Attach(srv, "x", start)
	if err != nil || v2 == v1 || starts != 2 || v1.(*attachment).closed.Load() != 1 {
		t.Errorf("after death: %v, %v, %d starts, first closed %d times; want a new value, the old one closed", v2, err, starts, v1.(*attachment).closed.Load())
	}
	rel() // the last lease with Linger -1: the server and its attachments close
	if n := v2.(*attachment).closed.Load(); n != 1 {
		t.Errorf("attachment closed %d times with its server, want 1", n)
	}
	if _, err := p.Attach(srv, "x", start); err == nil {
		t.Error("Attach to a closed server succeeded")
	}

	srv, _, err = p.Get(policy, "s")
	if err != nil {
		t.Fatal(err)
	}
	v3, _ := p.Attach(srv, "x", start)
	_ = p.Close()
	if v3.(*attachment).closed.Load() != 1 {
		t.Error("Pool.Close did not close the attachment")
	}
	if _, err := p.Attach(srv, "x", start); !errors.Is(err, ErrClosed) {
		t.Errorf("Attach after Close = %v, want ErrClosed", err)
	}
}

func TestPoolErrors(t *testing.T) {
	base := testDir(t)
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		dir    string
		policy netproxy.Policy
		is     error
		want   string
	}{
		{"no directory", "", policy, sandbox.ErrUnavailable, "no socket directory"},
		{"directory under a file", filepath.Join(file, "net"), policy, sandbox.ErrUnavailable, "allowlist proxy"},
		{"socket path too long", filepath.Join(base, strings.Repeat("d", 100)), policy, sandbox.ErrUnavailable, "longer than"},
		{"malformed entry", filepath.Join(base, "net"), netproxy.Policy{Allow: []string{"*"}}, netproxy.ErrInvalidPattern, "allow[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool(Options{Dir: tc.dir})
			defer p.Close()
			_, _, err := p.Get(tc.policy, "s")
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Get = %v, want %v naming %q", err, tc.is, tc.want)
			}
		})
	}
}

// TestPoolSweepsStale: socket directories of corral processes that are gone
// are removed; those of live processes are kept.
func TestPoolSweepsStale(t *testing.T) {
	dir := filepath.Join(testDir(t), "net")
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, fmt.Sprintf("%d-1", cmd.Process.Pid))
	live := filepath.Join(dir, fmt.Sprintf("%d-1", os.Getppid()))
	odd := filepath.Join(dir, "not-ours")
	for _, d := range []string{dead, live, odd} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p := NewPool(Options{Dir: dir, Linger: -1})
	defer p.Close()
	_, rel, err := p.Get(policy, "s")
	if err != nil {
		t.Fatal(err)
	}
	rel()
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dead process's directory stayed: %v", err)
	}
	for _, d := range []string{live, odd} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}

// TestPoolLogsDeniedAsWarn: refusals reach a logger at warn level, with the
// session; allowed requests stay at debug.
func TestPoolLogsDeniedAsWarn(t *testing.T) {
	var buf syncBuffer
	p := NewPool(Options{Dir: filepath.Join(testDir(t), "net"), Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), Linger: -1,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nil, errors.New("no upstream in this test")
		}})
	defer p.Close()
	srv, rel, err := p.Get(policy, "chat-7")
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	get(t, srv, "bad.allowed.test")
	get(t, srv, "ok.allowed.test")
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(buf.String(), "network.denied") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	out := buf.String()
	if !strings.Contains(out, "level=WARN msg=network.denied session=chat-7 host=bad.allowed.test") {
		t.Errorf("log %q lacks the refusal at WARN", out)
	}
	if strings.Contains(out, "ok.allowed.test") {
		t.Errorf("log %q shows an allowed request at WARN", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestCheck(t *testing.T) {
	if err := Check(filepath.Join(testDir(t), "doctor")); err != nil {
		t.Errorf("Check = %v", err)
	}
	file := filepath.Join(testDir(t), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Check(filepath.Join(file, "x")); err == nil {
		t.Error("Check under a regular file succeeded")
	}
}

func TestForwarderArgv(t *testing.T) {
	got := ForwarderArgv("/proc/self/fd/6", "/tmp/.corral-net", 1, []string{"bash", "-c", "x"})
	want := []string{"/proc/self/fd/6", netproxy.ForwarderArg,
		"--http", "127.0.0.1:3128=/tmp/.corral-net/http.sock",
		"--socks", "127.0.0.1:1080=/tmp/.corral-net/socks.sock",
		"--pass-fds", "1", "--", "bash", "-c", "x"}
	if !slices.Equal(got, want) {
		t.Errorf("ForwarderArgv = %q, want %q", got, want)
	}
	if got := ForwarderArgv("c", "/d", 0, []string{"true"}); slices.Contains(got, "--pass-fds") {
		t.Errorf("no descriptors to pass, yet %q", got)
	}
}

func TestEnvAndWithoutEnv(t *testing.T) {
	env := Env()
	for _, want := range []string{"http_proxy=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128", "ALL_PROXY=socks5h://127.0.0.1:1080", "NO_PROXY=localhost,127.0.0.1,::1", "NODE_OPTIONS=--require=/dev/.corral/nodeshim.cjs"} {
		if !slices.Contains(env, want) {
			t.Errorf("Env lacks %q: %q", want, env)
		}
	}
	saved := append([]string{"PATH=/bin", "http_proxy=http://corp:8080"}, env...)
	if got := WithoutEnv(saved); !slices.Equal(got, []string{"PATH=/bin", "http_proxy=http://corp:8080"}) {
		t.Errorf("WithoutEnv = %q", got)
	}
	if len(saved) != 2+len(env) {
		t.Error("WithoutEnv changed its argument")
	}
}

// TestWriteNodeShim: the directory holds the shim, public (0755, 0644)
// under a private parent; a stale file is replaced; a second call finds
// it written.
func TestWriteNodeShim(t *testing.T) {
	dir := filepath.Join(testDir(t), "state", "trust", "node")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, netproxy.NodeShimName)
	if err := os.WriteFile(path, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		got, err := WriteNodeShim(dir)
		if err != nil || got != dir {
			t.Fatalf("WriteNodeShim(%s) = %q, %v", dir, got, err)
		}
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(b, netproxy.NodeShim()) {
			t.Errorf("call %d: %s holds %d bytes (%v), want the shim's %d", i, path, len(b), err, len(netproxy.NodeShim()))
		}
		for p, want := range map[string]os.FileMode{dir: 0o755 | os.ModeDir, path: 0o644} {
			if st, err := os.Stat(p); err != nil {
				t.Error(err)
			} else if st.Mode() != want {
				t.Errorf("call %d: %s: mode %v, want %v", i, p, st.Mode(), want)
			}
		}
	}
	if st, err := os.Stat(filepath.Dir(filepath.Dir(dir))); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o700 {
		t.Errorf("the state directory's mode changed: %v", st.Mode())
	}
}

func TestServeArgv(t *testing.T) {
	want := []string{"/proc/self/fd/5", netproxy.ForwarderArg,
		"--http", "127.0.0.1:3128=/run/x/http.sock",
		"--socks", "127.0.0.1:1080=/run/x/socks.sock",
		"--ready-fd", "6", "--serve"}
	if got := ServeArgv("/proc/self/fd/5", "/run/x", 6); !slices.Equal(got, want) {
		t.Errorf("ServeArgv = %q, want %q", got, want)
	}
}

// TestTrampoline runs this test binary as the trampoline (the package's
// init dispatches it): the command starts under the filter with AF_UNIX
// sockets denied, with the caller's environment.
func TestTrampoline(t *testing.T) {
	script := `grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; echo "X=$X"`
	cmd := exec.Command(os.Args[0], netproxy.TrampolineArg, "--", "sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "X=kept"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if want := "NoNewPrivs:\t1\nSeccomp:\t2\nX=kept\n"; string(out) != want {
		t.Errorf("trampoline output %q, want %q", out, want)
	}
	if _, err := exec.LookPath("python3"); err == nil {
		cmd := exec.Command(os.Args[0], netproxy.TrampolineArg, "--", "python3", "-c", `import socket
try:
    socket.socket(socket.AF_UNIX); print("unix allowed")
except PermissionError: print("unix EPERM")
a, b = socket.socketpair(); a.send(b"ok"); print(b.recv(2).decode())`)
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "unix EPERM\nok\n" {
			t.Errorf("python3 under the trampoline: %v %q", err, out)
		}
	}
}

// TestTrampolineExitStatuses: the trampoline passes the command's status on
// and reports what it could not run as the CLI does (127, 125). (A filter
// that cannot be loaded also ends in 125 before the command runs:
// netproxy's tests cover that path.)
func TestTrampolineExitStatuses(t *testing.T) {
	dir := testDir(t)
	marker := filepath.Join(dir, "ran")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--", "no-such-command-corral"}, 127},
		{[]string{}, 125},
		{[]string{"--", "sh", "-c", "touch " + marker + "; exit 3"}, 3},
	} {
		cmd := exec.Command(os.Args[0], append([]string{netproxy.TrampolineArg}, tc.args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		cmd.Stderr = io.Discard
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		if code != tc.want {
			t.Errorf("trampoline %q: exit %d, want %d", tc.args, code, tc.want)
		}
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the command did not run: %v", err)
	}
}
