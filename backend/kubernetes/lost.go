package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// A session's pod can go behind corral's back: evicted by its node's
// kubelet (the workspace emptyDir past its sizeLimit, node pressure),
// evicted through the Eviction API (`kubectl drain`), preempted, deleted
// (`kubectl delete`, the taint manager when its node is lost), or left
// with its commands' container ended (killed for memory). corral learns
// it when the pod's agent stream breaks or a new one cannot be opened;
// it then reads the pod (podLoss), removes it, and the session's next
// command runs in a new pod with a note that names the cause and what was
// lost (lostNote). Sources: the Kubernetes documentation's "Pod
// disruption conditions" (DisruptionTarget and its reasons) and
// "Node-pressure eviction" (phase Failed, reason Evicted, the kubelet's
// message).

// Reasons of the DisruptionTarget condition (Kubernetes documentation,
// "Pod disruption conditions"; k8s.io/api names only some of them).
var disruptionReasons = map[string]string{
	"EvictionByEvictionAPI":  "evicted through the Eviction API, as `kubectl drain` does",
	"PreemptionByScheduler":  "preempted by the scheduler for a pod of higher priority",
	"DeletionByTaintManager": "deleted because its node was tainted NoExecute, as a node that is not ready or unreachable is",
	"DeletionByPodGC":        "deleted by the pod garbage collector, its node being gone",
	"TerminationByKubelet":   "terminated by its node's kubelet, for node pressure or a node shutdown",
}

// podLoss returns why pod can no longer run commands, as a phrase that
// follows "pod NAME" ("was evicted by its node's kubelet: ..."), or ""
// when it looks usable (pure). Lost: being deleted (with the
// DisruptionTarget condition's reason when the API server set one),
// phase Failed or Succeeded (the kubelet's reason and message, such as
// Evicted with "Usage of EmptyDir volume ... exceeds the limit"), the
// commands' container (ContainerName) ended or restarted, or the pod not
// Ready (its node lost, a container ended).
func podLoss(pod *corev1.Pod) string {
	var disruption *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if c := &pod.Status.Conditions[i]; c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			disruption = c
		}
	}
	detail := func(reason, msg string) string {
		// The kubelet ends its messages with ". ": the note goes on.
		msg = strings.TrimRight(strings.TrimSpace(msg), ".")
		switch {
		case reason != "" && msg != "":
			return reason + ": " + msg
		case msg != "":
			return msg
		}
		return reason
	}
	switch {
	case pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == "Evicted":
		return "was evicted by its node's kubelet: " + detail("", pod.Status.Message)
	case disruption != nil:
		what, ok := disruptionReasons[disruption.Reason]
		if !ok {
			what = "disrupted"
		}
		if d := detail(disruption.Reason, disruption.Message); d != "" {
			what += " (" + d + ")"
		}
		return "was " + what
	case pod.DeletionTimestamp != nil:
		return "was deleted (at " + pod.DeletionTimestamp.UTC().Format(time.RFC3339) + ", by `kubectl delete` or a controller; the API server recorded no cause)"
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		s := fmt.Sprintf("ended (phase %s", pod.Status.Phase)
		if d := detail(pod.Status.Reason, pod.Status.Message); d != "" {
			s += ", " + d
		}
		return s + ")"
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ContainerName {
			continue
		}
		if t := cs.State.Terminated; t != nil {
			s := fmt.Sprintf("lost its container %s (%s, exit status %d", cs.Name, t.Reason, t.ExitCode)
			if t.Reason == "OOMKilled" {
				s += ": the pod's memory limit, kubernetes.memory"
			}
			if m := strings.TrimSpace(t.Message); m != "" {
				s += ": " + m
			}
			return s + ")"
		}
		if cs.RestartCount > 0 {
			return fmt.Sprintf("restarted its container %s (%d restarts): what ran in it is gone", cs.Name, cs.RestartCount)
		}
		if cs.State.Running == nil {
			return fmt.Sprintf("has its container %s not running", cs.Name)
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			s := "is not ready"
			if d := detail(c.Reason, c.Message); d != "" {
				s += " (" + d + ")"
			}
			return s + "; its node may be lost"
		}
	}
	return ""
}

// goneWhy is podLoss's phrase for a pod the API server no longer has.
const goneWhy = "was deleted (by `kubectl delete`, the Eviction API, a node drain or the loss of its node; it was gone when corral looked, so the cause is unknown)"

// lossSettle bounds how long lossOf waits for a pod whose agent died to
// show why in its status: the kubelet reports an eviction or a dead
// container a moment after the processes go (its status manager, its
// PLEG relist every second).
var lossSettle = 15 * time.Second

// lossOf reads p's pod and returns podLoss's phrase, goneWhy when the
// API server no longer has it, or "" when it looks usable or cannot be
// read. With settle > 0 it reads again (backing off to a second apart)
// until the pod shows a loss or settle has passed: called when the
// agent's stream broke, which comes before the kubelet reports why.
func (e *Engine) lossOf(ctx context.Context, p *podRef, settle time.Duration) string {
	if p.cl == nil || p.cl.cs == nil {
		return ""
	}
	deadline := time.Now().Add(settle)
	delay := 100 * time.Millisecond
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var pod corev1.Pod
		err := p.cl.cs.get(rctx, p.namespace, resPods, p.name, &pod)
		cancel()
		switch {
		case apierrors.IsNotFound(err):
			return goneWhy
		case err != nil:
			// Unknown: the caller treats the pod as usable, and a
			// command that cannot reach it fails as passing.
			e.log.Warn("kubernetes.pod.status_failed", "pod", p.name, "namespace", p.namespace, "error", err)
			return ""
		}
		if p.uid != "" && pod.UID != p.uid {
			// Another corral removed the session's home pod and made
			// it again: this one is gone.
			return goneWhy
		}
		if why := podLoss(&pod); why != "" {
			return why
		}
		if time.Now().Add(delay).After(deadline) {
			return ""
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// lose takes p, gone for why (podLoss), out of the engine's table and
// removes what is left of it, whatever commands still hold it (they
// cannot use it; a PVC kept for the next pod must not stay mounted by
// this one). A session's (or shared) pod leaves a reset behind, so its
// scope's next command gets a new pod and the note of lostNote; under
// storage pvc the workspace PVC is kept for that pod. A pod of one
// command is removed when that command ends, as it always is. Nothing is
// recorded when p had left the table already (another command noticed
// first, or the session ended).
func (e *Engine) lose(p *podRef, why string) {
	pvc := ""
	keep := func() *reset {
		// Under the table's lock: the PVC moves to the reset, so the
		// pod's removal leaves it.
		pvc = p.pvc
		p.pvc = ""
		return &reset{pod: p.name, lost: why, pvc: pvc, cl: p.cl, ns: p.namespace}
	}
	retire := e.table.Take
	if p.ephemeral {
		retire = e.table.Retire
	}
	took, d := retire(p, "lost", keep)
	if !took {
		return
	}
	e.log.Warn("kubernetes.pod.lost", "pod", p.name, "namespace", p.namespace, "reason", why, "pvc_kept", pvc)
	if d != nil {
		go e.remove(p, d.Why)
	}
}

// lostNote is the note on the first result in the pod that replaced pod,
// lost for why (pure). It says what went with it: the workspace, which
// lives in the pod's emptyDir and is never copied back to corral's
// machine by itself (only `corral cp` and `corral sync --pull` bring
// files out), unless it is a PVC (pvcKept); /tmp; background processes.
func lostNote(pod, why string, pvcKept bool) string {
	if pvcKept {
		return fmt.Sprintf("this session's previous pod %s %s; this command runs in a new pod with the same workspace volume (PVC), but /tmp and the background processes were lost, and a command that was running there may have run in part", pod, why)
	}
	return fmt.Sprintf("this session's previous pod %s %s; this command runs in a new pod with an empty workspace: every file of the old workspace (an emptyDir of that pod: what commands wrote and what `corral cp` or `corral sync` put there) was lost unless it had been copied out with `corral cp` or `corral sync --pull`, and so were /tmp and the background processes; the session's working directory and exported variables carry over", pod, why)
}
