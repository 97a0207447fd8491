package kubernetes

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	p := &podRef{name: "corral-0123456789ab", namespace: "ns", scopeKey: "s:a|h", pvc: "corral-0123456789ab-ws", ready: ready, sessions: map[string]bool{"a": true}}
	e.pods[p.scopeKey] = p
	e.lose(p, "was evicted by its node's kubelet: full")
	r := e.resets[p.scopeKey]
	if r == nil || r.pvc != "corral-0123456789ab-ws" || r.pod != p.name || r.lost != "was evicted by its node's kubelet: full" || !r.sessions["a"] {
		t.Fatalf("reset %+v", r)
	}
	if _, ok := e.pods[p.scopeKey]; ok || p.pvc != "" {
		t.Fatalf("still in the table, or its PVC would go with it: %v %q", e.pods, p.pvc)
	}
	e.lose(p, "was deleted")
	if e.resets[p.scopeKey] != r {
		t.Errorf("a second report replaced the reset: %+v", e.resets[p.scopeKey])
	}
	// The session ends: its kept PVC goes with it (removeKept: no client
	// here, so nothing is called).
	e.Release("a")
	if len(e.resets) != 0 {
		t.Errorf("resets after Release: %v", e.resets)
	}
	// A pod of one command leaves no reset.
	o := &podRef{name: "corral-ba9876543210", scopeKey: "once:x", ready: ready, sessions: map[string]bool{}, ephemeral: true}
	e.pods[o.scopeKey] = o
	e.lose(o, "was deleted")
	if len(e.resets) != 0 || len(e.pods) != 0 {
		t.Errorf("one command's pod: resets %v pods %v", e.resets, e.pods)
	}
}
