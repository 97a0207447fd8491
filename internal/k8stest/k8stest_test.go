package k8stest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/exec"
	"k8s.io/utils/ptr"
)

const testLabel = "corral.test/k8stest"

// runPod starts a pod of the test image that sleeps, locked down as
// corral's will be (non-root, no capabilities, no token), waits until it
// runs, and deletes it (by label) when the test ends.
func runPod(t *testing.T, c *Cluster) string {
	t.Helper()
	name := fmt.Sprintf("k8stest-%d", time.Now().UnixNano())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{testLabel: name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           c.Image,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sleep", "3600"},
				WorkingDir:      "/work",
				SecurityContext: &corev1.SecurityContext{
					RunAsUser:                ptr.To[int64](65534),
					RunAsNonRoot:             ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}, {Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	ctx := context.Background()
	pods := c.Client.CoreV1().Pods(c.Namespace)
	start := time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	t.Cleanup(func() {
		sel := metav1.ListOptions{LabelSelector: testLabel + "=" + name}
		if err := pods.DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, sel); err != nil {
			t.Errorf("deleting pod by label: %v", err)
		}
	})
	// A condition loop with a generous deadline: a loaded machine may take
	// long, and only a pod that never runs fails.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting pod: %v", err)
		}
		if p.Status.Phase == corev1.PodRunning {
			t.Logf("pod running %v after create", time.Since(start).Round(time.Millisecond))
			return name
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			t.Fatalf("pod ended before running: %s %s", p.Status.Phase, p.Status.Message)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not running after 3 min: phase %s, conditions %+v, containers %+v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestNodeReadyAndExec(t *testing.T) {
	c := Require(t)
	admin := c.AdminOrSkip(t)
	ctx := context.Background()
	nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 {
		t.Fatalf("want one node, got %d", len(nodes.Items))
	}
	ready := slices.ContainsFunc(nodes.Items[0].Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
	if !ready {
		t.Fatalf("node %s not Ready: %+v", nodes.Items[0].Name, nodes.Items[0].Status.Conditions)
	}
	// corral's own credentials cannot list nodes: its RBAC is its namespace.
	if _, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("corral's token listing nodes: want Forbidden, got %v", err)
	}

	pod := runPod(t, c)
	out, err := c.Output(ctx, pod, "main", "echo", "hello from the pod")
	if err != nil || out != "hello from the pod\n" {
		t.Fatalf("exec echo: %q, %v", out, err)
	}
	out, err = c.Output(ctx, pod, "main", "id", "-u")
	if err != nil || out != "65534\n" {
		t.Fatalf("exec id -u: %q, %v", out, err)
	}
	// The exit code comes back.
	_, err = c.Output(ctx, pod, "main", "sh", "-c", "echo to-stderr >&2; exit 7")
	var ee exec.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 7 || !strings.Contains(err.Error(), "to-stderr") {
		t.Fatalf("exec exit 7: want an ExitError with status 7 and the stderr, got %v", err)
	}
	// No service-account token inside.
	if out, err := c.Output(ctx, pod, "main", "sh", "-c", "ls /var/run/secrets/kubernetes.io 2>&1; true"); err != nil || !strings.Contains(out, "No such file") {
		t.Errorf("service-account token dir: %q, %v", out, err)
	}

	// Exec latency (reported, not judged: the machine is shared).
	var times []time.Duration
	for range 10 {
		t0 := time.Now()
		if _, err := c.Output(ctx, pod, "main", "true"); err != nil {
			t.Fatal(err)
		}
		times = append(times, time.Since(t0))
	}
	slices.Sort(times)
	t.Logf("exec true: median %v, min %v, max %v over %d", times[len(times)/2].Round(time.Millisecond), times[0].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), len(times))
}

// TestUpload8MiB sends 8 MiB over exec stdin and checks the hash of what
// landed. containerd's CRI exec closes stdin as soon as the command's
// stdout ends, so the command keeps stdout open until it has read all of
// stdin (the shell stays, holding it, while cat writes the file) and the
// hash it prints afterwards is compared with the one sent.
func TestUpload8MiB(t *testing.T) {
	c := Require(t)
	pod := runPod(t, c)
	data := make([]byte, 8<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	var out, errb bytes.Buffer
	t0 := time.Now()
	err := c.Exec(context.Background(), pod, "main", []string{"sh", "-c", `cat > /work/blob && python3 -c 'import hashlib; print(hashlib.sha256(open("/work/blob", "rb").read()).hexdigest())'`}, bytes.NewReader(data), &out, &errb)
	if err != nil {
		t.Fatalf("upload: %v (stderr %q)", err, errb.String())
	}
	t.Logf("8 MiB in over exec stdin: %v", time.Since(t0).Round(time.Millisecond))
	if got := strings.TrimSpace(out.String()); got != want {
		t.Fatalf("uploaded file's sha256 %q, sent %q: the upload was cut short", got, want)
	}
	// And back out over stdout.
	var back bytes.Buffer
	t0 = time.Now()
	if err := c.Exec(context.Background(), pod, "main", []string{"cat", "/work/blob"}, nil, &back, &errb); err != nil {
		t.Fatalf("download: %v", err)
	}
	t.Logf("8 MiB out over exec stdout: %v", time.Since(t0).Round(time.Millisecond))
	if !bytes.Equal(back.Bytes(), data) {
		t.Fatalf("downloaded %d bytes, not the %d sent", back.Len(), len(data))
	}
}

// TestPodReachesHost: a pod reaches a port the host listens on at
// CORRAL_TEST_KUBE_HOST_ADDR (where corral's egress proxy will listen).
func TestPodReachesHost(t *testing.T) {
	c := Require(t)
	addr := os.Getenv("CORRAL_TEST_KUBE_HOST_ADDR")
	if addr == "" {
		t.Skip("CORRAL_TEST_KUBE_HOST_ADDR is not set (.ci/k8s-cluster up writes it to /var/tmp/k8s-ready)")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatalf("listening on the host side %s: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from the host")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	pod := runPod(t, c)
	out, err := c.Output(context.Background(), pod, "main", "curl", "-sS", "--max-time", "60", "http://"+ln.Addr().String()+"/")
	if err != nil || out != "hello from the host" {
		t.Fatalf("pod -> host %s: %q, %v", ln.Addr(), out, err)
	}
}
