package bwrap

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/internal/testcert"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
	"golang.org/x/sys/unix"
)

// testPolicy is the allowlist of the egress tests: allowed.test and its
// subdomains, except blocked.allowed.test.
var (
	testAllow = []string{"allowed.test", "*.allowed.test"}
	testDeny  = []string{"blocked.allowed.test"}
)

// world stands in for the internet: loopback servers on the host that the
// proxy reaches through its Dial hook (the sandbox has no route to them),
// and a recorder of the proxy's log.
type world struct {
	plain, tls *httptest.Server
	caPath     string // the test CA in PEM, readable inside the sandbox
	gitRoot    string // served as git.allowed.test (a dumb HTTP git server)

	mu   sync.Mutex
	hits []string // "host path" of every request that reached a server

	log  *logRecorder
	pool *egress.Pool
}

func (w *world) hit(r *http.Request) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hits = append(w.hits, hostOnly(r.Host)+" "+r.URL.Path)
}

// reached reports whether a request for host with a path starting with
// prefix reached a server.
func (w *world) reached(host, prefix string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.ContainsFunc(w.hits, func(h string) bool { return strings.HasPrefix(h, host+" "+prefix) })
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// serve answers every test host: git.allowed.test serves a git repository
// over dumb HTTP, pypi.allowed.test an empty package index, anything else
// says hello.
func (w *world) serve(rw http.ResponseWriter, r *http.Request) {
	w.hit(r)
	switch hostOnly(r.Host) {
	case "git.allowed.test":
		http.FileServer(http.Dir(w.gitRoot)).ServeHTTP(rw, r)
	case "pypi.allowed.test":
		http.Error(rw, "no such project", http.StatusNotFound)
	default:
		fmt.Fprintf(rw, "hello host=%s path=%s tls=%v", hostOnly(r.Host), r.URL.Path, r.TLS != nil)
	}
}

// dial maps every *.test name to the loopback servers, by port: 443 to
// the TLS one, anything else to the plain one.
func (w *world) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(strings.ToLower(host), ".test") {
		return nil, fmt.Errorf("test dialer: %s is outside the test world", host)
	}
	target := w.plain.Listener.Addr().String()
	if port == "443" {
		target = w.tls.Listener.Addr().String()
	}
	var d net.Dialer
	return d.DialContext(ctx, network, target)
}

// newWorld starts the servers and an egress pool over them (closing
// servers at once when unused), and gives e a backend that uses the pool.
func newWorld(t *testing.T, e *env) *world {
	t.Helper()
	w := &world{log: &logRecorder{}, gitRoot: filepath.Join(e.base, "gitsrv")}
	cert, caPEM := testcert.New(t, "allowed.test", "*.allowed.test")
	// In the working directory: a root caller's sandbox reads only what
	// its unprivileged identity could reach (e.base is 0700).
	w.caPath = filepath.Join(e.work, "ca.pem")
	if err := os.WriteFile(w.caPath, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	w.plain = httptest.NewServer(http.HandlerFunc(w.serve))
	w.tls = httptest.NewUnstartedServer(http.HandlerFunc(w.serve))
	w.tls.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	w.tls.StartTLS()
	t.Cleanup(func() { w.plain.Close(); w.tls.Close() })
	// The forwarder is this test binary: with -race it would sleep a
	// second at every exit.
	e.envv = append(e.envv, "GORACE=atexit_sleep_ms=0")
	w.pool = egress.NewPool(egress.Options{Dir: filepath.Join(e.base, "net"), Logger: slog.New(w.log), Dial: w.dial, Linger: -1})
	t.Cleanup(func() { _ = w.pool.Close() })
	e.backend = New(Options{StateDir: e.state, HiddenDirs: []string{filepath.Join(e.home, ".config", "corral")}, Egress: w.pool})
	return w
}

// allowlist sets the allowlist profile and the test policy.
func allowlist(r *sandbox.Request) {
	r.Profile = sandbox.ProfileAllowlist
	r.NetworkAllow, r.NetworkDeny = testAllow, testDeny
	r.Session = "egress-test"
}

// logRecorder keeps every log record as its message and attributes.
type logRecorder struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	a := map[string]string{"msg": rec.Message, "level": rec.Level.String()}
	rec.Attrs(func(at slog.Attr) bool { a[at.Key] = at.Value.String(); return true })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, a)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// waitFor returns the first record with message msg and attribute host,
// waiting a little: the proxy may log just after the client got its answer.
func (r *logRecorder) waitFor(t *testing.T, msg, host string) map[string]string {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		i := slices.IndexFunc(r.recs, func(a map[string]string) bool { return a["msg"] == msg && a["host"] == host })
		var a map[string]string
		if i >= 0 {
			a = r.recs[i]
		}
		r.mu.Unlock()
		if a != nil {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s record for host %q", msg, host)
		}
	}
}

func requireTool(t *testing.T, name, why string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed (%s); CI installs it", name, why)
	}
}

// TestAllowlistEndToEnd runs real tools in a bwrap sandbox of the
// allowlist profile: allowed hosts pass through the proxy (plain HTTP,
// HTTPS through CONNECT, SOCKS5), everything else fails at once with a
// reason, and refusals are logged.
func TestAllowlistEndToEnd(t *testing.T) {
	e := newEnv(t)
	requireTool(t, "curl", "apt-get install curl")
	w := newWorld(t, e)
	curl := "curl -q -sS --max-time 10 "

	t.Run("https through CONNECT", func(t *testing.T) {
		o := e.sh(curl+"--cacert "+w.caPath+" https://api.allowed.test/tls", allowlist)
		if o.stdout != "hello host=api.allowed.test path=/tls tls=true" || o.res.ExitCode != 0 {
			t.Errorf("want the TLS server's hello\n%s", o)
		}
	})
	t.Run("plain http, the apex and a wildcard", func(t *testing.T) {
		o := e.sh(curl+"http://allowed.test/a; echo; "+curl+"http://Deep.Sub.Allowed.TEST/b", allowlist)
		mustContain(t, o, "hello host=allowed.test path=/a tls=false", "hello host=Deep.Sub.Allowed.TEST path=/b tls=false")
	})
	t.Run("socks5h", func(t *testing.T) {
		o := e.sh(curl+`-x "$ALL_PROXY" http://api.allowed.test/socks`, allowlist)
		mustContain(t, o, "hello host=api.allowed.test path=/socks")
	})
	t.Run("outside the allowlist", func(t *testing.T) {
		o := e.sh(curl+"-w '\\n%{http_code}' http://allowed.test.evil/x", allowlist)
		mustContain(t, o, "blocked by corral network allowlist: allowed.test.evil", "403")
		a := w.log.waitFor(t, "network.denied", "allowed.test.evil")
		if a["session"] != "egress-test" || a["level"] != "WARN" {
			t.Errorf("network.denied record %v, want session egress-test at WARN", a)
		}
		if w.reached("allowed.test.evil", "") {
			t.Error("the refused request reached a server")
		}
	})
	t.Run("deny list first", func(t *testing.T) {
		o := e.sh(curl+"--cacert "+w.caPath+" https://blocked.allowed.test/ ; echo rc=$?", allowlist)
		mustContain(t, o, "403")
		mustNotContain(t, o, "rc=0", "hello")
		w.log.waitFor(t, "network.denied", "blocked.allowed.test")
	})
	t.Run("raw IP, DNS and direct connections fail at once", func(t *testing.T) {
		o := e.sh(`start=$(date +%s%N)
`+curl+`-o /dev/null -w 'proxied_ip=%{http_code}\n' http://1.1.1.1/
`+curl+`--noproxy '*' http://1.1.1.1/ >/dev/null 2>&1; echo "direct_curl=$?"
getent hosts example.com >/dev/null; echo "dns=$?"
bash -c 'echo > /dev/tcp/1.1.1.1/80' 2>/dev/null; echo "devtcp=$?"
bash -c 'echo > /dev/tcp/127.0.0.1/9' 2>/dev/null; echo "loopback_closed=$?"
echo "ms=$(( ($(date +%s%N)-start)/1000000 ))"`, allowlist)
		mustContain(t, o, "proxied_ip=403", "direct_curl=7", "dns=2", "devtcp=1", "loopback_closed=1")
		var ms int
		for _, l := range strings.Split(o.stdout, "\n") {
			fmt.Sscanf(l, "ms=%d", &ms)
		}
		if ms > 5000 {
			t.Errorf("refusals took %d ms; they must fail at once\n%s", ms, o)
		}
		w.log.waitFor(t, "network.denied", "1.1.1.1")
	})
	t.Run("environment", func(t *testing.T) {
		o := e.sh(`env | grep -iE '^(https?|all|no)_proxy=|^PIP_PROXY=|^CORRAL' | sort`, allowlist)
		for _, want := range []string{"HTTPS_PROXY=http://127.0.0.1:3128", "http_proxy=http://127.0.0.1:3128", "ALL_PROXY=socks5h://127.0.0.1:1080", "NO_PROXY=localhost,127.0.0.1,::1", "PIP_PROXY=http://127.0.0.1:3128"} {
			mustContain(t, o, want)
		}
		mustNotContain(t, o, "CORRAL_")
	})
	t.Run("python urllib", func(t *testing.T) {
		requireTool(t, "python3", "apt-get install python3")
		o := e.sh(`python3 -c 'import urllib.request as u; print(u.urlopen("http://api.allowed.test/py", timeout=10).read().decode())'`, allowlist)
		mustContain(t, o, "hello host=api.allowed.test path=/py tls=false")
	})
}

// TestAllowlistGitAndPip: git (libcurl) and pip honour the proxy variables.
func TestAllowlistGitAndPip(t *testing.T) {
	e := newEnv(t)
	w := newWorld(t, e)
	t.Run("git", func(t *testing.T) {
		requireTool(t, "git", "apt-get install git")
		src := filepath.Join(e.base, "gitwork")
		git := func(dir string, args ...string) {
			t.Helper()
			cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		git(src, "init", "-q")
		if err := os.WriteFile(filepath.Join(src, "f"), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		git(src, "add", "f")
		git(src, "commit", "-q", "-m", "one")
		git(e.base, "clone", "-q", "--bare", src, filepath.Join(w.gitRoot, "repo.git"))
		git(filepath.Join(w.gitRoot, "repo.git"), "update-server-info")

		o := e.sh(`git ls-remote http://git.allowed.test/repo.git && git clone -q http://git.allowed.test/repo.git "$TMPDIR/c" && cat "$TMPDIR/c/f" && echo CLONED`, allowlist, func(r *sandbox.Request) {
			r.ScratchDir = filepath.Join(e.base, "scratch")
			_ = os.MkdirAll(r.ScratchDir, 0o755)
			r.Limits.MemoryMB = 1024
		})
		mustContain(t, o, "refs/heads/main", "CLONED")
		if !w.reached("git.allowed.test", "/repo.git/info/refs") {
			t.Errorf("git's request did not reach the server: %q", w.hits)
		}
		o = e.sh(`git ls-remote http://git.evil.test/repo.git; echo rc=$?`, allowlist)
		mustContain(t, o, "403")
		w.log.waitFor(t, "network.denied", "git.evil.test")
	})
	t.Run("pip", func(t *testing.T) {
		requireTool(t, "python3", "apt-get install python3")
		if err := exec.Command("python3", "-m", "pip", "--version").Run(); err != nil {
			t.Skip("pip is not installed (apt-get install python3-pip); CI installs it")
		}
		o := e.sh(`python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check --retries 0 --timeout 10 -d "$TMPDIR" --index-url http://pypi.allowed.test/simple --trusted-host pypi.allowed.test corral-test-pkg; echo rc=$?`, allowlist, func(r *sandbox.Request) {
			r.Limits.MemoryMB = 1024
		})
		if !w.reached("pypi.allowed.test", "/simple/corral-test-pkg") {
			t.Errorf("pip's index request did not reach the server through the proxy: %q\n%s", w.hits, o)
		}
		o = e.sh(`python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check --retries 0 --timeout 10 -d "$TMPDIR" --index-url https://pypi.org/simple corral-test-pkg; echo rc=$?`, allowlist, func(r *sandbox.Request) {
			r.Limits.MemoryMB = 1024
		})
		w.log.waitFor(t, "network.denied", "pypi.org")
	})
}

// TestAllowlistCommandContract: the forwarder changes nothing the caller
// relies on: exit statuses, the caller's descriptors (a session's state
// pipe) and only those, the limits, and the filter on the command.
func TestAllowlistCommandContract(t *testing.T) {
	e := newEnv(t)
	newWorld(t, e)
	t.Run("exit status and signals", func(t *testing.T) {
		if o := e.sh("exit 7", allowlist); o.res.ExitCode != 7 {
			t.Errorf("exit %d, want 7\n%s", o.res.ExitCode, o)
		}
		if o := e.sh("kill -TERM $$", allowlist); o.res.ExitCode != 128+15 || o.res.Signal != 15 {
			t.Errorf("exit %d signal %d, want 143 and 15\n%s", o.res.ExitCode, o.res.Signal, o)
		}
		if o := e.sh("corral-no-such-command", allowlist); o.res.ExitCode != 127 {
			t.Errorf("exit %d, want 127\n%s", o.res.ExitCode, o)
		}
	})
	t.Run("caller's descriptors", func(t *testing.T) {
		r, wr, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got := make(chan string, 1)
		go func() {
			var b bytes.Buffer
			_, _ = b.ReadFrom(r)
			got <- b.String()
		}()
		o := e.sh(`echo state >&3; ls /proc/self/fd | sort -n | tr '\n' ' '`, allowlist, func(r *sandbox.Request) { r.ExtraFiles = []*os.File{wr} })
		wr.Close()
		if s := <-got; s != "state\n" {
			t.Errorf("descriptor 3 carried %q, want %q\n%s", s, "state\n", o)
		}
		// 0 1 2 3, and the descriptor ls lists /proc/self/fd with.
		if fds := strings.Fields(o.stdout); len(fds) != 5 || fds[3] != "3" {
			t.Errorf("the command has descriptors %q, want 0-3 and ls's own", fds)
		}
	})
	t.Run("limits and filter", func(t *testing.T) {
		o := e.sh(`ulimit -d; ulimit -v; ulimit -t; grep -E '^(Seccomp|Seccomp_filters|NoNewPrivs|CapEff):' /proc/self/status`, allowlist, func(r *sandbox.Request) {
			r.Limits = sandbox.Limits{MemoryMB: 256, CPUSeconds: 30, MaxProcs: 256}
		})
		as := "262144\nunlimited\n30\n"
		if memoryLimitName() == sandbox.LimitCommandMemory {
			as = "unlimited\nunlimited\n30\n" // the memory cgroup holds memory_mb instead
		}
		// Two filters: connect(2) mediation and the main one.
		mustContain(t, o, as, "Seccomp:\t2", "Seccomp_filters:\t2", "NoNewPrivs:\t1", "CapEff:\t0000000000000000")
		// The gate's injected calls leave no capability behind either.
		o = e.sh(`grep -E '^Cap(Prm|Inh|Amb):' /proc/self/status`, allowlist)
		mustContain(t, o, "CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapAmb:\t0000000000000000")
		if _, err := exec.LookPath("python3"); err == nil {
			o := e.sh(`python3 -c 'x = bytearray(1 << 30); print("ALLOCATED")'`, allowlist, func(r *sandbox.Request) { r.Limits.MemoryMB = 128 })
			mustNotContain(t, o, "ALLOCATED")
			if want := memoryLimitName(); o.res.LimitHit != want {
				t.Errorf("LimitHit = %q, want %q\n%s", o.res.LimitHit, want, o)
			}
		}
	})
	t.Run("cpu limit", func(t *testing.T) {
		o := e.sh(`while :; do :; done`, allowlist, func(r *sandbox.Request) { r.Limits.CPUSeconds = 1 })
		if o.res.LimitHit != sandbox.LimitCPU {
			t.Errorf("LimitHit = %q, want cpu\n%s", o.res.LimitHit, o)
		}
	})
	t.Run("forwarder out of reach", func(t *testing.T) {
		// The sandbox's pid 1 (bwrap's init) carries both filters as well
		// (connect(2) mediation and the main one), and no process of the
		// sandbox is corral's forwarder or holds the proxy's sockets: a
		// command that took over pid 1 (/proc/1/mem) gains no way to a
		// host socket.
		o := e.sh(`grep -E '^Seccomp(_filters)?:' /proc/1/status; for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done; ls -a /tmp; python3 -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)' 2>&1 | tail -1`, allowlist)
		mustContain(t, o, "Seccomp:\t2\nSeccomp_filters:\t2\n", "PermissionError")
		mustNotContain(t, o, "__corral-net-forward", "corral-net", "http.sock")
	})
	t.Run("timeout ends the command", func(t *testing.T) {
		start := time.Now()
		o := e.sh(`sleep 30`, allowlist, func(r *sandbox.Request) { r.Timeout = 500 * time.Millisecond })
		if !o.res.TimedOut || time.Since(start) > 10*time.Second {
			t.Errorf("timed out %v after %s\n%s", o.res.TimedOut, time.Since(start), o)
		}
	})
}

// TestAllowlistThroughNsenter: where the gate cannot enter the session's
// namespace (another architecture, ptrace refused), nsenter(1) does, with
// the same result: the proxy is reached, nothing of the namespaces'
// descriptors is left in the sandbox, and the command has no capabilities.
func TestAllowlistThroughNsenter(t *testing.T) {
	e := newEnv(t)
	requireTool(t, "curl", "apt-get install curl")
	requireTool(t, "nsenter", "apt-get install util-linux")
	newWorld(t, e)
	e.backend.forceNsenter = true
	o := e.sh(`curl -q -sS --max-time 10 http://api.allowed.test/ns; echo; ls /proc/self/fd | sort -n | tr '\n' ' '; echo; grep -E '^(CapEff|CapPrm|Seccomp_filters):' /proc/self/status`, allowlist)
	mustContain(t, o, "hello host=api.allowed.test path=/ns tls=false", "\n0 1 2 3 \n", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "Seccomp_filters:\t2")
	// And where the gate is refused altogether (prlimit(1) starts bwrap).
	e.backend.forceNsenter, e.backend.noGate = false, true
	o = e.sh(`curl -q -sS --max-time 10 http://api.allowed.test/nogate; echo; ulimit -d; ulimit -v`, allowlist, func(r *sandbox.Request) { r.Limits.MaxProcs = 0 })
	// memory_mb is RLIMIT_DATA there (KiB in ulimit -d), never RLIMIT_AS.
	mustContain(t, o, "hello host=api.allowed.test path=/nogate tls=false", fmt.Sprintf("\n%d\nunlimited\n", sandbox.DefaultLimits.MemoryMB<<10))

	// Once corral has read a secret it is non-dumpable for good
	// (secrets.ProtectProcess), and /proc/PID/fd of a non-dumpable process
	// is closed to other processes of its uid: nsenter is handed the
	// namespaces as descriptors of its own (throughNsenter), which never
	// reach the sandbox. Before that fix, a plain user's allowlist commands
	// after the first secret failed to build their sandboxes.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0) })
	e.backend.forceNsenter, e.backend.noGate = true, false
	o = e.sh(`curl -q -sS --max-time 10 http://api.allowed.test/nodump; echo; ls /proc/self/fd | sort -n | tr '\n' ' '; echo`, allowlist)
	mustContain(t, o, "hello host=api.allowed.test path=/nodump tls=false", "\n0 1 2 3 \n")
	e.backend.forceNsenter, e.backend.noGate = false, true
	o = e.sh(`curl -q -sS --max-time 10 http://api.allowed.test/nodump-nogate; echo; ls /proc/self/fd | sort -n | tr '\n' ' '; echo`, allowlist, func(r *sandbox.Request) { r.Limits.MaxProcs = 0 })
	mustContain(t, o, "hello host=api.allowed.test path=/nodump-nogate tls=false", "\n0 1 2 3 \n")
}

// TestAllowlistFailsClosed: when the proxy cannot start, the command does
// not run, and the error says why.
func TestAllowlistFailsClosed(t *testing.T) {
	e := newEnv(t)
	// A socket directory under a regular file cannot be made, not even by
	// root.
	blocker := filepath.Join(e.base, "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(e.work, "ran")
	for _, tc := range []struct {
		name string
		dir  string
		want string
	}{
		{"unwritable directory", filepath.Join(blocker, "net"), "allowlist proxy"},
		{"socket path too long", filepath.Join(e.base, strings.Repeat("x", 100)), "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := egress.NewPool(egress.Options{Dir: tc.dir, Linger: -1})
			defer pool.Close()
			b := New(Options{StateDir: e.state, Egress: pool})
			req := &sandbox.Request{Argv: []string{"/bin/sh", "-c", "touch " + marker}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work}, Timeout: time.Minute}
			allowlist(req)
			res, err := b.Run(context.Background(), req)
			if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %+v, %v; want ErrUnavailable naming %q", res, err, tc.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the command ran without its proxy")
			}
		})
	}
	t.Run("malformed allowlist entry", func(t *testing.T) {
		req := &sandbox.Request{Argv: []string{"/bin/sh", "-c", "touch " + marker}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work}, Timeout: time.Minute}
		allowlist(req)
		req.NetworkAllow = []string{"*"}
		_, err := e.backend.Run(context.Background(), req)
		if !errors.Is(err, sandbox.ErrBadRequest) {
			t.Errorf("Run = %v, want ErrBadRequest", err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the command ran")
		}
	})
}

// TestAllowlistServerShared: a session's commands share one server and one
// network namespace (held by one forwarder), which go once the last of
// them has ended (Linger -1 here); another session gets its own; a holder
// that died is replaced by the next command.
func TestAllowlistServerShared(t *testing.T) {
	e := newEnv(t)
	requireTool(t, "curl", "apt-get install curl")
	newWorld(t, e)
	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	run := func(session string, i int, hold time.Duration) (string, error) {
		var so bytes.Buffer
		req := &sandbox.Request{Argv: []string{"/bin/sh", "-c", `curl -q -sS --max-time 10 http://api.allowed.test/` + fmt.Sprint(i) + `; echo; readlink /proc/self/ns/net; touch served-` + fmt.Sprint(i) + `; sleep ` + fmt.Sprint(hold.Seconds())},
			Env: e.envv, Policy: sandbox.Policy{Workdir: e.work}, Stdout: &so, Stderr: &so, Timeout: time.Minute}
		allowlist(req)
		req.Session = session
		_, err := e.backend.Run(context.Background(), req)
		return so.String(), err
	}
	netnsOf := func(out string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "net:[") {
				return l
			}
		}
		return ""
	}
	var wg sync.WaitGroup
	outs := make([]string, 4)
	errs := make([]error, 4)
	for i := range outs {
		session := "egress-test"
		if i == 3 {
			session = "another"
		}
		wg.Go(func() { outs[i], errs[i] = run(session, i, 500*time.Millisecond) })
	}
	wg.Wait()
	for i, o := range outs {
		if errs[i] != nil || !strings.Contains(o, fmt.Sprintf("path=/%d", i)) || netnsOf(o) == "" || netnsOf(o) == hostNet {
			t.Errorf("command %d: %v\n%s", i, errs[i], o)
		}
	}
	if a, b, c := netnsOf(outs[0]), netnsOf(outs[1]), netnsOf(outs[2]); a != b || b != c {
		t.Errorf("one session's concurrent commands are in network namespaces %s %s %s, want one", a, b, c)
	}
	if netnsOf(outs[3]) == netnsOf(outs[0]) {
		t.Errorf("two sessions share the network namespace %s", netnsOf(outs[0]))
	}
	waitNoForwarder(t)
	ents, err := os.ReadDir(filepath.Join(e.base, "net"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("socket directories left after the commands: %v", ents)
	}

	t.Run("a dead holder is replaced", func(t *testing.T) {
		got := make(chan string, 1)
		go func() {
			o, err := run("egress-test", 10, 3*time.Second)
			got <- fmt.Sprint(o, err)
		}()
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(e.work, "served-10")); err == nil {
				break
			}
		}
		pids := forwarderPids()
		if len(pids) == 0 {
			t.Fatal("no forwarder process while a command runs")
		}
		var parents []int
		for _, p := range pids {
			if pp, ok := ppidOf(p); ok {
				parents = append(parents, pp)
			}
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		// Its parent, the holder's pid 1, ends with it.
		for deadline := time.Now().Add(60 * time.Second); slices.ContainsFunc(parents, running) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		// The running command holds its lease: the next one finds the
		// holder dead and starts another, in a new namespace.
		o, err := run("egress-test", 11, 0)
		if err != nil || !strings.Contains(o, "path=/11") {
			t.Errorf("after the forwarder was killed: %v\n%s", err, o)
		}
		if first := <-got; !strings.Contains(first, "path=/10") || netnsOf(first) == netnsOf(o) {
			t.Errorf("first command %q, second %q: want both served, in different namespaces", first, o)
		}
		waitNoForwarder(t)
	})
}

// forwarderPids lists this test process's descendants that run corral's
// forwarder (the holders of egress namespaces); other packages' tests
// (docker's containers) have their own.
func forwarderPids() []int {
	var pids []int
	queue := []int{os.Getpid()}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		for _, task := range tasks {
			data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", p, task.Name()))
			for _, f := range strings.Fields(string(data)) {
				c, err := strconv.Atoi(f)
				if err != nil {
					continue
				}
				queue = append(queue, c)
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c)); err == nil && bytes.Contains(b, []byte(netproxy.ForwarderArg)) {
					pids = append(pids, c)
				}
			}
		}
	}
	return pids
}

// ppidOf reads the parent of pid from /proc/PID/stat (proc(5): the field
// after the parenthesized command name and the state).
func ppidOf(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// waitNoForwarder fails the test when a forwarder process is still there
// a few seconds after every lease ended.
func waitNoForwarder(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for len(forwarderPids()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("forwarder processes left: %v", forwarderPids())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCheckEgress: doctor's check runs a command in a fresh session's
// namespace, by the gate here, or by nsenter when told to, and leaves no
// forwarder behind.
func TestCheckEgress(t *testing.T) {
	e := newEnv(t)
	pool := egress.NewPool(egress.Options{Dir: filepath.Join(e.base, "net"), Linger: -1})
	defer pool.Close()
	b := New(Options{StateDir: e.state, Egress: pool})
	want, nsenter := "nsenter", "nsenter"
	if canJoinByInjection {
		want = "ptrace gate"
	}
	if os.Getuid() == 0 {
		// Root's commands start from a thread that enters the namespace
		// itself, whatever the gate can do.
		want, nsenter = joinedBySetns, joinedBySetns
	}
	if got, err := b.CheckEgress(context.Background(), e.base); err != nil || got != want {
		t.Errorf("CheckEgress = %q, %v; want %q", got, err, want)
	}
	waitNoForwarder(t)
	b.forceNsenter = true
	if got, err := b.CheckEgress(context.Background(), e.base); err != nil || got != nsenter {
		t.Errorf("CheckEgress through nsenter = %q, %v; want %q", got, err, nsenter)
	}
	b.forceNsenter, b.noGate = false, true
	if got, err := b.CheckEgress(context.Background(), e.base); err != nil || got != nsenter {
		t.Errorf("CheckEgress without the gate = %q, %v; want %q", got, err, nsenter)
	}
	waitNoForwarder(t)
}
