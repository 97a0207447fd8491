package kubernetes

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// envBgReplica, set in the environment of this test binary, makes it a
// corral replica that starts one background process (bgReplicaMain,
// from TestMain) instead of running tests: TestHomeBackgroundReplicaKilled
// kills it with SIGKILL, as a replica is lost.
const envBgReplica = "CORRAL_TEST_BG_REPLICA"

// bgReplica is what the replica process is told (JSON in envBgReplica).
type bgReplica struct {
	Settings Settings
	Helper   string // the static helper for the pods
	StateDir string
	Session  string
	Workdir  string
	Command  string
}

// bgReplicaMain is the replica process: it starts b.Command in the
// background in session b.Session under scope cluster, prints its id,
// and then runs until it is killed (or its stdin ends).
func bgReplicaMain(spec string) int {
	var b bgReplica
	if err := json.Unmarshal([]byte(spec), &b); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	e := NewEngine(Options{Helper: b.Helper, KillGrace: time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	be := e.Backend(b.Settings)
	m := session.NewManager(session.Options{StateDir: b.StateDir, Resolve: func(string) (*session.Spec, error) {
		return &session.Spec{Backend: be, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: b.Workdir}, Timeout: 15 * time.Minute,
			OutputLimit: 1 << 20, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, nil
	}})
	s, err := m.Open(b.Session)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, err := s.Start(session.StartRequest{Command: b.Command})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 1
	}
	fmt.Println(p.ID)
	var buf [1]byte
	_, _ = os.Stdin.Read(buf[:])
	return 0
}

// TestHomeBackgroundReplicaKilled: under scope cluster a background
// process outlives the corral that started it. Corral A (a process of
// its own) starts one; corral B lists it and reads its output; A is
// killed with SIGKILL; the process runs on, and B reads what it wrote
// after A's death (a token B made after the kill, so the order is the
// content's), kills it, sees how it ended, and nothing of it is left in
// the pod.
func TestHomeBackgroundReplicaKilled(t *testing.T) {
	k := newKube(t)
	sess := "bgkilled-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { k.removeHome(t, sess) })
	st := k.st
	st.Scope = ScopeCluster
	// The command waits for the file "go" in its session's directory,
	// which B writes only after A is dead, and prints what it holds.
	cmd := `echo "first $$"; until test -e go; do sleep 0.1; done; echo "after $(cat go)"; exec sleep 600`
	spec, _ := json.Marshal(bgReplica{Settings: st, Helper: dockertest.StaticCorral(t), StateDir: filepath.Join(dockertest.TestDir(t), "state-a"),
		Session: sess, Workdir: k.ws, Command: cmd})
	a := exec.Command(os.Args[0], "-test.run=^$")
	a.Env = append(os.Environ(), envBgReplica+"="+string(spec))
	var aerr strings.Builder
	a.Stderr = &aerr
	stdin, err := a.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := a.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = a.Process.Kill()
			_ = a.Wait()
		}
		stdin.Close()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	id := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(id, "bg-") {
		_ = a.Process.Kill()
		_ = a.Wait()
		waited = true
		t.Fatalf("replica A: %q, %v; stderr:\n%s", line, err, aerr.String())
	}

	b := k.newReplica(t, "b")
	sb, err := b.m.Open(sess)
	if err != nil {
		t.Fatal(err)
	}
	var listed *session.ProcessInfo
	for _, p := range sb.List() {
		if p.ID == id {
			listed = &p
		}
	}
	if listed == nil || !listed.Running || listed.Command != cmd {
		t.Fatalf("B lists %+v, want %s running with its command", sb.List(), id)
	}
	// B reads A's process's first line (written while A lived).
	out := readUntil(t, sb, id, "first ")
	pid := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "first "))

	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err = a.Wait()
	waited = true
	if ws, ok := a.ProcessState.Sys().(syscall.WaitStatus); err == nil || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("replica A: %v (%v), stderr %s", err, a.ProcessState, aerr.String())
	}
	pod := k.sessionPod(t, sess)
	// A's agent ends with its stream (its foreground commands with it),
	// leaving B's alone; the background process must not end with it.
	k.waitInPod(t, pod, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <$f 2>/dev/null; echo; done | grep -c '^/.corral/corral __corral-agent '`, "1")

	token := fmt.Sprintf("token-%d", time.Now().UnixNano())
	b.exec(t, sess, "echo "+token+" > go")
	out = readUntil(t, sb, id, "after "+token+"\n")
	if !strings.HasPrefix(out, "first "+pid+"\n") {
		t.Errorf("output %q, want the first line before", out)
	}
	if c, err := sb.Output(id, 0); err != nil || !c.Running {
		t.Fatalf("Output after A's death: %+v, %v; want it running", c, err)
	}

	if err := sb.Kill(id); err != nil {
		t.Fatalf("B's Kill: %v", err)
	}
	c, err := sb.Output(id, 0)
	if err != nil || c.Running || c.ExitCode != 128+int(syscall.SIGKILL) || c.Data != out {
		t.Fatalf("Output after Kill: %+v, %v; want it ended by SIGKILL (137) with its output whole", c, err)
	}
	var ended *session.ProcessInfo
	for _, p := range sb.List() {
		if p.ID == id {
			ended = &p
		}
	}
	if ended == nil || ended.Running || ended.ExitCode != 137 {
		t.Errorf("B lists %+v after the kill, want %s ended with 137", ended, id)
	}
	// Nothing of it runs: neither its keeper nor its command.
	k.waitNoProcess(t, pod, "/.corral/corral\x00__corral-bgkeep\x00")
	if got := strings.TrimSpace(k.inPod(t, pod, "test -e /proc/"+pid+" && echo alive; true")); got != "" {
		t.Errorf("the background shell %s still runs", pid)
	}
	k.waitNoProcess(t, pod, "sleep\x00600\x00")
	// A second Kill of an ended process says how it ended.
	if err := sb.Kill(id); err != nil {
		t.Errorf("Kill of an ended process: %v", err)
	}
	// An unknown id is the caller's error.
	if _, err := sb.Output("bg-nosuch", 0); err == nil {
		t.Errorf("Output of an unknown id: no error")
	}
}

// readUntil reads process id's output from the start until it holds
// want (a condition loop: 3 min deadline), and returns it.
func readUntil(t *testing.T, s *session.Session, id, want string) string {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var out strings.Builder
	var off int64
	for {
		c, err := s.Output(id, off)
		if err != nil {
			t.Fatalf("Output(%s, %d): %v", id, off, err)
		}
		out.WriteString(c.Data)
		off = c.Next
		if strings.Contains(out.String(), want) {
			return out.String()
		}
		if !c.Running {
			t.Fatalf("%s ended (%+v) with output %q, without %q", id, c, out.String(), want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's output %q, still without %q", id, out.String(), want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHomeBackgroundKeepsPod: a home pod idle past idle_timeout is kept
// while a background process of its session runs there (its watch says
// so: kubernetes.home.background_running), and removed once the process
// is killed.
func TestHomeBackgroundKeepsPod(t *testing.T) {
	k := newKube(t)
	sess := "bgidle-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { k.removeHome(t, sess) })
	r := k.newReplicaWith(t, "one", func(st *Settings) { st.IdleTimeout = "2s" })
	s, err := r.m.Open(sess)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Start(session.StartRequest{Command: "echo up; exec sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	pod := k.sessionPod(t, sess)
	readUntil(t, s, p.ID, "up\n")
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(r.log.String(), "kubernetes.home.background_running") {
		if time.Now().After(deadline) {
			t.Fatalf("the home pod's watch never found its background process running")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pods, _ := k.objects(sess); len(pods) != 1 || pods[0] != pod {
		t.Fatalf("pods %v, want %s kept", pods, pod)
	}
	if c, err := s.Output(p.ID, 0); err != nil || !c.Running {
		t.Fatalf("Output: %+v, %v; want it running", c, err)
	}
	if err := s.Kill(p.ID); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(3 * time.Minute)
	for {
		pods, _ := k.objects(sess)
		if len(pods) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle home pod %s stayed after its background process ended", pod)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHomeBackgroundStartState: a background command starts in the
// session's cwd and with its variables as the last command left them,
// although another corral ran that command (this corral's own copy is
// older).
func TestHomeBackgroundStartState(t *testing.T) {
	k := newKube(t)
	sess := "bgstate-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { k.removeHome(t, sess) })
	r1, r2 := k.newReplica(t, "one"), k.newReplica(t, "two")
	r1.exec(t, sess, "true")
	r2.exec(t, sess, "mkdir -p sub && cd sub && export W=seven")
	s, err := r1.m.Open(sess)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Start(session.StartRequest{Command: `echo "$PWD|$W|end"`})
	if err != nil {
		t.Fatal(err)
	}
	if out, want := readUntil(t, s, p.ID, "|end\n"), k.ws+"/sub|seven|end\n"; out != want {
		t.Errorf("the background command saw %q, want %q", out, want)
	}
}

// BenchmarkHomeBackground: what a background process kept in the home
// pod costs a corral: its start (through the agent, a keeper started
// detached, its record written), a read of its output, a list, and a
// kill (the keeper ends the tree and writes the status).
func BenchmarkHomeBackground(b *testing.B) {
	k := newKube(b)
	sess := "bgbench-" + strconv.Itoa(os.Getpid())
	st := k.st
	st.Scope = ScopeCluster
	be := k.e.Backend(st)
	m := session.NewManager(session.Options{StateDir: filepath.Join(dockertest.TestDir(b), "state"), Resolve: func(string) (*session.Spec, error) {
		return &session.Spec{Backend: be, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: k.ws}, Timeout: time.Minute,
			OutputLimit: 1 << 20, Env: []string{"PATH=/usr/bin:/bin"}}, nil
	}})
	b.Cleanup(func() {
		m.Close()
		cl, err := k.e.clusterFor(k.st.Kubeconfig, "")
		if err != nil {
			return
		}
		pods, _ := k.objects(sess)
		for _, p := range pods {
			_ = deleteObjects(context.Background(), cl.cs, k.st.Namespace, p, true, "")
		}
	})
	s, err := m.Open(sess)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Exec(context.Background(), session.ExecRequest{Command: "true"}); err != nil {
		b.Fatal(err)
	}
	var ids []string
	b.Run("start", func(b *testing.B) {
		for b.Loop() {
			p, err := s.Start(session.StartRequest{Command: "echo up; exec sleep 600"})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if len(ids) >= 8 {
				// At most inside.MaxBgProcs run at once.
				if err := s.Kill(ids[0]); err != nil {
					b.Fatal(err)
				}
				ids = ids[1:]
			}
			b.StartTimer()
			ids = append(ids, p.ID)
		}
	})
	b.Run("output", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Output(ids[len(ids)-1], 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("list", func(b *testing.B) {
		for b.Loop() {
			s.List()
		}
	})
	b.Run("kill", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			p, err := s.Start(session.StartRequest{Command: "exec sleep 600"})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := s.Kill(p.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
}
