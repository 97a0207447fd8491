package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/owner"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// setWarmPool makes k's backend keep n free pods.
func (k *kube) setWarmPool(n int) {
	k.st.WarmPool = n
	k.b = k.e.Backend(k.st)
}

// maker is the pool maker id of engine e.
func maker(e *Engine) string { return e.pool.(*corralPool).maker }

// managedPods lists corral's pods in the test namespace, without those
// being deleted, through the test's own client (not the engine's, whose
// API calls the benchmarks count).
func (k *kube) managedPods() []corev1.Pod {
	k.t.Helper()
	pl, err := k.c.Client.CoreV1().Pods(k.st.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: LabelManaged + "=true"})
	if err != nil {
		k.t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pl.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// poolPods returns the names of the pods in state (PoolFree, ...) that
// the engine with maker id m made.
func (k *kube) poolPods(m, state string) []string {
	var out []string
	for _, p := range k.managedPods() {
		if p.Annotations[AnnotationMaker] == m && p.Labels[LabelPool] == state {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// waitFree waits (a condition loop, 180 s deadline) until the engine with
// maker id m has n free pods, and returns their names.
func (k *kube) waitFree(m string, n int) []string {
	k.t.Helper()
	deadline := time.Now().Add(180 * time.Second)
	for {
		free := k.poolPods(m, PoolFree)
		if len(free) == n {
			return free
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("maker %s has free pods %v, want %d\nlog:\n%s", m, free, n, k.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// podOf returns the one pod of session sess.
func (k *kube) podOf(sess string) string {
	k.t.Helper()
	pods, _ := k.objects(sess)
	if len(pods) != 1 {
		k.t.Fatalf("session %s has pods %v, want one", sess, pods)
	}
	return pods[0]
}

// engine returns another engine on the test cluster (with k's helper and
// log), closed at the end of the test.
func (k *kube) engine(oneShot bool) *Engine {
	e := NewEngine(Options{
		Helper:    dockertest.StaticCorral(k.t),
		Logger:    slog.New(slog.NewTextHandler(k.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		KillGrace: time.Second, OneShot: oneShot,
	})
	k.t.Cleanup(func() { e.Close() })
	return e
}

// TestWarmPoolClaim: an engine with warm_pool 2 fills its pool on first
// sight of a kind of pod; the next session claims a pod that was free
// before (so it was made before the session asked), locked down as a
// cold one; the pool refills to 2; Close removes the free pods.
func TestWarmPoolClaim(t *testing.T) {
	k := newKube(t)
	k.setWarmPool(2)
	id := strconv.Itoa(os.Getpid())
	k.run("warm-first-"+id, "true", nil) // first sight of the key: the pool fills
	m := maker(k.e)
	free := k.waitFree(m, 2)
	sess := "warm-claim-" + id
	k.assertLockedDown(sess)
	got := k.podOf(sess)
	if !slices.Contains(free, got) {
		t.Fatalf("session pod %s was not one of the free pods %v\nlog:\n%s", got, free, k.log.String())
	}
	for _, p := range k.managedPods() {
		if p.Name == got && (p.Labels[LabelPool] != PoolClaimed || p.Annotations[AnnotationOwner] != k.e.self.String() || p.Annotations[AnnotationSession] != sess) {
			t.Errorf("claimed pod's meta %v %v", p.Labels, p.Annotations)
		}
	}
	// A pod this engine made is claimed without a list, and its agent,
	// started when the pod turned free, runs the session's first command.
	if want := "msg=kubernetes.pool.claimed pod=" + got; !strings.Contains(k.log.String(), want) ||
		!regexp.MustCompile(regexp.QuoteMeta(want)+` .*agent=true`).MatchString(k.log.String()) {
		t.Errorf("no %q with agent=true in the log", want)
	}
	// The pool refills to 2 without the claimed pod.
	again := k.waitFree(m, 2)
	if slices.Contains(again, got) {
		t.Errorf("the claimed pod %s is still free: %v", got, again)
	}
	// A command runs there, and later commands use the same pod.
	if out, _, _ := k.run(sess, "cat f", nil); out != "data\n" || k.podOf(sess) != got {
		t.Errorf("second command: %q in %s", out, k.podOf(sess))
	}
	k.e.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := append(k.poolPods(m, PoolFree), k.poolPods(m, PoolWarming)...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Close, pool pods %v are left", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	k.waitGone(sess)
}

// TestWarmPoolConcurrentClaims: two engines (as two corral processes)
// claim at once from a third's pool of 3, four sessions in all: no pod is
// given to two sessions, and the pods claimed were free ones.
func TestWarmPoolConcurrentClaims(t *testing.T) {
	k := newKube(t)
	k.setWarmPool(3)
	id := strconv.Itoa(os.Getpid())
	k.run("conc-first-"+id, "true", nil)
	free := k.waitFree(maker(k.e), 3)
	var sessions []string
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 2 {
		e := k.engine(true)
		b := e.Backend(k.st)
		for j := range 2 {
			sess := fmt.Sprintf("conc-%s-%d-%d", id, i, j)
			sessions = append(sessions, sess)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := b.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Session: sess,
					Policy: sandbox.Policy{Workdir: k.ws, Profile: sandbox.ProfileWorkspace}})
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Run: %v\nlog:\n%s", err, k.log.String())
		}
	}
	seen := map[string]string{}
	claimed := 0
	for _, s := range sessions {
		p := k.podOf(s) // exactly one pod carries each session's name
		if o, dup := seen[p]; dup {
			t.Errorf("pod %s given to %s and %s", p, o, s)
		}
		seen[p] = s
		if slices.Contains(free, p) {
			claimed++
		}
	}
	if claimed == 0 {
		t.Errorf("no session claimed one of the free pods %v: %v\nlog:\n%s", free, seen, k.log.String())
	}
	t.Logf("%d of 4 sessions claimed a warm pod", claimed)
}

// TestWarmPoolCleanupDeadMaker: Cleanup removes the free pods (and their
// policies) of a corral that is gone, and keeps those of a live one.
func TestWarmPoolCleanupDeadMaker(t *testing.T) {
	k := newKube(t)
	id := strconv.Itoa(os.Getpid())
	// An engine that believes it is a process that has exited: same pid,
	// another start time (owner.ID.State says Dead).
	dead := k.engine(false)
	dead.self.Start++
	if dead.self.State(owner.Self()) != owner.Dead {
		t.Fatal("the fake owner is not dead")
	}
	st := k.st
	st.WarmPool = 1
	if _, err := dead.Backend(st).Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Session: "dead-" + id,
		Policy: sandbox.Policy{Workdir: k.ws, Profile: sandbox.ProfileWorkspace}}); err != nil {
		t.Fatal(err)
	}
	deadFree := k.waitFree(maker(dead), 1)
	// The live engine's pods have another workspace, so another pool key:
	// its session does not claim the dead engine's free pod.
	k.ws += "-live"
	k.setWarmPool(1)
	k.run("alive-"+id, "true", nil)
	liveFree := k.waitFree(maker(k.e), 1)
	los, err := k.e.Cleanup(context.Background(), k.st, false)
	if err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	for _, lo := range los {
		if lo.Removed {
			removed[lo.Kind+"/"+lo.Name] = true
		}
		if lo.Name == liveFree[0] && lo.Removed {
			t.Errorf("cleanup removed the live corral's free %s %s", lo.Kind, lo.Name)
		}
	}
	if !removed["pod/"+deadFree[0]] || !removed["networkpolicy/"+deadFree[0]] {
		t.Errorf("cleanup did not remove the dead corral's free pod and policy %s: %+v", deadFree[0], los)
	}
	if got := k.poolPods(maker(k.e), PoolFree); !slices.Equal(got, liveFree) {
		t.Errorf("live free pods after cleanup %v, want %v", got, liveFree)
	}
}

// TestOneShotClaimsLivePool: a one-shot `corral run` (another process)
// claims a free pod made by this live engine, and does not refill.
func TestOneShotClaimsLivePool(t *testing.T) {
	k := newKube(t)
	k.setWarmPool(1)
	id := strconv.Itoa(os.Getpid())
	k.run("live-pool-"+id, "true", nil)
	free := k.waitFree(maker(k.e), 1)
	bin := dockertest.StaticCorral(t)
	sess := "oneshot-" + id
	cmd := exec.Command(bin, "--log-level", "info", "run", "--session", sess, "--", "cat /etc/hostname")
	cmd.Env = []string{"HOME=" + dockertest.TestDir(t), "PATH=/usr/bin:/bin", "CORRAL_BACKEND=kubernetes", "CORRAL_PROFILE=workspace",
		"CORRAL_CWD=" + k.ws, "CORRAL_KUBERNETES_KUBECONFIG=" + k.kubeconfig, "CORRAL_KUBERNETES_IMAGE=" + k.st.Image,
		"CORRAL_KUBERNETES_NAMESPACE=" + k.st.Namespace, "CORRAL_KUBERNETES_MEMORY=256Mi", "CORRAL_KUBERNETES_CPUS=500m",
		"CORRAL_KUBERNETES_WARM_POOL=1"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("corral run: %v\n%s\n%s", err, out.String(), errb.String())
	}
	if host := strings.TrimSpace(out.String()); host != free[0] {
		t.Errorf("the one-shot ran in pod %q, want the free pod %s\nstderr:\n%s", host, free[0], errb.String())
	}
	// It did not refill the pool (its log at info level would say).
	if strings.Contains(errb.String(), "kubernetes.pool.refill") {
		t.Errorf("the one-shot corral refilled the pool:\n%s", errb.String())
	}
	k.waitGone(sess)
}

// TestIdleTimeout: a session's pod that runs no command for idle_timeout
// is removed; while a command (a background process, say) runs it is
// not; the next command runs in a new pod with the workspace reset and a
// note saying so.
func TestIdleTimeout(t *testing.T) {
	k := newKube(t)
	k.st.IdleTimeout = "2s"
	k.b = k.e.Backend(k.st)
	sess := "idle-" + strconv.Itoa(os.Getpid())
	k.run(sess, "echo data > f", nil)
	first := k.podOf(sess)
	// A command running longer than the timeout keeps the pod.
	done := make(chan error, 1)
	go func() {
		_, err := k.b.Run(context.Background(), &sandbox.Request{Argv: []string{"bash", "-c", "touch /tmp/running; while [ ! -e /tmp/stop ]; do sleep 0.1; done"},
			Session: sess, Policy: sandbox.Policy{Workdir: k.ws, Profile: sandbox.ProfileWorkspace}})
		done <- err
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if out, _, _ := k.run(sess, "ls /tmp/running 2>/dev/null", nil); out != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the long command did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	quiet := time.Now()
	for time.Since(quiet) < 3*2*time.Second { // three timeouts without another command
		time.Sleep(200 * time.Millisecond)
	}
	if got := k.podOf(sess); got != first {
		t.Fatalf("pod %s replaced by %s while a command ran", first, got)
	}
	k.run(sess, "touch /tmp/stop", nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	k.waitGone(sess) // idle: removed
	out, _, res := k.run(sess, "test -e f && echo kept || echo reset", nil)
	if out != "reset\n" {
		t.Errorf("workspace after the idle removal: %q", out)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool {
		return strings.Contains(w, "idle_timeout (2s)") && strings.Contains(w, "reset (emptyDir)")
	}) {
		t.Errorf("warnings %q, want the idle note", res.Warnings)
	}
	if got := k.podOf(sess); got == first {
		t.Errorf("still pod %s", got)
	}
	k.b.Release(sess)
	k.waitGone(sess)
}

// TestIdleTimeoutSessionCwd: through a session, the command after an
// idle removal runs (the cwd it had is gone with the workspace: it starts
// at the workspace and says so), keeps the session's variables and
// carries the idle note.
func TestIdleTimeoutSessionCwd(t *testing.T) {
	k := newKube(t)
	k.st.IdleTimeout = "1s"
	k.b = k.e.Backend(k.st)
	m := session.NewManager(session.Options{StateDir: filepath.Join(dockertest.TestDir(t), "state"), Resolve: func(string) (*session.Spec, error) {
		return &session.Spec{Backend: k.b, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: k.ws}, Timeout: time.Minute,
			OutputLimit: 1 << 20, Env: []string{"PATH=/usr/bin:/bin"}}, nil
	}})
	defer m.Close()
	name := "idle-cwd-" + strconv.Itoa(os.Getpid())
	s, err := m.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Exec(ctx, session.ExecRequest{Command: "mkdir -p a/b && cd a/b && export X=1"}); err != nil {
		t.Fatal(err)
	}
	k.waitGone(name)
	r, err := s.Exec(ctx, session.ExecRequest{Command: `echo "$PWD|$X"`})
	if err != nil {
		t.Fatalf("after the idle removal: %v\nlog:\n%s", err, k.log.String())
	}
	t.Logf("after the idle removal: exit %d output %q cwd %q warnings %q", r.ExitCode, r.Output.Text, r.Cwd, r.Notes)
	// The session's variables carry over (they live on the host); its
	// cwd is gone with the workspace, and the session says so.
	if r.ExitCode != 0 || !strings.HasSuffix(r.Output.Text, k.ws+"|1\n") || !strings.Contains(r.Output.Text, "no longer exists") {
		t.Errorf("after the idle removal: %+v", r)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "idle_timeout (1s)") }) {
		t.Errorf("notes %q, want the idle note", r.Notes)
	}
	m.Close()
	k.waitGone(name)
}

// keyPods returns the free and warming pods of pool key key, by maker.
func (k *kube) keyPods(key string) (free, warming map[string][]string) {
	free, warming = map[string][]string{}, map[string][]string{}
	for _, p := range k.managedPods() {
		if p.Labels[LabelPoolKey] != key {
			continue
		}
		switch p.Labels[LabelPool] {
		case PoolFree:
			free[p.Annotations[AnnotationMaker]] = append(free[p.Annotations[AnnotationMaker]], p.Name)
		case PoolWarming:
			warming[p.Annotations[AnnotationMaker]] = append(warming[p.Annotations[AnnotationMaker]], p.Name)
		}
	}
	return free, warming
}

// holder returns the holder of the pool key's Lease and its transitions
// ("" and -1 when there is none), read with the test's own client.
func (k *kube) holder(key string) (string, int32) {
	l, err := k.c.Client.CoordinationV1().Leases(k.st.Namespace).Get(context.Background(), LeasePrefix+key, metav1.GetOptions{})
	if err != nil {
		return "", -1
	}
	h, n := "", int32(0)
	if l.Spec.HolderIdentity != nil {
		h = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		n = *l.Spec.LeaseTransitions
	}
	return h, n
}

// until waits (a condition loop, 180 s deadline) for cond, failing with
// what() when it does not hold by then.
func (k *kube) until(cond func() bool, what func() string) {
	k.t.Helper()
	deadline := time.Now().Add(180 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			k.t.Fatalf("%s\nlog:\n%s", what(), k.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestWarmPoolOneRefiller (issue 29): two long-running corrals (as two
// replicas of corral serve) that both use a kind of pod keep one pool of
// warm_pool pods between them, refilled by the holder of the key's Lease
// alone; when the holder stops, it releases the Lease, the other takes it
// and refills the pool to warm_pool.
func TestWarmPoolOneRefiller(t *testing.T) {
	k := newKube(t)
	k.setWarmPool(2)
	id := strconv.Itoa(os.Getpid())
	a := k.e
	b := k.engine(false)
	bb := b.Backend(k.st)
	k.run("lease-a-"+id, "true", nil) // a sees the key first: its Lease, its pool
	var key string
	for _, p := range k.managedPods() {
		if p.Annotations[AnnotationMaker] == maker(a) {
			key = p.Labels[LabelPoolKey]
		}
	}
	if key == "" {
		k.waitFree(maker(a), 2)
		for _, p := range k.managedPods() {
			if p.Annotations[AnnotationMaker] == maker(a) {
				key = p.Labels[LabelPoolKey]
			}
		}
	}
	aID := a.self.String() + "/" + maker(a)
	bID := b.self.String() + "/" + maker(b)
	k.until(func() bool { h, _ := k.holder(key); return h == aID }, func() string { h, _ := k.holder(key); return "lease holder " + h + ", want " + aID })
	k.waitFree(maker(a), 2)
	// b's session claims from the pool and campaigns for the key too.
	if _, err := bb.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Session: "lease-b-" + id,
		Policy: sandbox.Policy{Workdir: k.ws, Profile: sandbox.ProfileWorkspace}}); err != nil {
		t.Fatal(err)
	}
	// The pool comes back to 2 free pods in all, refilled by a.
	k.until(func() bool {
		free, _ := k.keyPods(key)
		return len(free[maker(a)])+len(free[maker(b)]) == 2
	}, func() string {
		free, warm := k.keyPods(key)
		return fmt.Sprintf("free %v warming %v, want 2 free in all", free, warm)
	})
	if h, n := k.holder(key); h == aID && n == 0 {
		// No takeover happened (one could, legitimately, if a's
		// renewals stalled for 15 s on a loaded machine): b made none.
		if free, warm := k.keyPods(key); len(free[maker(b)])+len(warm[maker(b)]) != 0 {
			t.Errorf("b made pool pods while a held the Lease: free %v warming %v", free, warm)
		}
	} else {
		t.Logf("the Lease moved while a ran (holder %s, %d transitions): not checking who made the pods", h, n)
	}
	// a stops: it releases the Lease and removes its free pods; b takes
	// the Lease at its next try and refills to 2.
	a.Close()
	k.until(func() bool { h, _ := k.holder(key); return h == bID }, func() string { h, _ := k.holder(key); return "after a closed, lease holder " + h + ", want " + bID })
	k.until(func() bool { free, _ := k.keyPods(key); return len(free[maker(b)]) == 2 && len(free[maker(a)]) == 0 },
		func() string {
			free, warm := k.keyPods(key)
			return fmt.Sprintf("after a closed: free %v warming %v, want b's 2", free, warm)
		})
	if !strings.Contains(k.log.String(), "msg=kubernetes.lease.released lease="+LeasePrefix+key) {
		t.Errorf("no kubernetes.lease.released in the log")
	}
}
