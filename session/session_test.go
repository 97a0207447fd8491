package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

type fixture struct {
	t     *testing.T
	base  string
	work  string
	state string
	be    *bwrap.Backend
	m     *Manager
	spec  Spec
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping sandbox test in -short mode")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap not installed (apt install bubblewrap); CI installs it")
	}
	root := os.Getenv("CORRAL_TEST_DIR")
	if root == "" {
		root = "/var/tmp"
	}
	base, err := os.MkdirTemp(root, "corral-session-*")
	if err != nil {
		t.Fatal(err)
	}
	base, _ = filepath.EvalSymlinks(base)
	f := &fixture{t: t, base: base, work: filepath.Join(base, "home", "work"), state: filepath.Join(base, "home", ".local", "state", "corral")}
	os.MkdirAll(f.work, 0o755)
	os.MkdirAll(f.state, 0o700)
	t.Setenv("HOME", filepath.Join(base, "home"))
	f.be = bwrap.New(bwrap.Options{StateDir: f.state, KillGrace: 500 * time.Millisecond})
	f.spec = Spec{Backend: f.be, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Limits: sandbox.Limits{MemoryMB: 1024, CPUSeconds: 60, MaxProcs: 256}, Workdir: f.work}, Timeout: 60 * time.Second, OutputLimit: 16 << 10,
		Env: []string{"HOME=" + filepath.Join(base, "home"), "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}}
	f.m = f.manager()
	t.Cleanup(func() {
		f.m.Close()
		os.RemoveAll(base)
	})
	return f
}

func (f *fixture) manager() *Manager {
	return NewManager(Options{StateDir: f.state, Resolve: func(string) (*Spec, error) { sp := f.spec; return &sp, nil }})
}

func (f *fixture) exec(s *Session, cmd string) *ExecResult {
	f.t.Helper()
	r, err := s.Exec(context.Background(), ExecRequest{Command: cmd})
	if err != nil {
		f.t.Fatalf("Exec(%q): %v", cmd, err)
	}
	return r
}

func (f *fixture) open(name string) *Session {
	f.t.Helper()
	s, err := f.m.Open(name)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func TestStateCarriesOver(t *testing.T) {
	f := newFixture(t)
	s := f.open("telegram:12345")
	f.exec(s, "mkdir -p sub/deeper && cd sub")
	if r := f.exec(s, "pwd"); strings.TrimSpace(r.Output.Text) != filepath.Join(f.work, "sub") || r.Cwd != filepath.Join(f.work, "sub") {
		t.Errorf("cwd did not carry over: %q cwd=%q", r.Output.Text, r.Cwd)
	}
	f.exec(s, "export A=1 B='two words'")
	if r := f.exec(s, `echo "$A|$B"`); r.Output.Text != "1|two words\n" {
		t.Errorf("variables did not carry over: %q", r.Output.Text)
	}
	f.exec(s, "unset A")
	if r := f.exec(s, `echo "${A-unset}"`); r.Output.Text != "unset\n" {
		t.Errorf("unset did not stick: %q", r.Output.Text)
	}
	// exit 5 is a result and does not break the session.
	if r := f.exec(s, "cd deeper; exit 5"); r.ExitCode != 5 {
		t.Errorf("exit 5 gave %d", r.ExitCode)
	}
	if r := f.exec(s, "pwd"); strings.TrimSpace(r.Output.Text) != filepath.Join(f.work, "sub", "deeper") {
		t.Errorf("after exit 5: %q", r.Output.Text)
	}
	// The real status of a pipeline and of each member.
	r := f.exec(s, "sh -c 'echo out; exit 3' | tail -1")
	if r.ExitCode != 0 || fmt.Sprint(r.PipeStatus) != "[3 0]" || r.Output.Text != "out\n" {
		t.Errorf("pipeline: exit=%d pipestatus=%v out=%q", r.ExitCode, r.PipeStatus, r.Output.Text)
	}
	// A new manager (a restarted process) sees the same cwd and variables.
	m2 := f.manager()
	defer m2.Close()
	s2, _ := m2.Open("telegram:12345")
	if r := f.exec(s2, `pwd; echo "$B"`); r.Output.Text != filepath.Join(f.work, "sub", "deeper")+"\ntwo words\n" {
		t.Errorf("after restart: %q", r.Output.Text)
	}
	// The non-interactive defaults are in place.
	if r := f.exec(s, `echo "$PAGER $GIT_PAGER $GIT_EDITOR $GIT_TERMINAL_PROMPT $DEBIAN_FRONTEND"`); r.Output.Text != "cat cat true 0 noninteractive\n" {
		t.Errorf("non-interactive env: %q", r.Output.Text)
	}
}

// TestShellErrorsAreBash: a command's shell errors read as a plain
// `bash -c` prints them: $0 is bash, and a line number is the command's,
// not one of corral's wrapper.
func TestShellErrorsAreBash(t *testing.T) {
	f := newFixture(t)
	s := f.open("s")
	r := f.exec(s, "echo \"$0\"\ntrue\ncorral-no-such-command")
	// Bash names the line on some systems and not on others; if it
	// does, it is the command's own (3), not the wrapper's.
	if (r.Output.Text != "bash\nbash: corral-no-such-command: command not found\n" &&
		r.Output.Text != "bash\nbash: line 3: corral-no-such-command: command not found\n") || r.ExitCode != 127 {
		t.Errorf("got %d %q", r.ExitCode, r.Output.Text)
	}
}

// TestOutputOrder: what a command wrote to stdout and stderr reaches the
// agent in the order it was written, under the memory limit too (whose
// stderr tail once split the one pipe in two), and with both cores busy
// (CI runs this package under load).
func TestOutputOrder(t *testing.T) {
	f := newFixture(t)
	s := f.open("s")
	for range 3 {
		if r := f.exec(s, testkit.OrderScript); r.Output.Text != testkit.OrderWant() || r.ExitCode != 0 {
			t.Fatalf("exit %d, output out of order:\n%.600q", r.ExitCode, r.Output.Text)
		}
	}
	// Streamed to one writer (corral run --session, progress).
	var both bytes.Buffer
	if r, err := s.Exec(context.Background(), ExecRequest{Command: testkit.OrderScript, Stdout: &both, Stderr: &both}); err != nil || r.ExitCode != 0 || both.String() != testkit.OrderWant() {
		t.Fatalf("streamed: %v, output out of order:\n%.600q", err, both.String())
	}
	// A background process's output.
	p, err := s.Start(StartRequest{Command: testkit.OrderScript})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	var got strings.Builder
	for off := int64(0); ; {
		c, err := s.Output(p.ID, off)
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString(c.Data)
		if c.Next == off {
			break
		}
		off = c.Next
	}
	if got.String() != testkit.OrderWant() {
		t.Errorf("background output out of order:\n%.600q", got.String())
	}
}

func TestVanishedCwdFallsBack(t *testing.T) {
	f := newFixture(t)
	s := f.open("s")
	f.exec(s, "mkdir -p a/b && cd a/b")
	if err := os.RemoveAll(filepath.Join(f.work, "a", "b")); err != nil {
		t.Fatal(err)
	}
	r := f.exec(s, "pwd")
	if strings.TrimSpace(r.Output.Text) != filepath.Join(f.work, "a") || len(r.Notes) == 0 {
		t.Errorf("vanished cwd: out=%q notes=%q", r.Output.Text, r.Notes)
	}
}

func TestStdinAndOutputBounds(t *testing.T) {
	f := newFixture(t)
	s := f.open("s")
	start := time.Now()
	if r := f.exec(s, "cat; echo after"); r.Output.Text != "after\n" || time.Since(start) > 10*time.Second {
		t.Errorf("stdin not /dev/null: %q", r.Output.Text)
	}
	r, err := s.Exec(context.Background(), ExecRequest{Command: "tr a-z A-Z", Stdin: []byte("hello\n")})
	if err != nil || r.Output.Text != "HELLO\n" {
		t.Errorf("stdin data: %v %q", err, r.Output.Text)
	}
	r = f.exec(s, "head -c 200000000 /dev/zero | tr '\\0' x")
	if r.Output.Bytes != 200000000 || r.Output.Omitted == 0 || len(r.Output.Text) > 17<<10 || !strings.Contains(r.Output.Text, "bytes of output omitted") {
		t.Errorf("huge output: bytes=%d omitted=%d len=%d", r.Output.Bytes, r.Output.Omitted, len(r.Output.Text))
	}
	if r := f.exec(s, "seq 1 50000000 | tail -3"); r.Output.Text != "49999998\n49999999\n50000000\n" {
		t.Errorf("seq | tail: %q", r.Output.Text)
	}
	r, err = s.Exec(context.Background(), ExecRequest{Command: "yes", Timeout: time.Second})
	if err != nil || !r.TimedOut || r.Output.Omitted == 0 {
		t.Errorf("yes with a timeout: %v %+v", err, r)
	}
	r = f.exec(s, `printf 'ok \xff\xfe bytes\n'; printf 'nul\0byte\n'`)
	if !r.Output.InvalidUTF8 || !r.Output.Binary || !strings.Contains(r.Output.Text, "ok \uFFFD\uFFFD bytes") || r.ExitCode != 0 {
		t.Errorf("non-UTF-8: %+v", r.Output)
	}
}

func TestTimeoutEndsWholeTree(t *testing.T) {
	f := newFixture(t)
	s := f.open("s")
	marker := fmt.Sprintf("corral-timeout-%d", time.Now().UnixNano())
	start := time.Now()
	r, err := s.Exec(context.Background(), ExecRequest{
		Command: fmt.Sprintf(`echo before; (trap '' TERM; exec -a %s sleep 1000) & setsid bash -c 'exec -a %s sleep 1000' & (trap '' TERM; while :; do sleep 1; done) & wait`, marker, marker),
		Timeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); !r.TimedOut || el > 5*time.Second {
		t.Errorf("timed_out=%v after %s", r.TimedOut, el)
	}
	if r.Output.Text != "before\n" {
		t.Errorf("output so far: %q", r.Output.Text)
	}
	if out, _ := exec.Command("pgrep", "-f", marker).Output(); len(out) > 0 {
		t.Errorf("left behind: %s", out)
	}
	// The session still works, state unchanged.
	if r := f.exec(s, "pwd"); strings.TrimSpace(r.Output.Text) != f.work {
		t.Errorf("after timeout: %q", r.Output.Text)
	}
}

func TestScratchDirectory(t *testing.T) {
	f := newFixture(t)
	a, b := f.open("a"), f.open("b")
	f.exec(a, `echo keep > "$TMPDIR/note"; echo gone > /tmp/fresh`)
	if r := f.exec(a, `cat "$TMPDIR/note"; cat /tmp/fresh 2>/dev/null || echo no-tmp`); r.Output.Text != "keep\nno-tmp\n" {
		t.Errorf("scratch: %q", r.Output.Text)
	}
	if r := f.exec(b, `ls "$TMPDIR"; ls `+a.ScratchDir()+` 2>/dev/null | wc -l`); strings.Contains(r.Output.Text, "note") {
		t.Errorf("session b sees a's scratch: %q", r.Output.Text)
	}
	// Read-only under restricted, where TMPDIR is the fresh /tmp.
	f.spec.Profile = sandbox.ProfileRestricted
	if r := f.exec(a, `(echo x > `+a.ScratchDir()+`/w) 2>/dev/null && echo WRITABLE; cat `+a.ScratchDir()+`/note; echo "$TMPDIR"; echo t > "$TMPDIR/t" && echo TMP-OK`); r.Output.Text != "keep\n/tmp\nTMP-OK\n" {
		t.Errorf("restricted scratch: %q", r.Output.Text)
	}
}

func TestBackground(t *testing.T) {
	f := newFixture(t)
	s := f.open("s")
	p, err := s.Start(StartRequest{Command: "echo done"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	var c *Chunk
	for {
		if c, err = s.Output(p.ID, 0); err != nil {
			t.Fatal(err)
		}
		if !c.Running || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.Running || c.Data != "done\n" || c.ExitCode != 0 {
		t.Errorf("echo done: %+v", c)
	}
	// Once it reported ended, it never says running again.
	if c2, _ := s.Output(p.ID, c.Next); c2.Running || c2.Data != "" {
		t.Errorf("second poll: %+v", c2)
	}
	p7, _ := s.Start(StartRequest{Command: "echo a; sleep 0.2; echo b; exit 7"})
	<-p7.done
	c, _ = s.Output(p7.ID, 0)
	if c.ExitCode != 7 || c.Data != "a\nb\n" {
		t.Errorf("exit 7: %+v", c)
	}
	c, _ = s.Output(p7.ID, 2)
	if c.Data != "b\n" || c.Offset != 2 || c.Next != 4 {
		t.Errorf("offset read: %+v", c)
	}
	// A server: reachable, and its port is free after Kill.
	if _, err := exec.LookPath("python3"); err == nil {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		f.spec.Profile = sandbox.ProfileNetwork
		srv, err := s.Start(StartRequest{Command: fmt.Sprintf("exec python3 -m http.server %d --bind 127.0.0.1", port)})
		if err != nil {
			t.Fatal(err)
		}
		up := false
		for i := 0; i < 100 && !up; i++ {
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				c.Close()
				up = true
			} else {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if !up {
			c, _ := s.Output(srv.ID, 0)
			t.Fatalf("server never came up: %+v", c)
		}
		if err := s.Kill(srv.ID); err != nil {
			t.Fatal(err)
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			t.Errorf("port still taken after Kill: %v", err)
		} else {
			l.Close()
		}
		if c, _ := s.Output(srv.ID, 0); c.Running {
			t.Errorf("killed server still running")
		}
	}
	// Close ends what is still running.
	marker := fmt.Sprintf("corral-bg-%d", time.Now().UnixNano())
	s.Start(StartRequest{Command: "exec -a " + marker + " sleep 1000"})
	s.Start(StartRequest{Command: "(exec -a " + marker + " sleep 1000) & wait"})
	time.Sleep(300 * time.Millisecond)
	s.Close()
	if out, _ := exec.Command("pgrep", "-f", marker).Output(); len(out) > 0 {
		t.Errorf("left behind after Close: %s", out)
	}
}

func TestBackgroundOutputBounded(t *testing.T) {
	f := newFixture(t)
	s := f.open("s")
	p, _ := s.Start(StartRequest{Command: "head -c 100000000 /dev/zero | tr '\\0' y; echo; echo END"})
	<-p.done
	c, err := s.Output(p.ID, 0)
	if err != nil || c.Running || len(c.Data) != bgChunk {
		t.Fatalf("first chunk: %v len=%d", err, len(c.Data))
	}
	// Past the file cap only the newest bytes are kept; reading from an
	// old offset past the file says how much was skipped.
	c, _ = s.Output(p.ID, bgFileCap+10)
	if c.Skipped == 0 {
		t.Errorf("no skip reported: %+v", c.Skipped)
	}
	last, _ := s.Output(p.ID, 100000000-10)
	if !strings.HasSuffix(last.Data, "END\n") {
		t.Errorf("tail: %q", last.Data)
	}
	if st, err := os.Stat(filepath.Join(s.Dir(), "bg", p.ID+".log")); err != nil || st.Size() > bgFileCap {
		t.Errorf("spill file: %v %v", err, st)
	}
}

// Two commands sent at once to one session run one after the other and
// never mix; the timeout of one does not touch the other.
func TestConcurrentCommandsSerialize(t *testing.T) {
	f := newFixture(t)
	s := f.open("s")
	var wg sync.WaitGroup
	var slow, fast *ExecResult
	wg.Add(2)
	go func() {
		defer wg.Done()
		slow, _ = s.Exec(context.Background(), ExecRequest{Command: "for i in 1 2 3; do echo slow$i; sleep 0.2; done; sleep 10", Timeout: 1500 * time.Millisecond})
	}()
	time.Sleep(50 * time.Millisecond)
	go func() {
		defer wg.Done()
		fast, _ = s.Exec(context.Background(), ExecRequest{Command: "echo fast1; echo fast2"})
	}()
	wg.Wait()
	if slow == nil || fast == nil || !slow.TimedOut || fast.TimedOut || fast.Output.Text != "fast1\nfast2\n" || strings.Contains(slow.Output.Text, "fast") {
		t.Errorf("slow=%+v fast=%+v", slow, fast)
	}
}

// 16 sessions x 40 commands in parallel (CI runs it with the CPUs kept
// busy): every command runs and is reported as run (no error: a verdict on
// whether a command ran must not depend on timing), each session sees only
// its own cwd, exported variables and scratch directory, and no process of
// the test's sandboxes (bwrap, its pid 1, the shell) is left afterwards.
// As root with a Docker engine, containers start and stop all the while
// (their mounts change the host's mount table under bwrap's starts).
func TestManySessionsInParallel(t *testing.T) {
	f := newFixture(t)
	churn := dockertest.ChurnAsRoot(t)
	const sessions, commands = 16, 40
	// In every command's text, so in the argv of its bwrap and shell.
	marker := fmt.Sprintf("corral-many-%d", time.Now().UnixNano())
	var wg sync.WaitGroup
	errs := make(chan string, sessions*commands)
	for i := 0; i < sessions; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, err := f.m.Open(fmt.Sprintf("chat:%d", i))
			if err != nil {
				errs <- err.Error()
				return
			}
			dir := filepath.Join(f.work, fmt.Sprintf("d%d", i))
			if _, err := s.Exec(context.Background(), ExecRequest{Command: fmt.Sprintf(": %s; mkdir -p %s && cd %s && export ME=%d N=0 && echo %d > $TMPDIR/me", marker, dir, dir, i, i)}); err != nil {
				errs <- fmt.Sprintf("session %d command 0: %v", i, err)
				return
			}
			for j := 1; j < commands; j++ {
				r, err := s.Exec(context.Background(), ExecRequest{Command: fmt.Sprintf(`: %s; echo "$ME $N $(basename $PWD) $(cat $TMPDIR/me)"; export N=$((N+1))`, marker)})
				if err != nil {
					errs <- fmt.Sprintf("session %d command %d: %v", i, j, err)
					return
				}
				want := fmt.Sprintf("%d %d d%d %d\n", i, j-1, i, i)
				if r.Output.Text != want || r.ExitCode != 0 || r.Cwd != dir {
					errs <- fmt.Sprintf("session %d command %d: %q exit %d cwd %q, want %q in %s (notes %q)", i, j, r.Output.Text, r.ExitCode, r.Cwd, want, dir, r.Notes)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	if churn != nil {
		t.Logf("%d containers started and removed during the load", churn.Stop())
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// Each command's bwrap is reaped before Exec returns; its pid 1 and
	// the shell get SIGKILL as it exits (--die-with-parent), so allow the
	// kernel a moment to finish them, but no more.
	var left []string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if left = processesWith(marker); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("processes of the test's sandboxes left running:\n%s", strings.Join(left, "\n"))
	}
}

// processesWith lists the live processes (not zombies) other than this one
// whose command line contains s, as "PID COMMAND-LINE".
func processesWith(s string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), s) {
			continue // a zombie's command line reads empty
		}
		out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return out
}

// The process holding a session dies with SIGKILL: its background
// processes die with it.
func TestBackgroundDiesWithHolder(t *testing.T) {
	if os.Getenv("CORRAL_TEST_HOLDER") != "" {
		return
	}
	f := newFixture(t)
	marker := fmt.Sprintf("corral-holder-%d", time.Now().UnixNano())
	cmd := exec.Command(os.Args[0], "-test.run=^TestHolderProcess$")
	cmd.Env = append(os.Environ(), "CORRAL_TEST_HOLDER="+marker, "CORRAL_TEST_HOLDER_STATE="+f.state, "CORRAL_TEST_HOLDER_WORK="+f.work)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "ready") {
		t.Fatalf("holder: %q", buf[:n])
	}
	if o, _ := exec.Command("pgrep", "-f", marker).Output(); len(o) == 0 {
		t.Fatal("background process did not start")
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if o, _ := exec.Command("pgrep", "-f", marker).Output(); len(o) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	o, _ := exec.Command("pgrep", "-af", marker).Output()
	t.Errorf("background processes outlived their holder: %s", o)
}

// TestHolderProcess is the helper process of TestBackgroundDiesWithHolder.
func TestHolderProcess(t *testing.T) {
	marker := os.Getenv("CORRAL_TEST_HOLDER")
	if marker == "" {
		return // not started as TestBackgroundDiesWithHolder's helper process
	}
	state, work := os.Getenv("CORRAL_TEST_HOLDER_STATE"), os.Getenv("CORRAL_TEST_HOLDER_WORK")
	be := bwrap.New(bwrap.Options{StateDir: state})
	m := NewManager(Options{StateDir: state, Resolve: func(string) (*Spec, error) {
		return &Spec{Backend: be, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: work}, Env: os.Environ()}, nil
	}})
	s, _ := m.Open("holder")
	s.Start(StartRequest{Command: "exec -a " + marker + " sleep 1000"})
	s.Start(StartRequest{Command: "setsid bash -c 'exec -a " + marker + " sleep 1000' & wait"})
	time.Sleep(500 * time.Millisecond)
	fmt.Println("ready")
	time.Sleep(time.Minute)
}

// A session's exported variables are the sandbox's business only: they
// never reach a host process (LD_PRELOAD for bwrap) and never widen what the
// sandbox shows (PATH under home, CA bundle variables).
func TestSessionEnvIsUntrusted(t *testing.T) {
	f := newFixture(t)
	home := filepath.Join(f.base, "home")
	os.MkdirAll(filepath.Join(home, ".secretdir"), 0o700)
	os.WriteFile(filepath.Join(home, ".secretdir", "s"), []byte("HIDDEN-DOT-ENTRY"), 0o600)
	victim := f.open("victim")
	f.exec(victim, `export V=victim-secret; echo victim-scratch > "$TMPDIR/s"`)
	s := f.open("evil")
	f.exec(s, `export PATH=$HOME/.secretdir:$PATH SSL_CERT_DIR=$HOME/.local/state SSL_CERT_FILE=$HOME/.secretdir/s`)
	r := f.exec(s, `cat ~/.secretdir/s; grep -rh V= ~/.local/state 2>/dev/null; cat ~/.local/state/corral/sessions/victim*/scratch/s 2>/dev/null; echo done`)
	if strings.Contains(r.Output.Text, "HIDDEN-DOT-ENTRY") || strings.Contains(r.Output.Text, "victim-") {
		t.Errorf("session variables widened the sandbox: %q", r.Output.Text)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Logf("gcc not installed: LD_PRELOAD case not run")
		return
	}
	marker := filepath.Join(f.base, "host-marker")
	src := filepath.Join(f.work, "evil.c")
	os.WriteFile(src, []byte(`#include <stdio.h>
#include <fcntl.h>
__attribute__((constructor)) static void p(void){ int fd = open("`+marker+`", O_CREAT|O_WRONLY, 0644); if (fd >= 0) write(fd, "x", 1); }
`), 0o644)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", filepath.Join(f.work, "evil.so"), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v %s", err, out)
	}
	f.exec(s, "export LD_PRELOAD="+filepath.Join(f.work, "evil.so"))
	f.exec(s, "true")
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("LD_PRELOAD exported in a session ran code on the host")
	}
}

// What a command writes on the state descriptor is data: a forged record,
// exported functions, huge variables and bad names cannot wedge the session.
func TestHostileState(t *testing.T) {
	f := newFixture(t)
	s := f.open("s")
	r := f.exec(s, `export BIG=$(head -c 200000 /dev/zero | tr '\0' x) SMALL=1`)
	if len(r.Notes) == 0 {
		t.Errorf("no note about the dropped variable: %+v", r)
	}
	if r := f.exec(s, `echo "${#BIG} $SMALL"`); r.Output.Text != "0 1\n" || r.ExitCode != 0 {
		t.Errorf("after a huge variable: %+v", r)
	}
	f.exec(s, `printf '\000`+stateMagic+`\0000\000\000/x\000declare -x BASH_FUNC_trap%%%%="() { :; }"\n' >&$__corral_fd; export NEW=1`)
	if r := f.exec(s, `echo "$NEW"; pwd; type -t trap`); r.Output.Text != "1\n"+f.work+"\nbuiltin\n" {
		t.Errorf("after a forged state record: %q notes=%q", r.Output.Text, r.Notes)
	}
	f.exec(s, `exec {__corral_fd}>&-; export GONE=1`)
	if r := f.exec(s, `echo "${GONE-unset}"; export AFTER=1`); r.ExitCode != 0 {
		t.Errorf("after closing the state descriptor: %+v", r)
	}
	if r := f.exec(s, `echo "$AFTER"`); r.Output.Text != "1\n" {
		t.Errorf("session wedged: %q", r.Output.Text)
	}
}

// A variable that acts on a shell before its first line (BASH_ENV,
// LD_PRELOAD, SHELLOPTS) stopped every later shell of the session before
// it could save a change: the session was wedged for good. Each is
// exported (or forged, for the read-only SHELLOPTS) and the next commands
// must run, see the variable as exported, and be able to drop it.
func TestStartupVariablesDoNotWedge(t *testing.T) {
	f := newFixture(t)
	// run returns the command's output and notes; an error (the wedge:
	// "the sandbox could not be set up") fails the test but not the others.
	run := func(s *Session, cmd string) (string, []string) {
		t.Helper()
		r, err := s.Exec(context.Background(), ExecRequest{Command: cmd})
		if err != nil {
			t.Errorf("Exec(%q): %v", cmd, err)
			return "", nil
		}
		return r.Output.Text, r.Notes
	}
	s := f.open("bashenv")
	exit := filepath.Join(f.work, "exit.sh")
	os.WriteFile(exit, []byte("builtin exit 0\n"), 0o644)
	run(s, "export BASH_ENV="+exit)
	if out, notes := run(s, `echo "ran $BASH_ENV"`); out != "ran "+exit+"\n" {
		t.Errorf("after export BASH_ENV: %q notes=%q", out, notes)
	}
	if out, _ := run(s, `bash -c 'echo child'; echo "rc=$?"`); out != "rc=0\n" {
		t.Errorf("a child bash did not read BASH_ENV: %q", out)
	}
	run(s, "unset BASH_ENV")
	if out, _ := run(s, `bash -c 'echo child'`); out != "child\n" {
		t.Errorf("after unset BASH_ENV: %q", out)
	}

	s = f.open("shellopts")
	run(s, `builtin trap - EXIT; printf '\000`+stateMagic+`\0000\000\000/tmp\000declare -x SHELLOPTS="noexec"\ndeclare -x KEPT="1"\n' >&$__corral_fd`)
	if out, notes := run(s, `echo "ran $KEPT"; [[ -o noexec ]] || echo no-noexec`); out != "ran 1\nno-noexec\n" {
		t.Errorf("after a record exporting SHELLOPTS=noexec: %q notes=%q", out, notes)
	}

	if _, err := exec.LookPath("gcc"); err != nil {
		t.Logf("gcc not installed: LD_PRELOAD case not run")
		return
	}
	src := filepath.Join(f.work, "exit.c")
	so := filepath.Join(f.work, "exit.so")
	os.WriteFile(src, []byte("#include <unistd.h>\n__attribute__((constructor)) static void p(void){ _exit(0); }\n"), 0o644)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v %s", err, out)
	}
	s = f.open("preload")
	run(s, "export LD_PRELOAD="+so)
	if out, notes := run(s, `echo "ran $LD_PRELOAD"`); out != "ran "+so+"\n" {
		t.Errorf("after export LD_PRELOAD: %q notes=%q", out, notes)
	}
	run(s, "unset LD_PRELOAD")
	if out, _ := run(s, `/bin/echo external`); out != "external\n" {
		t.Errorf("after unset LD_PRELOAD: %q", out)
	}
}

// The exported variables are saved in a form the host parses byte by
// byte whatever the session's locale: under a GBK locale (brought with
// LOCPATH, as a command can), bash quoted by character, and a value
// ending in 0x95 0x5c (a GBK character whose second byte is a backslash)
// made the record unparsable, losing the command's state.
func TestStateInMultibyteLocale(t *testing.T) {
	f := newFixture(t)
	loc := filepath.Join(f.work, "loc")
	os.MkdirAll(loc, 0o755)
	out, err := exec.Command("localedef", "-i", "zh_CN", "-f", "GBK", filepath.Join(loc, "zh_CN.GBK")).CombinedOutput()
	if _, serr := os.Stat(filepath.Join(loc, "zh_CN.GBK", "LC_CTYPE")); serr != nil {
		t.Fatalf("localedef (package locales, for its GBK charmap) made no locale: %v %s", err, out)
	}
	s := f.open("s")
	f.exec(s, "export LOCPATH="+loc+" LC_ALL=zh_CN.GBK")
	f.exec(s, `export V=$(printf '\x95\x5c') B=2`)
	// V itself comes back with its bytes that are not UTF-8 replaced
	// (state.json is JSON); B shows whether the record parsed.
	if r := f.exec(s, `echo "B=$B LC_ALL=$LC_ALL"`); r.Output.Text != "B=2 LC_ALL=zh_CN.GBK\n" {
		t.Errorf("after a GBK value: %q notes=%q", r.Output.Text, r.Notes)
	}
	// A read-only LC_ALL (the temporary assignment would fail) keeps the
	// variables all the same.
	f.exec(s, `unset V; readonly LC_ALL; export C=3`)
	if r := f.exec(s, `echo "C=$C B=$B"; [[ -n $PATH ]] && echo path`); r.Output.Text != "C=3 B=2\npath\n" {
		t.Errorf("after readonly LC_ALL: %q notes=%q", r.Output.Text, r.Notes)
	}
}

// A session moved to another working directory starts there.
func TestWorkdirChangeResetsCwd(t *testing.T) {
	f := newFixture(t)
	s := f.open("s")
	f.exec(s, "mkdir -p a && cd a && export K=1")
	other := filepath.Join(f.base, "home", "other")
	os.MkdirAll(other, 0o755)
	f.spec.Workdir = other
	r := f.exec(s, `pwd; echo "$K"`)
	if r.Output.Text != other+"\n1\n" || len(r.Notes) == 0 {
		t.Errorf("after the workdir moved: %q notes=%q", r.Output.Text, r.Notes)
	}
}

// TestAllowlistSession: under the allowlist profile the session's state
// still comes back on descriptor 3 through the proxy forwarder, background
// processes work, and proxy variables saved with the session do not follow
// it to another profile.
func TestAllowlistSession(t *testing.T) {
	f := newFixture(t)
	f.spec.Profile = sandbox.ProfileAllowlist
	f.spec.NetworkAllow = []string{"example.com"}
	f.spec.Env = append(f.spec.Env, "GORACE=atexit_sleep_ms=0")
	s := f.open("al")
	f.exec(s, "mkdir -p sub && cd sub && export A=1")
	if r := f.exec(s, `echo "$A $PWD $HTTPS_PROXY"`); r.Output.Text != "1 "+filepath.Join(f.work, "sub")+" http://127.0.0.1:3128\n" || r.Cwd != filepath.Join(f.work, "sub") {
		t.Errorf("state under allowlist: %q cwd=%q notes=%q", r.Output.Text, r.Cwd, r.Notes)
	}
	p, err := s.Start(StartRequest{Command: "echo bg-$A"})
	if err != nil {
		t.Fatal(err)
	}
	<-p.done
	if c, _ := s.Output(p.ID, 0); c.Data != "bg-1\n" || c.ExitCode != 0 {
		t.Errorf("background under allowlist: %+v", c)
	}
	f.spec.Profile = sandbox.ProfileWorkspace
	if r := f.exec(s, `echo "$A ${HTTPS_PROXY-none} ${http_proxy-none}"`); r.Output.Text != "1 none none\n" {
		t.Errorf("under workspace after allowlist: %q", r.Output.Text)
	}
}

// TestRemoveWithToolCache: a session whose own tool cache holds Go's
// read-only module cache is removed whole, and CacheDirs lists that cache
// until then.
func TestRemoveWithToolCache(t *testing.T) {
	state := t.TempDir()
	m := NewManager(Options{StateDir: state, Resolve: func(string) (*Spec, error) { return &Spec{SessionCache: true}, nil }})
	defer m.Close()
	s, err := m.Open("cached")
	if err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(s.CacheDir(), "go-mod", "example.com", "dep@v1.0.0")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "dep.go"), []byte("package dep\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	for d := mod; d != s.CacheDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.CacheDirs(); len(got) != 1 || got[0] != s.CacheDir() {
		t.Errorf("CacheDirs = %q, want [%s]", got, s.CacheDir())
	}
	if err := m.Remove("cached"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
		t.Errorf("the session's directory is still there: %v", err)
	}
}

// Review mode: a session's commands and background processes write its
// layer, carry cwd and variables as usual, and leave the host's working
// directory as it was; the layer survives the session's manager.
func TestReviewSession(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(filepath.Join(f.work, "f.txt"), []byte("orig\n"), 0o644)
	f.spec.Review = true
	s := f.open("r")
	r := f.exec(s, "echo changed > f.txt && mkdir -p sub && cd sub && export X=1")
	if r.ExitCode != 0 {
		t.Fatalf("first command: %+v", r)
	}
	r = f.exec(s, `pwd; echo "$X"; cat ../f.txt`)
	if want := filepath.Join(f.work, "sub") + "\n1\nchanged\n"; r.Output.Text != want {
		t.Errorf("second command: %q, want %q", r.Output.Text, want)
	}
	p, err := s.Start(StartRequest{Command: "echo bg > ../bg.txt"})
	if err != nil {
		t.Fatal(err)
	}
	<-p.done
	if r = f.exec(s, "cat ../bg.txt"); r.Output.Text != "bg\n" {
		t.Errorf("background write not seen: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(f.work, "f.txt")); string(b) != "orig\n" {
		t.Errorf("host f.txt = %q", b)
	}
	for _, p := range []string{"sub", "bg.txt"} {
		if _, err := os.Lstat(filepath.Join(f.work, p)); err == nil {
			t.Errorf("host %s made", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(s.LayerDir(), "upper", "f.txt")); err != nil || string(b) != "changed\n" {
		t.Errorf("layer f.txt = %q, %v", b, err)
	}
	// A new manager (corral restarted) finds the layer as it was.
	f.m.Close()
	f.be.Close()
	f.m = f.manager()
	s = f.open("r")
	if r = f.exec(s, "cat ../f.txt ../bg.txt"); r.Output.Text != "changed\nbg\n" {
		t.Errorf("after a restart: %+v", r)
	}
}

// TestListBackgroundOnly: a session that has run only a background
// process is listed with what is known of it: its backend, profile and
// working directory (where its next command starts), when it was last
// used, and its running background process.
func TestListBackgroundOnly(t *testing.T) {
	f := newFixture(t)
	s := f.open("bg-only")
	p, err := s.Start(StartRequest{Command: "sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill(p.ID)
	deadline := time.Now().Add(10 * time.Second)
	for len(Background(s.Dir())) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	infos, err := f.manager().List()
	if err != nil || len(infos) != 1 {
		t.Fatalf("List: %v %+v", err, infos)
	}
	in := infos[0]
	if in.Name != "bg-only" || in.Backend != "bwrap" || in.Profile != string(sandbox.ProfileWorkspace) || in.Workdir != f.work || in.Cwd != f.work || in.LastUsed.IsZero() || in.Background != 1 {
		t.Errorf("a session with a background process only is listed as %+v", in)
	}
}

// TestMissingWorkdirRunsNothing: a command asked to start in a directory
// that does not exist (a mistyped workdir) runs nowhere and says so
// (sandbox.ErrBadRequest, "nothing was run"); the session's cwd stays. The
// backends start a gone directory's nearest parent, and a new user's
// `rm -f *.txt` with workdir "buidl" deleted the files one level up.
// An existing workdir (absolute, relative, ~/) runs there, and a
// background command with a missing one ends at once, having run
// nothing.
func TestMissingWorkdirRunsNothing(t *testing.T) {
	f := newFixture(t)
	s := f.open("wd")
	f.exec(s, "mkdir -p build && echo keep > important.txt")
	_, err := s.Exec(context.Background(), ExecRequest{Command: "rm -f *.txt; touch ran", Workdir: "buidl"})
	if !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), "nothing was run") || !strings.Contains(err.Error(), "buidl") {
		t.Fatalf("Exec with a missing workdir: %v, want a bad request that says nothing was run", err)
	}
	if _, err := os.Stat(filepath.Join(f.work, "important.txt")); err != nil {
		t.Fatalf("the command ran one level up: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.work, "ran")); err == nil {
		t.Fatal("the command ran")
	}
	if r := f.exec(s, "pwd"); r.Cwd != f.work {
		t.Errorf("the session's cwd moved to %q", r.Cwd)
	}
	if _, err := s.Exec(context.Background(), ExecRequest{Command: "true", Workdir: "/nonexistent/x"}); !errors.Is(err, sandbox.ErrBadRequest) {
		t.Errorf("an absolute missing workdir: %v", err)
	}
	for _, wd := range []string{"build", filepath.Join(f.work, "build")} {
		r, err := s.Exec(context.Background(), ExecRequest{Command: "pwd", Workdir: wd})
		if err != nil || strings.TrimSpace(r.Output.Text) != filepath.Join(f.work, "build") {
			t.Errorf("workdir %q: %v, %+v", wd, err, r)
		}
	}
	home := filepath.Join(f.base, "home")
	if r, err := s.Exec(context.Background(), ExecRequest{Command: "pwd", Workdir: "~/work"}); err != nil || strings.TrimSpace(r.Output.Text) != filepath.Join(home, "work") {
		t.Errorf("workdir ~/work: %v, %+v", err, r)
	}
	p, err := s.Start(StartRequest{Command: "touch ran-bg", Workdir: "buidl"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatal("the background command with a missing workdir did not end")
	}
	if _, err := os.Stat(filepath.Join(f.work, "ran-bg")); err == nil {
		t.Error("the background command ran one level up")
	}
}

// TestGivenSpec: a command given the Spec its caller resolved for it
// (ExecRequest.Spec, StartRequest.Spec) runs under that one and does not
// resolve the session's again; one without a backend is refused.
func TestGivenSpec(t *testing.T) {
	f := newFixture(t)
	var resolved atomic.Int64
	m := NewManager(Options{StateDir: f.state, Resolve: func(string) (*Spec, error) {
		resolved.Add(1)
		sp := f.spec
		return &sp, nil
	}})
	defer m.Close()
	s, err := m.Open("given")
	if err != nil {
		t.Fatal(err)
	}
	given := f.spec
	given.Env = append(slices.Clone(f.spec.Env), "GIVEN_MARK=from-the-caller")
	r, err := s.Exec(context.Background(), ExecRequest{Command: "echo $GIVEN_MARK", Spec: &given})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(r.Output.Text); got != "from-the-caller" {
		t.Errorf("Exec with a given Spec printed %q; want the given Spec's environment", got)
	}
	p, err := s.Start(StartRequest{Command: "true", Spec: &given})
	if err != nil {
		t.Fatal(err)
	}
	<-p.done
	if n := resolved.Load(); n != 0 {
		t.Errorf("the session resolved its Spec %d times for commands given one", n)
	}
	if _, err := s.Exec(context.Background(), ExecRequest{Command: "true", Spec: &Spec{}}); !errors.Is(err, sandbox.ErrBadRequest) {
		t.Errorf("Exec with a given Spec without a backend: %v; want ErrBadRequest", err)
	}
	f.exec(s, "true") // no Spec given: the session resolves it
	if n := resolved.Load(); n != 1 {
		t.Errorf("a command given no Spec resolved it %d times; want once", n)
	}
}

// TestStateDeclareDisabled: a command that disables the declare builtin
// (enable -n declare) leaves the session's variables as they were, with a
// note; they are not taken to be none.
func TestStateDeclareDisabled(t *testing.T) {
	f := newFixture(t)
	s := f.open("no-declare")
	f.exec(s, "export KEEP=1")
	r := f.exec(s, "enable -n declare; export LOST=1")
	if !strings.Contains(strings.Join(r.Notes, "\n"), "without saving its state") {
		t.Errorf("no note that the state was not saved: %q", r.Notes)
	}
	if r := f.exec(s, `echo "$KEEP ${LOST-unset} ${PATH:+path}"`); r.Output.Text != "1 unset path\n" {
		t.Errorf("after declare was disabled: %q", r.Output.Text)
	}
}
