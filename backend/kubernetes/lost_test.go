package kubernetes

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/backend/internal/scopes"
)

// runningPod is a pod whose commands' container runs and which is Ready.
func runningPod() *corev1.Pod {
	return &corev1.Pod{
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
				{Name: HelperContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			},
		},
	}
}

func TestPodLoss(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Pod)
		want   []string // substrings; none: the pod is usable
	}{
		{"running", func(*corev1.Pod) {}, nil},
		{"helper container restarted", func(p *corev1.Pod) { p.Status.ContainerStatuses[1].RestartCount = 1 }, nil},
		{"kubelet eviction", func(p *corev1.Pod) {
			// What the kubelet's eviction manager writes (pkg/kubelet/eviction).
			p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
			p.Status.Message = `Usage of EmptyDir volume "workspace" exceeds the limit "16Mi". `
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet", Message: "Pod was terminated in response to imminent eviction"})
		}, []string{`was evicted by its node's kubelet: Usage of EmptyDir volume "workspace" exceeds the limit "16Mi"`}},
		{"eviction API", func(p *corev1.Pod) {
			p.DeletionTimestamp = &now
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting"})
		}, []string{"was evicted through the Eviction API, as `kubectl drain` does (EvictionByEvictionAPI: Eviction API: evicting)"}},
		{"taint manager", func(p *corev1.Pod) {
			p.DeletionTimestamp = &now
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"})
		}, []string{"was deleted because its node was tainted", "(DeletionByTaintManager)"}},
		{"unknown disruption", func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "SomethingNew", Message: "m"})
		}, []string{"was disrupted (SomethingNew: m)"}},
		{"disruption withdrawn", func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse, Reason: "EvictionByEvictionAPI"})
		}, nil},
		{"deleted", func(p *corev1.Pod) { p.DeletionTimestamp = &now }, []string{"was deleted (at 2026-12-02T17:00:00Z"}},
		{"failed", func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Terminated", "Pod was terminated in response to imminent node shutdown."
		}, []string{"ended (phase Failed, Terminated: Pod was terminated in response to imminent node shutdown)"}},
		{"succeeded", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, []string{"ended (phase Succeeded)"}},
		{"container OOM", func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}
		}, []string{"lost its container sandbox (OOMKilled, exit status 137: the pod's memory limit, kubernetes.memory)"}},
		{"container restarted", func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 2 }, []string{"restarted its container sandbox (2 restarts)"}},
		{"container waiting", func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
		}, []string{"has its container sandbox not running"}},
		{"not ready", func(p *corev1.Pod) {
			p.Status.Conditions[0].Status, p.Status.Conditions[0].Reason = corev1.ConditionFalse, "NodeNotReady"
		}, []string{"is not ready (NodeNotReady); its node may be lost"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := runningPod()
			tc.mutate(p)
			got := podLoss(p)
			if len(tc.want) == 0 {
				if got != "" {
					t.Fatalf("podLoss = %q, want usable", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("podLoss = %q, want %q in it", got, w)
				}
			}
		})
	}
}

func TestLostNote(t *testing.T) {
	why := `was evicted by its node's kubelet: Usage of EmptyDir volume "workspace" exceeds the limit "16Mi"`
	r := &reset{pod: "corral-0123456789ab", lost: why}
	n := r.note()
	for _, w := range []string{"previous pod corral-0123456789ab " + why, "new pod with an empty workspace", "emptyDir", "corral cp", "corral sync --pull", "/tmp", "background processes", "exported variables carry over"} {
		if !strings.Contains(n, w) {
			t.Errorf("note %q lacks %q", n, w)
		}
	}
	r.pvc = "corral-0123456789ab-ws"
	n = r.note()
	for _, w := range []string{"previous pod corral-0123456789ab " + why, "same workspace volume (PVC)", "/tmp and the background processes were lost"} {
		if !strings.Contains(n, w) {
			t.Errorf("PVC note %q lacks %q", n, w)
		}
	}
	// An idle reset keeps its own note.
	if n := (&reset{idle: time.Minute}).note(); !strings.Contains(n, "kubernetes.idle_timeout (1m0s)") {
		t.Errorf("idle note %q", n)
	}
}

// TestLoseKeepsNoteAndPVC: a lost session pod leaves the table with a
// reset that carries the cause and its workspace PVC for the next pod
// (not deleted with the pod); a second report of the same loss, or one
// after the session moved on, records nothing.
func TestLoseKeepsNoteAndPVC(t *testing.T) {
	e := NewEngine(Options{})
	ready := make(chan struct{})
	close(ready)
	// Held by the command that notices the loss, as in runIn.
	l, _ := e.table.Acquire("a", scopes.KeyFor("a", false, "h"), func() *podRef {
		return &podRef{name: "corral-0123456789ab", namespace: "ns", pvc: "corral-0123456789ab-ws", ready: ready}
	})
	p := l.Handle
	e.lose(p, "was evicted by its node's kubelet: full")
	rs := e.table.Resets()
	if len(rs) != 1 {
		t.Fatalf("resets %+v", rs)
	}
	r := rs[0].Value
	if r.pvc != "corral-0123456789ab-ws" || r.pod != p.name || r.lost != "was evicted by its node's kubelet: full" || !slices.Equal(rs[0].Sessions, []string{"a"}) || rs[0].Key != l.Key {
		t.Fatalf("reset %+v %+v", rs[0], r)
	}
	if e.table.Live(p) || len(e.table.Entries()) != 0 || p.pvc != "" {
		t.Fatalf("still in the table, or its PVC would go with it: %v %q", e.table.Entries(), p.pvc)
	}
	e.lose(p, "was deleted")
	if rs := e.table.Resets(); len(rs) != 1 || rs[0].Value != r {
		t.Errorf("a second report replaced the reset: %+v", rs)
	}
	e.done(p) // its holder lets go: it was handed back already
	// The session ends: its kept PVC goes with it (removeKept: no client
	// here, so nothing is called).
	e.Release("a")
	if rs := e.table.Resets(); len(rs) != 0 {
		t.Errorf("resets after Release: %+v", rs)
	}
	// A pod of one command leaves no reset.
	l, _ = e.table.Acquire("", scopes.KeyFor("", false, "h"), func() *podRef {
		return &podRef{name: "corral-ba9876543210", ready: ready, ephemeral: true}
	})
	e.lose(l.Handle, "was deleted")
	if rs, es := e.table.Resets(), e.table.Entries(); len(rs) != 0 || len(es) != 0 {
		t.Errorf("one command's pod: resets %+v pods %+v", rs, es)
	}
	e.done(l.Handle)
}
