package kubernetes

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	lb := &testkit.LogBuf{}
	e := NewEngine(Options{Helper: dockertest.StaticCorral(t), KillGrace: time.Second,
		Logger: slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	st := k.st
	st.Scope = ScopeCluster
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
	r1, r2 := k.newReplica(t, "one"), k.newReplica(t, "two")
	sess := "home-" + strconv.Itoa(os.Getpid())
	defer r1.e.Release(sess)

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
	other := sess + "-other"
	defer r2.e.Release(other)
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
