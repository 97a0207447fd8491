package kubernetes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// session opens session name on backend b (k.b when nil) through a
// session manager, as corral mcp runs commands; the manager closes with
// the test.
func (k *kube) session(t *testing.T, name string, b *Backend) *session.Session {
	t.Helper()
	if b == nil {
		b = k.b
	}
	m := session.NewManager(session.Options{StateDir: filepath.Join(dockertest.TestDir(t), "state-"+name), Resolve: func(string) (*session.Spec, error) {
		return &session.Spec{Backend: b, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: k.ws}, Timeout: 15 * time.Minute,
			OutputLimit: 1 << 20, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, nil
	}})
	t.Cleanup(func() { m.Close() })
	s, err := m.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// exec runs command in s and fails the test on an error.
func (k *kube) exec(t *testing.T, s *session.Session, command string) *session.ExecResult {
	t.Helper()
	r, err := s.Exec(context.Background(), session.ExecRequest{Command: command})
	if err != nil {
		t.Fatalf("Exec(%q): %v\nlog:\n%s", command, err, k.log.String())
	}
	return r
}

// sessionPod returns the name of session sess's one live pod.
func (k *kube) sessionPod(t *testing.T, sess string) string {
	t.Helper()
	pods, _ := k.objects(sess)
	if len(pods) != 1 {
		t.Fatalf("pods of session %s: %v", sess, pods)
	}
	return pods[0]
}

// waitPod waits (a condition loop, 5 min deadline) until ok holds for
// pod name as the admin reads it (nil: the pod is gone).
func waitPod(t *testing.T, admin k8s.Interface, ns, name, what string, ok func(*corev1.Pod) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		p, err := admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			p = nil
		case err != nil:
			t.Fatal(err)
		}
		if ok(p) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: not %s in 5 minutes: %+v", name, what, p)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitAgentGone waits (a condition loop, 2 min deadline) until corral has
// seen the end of its agent stream into pod name, which the pod's end
// breaks: a command sent before that would go down a stream that is
// about to end, and may have run for all corral can tell.
func (k *kube) waitAgentGone(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var ref *podRef
		for _, en := range k.e.table.Entries() {
			if en.Handle.name == name {
				ref = en.Handle
			}
		}
		if ref == nil || ref.agentDied() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("corral's agent stream into pod %s did not end in 2 minutes", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// containerDown reports whether the commands' container of pod has ended
// (the kubelet killed it).
func containerDown(p *corev1.Pod) bool {
	if p == nil {
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ContainerName {
			return cs.State.Terminated != nil
		}
	}
	return false
}

// checkLostNote checks that r, the first result after pod old went, ran
// in a new pod of sess with a note naming old and the cause, and saying
// the workspace was lost; the file the old workspace held is gone.
func (k *kube) checkLostNote(t *testing.T, r *session.ExecResult, sess, old string, cause ...string) string {
	t.Helper()
	note := strings.Join(r.Notes, "\n")
	t.Logf("notes after pod %s went:\n%s", old, note)
	for _, w := range append([]string{"this session's previous pod " + old + " ", "new pod with an empty workspace", "/tmp and the background processes"}, cause...) {
		if !strings.Contains(note, w) {
			t.Errorf("notes lack %q:\n%s", w, note)
		}
	}
	if r.ExitCode != 0 || !strings.Contains(r.Output.Text, "no kept file") {
		t.Errorf("the command in the new pod: exit %d %q", r.ExitCode, r.Output.Text)
	}
	now := k.sessionPod(t, sess)
	if now == old {
		t.Errorf("the command ran in the old pod %s", old)
	}
	return now
}

// probe is the command after a loss: the workspace of the new pod lacks
// the old one's file.
const probe = `cat kept 2>/dev/null || echo no kept file`

// TestEvictedForWorkspaceSizeKubernetes (issue 27 item 4): a command that
// fills the workspace past kubernetes.storage_size gets its pod evicted
// by the kubelet. The command is reported as one that may have run,
// naming the eviction and the kubelet's message, never as not run; the
// session's next command runs in a new pod and its notes say the old pod
// was evicted, why, and that its workspace, /tmp and background
// processes were lost.
func TestEvictedForWorkspaceSizeKubernetes(t *testing.T) {
	k := newKube(t)
	st := k.st
	st.StorageSize = "16Mi"
	sess := "evict-ws-" + strconv.Itoa(os.Getpid())
	s := k.session(t, sess, k.e.Backend(st))
	k.exec(t, s, "echo keep > kept")
	old := k.sessionPod(t, sess)
	// The kubelet measures the emptyDir every so often and evicts the pod
	// past its sizeLimit; the command waits for that (its timeout is the
	// bound).
	_, err := s.Exec(context.Background(), session.ExecRequest{Command: "head -c 48m /dev/zero > big && echo written; sleep 840", Timeout: 14 * time.Minute})
	if err == nil {
		t.Fatalf("the command that filled the workspace was not ended by an eviction\nlog:\n%s", k.log.String())
	}
	t.Logf("the command running at the eviction: %v", err)
	if !errors.Is(err, sandbox.ErrMayHaveRun) || sandbox.IsTransient(err) {
		t.Errorf("the running command's error is not may-have-run: %v", err)
	}
	for _, w := range []string{"pod " + old + " was evicted by its node's kubelet", `exceeds the limit "16Mi"`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}
	r := k.exec(t, s, probe)
	k.checkLostNote(t, r, sess, old, "was evicted by its node's kubelet: ", `Usage of EmptyDir volume "workspace" exceeds the limit "16Mi"`)
	if !strings.Contains(k.log.String(), "kubernetes.pod.lost") {
		t.Errorf("no kubernetes.pod.lost event:\n%s", k.log.String())
	}
	k.b.Release(sess)
	k.waitGone(sess)
}

// TestEvictedByAPIKubernetes (issue 27 item 4): a session's pod evicted
// through the Eviction API (as `kubectl drain` does) or deleted.
//
//   - During a command: the command is reported as one that may have run,
//     naming the pod and what became of it, never as not run; the next
//     command runs in a new pod with a note.
//   - Between commands, the pod held by a finalizer so that the API
//     server still shows it: the next command's note names the Eviction
//     API as the cause.
//   - Deleted between commands and gone: the note says it was deleted and
//     that the cause is unknown.
func TestEvictedByAPIKubernetes(t *testing.T) {
	k := newKube(t)
	admin := k.c.AdminOrSkip(t)
	ns := k.st.Namespace
	ctx := context.Background()
	sess := "evict-api-" + strconv.Itoa(os.Getpid())
	s := k.session(t, sess, nil)
	evict := func(name string) {
		t.Helper()
		if err := admin.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
			t.Fatalf("evicting %s: %v", name, err)
		}
	}

	// During a command.
	k.exec(t, s, "echo keep > kept")
	p1 := k.sessionPod(t, sess)
	out := &testkit.LogBuf{}
	done := make(chan error, 1)
	go func() {
		_, err := s.Exec(ctx, session.ExecRequest{Command: "echo started; sleep 840", Stdout: out, Stderr: out})
		done <- err
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), "started") {
		if time.Now().After(deadline) {
			t.Fatalf("the command did not start: %q", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	evict(p1)
	select {
	case err := <-done:
		t.Logf("the command running at the eviction: %v", err)
		if err == nil || !errors.Is(err, sandbox.ErrMayHaveRun) || sandbox.IsTransient(err) {
			t.Errorf("the command running at the eviction: %v, want may-have-run", err)
		}
		if err != nil && !strings.Contains(err.Error(), "pod "+p1+" was ") {
			t.Errorf("the error does not say what became of pod %s: %v", p1, err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatalf("the command went on for 5 minutes after its pod was evicted")
	}
	r := k.exec(t, s, probe)
	p2 := k.checkLostNote(t, r, sess, p1)

	// Between commands, the pod still shown (a finalizer holds it).
	k.exec(t, s, "echo keep > kept")
	const hold = "corral.test/hold"
	if _, err := admin.CoreV1().Pods(ns).Patch(ctx, p2, types.MergePatchType, []byte(`{"metadata":{"finalizers":["`+hold+`"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.CoreV1().Pods(ns).Patch(context.Background(), p2, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	evict(p2)
	waitPod(t, admin, ns, p2, "ended", containerDown)
	k.waitAgentGone(t, p2)
	r = k.exec(t, s, probe)
	p3 := k.checkLostNote(t, r, sess, p2, "was evicted through the Eviction API", "EvictionByEvictionAPI")
	if _, err := admin.CoreV1().Pods(ns).Patch(ctx, p2, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}

	// Deleted between commands, and gone.
	k.exec(t, s, "echo keep > kept")
	if err := admin.CoreV1().Pods(ns).Delete(ctx, p3, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, admin, ns, p3, "gone", func(p *corev1.Pod) bool { return p == nil })
	k.waitAgentGone(t, p3)
	r = k.exec(t, s, probe)
	k.checkLostNote(t, r, sess, p3, goneWhy)

	k.b.Release(sess)
	k.waitGone(sess)
}

// TestOOMThroughSessionKubernetes (issue 27 item 4): a command of a
// session that allocates past kubernetes.memory is reported as killed by
// the pod's memory limit (LimitHit and LimitMessage), though the
// session's wrapper shell outlives it; the pod stays and the session goes
// on in it.
func TestOOMThroughSessionKubernetes(t *testing.T) {
	k := newKube(t)
	sess := "oom-sess-" + strconv.Itoa(os.Getpid())
	s := k.session(t, sess, nil)
	k.exec(t, s, "echo keep > kept")
	pod := k.sessionPod(t, sess)
	for _, cmd := range []string{`python3 -c 'b = bytearray(512 << 20); print(len(b))'`, `head -c 5G /dev/zero | tail`} {
		r := k.exec(t, s, cmd)
		if r.ExitCode == 0 || r.LimitHit != sandbox.LimitPodMemory {
			t.Errorf("%s under 256Mi: exit %d, limit %q: %q", cmd, r.ExitCode, r.LimitHit, r.Output.Text)
		}
		if !strings.Contains(r.LimitMessage, "out of memory") || !strings.Contains(r.LimitMessage, "kubernetes.memory") {
			t.Errorf("%s: limit message %q", cmd, r.LimitMessage)
		}
	}
	r := k.exec(t, s, "cat kept")
	if r.ExitCode != 0 || r.Output.Text != "keep\n" || r.LimitHit != "" {
		t.Errorf("after the memory kills: %+v", r)
	}
	if now := k.sessionPod(t, sess); now != pod {
		t.Errorf("the session moved from pod %s to %s", pod, now)
	}
	k.b.Release(sess)
	k.waitGone(sess)
}
