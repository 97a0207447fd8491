package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/k8stest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// kube is a kubernetes backend on the real test cluster.
type kube struct {
	t          testing.TB
	e          *Engine
	b          *Backend
	st         Settings
	ws         string
	log        *testkit.LogBuf
	kubeconfig string
	c          *k8stest.Cluster
}

func newKube(t testing.TB) *kube {
	t.Helper()
	return newKubeWith(t, nil)
}

// newKubeWith is newKube with the engine's options changed by mut.
func newKubeWith(t testing.TB, mut func(*Options)) *kube {
	t.Helper()
	if testing.Short() {
		t.Skip("kubernetes cluster test (-short)")
	}
	c := k8stest.Require(t) // skips (fails under CORRAL_REQUIRE_KUBERNETES=1) without a cluster
	kc, img, ns := os.Getenv(k8stest.EnvKubeconfig), c.Image, c.Namespace
	st := DefaultSettings
	st.Image, st.Namespace, st.Kubeconfig = img, ns, kc
	st.Memory, st.CPUs = "256Mi", "500m"
	lb := &testkit.LogBuf{}
	opts := Options{
		Helper:    dockertest.StaticCorral(t),
		Logger:    slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})),
		KillGrace: time.Second,
	}
	if mut != nil {
		mut(&opts)
	}
	e := NewEngine(opts)
	t.Cleanup(func() {
		e.Close()
		if t.Failed() {
			t.Logf("log:\n%s", lb.String())
		}
	})
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &kube{t: t, e: e, b: e.Backend(st), st: st, ws: "/work/ws-" + hex.EncodeToString(b[:]), log: lb, kubeconfig: kc, c: c}
}

// run runs a bash script in session sess and returns stdout, stderr and
// the result.
func (k *kube) run(sess, script string, mut func(*sandbox.Request)) (string, string, *sandbox.Result) {
	k.t.Helper()
	var out, errb bytes.Buffer
	req := &sandbox.Request{Argv: []string{"bash", "-c", script}, Session: sess, Stdout: &out, Stderr: &errb,
		Policy: sandbox.Policy{Workdir: k.ws, Profile: sandbox.ProfileWorkspace}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}
	if mut != nil {
		mut(req)
	}
	res, err := k.b.Run(context.Background(), req)
	if err != nil {
		k.t.Fatalf("Run(%q): %v\nlog:\n%s", script, err, k.log.String())
	}
	return out.String(), errb.String(), res
}

// objects returns the names of the pods and NetworkPolicies of session
// sess (by AnnotationSession) in the namespace.
func (k *kube) objects(sess string) (pods, policies []string) {
	k.t.Helper()
	cl, err := k.e.clusterFor(k.st.Kubeconfig, "")
	if err != nil {
		k.t.Fatal(err)
	}
	ns := k.st.Namespace
	if ns == "" {
		ns = cl.namespace
	}
	ctx := context.Background()
	var pl corev1.PodList
	if err := cl.cs.list(ctx, ns, resPods, LabelManaged+"=true", &pl); err != nil {
		k.t.Fatal(err)
	}
	for _, p := range pl.Items {
		if p.Annotations[AnnotationSession] == sess && p.DeletionTimestamp == nil {
			pods = append(pods, p.Name)
		}
	}
	var nl networkingv1.NetworkPolicyList
	if err := cl.cs.list(ctx, ns, resPolicies, LabelManaged+"=true", &nl); err != nil {
		k.t.Fatal(err)
	}
	for _, n := range nl.Items {
		if n.Annotations[AnnotationSession] == sess && n.DeletionTimestamp == nil {
			policies = append(policies, n.Name)
		}
	}
	return pods, policies
}

// waitGone waits (a condition loop, 60 s deadline) until session sess has
// no pod and no policy left.
func (k *kube) waitGone(sess string) {
	k.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, n := k.objects(sess)
		if len(p) == 0 && len(n) == 0 {
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("session %s: pods %v policies %v still there", sess, p, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPodLockdown: in the pod, commands run as the non-root uid with no
// capabilities, no service-account token, a read-only root and a
// writable workspace and /tmp; the pod and its NetworkPolicy go when the
// session is released.
func TestPodLockdown(t *testing.T) {
	k := newKube(t)
	sess := "lock-" + strconv.Itoa(os.Getpid())
	k.assertLockedDown(sess)
	pods, policies := k.objects(sess)
	if len(pods) != 1 || len(policies) != 1 || pods[0] != policies[0] {
		t.Fatalf("pods %v policies %v", pods, policies)
	}
	// Under restricted the workspace is read-only.
	ro := sess + "-ro"
	out, _, _ := k.run(ro, `touch ./x 2>/dev/null && echo ws-writable || echo ws-ro`, func(r *sandbox.Request) { r.Profile = sandbox.ProfileRestricted })
	if out != "ws-ro\n" {
		t.Errorf("restricted workspace: %q", out)
	}
	k.b.Release(sess)
	k.b.Release(ro)
	k.waitGone(sess)
	k.waitGone(ro)
}

// TestHelperReadOnlyKubernetes: a command in the pod cannot replace
// corral's helper (issue 24: a forged /.corral/corral would answer
// `corral cp` with whatever it likes): HelperDir is read-only in the
// commands' container, whether the helper is overwritten, renamed over
// or removed, and the helper container's writable view of it is out of
// reach through /proc/PID/root (another uid). The helper still works:
// commands run, and its hash in the pod is the host's.
func TestHelperReadOnlyKubernetes(t *testing.T) {
	k := newKube(t)
	sess := "ro-helper-" + strconv.Itoa(os.Getpid())
	out, errb, res := k.run(sess, `cd /tmp
cp /bin/sh /.corral/corral 2>&1 || echo overwrite-refused
cp /bin/sh /.corral/corral.new 2>&1 || echo create-refused
rm -f /.corral/corral 2>&1 || echo remove-refused
mv -f /.corral/corral /.corral/x 2>&1 || echo rename-refused
mkdir -p /.corral/trust 2>&1 || echo mkdir-refused
for p in /proc/[0-9]*; do
  if [ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "sleep 2147483647 " ]; then
    if ls $p/root/.corral >/dev/null 2>&1; then
      { cp /bin/sh $p/root/.corral/corral.new && mv -f $p/root/.corral/corral.new $p/root/.corral/corral; } 2>/dev/null && echo "replaced through $p" || echo sleep-root-readonly
    else
      echo sleep-root-denied
    fi
  fi
done | sort`, nil)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s %s", res.ExitCode, out, errb)
	}
	for _, w := range []string{"overwrite-refused", "create-refused", "remove-refused", "rename-refused", "mkdir-refused", "Read-only file system",
		"\nsleep-root-denied\nsleep-root-readonly\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("in the pod, want %q:\n%s\n%s", w, out, errb)
		}
	}
	if strings.Contains(out, "replaced") {
		t.Errorf("the helper was replaced:\n%s", out)
	}
	data, err := os.ReadFile(k.e.opts.Helper)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	out, errb, res = k.run(sess, `/.corral/corral __corral-sha256 /.corral/corral`, nil)
	if res.ExitCode != 0 || strings.TrimSpace(out) != hex.EncodeToString(sum[:]) {
		t.Errorf("the helper after the attempts: exit %d %q %s", res.ExitCode, out, errb)
	}
	k.b.Release(sess)
	k.waitGone(sess)
}

// assertLockedDown runs the lockdown probes as the first command of
// session sess: non-root uid and gid, no capabilities, no_new_privs, no
// service-account token, read-only root, writable workspace and /tmp,
// and the RuntimeDefault note as the only warning.
func (k *kube) assertLockedDown(sess string) {
	t := k.t
	t.Helper()
	out, errb, res := k.run(sess, `id -u; id -g; grep -E '^Cap(Eff|Prm|Bnd|Amb):' /proc/self/status | tr -s '\t' ' '
grep NoNewPrivs /proc/self/status | tr -s '\t' ' '
ls /var/run/secrets/kubernetes.io/serviceaccount 2>/dev/null | wc -l
touch /etc/corral-probe 2>/dev/null && echo root-writable || echo root-ro
touch /usr/corral-probe 2>/dev/null && echo usr-writable || echo usr-ro
echo data > ./f && cat ./f; pwd; echo "$HOME"; touch /tmp/t && echo tmp-ok`, nil)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s %s", res.ExitCode, out, errb)
	}
	want := "1000\n1000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nCapAmb: 0000000000000000\nNoNewPrivs: 1\n0\nroot-ro\nusr-ro\ndata\n" + k.ws + "\n/tmp\ntmp-ok\n"
	if out != want {
		t.Errorf("in the pod:\n%s\nwant:\n%s", out, want)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "RuntimeDefault") {
		t.Errorf("warnings %q, want the RuntimeDefault note", res.Warnings)
	}
}

// TestSessionOnKubernetes: cwd and variables carry over, stdin reaches the
// command intact, background processes run in the pod and Kill ends their
// whole tree, a timeout ends the tree, and the pod goes with the session.
func TestSessionOnKubernetes(t *testing.T) {
	k := newKube(t)
	m := session.NewManager(session.Options{StateDir: filepath.Join(dockertest.TestDir(t), "state"), Resolve: func(string) (*session.Spec, error) {
		return &session.Spec{Backend: k.b, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: k.ws}, Timeout: time.Minute,
			OutputLimit: 1 << 20, Env: []string{"PATH=/usr/bin:/bin"}}, nil
	}})
	defer m.Close()
	name := "sess-" + strconv.Itoa(os.Getpid())
	s, err := m.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exec := func(req session.ExecRequest) *session.ExecResult {
		t.Helper()
		r, err := s.Exec(ctx, req)
		if err != nil {
			t.Fatalf("Exec(%q): %v\nlog:\n%s", req.Command, err, k.log.String())
		}
		return r
	}
	exec(session.ExecRequest{Command: "mkdir -p a/b && cd a/b && export GREETING='hello there'"})
	r := exec(session.ExecRequest{Command: `echo "$PWD|$GREETING"`})
	if want := k.ws + "/a/b|hello there\n"; r.Output.Text != want || r.Cwd != k.ws+"/a/b" {
		t.Errorf("carried over: %q cwd %q, want %q", r.Output.Text, r.Cwd, want)
	}
	// A workspace round trip: 3 MiB in through stdin, its hash computed in
	// the pod, read back by a later command.
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	sum := sha256.Sum256(data)
	// (The image has no sha256sum: corral's helper hashes it.)
	r = exec(session.ExecRequest{Command: "cat > blob && /.corral/corral __corral-sha256 blob", Stdin: data})
	if got := strings.TrimSpace(r.Output.Text); got != hex.EncodeToString(sum[:]) {
		t.Errorf("uploaded blob hash %q, want %x", r.Output.Text, sum)
	}
	r = exec(session.ExecRequest{Command: "wc -c < blob"})
	if strings.TrimSpace(r.Output.Text) != strconv.Itoa(len(data)) {
		t.Errorf("blob size %q", r.Output.Text)
	}
	// Background process with children; Kill ends the tree.
	p, err := s.Start(session.StartRequest{Command: `(sleep 310; echo never) & sleep 311 & echo started; wait`})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := s.Output(p.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(c.Data, "started") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no output: %+v", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Kill(p.ID); err != nil {
		t.Fatal(err)
	}
	count := `for p in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $p 2>/dev/null; echo; done | grep -c '^sleep 3[01][0-9] $' || true`
	r = exec(session.ExecRequest{Command: count})
	if r.Output.Text != "0\n" {
		t.Errorf("left after Kill: %q", r.Output.Text)
	}
	// A timeout ends the whole tree.
	r = exec(session.ExecRequest{Command: "sleep 301 & sleep 302; echo never", Timeout: 2 * time.Second})
	if !r.TimedOut || strings.Contains(r.Output.Text, "never") {
		t.Errorf("timeout: %+v", r)
	}
	r = exec(session.ExecRequest{Command: count})
	if r.Output.Text != "0\n" {
		t.Errorf("left after the timeout: %q", r.Output.Text)
	}
	if pods, _ := k.objects(name); len(pods) != 1 {
		t.Fatalf("pods of the session: %v", pods)
	}
	m.Close()
	k.waitGone(name)
}

// TestCancelAndExitCodes: exit statuses come back, cancellation ends the
// command, and a bad setting is refused naming its key before anything is
// made.
// TestOutputOrder: one writer for stdout and stderr gets them in the order
// the command wrote them (one pipe in the pod).
func TestOutputOrder(t *testing.T) {
	k := newKube(t)
	var both bytes.Buffer
	for range 3 {
		both.Reset()
		_, _, res := k.run("order", testkit.OrderScript, func(r *sandbox.Request) { r.Stdout, r.Stderr = &both, &both })
		if res.ExitCode != 0 || both.String() != testkit.OrderWant() {
			t.Fatalf("exit %d, output out of order:\n%.600q", res.ExitCode, both.String())
		}
	}
}

func TestCancelAndExitCodes(t *testing.T) {
	k := newKube(t)
	sess := "codes-" + strconv.Itoa(os.Getpid())
	if _, _, res := k.run(sess, "exit 7", nil); res.ExitCode != 7 {
		t.Errorf("exit status %d, want 7", res.ExitCode)
	}
	if _, _, res := k.run(sess, "kill -9 $$", nil); res.ExitCode != 137 || res.Signal != 9 {
		t.Errorf("killed: %+v", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	req := &sandbox.Request{Argv: []string{"sleep", "300"}, Session: sess, Policy: sandbox.Policy{Workdir: k.ws, Profile: sandbox.ProfileWorkspace}}
	res, err := k.b.Run(ctx, req)
	if err != nil || res.ExitCode == 0 {
		t.Errorf("cancelled: %+v %v", res, err)
	}
	bad := k.e.Backend(func() Settings { s := k.st; s.User = "0:0"; return s }())
	_, err = bad.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Session: "bad", Policy: sandbox.Policy{Workdir: k.ws}})
	if err == nil || !strings.Contains(err.Error(), "kubernetes.user") {
		t.Errorf("root user: %v", err)
	}
	if pods, _ := k.objects("bad"); len(pods) != 0 {
		t.Errorf("a refused setting made pods %v", pods)
	}
	k.b.Release(sess)
	k.waitGone(sess)
}

// TestCleanupAfterKill9: the pod of a corral process killed with -9 is
// removed by Cleanup, which keeps the pods of a corral that still runs
// (this test process's).
func TestCleanupAfterKill9(t *testing.T) {
	k := newKube(t)
	live := "live-" + strconv.Itoa(os.Getpid())
	k.run(live, "true", nil)
	bin := dockertest.StaticCorral(t)
	home := dockertest.TestDir(t)
	sess := "k9-" + strconv.Itoa(os.Getpid())
	cmd := exec.Command(bin, "run", "--session", sess, "--", "sleep 120")
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "CORRAL_BACKEND=kubernetes", "CORRAL_PROFILE=workspace",
		"CORRAL_CWD=" + k.ws, "CORRAL_KUBERNETES_KUBECONFIG=" + k.kubeconfig, "CORRAL_KUBERNETES_IMAGE=" + k.st.Image,
		"CORRAL_KUBERNETES_NAMESPACE=" + k.st.Namespace, "CORRAL_KUBERNETES_MEMORY=256Mi", "CORRAL_KUBERNETES_CPUS=500m"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(120 * time.Second)
	for {
		pods, _ := k.objects(sess)
		if len(pods) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pod appeared for the child corral: %s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The pod exists once it is made, before the command runs: wait for
	// the command, then kill corral.
	for {
		_, _, r := k.run(live, "true", nil) // keeps the live pod in use
		_ = r
		if strings.Contains(k.podsOwnedBy(cmd.Process.Pid), "ready") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	los, err := k.e.Cleanup(context.Background(), k.st, false)
	if err != nil {
		t.Fatal(err)
	}
	removed, keptLive := 0, false
	for _, lo := range los {
		if lo.Session == sess && lo.Removed {
			removed++
		}
		if lo.Session == live && lo.Kind == "pod" && !lo.Removed && strings.Contains(lo.Kept, "in use") {
			keptLive = true
		}
		if lo.Session == live && lo.Removed {
			t.Errorf("cleanup removed the live corral's %s %s", lo.Kind, lo.Name)
		}
	}
	if removed != 2 || !keptLive {
		t.Errorf("cleanup: removed %d of the killed corral's objects (want pod and policy), kept live %v: %+v", removed, keptLive, los)
	}
	k.waitGone(sess)
}

// podsOwnedBy says "ready" when a Ready pod owned by pid exists.
func (k *kube) podsOwnedBy(pid int) string {
	cl, _ := k.e.clusterFor(k.st.Kubeconfig, "")
	var pl corev1.PodList
	if err := cl.cs.list(context.Background(), k.st.Namespace, resPods, LabelManaged+"=true", &pl); err != nil {
		return ""
	}
	for _, p := range pl.Items {
		if strings.Contains(p.Annotations[AnnotationOwner], fmt.Sprintf("/%d/", pid)) && podReady(&p) {
			return "ready"
		}
	}
	return ""
}
