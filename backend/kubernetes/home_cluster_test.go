package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"io"
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
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// replica is one corral process's view of the cluster in a test: an
// engine of its own and a session manager on a state directory of its
// own, as two replicas of corral serve have.
type replica struct {
	e   *Engine
	m   *session.Manager
	log *testkit.LogBuf
}

// newReplica makes a replica over k's settings with scope cluster.
func (k *kube) newReplica(t *testing.T, name string) *replica {
	t.Helper()
	return k.newReplicaWith(t, name, nil)
}

// newReplicaWith is newReplica with the settings changed by mut.
func (k *kube) newReplicaWith(t *testing.T, name string, mut func(*Settings)) *replica {
	t.Helper()
	lb := &testkit.LogBuf{}
	e := NewEngine(Options{Helper: dockertest.StaticCorral(t), KillGrace: time.Second,
		Logger: slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	st := k.st
	st.Scope = ScopeCluster
	if mut != nil {
		mut(&st)
	}
	b := e.Backend(st)
	m := session.NewManager(session.Options{StateDir: filepath.Join(dockertest.TestDir(t), "state-"+name), Resolve: func(string) (*session.Spec, error) {
		return &session.Spec{Backend: b, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: k.ws}, Timeout: 15 * time.Minute,
			OutputLimit: 1 << 20, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, nil
	}})
	t.Cleanup(func() {
		m.Close()
		e.Close()
		if t.Failed() {
			t.Logf("replica %s log:\n%s", name, lb.String())
		}
	})
	return &replica{e: e, m: m, log: lb}
}

// exec runs command in r's session sess, failing the test on an error.
func (r *replica) exec(t *testing.T, sess, command string) *session.ExecResult {
	t.Helper()
	s, err := r.m.Open(sess)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Exec(context.Background(), session.ExecRequest{Command: command})
	if err != nil {
		t.Fatalf("Exec(%q): %v", command, err)
	}
	return res
}

// inPod runs script with sh in pod's commands container, beside the
// session's commands and outside its turn, and returns its stdout.
func (k *kube) inPod(t *testing.T, pod, script string) string {
	t.Helper()
	cl, err := k.e.clusterFor(k.st.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code, err := execStream(context.Background(), cl, k.st.Namespace, pod, ContainerName, []string{"sh", "-c", script}, nil, &out, &errb)
	if err != nil || code != 0 {
		t.Fatalf("in pod %s: %q: exit %d, %v: %s", pod, script, code, err, errb.String())
	}
	return out.String()
}

// TestHomeAcrossReplicas: two corral processes (engines and state
// directories of their own) serving one session under scope cluster use
// one pod, found by its name; the cwd and exported variables one leaves
// are the other's next command's, both ways; a command of the session
// sent by one while the other's runs waits for it in the pod (the log
// of starts and ends the commands keep in the pod shows no overlap);
// another session's command runs meanwhile.
func TestHomeAcrossReplicas(t *testing.T) {
	k := newKube(t)
	sess := "home-" + strconv.Itoa(os.Getpid())
	other := sess + "-other"
	// Registered first, so run last: after the replicas have closed.
	t.Cleanup(func() { k.removeHome(t, sess); k.removeHome(t, other) })
	r1, r2 := k.newReplica(t, "one"), k.newReplica(t, "two")

	r1.exec(t, sess, "mkdir -p d/e && cd d && export V='one two' W=1")
	res := r2.exec(t, sess, `echo "$PWD|$V|$W"; cd e; unset W; export V=two`)
	if want := k.ws + "/d|one two|1\n"; res.Output.Text != want {
		t.Fatalf("replica two saw %q, want %q", res.Output.Text, want)
	}
	res = r1.exec(t, sess, `echo "$PWD|$V|${W-unset}"`)
	if want := k.ws + "/d/e|two|unset\n"; res.Output.Text != want || res.Cwd != k.ws+"/d/e" {
		t.Fatalf("replica one saw %q (cwd %q), want %q", res.Output.Text, res.Cwd, want)
	}
	pod := k.sessionPod(t, sess)
	if !strings.HasPrefix(pod, NamePrefix+"h") {
		t.Errorf("pod %s is not named as a home pod", pod)
	}

	// One at a time: replica one's command holds the turn until the test
	// ends its stdin; replica two's is sent meanwhile and must wait in the
	// pod (a blocked flock in /proc/locks) until then.
	log := k.ws + "/turns.log"
	s1, _ := r1.m.Open(sess)
	s2, _ := r2.m.Open(sess)
	stdinR, stdinW := io.Pipe()
	first := make(chan error, 1)
	go func() {
		_, err := s1.Exec(context.Background(), session.ExecRequest{Command: "echo start 1 >> " + log + "; read x; echo end 1 >> " + log, StdinReader: stdinR})
		first <- err
	}()
	k.waitInPod(t, pod, "grep -q 'start 1' "+log+" 2>/dev/null && echo yes", "yes")
	second := make(chan error, 1)
	go func() {
		_, err := s2.Exec(context.Background(), session.ExecRequest{Command: "echo start 2 >> " + log + "; echo end 2 >> " + log})
		second <- err
	}()
	// A waiter blocked on a FLOCK (proc(5), /proc/locks: "-> FLOCK").
	k.waitInPod(t, pod, "grep -c -- '-> FLOCK' /proc/locks || true", "1")
	if got := k.inPod(t, pod, "cat "+log); got != "start 1\n" {
		t.Fatalf("while one held the turn the log was %q", got)
	}

	// Another session runs while this one's turn is held.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	so, _ := r2.m.Open(other)
	if res, err := so.Exec(ctx, session.ExecRequest{Command: "echo other"}); err != nil || res.Output.Text != "other\n" {
		t.Fatalf("another session's command while the turn is held: %v %+v", err, res)
	}

	stdinW.Close()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if got, want := k.inPod(t, pod, "cat "+log), "start 1\nend 1\nstart 2\nend 2\n"; got != want {
		t.Errorf("log of the turns %q, want %q", got, want)
	}
	if pods, _ := k.objects(sess); len(pods) != 1 {
		t.Errorf("pods of the session: %v, want one", pods)
	}
}

// waitInPod runs script in pod until its output, trimmed, is want (a
// condition loop, 3 min deadline).
func (k *kube) waitInPod(t *testing.T, pod, script, want string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		got := strings.TrimSpace(k.inPod(t, pod, script))
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("in pod %s, %q gave %q, want %q", pod, script, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeHome deletes session sess's pods and their NetworkPolicies (home
// pods stay when their corral processes stop).
func (k *kube) removeHome(t *testing.T, sess string) {
	t.Helper()
	cl, err := k.e.clusterFor(k.st.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	pods, _ := k.objects(sess)
	for _, p := range pods {
		if err := deleteObjects(context.Background(), cl.cs, k.st.Namespace, p, true, ""); err != nil {
			t.Errorf("removing %s: %v", p, err)
		}
	}
}

// corralEnv is the environment of a corral process serving k's sessions
// under scope cluster, with a state directory (and home and caches) of
// its own under dir: the settings as CORRAL_* variables, the same as
// newReplica's, so both find the same pod.
func (k *kube) corralEnv(t *testing.T, dir string) []string {
	t.Helper()
	for _, d := range []string{"home", "state", "cache"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + filepath.Join(dir, "home"),
		"XDG_STATE_HOME=" + filepath.Join(dir, "state"), "XDG_CACHE_HOME=" + filepath.Join(dir, "cache"),
		"CORRAL_BACKEND=kubernetes", "CORRAL_KUBERNETES_SCOPE=" + ScopeCluster,
		"CORRAL_KUBERNETES_IMAGE=" + k.st.Image, "CORRAL_KUBERNETES_NAMESPACE=" + k.st.Namespace,
		"CORRAL_KUBERNETES_KUBECONFIG=" + k.st.Kubeconfig,
		"CORRAL_KUBERNETES_MEMORY=" + k.st.Memory, "CORRAL_KUBERNETES_CPUS=" + k.st.CPUs}
}

// TestHomeReplicaKilled: a corral process (corral run of a session)
// killed with SIGKILL in the middle of a command: the session's next
// command, from another corral, finds the cwd and variables as the
// commands before it left them, carries a note that the cut-off command
// may have run, naming it, and the cut-off command's processes are gone.
func TestHomeReplicaKilled(t *testing.T) {
	k := newKube(t)
	corral := dockertest.StaticCorral(t)
	sess := "killed-" + strconv.Itoa(os.Getpid())
	// After the corral processes below have ended (cleanups run last
	// first): one still starting would make the pod again.
	t.Cleanup(func() { k.removeHome(t, sess) })
	run := func(name, script string) *exec.Cmd {
		c := exec.Command(corral, "run", "--session", sess, "--cwd", k.ws, "--profile", "workspace", "--", script)
		c.Env = k.corralEnv(t, filepath.Join(dockertest.TestDir(t), name))
		c.Dir = "/"
		return c
	}
	if out, err := run("a", "mkdir -p d && cd d && export V=kept").CombinedOutput(); err != nil {
		t.Fatalf("first corral: %v: %s", err, out)
	}
	pod := k.sessionPod(t, sess)

	var berr bytes.Buffer
	b := run("b", "touch "+k.ws+"/began; exec sleep 600")
	b.Stderr = &berr
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = b.Process.Kill()
			_ = b.Wait()
		}
	})
	k.waitInPod(t, pod, "if test -e "+k.ws+"/began; then echo yes; fi", "yes")
	if err := b.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := b.Wait()
	waited = true
	if ws, ok := b.ProcessState.Sys().(syscall.WaitStatus); err == nil || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the killed corral: %v (%v), stderr %s", err, b.ProcessState, berr.String())
	}

	r := k.newReplica(t, "c")
	res := r.exec(t, sess, `echo "$PWD|$V"`)
	if want := k.ws + "/d|kept\n"; res.Output.Text != want {
		t.Errorf("after the kill the session's next command saw %q, want %q", res.Output.Text, want)
	}
	note := strings.Join(res.Notes, "\n")
	if !strings.Contains(note, "cut off") || !strings.Contains(note, "may have run") || !strings.Contains(note, "exec sleep 600") {
		t.Errorf("notes %q: want the cut-off command named as one that may have run", res.Notes)
	}
	if pods, _ := k.objects(sess); len(pods) != 1 || pods[0] != pod {
		t.Errorf("pods of the session %v, want %s alone", pods, pod)
	}
	// The killed corral's agent ended with its stream, and its command
	// with it.
	k.waitNoProcess(t, pod, "sleep\x00600\x00")
	// Told once: the next command has no such note.
	res = r.exec(t, sess, "true")
	if note := strings.Join(res.Notes, "\n"); strings.Contains(note, "cut off") {
		t.Errorf("the note came again: %q", res.Notes)
	}
}

// waitNoProcess waits (a condition loop, 3 min deadline) until no
// process in pod has the NUL-separated argv argv (its /proc/PID/cmdline;
// the looking shell's own argv holds it only inside a longer word).
func (k *kube) waitNoProcess(t *testing.T, pod, argv string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		all := "\x00" + k.inPod(t, pod, "cat /proc/[0-9]*/cmdline 2>/dev/null; true")
		if !strings.Contains(all, "\x00"+argv) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("in pod %s a process %q still runs", pod, argv)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// BenchmarkHomeCommand: a session command (session.Exec of `true`, and
// of one that changes a variable, so its state is saved) under scope
// session, whose turn and state are the host's, and under scope cluster,
// whose turn is taken and state read (and saved) in the pod over the
// agent's stream: what the session's home costs per command.
func BenchmarkHomeCommand(b *testing.B) {
	k := newKube(b)
	ctx := context.Background()
	for _, scope := range []string{ScopeSession, ScopeCluster} {
		st := k.st
		st.Scope = scope
		be := k.e.Backend(st)
		m := session.NewManager(session.Options{StateDir: filepath.Join(dockertest.TestDir(b), "state-"+scope), Resolve: func(string) (*session.Spec, error) {
			return &session.Spec{Backend: be, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: k.ws}, Timeout: time.Minute,
				OutputLimit: 1 << 20, Env: []string{"PATH=/usr/bin:/bin"}}, nil
		}})
		b.Cleanup(m.Close)
		name := fmt.Sprintf("bench-home-%s-%d", scope, os.Getpid())
		if scope == ScopeCluster {
			b.Cleanup(func() {
				m.Close()
				cl, err := k.e.clusterFor(k.st.Kubeconfig, "")
				if err != nil {
					return
				}
				pods, _ := k.objects(name)
				for _, p := range pods {
					_ = deleteObjects(context.Background(), cl.cs, k.st.Namespace, p, true, "")
				}
			})
		}
		s, err := m.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Exec(ctx, session.ExecRequest{Command: "true"}); err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct{ name, cmd string }{{"true", "true"}, {"export", "export N=$RANDOM"}} {
			b.Run(scope+"/"+c.name, func(b *testing.B) {
				for b.Loop() {
					if r, err := s.Exec(ctx, session.ExecRequest{Command: c.cmd}); err != nil || r.ExitCode != 0 {
						b.Fatal(err, r)
					}
				}
			})
		}
	}
}

// TestHomeIdle: a home pod that no corral has used for idle_timeout is
// removed by a corral that served it, although that corral's session
// still names it; the session's next command starts a new pod, says so,
// and keeps the cwd and variables.
func TestHomeIdle(t *testing.T) {
	k := newKube(t)
	idle := func(st *Settings) { st.IdleTimeout = "2s" }
	sess := "idle-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { k.removeHome(t, sess) })
	r1, r2 := k.newReplicaWith(t, "one", idle), k.newReplicaWith(t, "two", idle)
	// /tmp is there in every pod (the workspace of the next is empty).
	r1.exec(t, sess, "cd /tmp && export V=1")
	pod := k.sessionPod(t, sess)
	r2.exec(t, sess, "true")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pods, _ := k.objects(sess)
		if len(pods) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle home pod %s stayed", pod)
		}
		time.Sleep(200 * time.Millisecond)
	}
	res := r2.exec(t, sess, `echo "$PWD|$V"`)
	if want := "/tmp|1\n"; res.Output.Text != want {
		t.Errorf("after the idle removal %q, want %q", res.Output.Text, want)
	}
	// The corral that removed it says idle_timeout; another finds it
	// gone, cause unknown.
	if note := strings.Join(res.Notes, "\n"); !strings.Contains(note, "new pod") {
		t.Errorf("notes %q, want the new pod said", res.Notes)
	}
}
