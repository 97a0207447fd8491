package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

	"github.com/moby/moby/client"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/envsecrets"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

func TestRunBasics(t *testing.T) {
	f := newFixture(t, nil)
	res, out := f.run("s1", `echo hi; id -u; id -g; pwd; echo "HOME=$HOME TMPDIR=$TMPDIR HOSTONLY=${HOSTONLY-unset}"; ls`)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	want := fmt.Sprintf("hi\n%d\n%d\n%s\nHOME=/tmp TMPDIR=/tmp HOSTONLY=unset\nREADME\n", os.Getuid(), os.Getgid(), f.ws)
	if out != want {
		t.Errorf("output\n%q\nwant\n%q", out, want)
	}
	if res, _ := f.run("s1", "exit 7"); res.ExitCode != 7 {
		t.Errorf("exit 7 gave %d", res.ExitCode)
	}
	if res, out := f.run("s1", "kill -TERM $$"); res.ExitCode != 128+15 || res.Signal != 15 {
		t.Errorf("kill -TERM gave exit %d signal %d: %s", res.ExitCode, res.Signal, out)
	}
	// Stdin reaches the command; without one it reads EOF at once.
	var out2 bytes.Buffer
	res, err := f.b.Run(context.Background(), &sandbox.Request{Argv: []string{"cat"}, Policy: sandbox.Policy{Workdir: f.ws}, Session: "s1",
		Stdin: strings.NewReader("piped\n"), Stdout: &out2})
	if err != nil || res.ExitCode != 0 || out2.String() != "piped\n" {
		t.Errorf("cat with stdin: %v %+v %q", err, res, out2.String())
	}
	if res, out := f.run("s1", "cat; echo done"); res.ExitCode != 0 || out != "done\n" {
		t.Errorf("cat without stdin: %d %q", res.ExitCode, out)
	}
	if res, _ := f.run("s1", "no-such-program"); res.ExitCode != 127 {
		t.Errorf("missing program: exit %d, want 127", res.ExitCode)
	}
}

// TestOutputOrder: one writer for stdout and stderr gets them in the order
// the command wrote them (one pipe in the container: the helper's
// Merged/--merged), on the agent's channel and a relay alike.
func TestOutputOrder(t *testing.T) {
	f := newFixture(t, nil)
	for range 3 {
		if res, out := f.run("s1", testkit.OrderScript); res.ExitCode != 0 || out != testkit.OrderWant() {
			t.Fatalf("exit %d, output out of order:\n%.600q", res.ExitCode, out)
		}
	}
}

// TestIsatty: no command gets a terminal, every time.
func TestIsatty(t *testing.T) {
	f := newFixture(t, nil)
	for i := range 2 {
		_, out := f.run("s", `for fd in 0 1 2; do [ -t $fd ] && echo tty || echo no; done`)
		if out != "no\nno\nno\n" {
			t.Errorf("run %d: isatty answers %q", i, out)
		}
	}
}

// TestSecurity checks the container's restrictions from inside.
func TestSecurity(t *testing.T) {
	f := newFixture(t, nil)
	secret := filepath.Join(filepath.Dir(f.ws), "corral-host-secret-"+strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(secret, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secret)
	checks := []struct{ name, script, want string }{
		{"no network", `python3 -c 'import socket; s=socket.socket(); s.settimeout(2); s.connect(("1.1.1.1", 53))' 2>&1 | tail -1; ls /sys/class/net`, "OSError: [Errno 101] Network is unreachable\nlo\n"},
		{"read-only root", `touch /etc/x 2>&1 | grep -o 'Read-only file system'; touch /usr/x 2>&1 | grep -o 'Read-only file system'`, "Read-only file system\nRead-only file system\n"},
		{"host files hidden", `cat ` + secret + ` 2>&1 | grep -o 'No such file'; find /home /root -mindepth 1 | wc -l`, "No such file\n" + "0\n"},
		{"capabilities", `grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status | tr -s '\t' ' '`, "CapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nNoNewPrivs: 1\n"},
		{"writable workspace and tmp", `touch new && echo ok1; touch /tmp/t && echo ok2`, "ok1\nok2\n"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			_, out := f.run("sec", c.script)
			if out != c.want {
				t.Errorf("got\n%q\nwant\n%q", out, c.want)
			}
		})
	}
	st, err := os.Stat(filepath.Join(f.ws, "new"))
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if int(sys.Uid) != os.Getuid() || int(sys.Gid) != os.Getgid() {
		t.Errorf("file made in the workspace is owned by %d:%d, want %d:%d", sys.Uid, sys.Gid, os.Getuid(), os.Getgid())
	}
	if err := os.Remove(filepath.Join(f.ws, "new")); err != nil {
		t.Errorf("removing it as the host user: %v", err)
	}
}

// TestEnvWithheldLogged: the log names each variable withheld for its
// value (docker.env.withheld), never the value. (What reaches the
// command is the conformance suite's env case.)
func TestEnvWithheldLogged(t *testing.T) {
	f := newFixture(t, nil)
	res, out := f.run("envval", "env", func(r *sandbox.Request) {
		r.Env = append(r.Env, envsecrets.Env()...)
		r.EnvAllow = []string{envsecrets.AllowPattern}
	})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	logged := f.log.String()
	for _, name := range []string{"SLACK_WEBHOOK_URL", "DB_CONNECTION", "SESSION_DATA", "DEPLOY_MATERIAL", "REMOTE_HELPER_ARG"} {
		if !strings.Contains(logged, "docker.env.withheld") || !strings.Contains(logged, "name="+name+" ") {
			t.Errorf("no docker.env.withheld record for %s in the log:\n%s", name, logged)
		}
	}
	for _, m := range envsecrets.Markers {
		if strings.Contains(logged, m) {
			t.Errorf("the log holds a withheld value (%q)", m)
		}
	}
}

// TestForkBomb: the pids limit holds a fork bomb, the timeout ends it, and
// the container still works afterwards.
func TestForkBomb(t *testing.T) {
	f := newFixture(t, func(s *Settings) { s.PidsLimit = 64 })
	// First, that the engine holds the limit at all (an engine that
	// ignores it would let the bomb take the machine: rootless Podman on
	// cgroup v1 once made 29k processes): the container's pids cgroup
	// says 64, v2's or v1's, or, where the engine cannot limit it by
	// cgroups, the command's RLIMIT_NPROC does, soft and hard.
	check := `cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max`
	if f.perProcess() {
		check = `while read -r a b c d rest; do [ "$a $b" = "Max processes" ] && [ "$c" = "$d" ] && echo "$c"; done </proc/self/limits; true`
	}
	if res, out := f.run("fb", check); res.ExitCode != 0 || strings.TrimSpace(out) != "64" {
		t.Fatalf("the container's pids limit: exit %d, %q; want 64 before any fork bomb", res.ExitCode, out)
	}
	// A command that fills the pids limit, then writes: the helper that
	// runs it keeps working (it made its threads beforehand).
	res, out := f.run("fb", `python3 - <<'PY'
import os, sys, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
sys.stdout.write("x" * 2000000)
PY`)
	if res.ExitCode != 0 || len(out) != 2000000 {
		t.Errorf("pid filler: exit %d, %d bytes of output", res.ExitCode, len(out))
	}
	res, _ = f.run("fb", `bomb() { bomb | bomb & }; bomb; sleep 30`, func(r *sandbox.Request) { r.Timeout = 5 * time.Second })
	if !res.TimedOut {
		t.Errorf("fork bomb: %+v, want a timeout", res)
	}
	_, out = f.run("fb", `n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; [ $n -lt 10 ] && echo clean || echo "$n processes"`)
	if out != "clean\n" {
		t.Errorf("after the bomb: %q", out)
	}
}

// TestOOM: a memory kill says so; where the engine cannot limit the
// container by cgroups, the allocation beyond docker.memory fails in the
// process (RLIMIT_DATA), which says so, and the container goes on.
func TestOOM(t *testing.T) {
	f := newFixture(t, nil)
	if f.perProcess() {
		// The least docker.memory that holds per process
		// (minPerProcessMemory): the helpers live under it too.
		f = newFixture(t, func(s *Settings) { s.Memory = "128m" })
		res, out := f.run("oom", `python3 -c 'x = bytearray(512 << 20); print(len(x))'`)
		if res.ExitCode != 1 || res.LimitHit != sandbox.LimitContainerProcessMemory || !strings.Contains(out, "MemoryError") {
			t.Fatalf("memory bomb: exit %d limit %q: %s", res.ExitCode, res.LimitHit, out)
		}
		if msg := sandbox.LimitMessage(res, sandbox.Limits{}); !strings.Contains(msg, "per process, not in total") || !strings.Contains(msg, "docker.memory") {
			t.Errorf("message %q", msg)
		}
		// Per process, not in total: below the limit it runs, and
		// the container with it.
		if res, out := f.run("oom", `python3 -c 'x = bytearray(64 << 20); print(len(x))'`); res.ExitCode != 0 || res.LimitHit != "" || out != "67108864\n" {
			t.Errorf("64 MiB under 128: exit %d limit %q: %s", res.ExitCode, res.LimitHit, out)
		}
		return
	}
	f = newFixture(t, func(s *Settings) { s.Memory = "64m" })
	res, out := f.run("oom", `python3 -c 'x = bytearray(512 << 20); print(len(x))'`)
	if res.ExitCode != 137 || res.LimitHit != sandbox.LimitContainerMemory {
		t.Fatalf("memory bomb: exit %d limit %q: %s", res.ExitCode, res.LimitHit, out)
	}
	if msg := sandbox.LimitMessage(res, sandbox.Limits{}); !strings.Contains(msg, "out of memory") || !strings.Contains(msg, "docker.memory") {
		t.Errorf("message %q", msg)
	}
	// A plain SIGKILL afterwards is not called a memory kill.
	if res, _ := f.run("oom", `kill -KILL $$`); res.LimitHit != "" {
		t.Errorf("kill -KILL reported as %q", res.LimitHit)
	}
}

// TestZombiesReaped: orphans are reaped by the container's init.
func TestZombiesReaped(t *testing.T) {
	f := newFixture(t, nil)
	f.run("z", `for i in $(seq 50); do ( sleep 0.2 & ) ; done; sleep 1`)
	time.Sleep(500 * time.Millisecond)
	_, out := f.run("z", `z=0; for s in /proc/[0-9]*/stat; do read -r line < $s 2>/dev/null || continue; st=${line##*) }; [ "${st%% *}" = Z ] && z=$((z+1)); done; echo zombies=$z`)
	if out != "zombies=0\n" {
		t.Errorf("%q", out)
	}
}

// TestCancelKillsTree: a cancelled command's process group ends, and
// nothing of it is left in the container. (The timeout is the
// conformance suite's timeout case.)
func TestCancelKillsTree(t *testing.T) {
	f := newFixture(t, nil)
	// Cancellation too.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := f.b.Run(ctx, &sandbox.Request{Argv: []string{"bash", "-c", "sleep 303 & sleep 304"}, Policy: sandbox.Policy{Workdir: f.ws, Profile: sandbox.ProfileWorkspace}, Session: "to"})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled run: %v", err)
	}
	_, out := f.run("to", `for p in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $p 2>/dev/null; echo; done | grep -c 'sleep 30[34]' || true`)
	if out != "0\n" {
		t.Errorf("sleeps left after cancel: %q", out)
	}
}

// TestBackgroundEndsWithCommand: as on bwrap, what a command leaves behind
// in its session ends with it.
func TestBackgroundEndsWithCommand(t *testing.T) {
	f := newFixture(t, nil)
	f.run("bg", `sleep 305 &`)
	_, out := f.run("bg", `for p in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $p 2>/dev/null; echo; done | grep -c 'sleep 30[5]' || true`)
	if out != "0\n" {
		t.Errorf("left behind: %q", out)
	}
}

// TestGit: HOME is writable and the run user's; git trusts the workspace
// (and only it) even where its owner differs.
func TestGit(t *testing.T) {
	f := newFixture(t, func(s *Settings) { s.User = "4321:4321" })
	if err := os.Chmod(f.ws, 0o777); err != nil {
		t.Fatal(err)
	}
	res, out := f.run("git", `set -e
git config --global user.email a@b.c; git config --global user.name A
stat -c %u /tmp/.gitconfig
git init -q . && git add README && git commit -qm one && git status --short && echo committed
git config --global --get-all safe.directory`)
	if res.ExitCode != 0 || out != "4321\ncommitted\n"+f.ws+"\n" {
		t.Errorf("exit %d:\n%s", res.ExitCode, out)
	}
}

// TestOddWorkspacePath: spaces and a colon in the workspace path.
func TestOddWorkspacePath(t *testing.T) {
	f := newFixture(t, nil)
	odd := filepath.Join(f.ws, "with space:and colon")
	if err := os.Mkdir(odd, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(odd, "f"), []byte("x"), 0o644)
	f.ws = odd
	res, out := f.run("odd", `pwd; ls; touch g`)
	if res.ExitCode != 0 || out != odd+"\nf\n" {
		t.Errorf("exit %d: %q", res.ExitCode, out)
	}
	if _, err := os.Stat(filepath.Join(odd, "g")); err != nil {
		t.Error(err)
	}
}

// TestLifecycle: lazy start, one container per session, removal on
// Release and Close, names and labels.
func TestLifecycle(t *testing.T) {
	f := newFixture(t, nil)
	if n := f.containers(""); len(n) != 0 {
		t.Fatalf("containers before the first command: %v", n)
	}
	f.run("a", "true")
	f.run("a", "true")
	f.run("b", "true")
	a, b := f.containers("a"), f.containers("b")
	if len(a) != 1 || len(b) != 1 || a[0] == b[0] {
		t.Fatalf("containers a=%v b=%v", a, b)
	}
	if !strings.HasPrefix(a[0], NamePrefix) || len(a[0]) != len(NamePrefix)+12 {
		t.Errorf("name %q", a[0])
	}
	f.b.Release("a")
	if n := f.containers("a"); len(n) != 0 {
		t.Errorf("after Release(a): %v", n)
	}
	// A one-off command's container goes right after it.
	var out bytes.Buffer
	if _, err := f.b.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.ws}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if n := f.containers(""); len(n) != 1 {
		t.Errorf("after a one-off command: %v (want only b's)", n)
	}
	f.e.Close()
	if n := f.containers(""); len(n) != 0 {
		t.Errorf("after Close: %v", n)
	}
	if _, err := f.b.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.ws}, Session: "b"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	for _, ev := range []string{"docker.container.started", "docker.container.removed", "docker.session"} {
		if !strings.Contains(f.log.String(), ev) {
			t.Errorf("no %s in the log:\n%s", ev, f.log)
		}
	}
}

// TestSharedScope: sessions share one container until the last closes.
func TestSharedScope(t *testing.T) {
	f := newFixture(t, func(s *Settings) { s.Scope = ScopeShared })
	f.run("a", "echo from-a > /tmp/shared")
	_, out := f.run("b", "cat /tmp/shared")
	if out != "from-a\n" {
		t.Errorf("b sees %q", out)
	}
	if n := f.containers(sharedKey); len(n) != 1 {
		t.Fatalf("shared containers: %v", n)
	}
	f.b.Release("a")
	if n := f.containers(sharedKey); len(n) != 1 {
		t.Errorf("after a closed: %v", n)
	}
	f.b.Release("b")
	if n := f.containers(sharedKey); len(n) != 0 {
		t.Errorf("after both closed: %v", n)
	}
}

// TestSettingsChange: a session whose settings change gets a new container.
func TestSettingsChange(t *testing.T) {
	f := newFixture(t, nil)
	f.run("c", "true")
	first := f.containers("c")
	st := f.b.Settings()
	st.PidsLimit = 100
	f.b = f.e.Backend(st)
	f.run("c", "true")
	second := f.containers("c")
	if len(first) != 1 || len(second) != 1 || first[0] == second[0] {
		t.Errorf("containers before %v after %v", first, second)
	}
}

// TestMountCheck: a host_workspace the daemon resolves elsewhere is refused
// and its container removed; an empty workspace is logged as unverified.
func TestMountCheck(t *testing.T) {
	other := t.TempDir() // exists on the daemon's host, without README
	f := newFixture(t, func(s *Settings) { s.HostWorkspace = other })
	_, err := f.b.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.ws}, Session: "m"})
	if !errors.Is(err, ErrMount) || !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "docker.host_workspace") {
		t.Fatalf("wrong host_workspace: %v", err)
	}
	if n := f.containers("m"); len(n) != 0 {
		t.Errorf("refused container left: %v", n)
	}
	g := newFixture(t, nil)
	empty := filepath.Join(g.ws, "empty")
	os.Mkdir(empty, 0o755)
	g.ws = empty
	if res, _ := g.run("e", "true"); res.ExitCode != 0 {
		t.Fatal(res)
	}
	if !strings.Contains(g.log.String(), "docker.mount.unverified") {
		t.Errorf("no docker.mount.unverified:\n%s", g.log)
	}
}

// TestMissingTools: an image without bash is refused, naming what lacks.
func TestMissingTools(t *testing.T) {
	f := newFixture(t, nil)
	// The helper alone as an image: nothing else in it.
	ref := buildHelperOnlyImage(t, f)
	st := f.b.Settings()
	st.Image = ref
	b := f.e.Backend(st)
	_, err := b.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.ws}, Session: "mt"})
	if err == nil || !strings.Contains(err.Error(), "lacks bash, sh, setsid, cat, mkdir, dirname, ls") {
		t.Fatalf("err = %v", err)
	}
}

// TestUnavailable: no engine is a clear error naming the fix.
func TestUnavailable(t *testing.T) {
	e := NewEngine(Options{Helper: dockertest.StaticCorral(t), ClientOpts: []client.Opt{client.WithHost("unix:///nonexistent/docker.sock"), client.WithAPIVersionNegotiation()}})
	defer e.Close()
	st := DefaultSettings
	_, err := e.Backend(st).Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: "/var/tmp"}, Session: "u"})
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "systemctl start docker") || !strings.Contains(err.Error(), "DOCKER_HOST") {
		t.Errorf("err = %v", err)
	}
}

// TestTTY: corral shell's terminal mode runs on a terminal.
func TestTTY(t *testing.T) {
	f := newFixture(t, nil)
	ptmx, tty := openPTY(t)
	defer ptmx.Close()
	go func() { ptmx.Write([]byte("[ -t 0 ] && [ -t 1 ] && echo on-a-tty; exit 3\n")) }()
	var out bytes.Buffer
	done := make(chan struct{})
	var mu sync.Mutex
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				close(done)
				return
			}
		}
	}()
	res, err := f.b.Run(context.Background(), &sandbox.Request{Argv: []string{"bash", "--norc", "-i"}, Policy: sandbox.Policy{Workdir: f.ws}, Session: "tty", TTY: true, Stdin: tty, Stdout: tty, Stderr: tty, Timeout: 20 * time.Second})
	tty.Close()
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("%v %+v", err, res)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(out.String(), "on-a-tty\r\n") {
		t.Errorf("output %q", out.String())
	}
}

// TestProtectedPaths: existing protected paths in the workspace are
// read-only in the container; git commits work.
func TestProtectedPaths(t *testing.T) {
	f := newFixture(t, nil)
	for _, c := range [][]string{{"git", "init", "-q", f.ws}, {"git", "-C", f.ws, "config", "user.email", "a@b"}, {"git", "-C", f.ws, "config", "user.name", "A"}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	os.MkdirAll(filepath.Join(f.ws, ".vscode"), 0o755)
	res, out := f.run("prot", `echo 'echo pwned' > .git/hooks/pre-commit 2>&1 | grep -o 'Read-only file system'
echo x >> .git/config 2>&1 | grep -o 'Read-only file system'
echo '{}' > .vscode/tasks.json 2>&1 | grep -o 'Read-only file system'
git add README && git commit -qm one && echo committed`)
	if res.ExitCode != 0 || strings.Count(out, "Read-only file system") != 3 || !strings.HasSuffix(out, "committed\n") {
		t.Errorf("exit %d: %q", res.ExitCode, out)
	}
	if _, err := os.Stat(filepath.Join(f.ws, ".git/hooks/pre-commit")); err == nil {
		t.Error("the hook exists on the host")
	}
	// The directory above a protected path cannot be swapped.
	_, out = f.run("prot", `mv .git .g 2>&1 | grep -o 'busy'; ls -d .g 2>/dev/null || echo no-move`)
	if out != "busy\nno-move\n" {
		t.Errorf("rename of .git: %q", out)
	}
	// What appears after the container started is moved out after the
	// command, with a warning.
	res, _ = f.run("prot", `echo '{}' > .mcp.json; mkdir -p .claude && echo x > .claude/settings.json; echo ok > normal.txt`)
	for _, p := range []string{".mcp.json", ".claude"} {
		if _, err := os.Lstat(filepath.Join(f.ws, p)); err == nil {
			t.Errorf("%s stayed in the workspace", p)
		}
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "held 2 protected paths the command made") || !strings.Contains(res.Warnings[0], ".mcp.json") || !strings.Contains(res.Warnings[0], "ls -A ") {
		t.Errorf("warnings %q", res.Warnings)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "normal.txt")); err != nil {
		t.Error(err)
	}
}

// TestProtectedGitDirs: the hooks and configuration of a submodule whose
// name has a slash, of a separate git directory and of a bare repository
// are read-only in the container, git work in them goes on, and a bare
// repository made in the container loses its hooks and configuration
// after the command.
func TestProtectedGitDirs(t *testing.T) {
	f := newFixture(t, nil)
	git := func(dir string, args ...string) {
		t.Helper()
		gitT(t, dir, args...)
	}
	src := dockertest.TestDir(t)
	git(src, "init", "-q", "lib")
	git(filepath.Join(src, "lib"), "commit", "-q", "--allow-empty", "-m", "lib")
	git(f.ws, "init", "-q", "--separate-git-dir="+filepath.Join(f.ws, ".gd"), f.ws)
	git(f.ws, "submodule", "add", "-q", filepath.Join(src, "lib"), "vendor/lib")
	git(f.ws, "add", "README")
	git(f.ws, "commit", "-qm", "add")
	git(f.ws, "init", "-q", "--bare", "remote.git")
	// The workspace is owned by the test's user, which the container's
	// user may not be.
	env := `export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*' GIT_AUTHOR_NAME=A GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=A GIT_COMMITTER_EMAIL=a@b
`
	res, out := f.run("gitdirs", env+`for p in .gd/modules/vendor/lib/hooks/post-checkout .gd/modules/vendor/lib/config .gd/hooks/pre-commit .gd/config remote.git/hooks/post-receive remote.git/config; do
  (echo evil >> $p) 2>&1 | grep -q 'Read-only file system' && echo "ro $p" || echo "WROTE $p"
done
(cd vendor/lib && git commit -q --allow-empty -m in-container) && echo committed-sub
git commit -q --allow-empty -m top && echo committed-top
git push -q ./remote.git HEAD:refs/heads/main && echo pushed
git init -q --bare made.git && echo evil > made.git/hooks/post-receive && git config --file made.git/config core.fsmonitor evil && echo made`)
	for _, want := range []string{"ro .gd/modules/vendor/lib/hooks/post-checkout", "ro .gd/modules/vendor/lib/config", "ro .gd/hooks/pre-commit", "ro .gd/config",
		"ro remote.git/hooks/post-receive", "ro remote.git/config", "committed-sub", "committed-top", "pushed", "made"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q: exit %d, %q", want, res.ExitCode, out)
		}
	}
	if _, err := os.Lstat(filepath.Join(f.ws, "made.git/hooks")); err == nil {
		t.Errorf("made.git/hooks stayed in the workspace")
	}
	// The new repository's configuration: its safe part, written back.
	if b, err := os.ReadFile(filepath.Join(f.ws, "made.git/config")); err != nil || !strings.Contains(string(b), "bare = \"true\"") || strings.Contains(string(b), "evil") {
		t.Errorf("made.git/config after the command (%v), want its safe part:\n%s", err, b)
	}
	if len(res.Warnings) != 1 || !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "written back, without core.fsmonitor") }) {
		t.Errorf("warnings %q", res.Warnings)
	}
	// The configuration corral wrote back is its own: the next check
	// leaves it (a new user saw a clone's config moved and noted twice,
	// at the command's end and at the container's removal); one a command
	// changed since is the command's again.
	if res, _ := f.run("gitdirs", "true"); len(res.Warnings) != 0 {
		t.Errorf("the next command's warnings %q: corral's own written-back configuration was taken for the command's", res.Warnings)
	}
	res, _ = f.run("gitdirs", `git config --file made.git/config core.pager evil2`)
	if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "made.git/config") }) {
		t.Errorf("a changed written-back configuration was not moved out: warnings %q", res.Warnings)
	}
	if b, _ := os.ReadFile(filepath.Join(f.ws, "made.git/config")); strings.Contains(string(b), "evil2") {
		t.Errorf("made.git/config holds the command's core.pager:\n%s", b)
	}
}

// TestOtherUser: a command for another user (corral exec --user) runs in a
// docker exec of its own, with the same stdin, signals and exit report.
func TestOtherUser(t *testing.T) {
	f := newFixture(t, nil)
	res, out := f.run("ou", `id -u; read x; echo "got $x"; exit 5`, func(r *sandbox.Request) {
		r.User = "4242:4242"
		r.Stdin = strings.NewReader("line\n")
	})
	if res.ExitCode != 5 || out != "4242\ngot line\n" {
		t.Errorf("exit %d: %q", res.ExitCode, out)
	}
	res, _ = f.run("ou", `sleep 300`, func(r *sandbox.Request) { r.User = "4242:4242"; r.Timeout = time.Second })
	if !res.TimedOut {
		t.Errorf("timeout for another user: %+v", res)
	}
}

// TestAgentRestart: when corral's helper in the container dies, the next
// command starts a new one.
func TestAgentRestart(t *testing.T) {
	f := newFixture(t, nil)
	f.run("ar", "true")
	_, err := f.b.Run(context.Background(), &sandbox.Request{Policy: sandbox.Policy{Workdir: f.ws}, Session: "ar", Argv: []string{"bash", "-c",
		`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline | grep -q '^/.corral/corral __corral-agent' && kill -9 ${p#/proc/}; done; sleep 5`}})
	// It was sent and may have run: not "nothing was run".
	if err == nil || errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "lost corral's helper") || !strings.Contains(err.Error(), "may have run") {
		t.Errorf("the command whose agent died: %v", err)
	}
	res, out := f.run("ar", "echo back")
	if res.ExitCode != 0 || out != "back\n" {
		t.Errorf("after the agent died: %d %q", res.ExitCode, out)
	}
}

// TestSyscallFilter: corral's seccomp profile replaces Docker's; under
// workspace AF_UNIX sockets are denied (socketpair works), under network
// they are not; io_uring is denied everywhere.
func TestSyscallFilter(t *testing.T) {
	f := newFixture(t, nil)
	probe := `grep -E '^Seccomp:' /proc/self/status | tr -s '\t' ' '
python3 - <<'PY'
import ctypes, errno, socket
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); print("unix ok")
except OSError as e:
    print("unix", errno.errorcode[e.errno])
a, b = socket.socketpair(); print("socketpair ok")
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(425, 1, ctypes.c_void_p(0))
print("io_uring", errno.errorcode[ctypes.get_errno()] if r < 0 else "allowed")
PY`
	_, out := f.run("sc-vsock", `python3 -c '
import errno, socket
try:
    socket.socket(40, socket.SOCK_STREAM); print("vsock ok")
except OSError as e:
    print("vsock", errno.errorcode[e.errno])'`)
	if out != "vsock EPERM\n" {
		t.Errorf("AF_VSOCK under workspace: %q", out)
	}
	for _, c := range []struct {
		profile sandbox.Profile
		want    string
	}{
		{sandbox.ProfileWorkspace, "Seccomp: 2\nunix EPERM\nsocketpair ok\nio_uring EPERM\n"},
		{sandbox.ProfileNetwork, "Seccomp: 2\nunix ok\nsocketpair ok\nio_uring EPERM\n"},
	} {
		_, out := f.run("sc-"+string(c.profile), probe, func(r *sandbox.Request) { r.Profile = c.profile })
		if out != c.want {
			t.Errorf("%s: got\n%s\nwant\n%s", c.profile, out, c.want)
		}
	}
}

// TestAllowlist: under the allowlist profile the container has no network
// but corral's proxies: allowed names pass, others get the 403 that says
// why, direct connections and DNS fail, AF_UNIX sockets are denied.
func TestAllowlist(t *testing.T) {
	f := newFixture(t, nil)
	script := `python3 - <<'PY'
import socket, urllib.request, urllib.error
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return "%d %s" % (e.code, e.read().decode().strip())
    except Exception as e:
        return "error %s" % type(e).__name__
print(get("http://api.allowed.test/x"))
print(get("http://allowed.test.evil/x"))
print(get("http://allowed.test/x"))
try:
    socket.create_connection(("1.1.1.1", 80), timeout=3); print("direct ok")
except OSError:
    print("direct refused")
try:
    socket.getaddrinfo("example.com", 80); print("dns ok")
except OSError:
    print("dns refused")
try:
    socket.socket(socket.AF_UNIX).connect("/run/corral-net/http.sock"); print("unix ok")
except OSError as e:
    print("unix refused")
PY`
	res, out := f.run("al", script, func(r *sandbox.Request) {
		r.Profile = sandbox.ProfileAllowlist
		r.NetworkAllow = []string{"*.allowed.test"}
	})
	want := "hello from api.allowed.test\n403 blocked by corral network allowlist: allowed.test.evil\n403 blocked by corral network allowlist: allowed.test\ndirect refused\ndns refused\nunix refused\n"
	if res.ExitCode != 0 || out != want {
		t.Errorf("exit %d:\n%s\nwant\n%s", res.ExitCode, out, want)
	}
	if !strings.Contains(f.log.String(), "network.denied") || !strings.Contains(f.log.String(), "allowed.test.evil") {
		t.Errorf("no network.denied in the log:\n%s", f.log)
	}
	f.b.Release("al")
}

// TestImageNotPullable: an image the engine lacks and cannot pull (no
// registry is reachable here) is a clear error, after a progress report.
func TestImageNotPullable(t *testing.T) {
	f := newFixture(t, func(s *Settings) { s.Image = "corral-no-such-image.invalid/none:1" })
	var progress []string
	_, err := f.b.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.ws}, Session: "np",
		Progress: func(m string) { progress = append(progress, m) }})
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "cannot be pulled") || !strings.Contains(err.Error(), "docker.image") {
		t.Errorf("err = %v", err)
	}
	if len(progress) == 0 || !strings.Contains(progress[0], "pulling image") {
		t.Errorf("progress %q", progress)
	}
	if n := f.containers("np"); len(n) != 0 {
		t.Errorf("containers: %v", n)
	}
}

// gitT runs git on the host in dir, with no settings of the person's.
func gitT(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=A", "-c", "user.email=a@b", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "LANG=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %q: %v\n%s", args, err, out)
	}
}

// subRepo makes the workspace a repository with a submodule at path and a
// nested repository at sub.
func subRepo(t *testing.T, f *fixture, path string) {
	src := dockertest.TestDir(t)
	gitT(t, src, "init", "-q", "lib")
	gitT(t, filepath.Join(src, "lib"), "commit", "-q", "--allow-empty", "-m", "lib")
	gitT(t, f.ws, "init", "-q")
	gitT(t, f.ws, "submodule", "add", "-q", filepath.Join(src, "lib"), path)
	gitT(t, f.ws, "add", "README")
	gitT(t, f.ws, "commit", "-qm", "add")
	gitT(t, f.ws, "init", "-q", "sub")
}

// TestProtectedScanCut: a command that makes more directories than the
// scan looks at (below .git/modules, or at the top) does not switch
// protection off: the next command, in the session's container or in a new
// one, is refused, and the protected files stay as they were.
func TestProtectedScanCut(t *testing.T) {
	for _, tc := range []struct{ name, flood, victim string }{
		{"modules", "mkdir -p .git/modules/0000/d{1000..1600}", ".git/modules/vendor/lib/config"},
		{"top", "mkdir a{1000..2100}", "sub/.git/config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			subRepo(t, f, "vendor/lib")
			victim := filepath.Join(f.ws, tc.victim)
			before, _ := os.ReadFile(victim)
			res, _ := f.run("cut", tc.flood)
			if res.ExitCode != 0 || !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "is larger than corral checks") }) {
				t.Errorf("flood: exit %d, warnings %q", res.ExitCode, res.Warnings)
			}
			for _, sess := range []string{"cut", ""} {
				req := &sandbox.Request{Argv: []string{"bash", "-c", `printf '[core]\n\tfsmonitor = "touch PWNED; false"\n' >> ` + tc.victim}, Policy: sandbox.Policy{Workdir: f.ws, Profile: sandbox.ProfileWorkspace}, Session: sess, Stdout: io.Discard, Stderr: io.Discard, Timeout: time.Minute, Env: []string{"PATH=/usr/bin:/bin"}}
				_, err := f.b.Run(context.Background(), req)
				if !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), "narrower working directory") {
					t.Errorf("session %q: the command after the flood: %v, want: refused", sess, err)
				}
			}
			if now, _ := os.ReadFile(victim); string(now) != string(before) {
				t.Errorf("%s changed:\n%s", tc.victim, now)
			}
		})
	}
}

// TestProtectedWideProject: a project wider than the old bounds, with a
// submodule at depth 3, runs; the submodule's gitfile is read-only.
func TestProtectedWideProject(t *testing.T) {
	f := newFixture(t, nil)
	subRepo(t, f, "third_party/go/lib")
	for i := 0; i < 40; i++ {
		for j := 0; j < 4; j++ {
			os.MkdirAll(filepath.Join(f.ws, fmt.Sprintf("d%02d", i), fmt.Sprintf("s%d", j)), 0o755)
		}
	}
	gitfile := filepath.Join(f.ws, "third_party/go/lib/.git")
	before, _ := os.ReadFile(gitfile)
	res, out := f.run("wide", `for p in third_party/go/lib/.git sub/.git/config .git/modules/third_party/go/lib/config; do
  (echo "gitdir: ../../../.cache/g" > $p) 2>&1 | grep -q 'Read-only file system' && echo "ro $p" || echo "WROTE $p"
done
echo ran`)
	for _, want := range []string{"ro third_party/go/lib/.git", "ro sub/.git/config", "ro .git/modules/third_party/go/lib/config", "ran"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q: exit %d, %q", want, res.ExitCode, out)
		}
	}
	if now, _ := os.ReadFile(gitfile); string(now) != string(before) {
		t.Errorf("the gitfile changed: %s", now)
	}
	if len(res.Warnings) != 0 {
		t.Errorf("warnings %q", res.Warnings)
	}
}

// TestToolCaches: the tools' caches are writable in a container under every
// profile, restricted included (they live in the container's /tmp), and
// last across the commands of a session.
func TestToolCaches(t *testing.T) {
	f := newFixture(t, nil)
	withCache := func(p sandbox.Profile) func(*sandbox.Request) {
		return func(r *sandbox.Request) { r.CacheDir = "/host/state/cache"; r.Profile = p }
	}
	write := `for v in GOCACHE GOMODCACHE npm_config_cache PIP_CACHE_DIR CARGO_HOME GRADLE_USER_HOME; do
  d=${!v}; case $d in ` + CacheDir + `/*) ;; *) echo "$v=$d outside the cache"; exit 1;; esac
  mkdir -p "$d" && echo x > "$d/entry" || exit 1
done`
	for _, p := range []sandbox.Profile{sandbox.ProfileRestricted, sandbox.ProfileWorkspace} {
		if res, out := f.run("tc-"+string(p), write, withCache(p)); res.ExitCode != 0 {
			t.Errorf("%s: writing the caches: %d %s", p, res.ExitCode, out)
		}
		if res, out := f.run("tc-"+string(p), `cat "$GOMODCACHE/entry" "$CARGO_HOME/entry"`, withCache(p)); res.ExitCode != 0 || out != "x\nx\n" {
			t.Errorf("%s: the caches did not last to the next command: %d %q", p, res.ExitCode, out)
		}
	}
	if res, out := f.run("tc-off", `echo "${GOMODCACHE-unset}"`); res.ExitCode != 0 || out != "unset\n" {
		t.Errorf("without a tool cache: %d %q", res.ExitCode, out)
	}
}

// TestImageHomeNotWritable: an image whose /tmp is 0755 (Docker's tmpfs
// at the container's HOME takes that mode: tmpcopyup) leaves a user other
// than root nowhere to write; the first command is refused, naming the
// image, HOME and the fix, where before git, the tools' caches and corral
// shell failed later with "permission denied".
func TestImageHomeNotWritable(t *testing.T) {
	cli := dockertest.Engine(t)
	base := dockertest.Image(t, cli)
	ref := "corral-test-tmp755:1-" + strings.ReplaceAll(strings.TrimPrefix(base, "corral-test:"), ":", "-")
	if _, err := cli.ImageInspect(context.Background(), ref); err != nil {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		data := []byte("FROM " + base + "\nRUN chmod 755 /tmp\n")
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "Dockerfile", Mode: 0o644, Size: int64(len(data))})
		tw.Write(data)
		tw.Close()
		dockertest.BuildImage(t, cli, ref, &buf)
	}
	f := newFixture(t, func(s *Settings) { s.Image = ref; s.User = "4321:4321" })
	if err := os.Chmod(f.ws, 0o777); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, err := f.b.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.ws, Profile: sandbox.ProfileWorkspace},
		Stdout: &out, Stderr: &out, Timeout: time.Minute})
	if err == nil || !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), "chmod 1777 /tmp") {
		t.Fatalf("a command in an image whose /tmp is 0755: %v (%s); want ErrUnavailable naming the image and the fix", err, out.String())
	}
}
