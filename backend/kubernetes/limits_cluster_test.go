package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/k8stest"
	"github.com/corralhq/corral/sandbox"
)

// TestOOMReportedOnKubernetes: a command exceeding kubernetes.memory is
// reported as killed for memory, naming the setting; a plain SIGKILL
// afterwards is not.
func TestOOMReportedOnKubernetes(t *testing.T) {
	k := newKube(t)
	sess := "oom-" + strconv.Itoa(os.Getpid())
	out, errb, res := k.run(sess, `python3 -c 'x = bytearray(512 << 20); print(len(x))'`, nil)
	if res.ExitCode != 137 || res.LimitHit != sandbox.LimitPodMemory {
		t.Fatalf("memory bomb under 256Mi: exit %d limit %q: %s %s", res.ExitCode, res.LimitHit, out, errb)
	}
	if msg := sandbox.LimitMessage(res, sandbox.Limits{}); !strings.Contains(msg, "out of memory") || !strings.Contains(msg, "kubernetes.memory") {
		t.Errorf("message %q", msg)
	}
	if _, _, res := k.run(sess, `kill -KILL $$`, nil); res.LimitHit != "" || res.ExitCode != 137 {
		t.Errorf("kill -KILL reported as %q (exit %d)", res.LimitHit, res.ExitCode)
	}
	k.b.Release(sess)
	k.waitGone(sess)
}

// TestPidsRefused: kubernetes.pids cannot be applied by corral, so a
// non-zero value is refused naming what the node must set, before
// anything is made.
func TestPidsRefused(t *testing.T) {
	k := newKube(t)
	st := k.st
	st.Pids = 256
	_, err := k.e.Backend(st).Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Session: "pids-refused", Policy: sandbox.Policy{Workdir: k.ws}})
	if err == nil || !strings.Contains(err.Error(), "kubernetes.pids 256") || !strings.Contains(err.Error(), "podPidsLimit") {
		t.Errorf("pids 256: %v", err)
	}
	if pods, _ := k.objects("pids-refused"); len(pods) != 0 {
		t.Errorf("a refused setting made pods %v", pods)
	}
}

// nodePidsLimit returns the kubelet's podPidsLimit of the test node (its
// /configz through the API server's node proxy, admin credentials), or
// -1 when it sets none.
func nodePidsLimit(t *testing.T, admin k8s.Interface) int64 {
	t.Helper()
	ctx := context.Background()
	nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	raw, err := admin.CoreV1().RESTClient().Get().Resource("nodes").Name(nodes.Items[0].Name).SubResource("proxy").Suffix("configz").DoRaw(ctx)
	if err != nil {
		t.Fatalf("the kubelet's /configz: %v", err)
	}
	s := podPidsLimitOf(raw)
	var n int64
	if _, err := fmt.Sscanf(s, "%d processes", &n); err != nil {
		return -1
	}
	return n
}

// TestForkBombHeldOnKubernetes: the node's podPidsLimit holds a fork
// bomb, the timeout ends it, and the pod still works afterwards.
func TestForkBombHeldOnKubernetes(t *testing.T) {
	k := newKube(t)
	limit := nodePidsLimit(t, k8stest.Require(t).AdminOrSkip(t))
	if limit < 0 {
		t.Skip("the test node's kubelet sets no podPidsLimit, so nothing but the node holds a fork bomb: .ci/k8s-cluster sets podPidsLimit 1024 for clusters started since this test was added; restart the cluster (.ci/k8s-cluster down && up)")
	}
	sess := "fb-" + strconv.Itoa(os.Getpid())
	// Fill the pod's pids limit, then write: the agent keeps working.
	out, errb, res := k.run(sess, `python3 - <<'PY'
import os, sys, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        # sleep, not a copy of python: a thousand pythons would hit the
        # pod's memory limit before its pids limit.
        os.execv("/bin/sleep", ["sleep", "30"])
    n += 1
print(n)
PY`, nil)
	n, _ := strconv.Atoi(strings.TrimSpace(out))
	if res.ExitCode != 0 || n <= 0 || int64(n) >= limit {
		t.Errorf("pid filler: exit %d, forked %q (limit %d): %s", res.ExitCode, out, limit, errb)
	}
	_, _, res = k.run(sess, `bomb() { bomb | bomb & }; bomb; sleep 30`, func(r *sandbox.Request) { r.Timeout = 5 * time.Second })
	if !res.TimedOut {
		t.Errorf("fork bomb: %+v, want a timeout", res)
	}
	// The bomb's survivors may take a moment to be reaped: a condition
	// loop, not a verdict on timing.
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _, _ = k.run(sess, `n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; [ $n -lt 12 ] && echo clean || echo "$n processes"`, nil)
		if out == "clean\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the bomb: %q", out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	k.b.Release(sess)
	k.waitGone(sess)
}

// TestPVCRoundTrip: kubernetes.storage pvc keeps the workspace in a PVC
// of the session. The test cluster has no provisioner: the test makes a
// hostPath PersistentVolume of a class of its own (admin credentials) and,
// where the cluster runs no PV binder (kube-controller-manager's
// persistentvolume-binder, enabled by .ci/k8s-cluster for clusters
// started since), binds corral's claim to it as that controller would.
// The PVC goes with the session.
func TestPVCRoundTrip(t *testing.T) {
	k := newKube(t)
	admin := k8stest.Require(t).AdminOrSkip(t)
	ctx := context.Background()
	class := "corral-test-" + strconv.Itoa(os.Getpid())
	dir := filepath.Join(dockertest.TestDir(t), "pv")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // the pod's uid 1000 writes there (fsGroup does not apply to hostPath)
		t.Fatal(err)
	}
	dirType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}},
		},
	}
	if _, err := admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Its kubernetes.io/pv-protection finalizer is lifted here: the
		// pv-protection controller may not run (see bindClaim).
		ctx := context.Background()
		_ = admin.CoreV1().PersistentVolumes().Delete(ctx, class, metav1.DeleteOptions{})
		_, _ = admin.CoreV1().PersistentVolumes().Patch(ctx, class, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	st := k.st
	st.Storage, st.StorageClass, st.StorageSize = StoragePVC, class, "1Gi"
	b := k.e.Backend(st)
	sess := "pvc-" + strconv.Itoa(os.Getpid())
	stop := make(chan struct{})
	bound := make(chan error, 1)
	go func() { bound <- bindClaim(admin, k.st.Namespace, class, stop) }()
	run := func(script string) string {
		var out strings.Builder
		res, err := b.Run(ctx, &sandbox.Request{Argv: []string{"bash", "-c", script}, Session: sess, Stdout: &out, Stderr: &out,
			Policy: sandbox.Policy{Workdir: k.ws, Profile: sandbox.ProfileWorkspace}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: %v %+v %s\nlog:\n%s", script, err, res, out.String(), k.log.String())
		}
		return out.String()
	}
	run(`echo kept > data; mkdir -p sub && head -c 100000 /dev/urandom > sub/blob && /.corral/corral __corral-sha256 sub/blob > sum`)
	close(stop)
	if err := <-bound; err != nil {
		t.Fatal(err)
	}
	if out := run(`cat data; [ "$(/.corral/corral __corral-sha256 sub/blob)" = "$(cat sum)" ] && echo same`); out != "kept\nsame\n" {
		t.Errorf("in the PVC: %q", out)
	}
	// The data is on the volume, not in the container: the PV's directory holds it.
	if b, err := os.ReadFile(filepath.Join(dir, "data")); err != nil || string(b) != "kept\n" {
		t.Errorf("the PV's directory: %q %v", b, err)
	}
	run(`rm -rf ./*`) // files of the pod's uid, which the test's user may not remove from the host
	b.Release(sess)
	k.waitGone(sess)
	deadline := time.Now().Add(60 * time.Second)
	for {
		l, err := admin.CoreV1().PersistentVolumeClaims(k.st.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=true"})
		if err != nil {
			t.Fatal(err)
		}
		left := 0
		for _, c := range l.Items {
			if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != class {
				continue
			}
			if c.DeletionTimestamp == nil {
				left++
				continue
			}
			// Deleted by corral; its kubernetes.io/pvc-protection finalizer
			// is the pvc-protection controller's to lift, which clusters
			// started before .ci/k8s-cluster enabled it do not run.
			if len(c.Finalizers) > 0 {
				_, _ = admin.CoreV1().PersistentVolumeClaims(k.st.Namespace).Patch(ctx, c.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d PVCs of class %s left after the session", left, class)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// bindClaim waits for corral's PVC of class in ns and binds it to the PV
// of the same name as kube-controller-manager's persistentvolume-binder
// does (PV claimRef and Bound, PVC volumeName, bind-completed and Bound),
// unless a binder has done so; it returns when the claim is bound or stop
// is closed (an error then if it never was).
func bindClaim(admin k8s.Interface, ns, class string, stop chan struct{}) error {
	ctx := context.Background()
	for {
		select {
		case <-stop:
			return fmt.Errorf("corral's PVC of class %s was never bound", class)
		case <-time.After(100 * time.Millisecond):
		}
		l, err := admin.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=true"})
		if err != nil {
			return err
		}
		for _, c := range l.Items {
			if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != class {
				continue
			}
			if c.Status.Phase == corev1.ClaimBound {
				return nil
			}
			pv, err := admin.CoreV1().PersistentVolumes().Get(ctx, class, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pv.Spec.ClaimRef == nil {
				pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: c.Name, UID: c.UID, ResourceVersion: c.ResourceVersion}
				if pv, err = admin.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
					if apierrors.IsConflict(err) {
						continue
					}
					return err
				}
			}
			if pv.Status.Phase != corev1.VolumeBound {
				pv.Status.Phase = corev1.VolumeBound
				if _, err = admin.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
					return err
				}
			}
			if c.Spec.VolumeName == "" {
				c.Spec.VolumeName = class
				if c.Annotations == nil {
					c.Annotations = map[string]string{}
				}
				c.Annotations["pv.kubernetes.io/bind-completed"] = "yes"
				nc, err := admin.CoreV1().PersistentVolumeClaims(ns).Update(ctx, &c, metav1.UpdateOptions{})
				if err != nil {
					if apierrors.IsConflict(err) {
						continue
					}
					return err
				}
				c = *nc
			}
			c.Status.Phase = corev1.ClaimBound
			c.Status.AccessModes = pv.Spec.AccessModes
			c.Status.Capacity = pv.Spec.Capacity
			if _, err := admin.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, &c, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
				return err
			}
		}
	}
}
