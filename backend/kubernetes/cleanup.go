package kubernetes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/internal/owner"
)

// Leftover is a corral object (pod, NetworkPolicy or PVC) Cleanup looked
// at.
type Leftover struct {
	// Kind is "pod", "networkpolicy" or "pvc"; Name and Namespace the
	// object's.
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Session is AnnotationSession; Owner AnnotationOwner.
	Session string `json:"session"`
	Owner   string `json:"owner"`
	// Pool is a warm-pool pod's LabelPool (PoolFree, ...); Pod the pod
	// a NetworkPolicy or PVC belongs to (LabelPod).
	Pool string `json:"pool,omitempty"`
	Pod  string `json:"pod,omitempty"`
	// Removed is set when Cleanup deleted it; Kept says why it did not.
	Removed bool   `json:"removed"`
	Kept    string `json:"kept,omitempty"`
}

// Describe says whose the object is, for `corral cleanup`'s lines:
// "session NAME", "warm pool, free", "one command" or "pod NAME" (a
// policy or PVC of a pod that has no session: a pool's). Pure.
func (l Leftover) Describe() string {
	switch {
	case l.Session != "":
		return "session " + l.Session
	case l.Pool != "":
		return "warm pool, " + l.Pool
	case l.Kind != "pod" && l.Pod != "" && l.Pod != l.Name:
		return "pod " + l.Pod
	case l.Kind != "pod":
		return "pod " + l.Name
	}
	return "one command"
}

// decide returns "" when an object whose owner annotation is o may go,
// else why it is kept (pure): a dead owner's go; a live one's stay; one
// owned on another machine (or with no valid owner) stays unless all.
func decide(o string, self owner.ID, all bool) string {
	if all {
		return ""
	}
	id, ok := owner.Parse(o)
	if !ok {
		return "no valid owner annotation; --all removes it"
	}
	switch id.State(self) {
	case owner.Dead:
		return ""
	case owner.Alive:
		return fmt.Sprintf("in use by corral (pid %d)", id.PID)
	}
	return "owned by a corral process on another machine (" + id.Host + "); --all removes it"
}

// Cleanup deletes the pods, NetworkPolicies and PVCs labelled LabelManaged
// in the namespace of st (never any other object) whose corral process is
// gone (a crash, kill -9): owned on this machine by a process that has
// exited. all deletes every one, in use or not. A pod goes before its
// policy, so no pod runs without its policy; a pod is deleted only if it
// is unchanged since it was listed (its UID and resourceVersion as
// preconditions: a warm-pool pod another corral claimed meanwhile stays).
// A policy or PVC whose pod (LabelPod) is kept stays too: a warm-pool pod
// claimed by a live corral keeps its maker's owner on them.
func (e *Engine) Cleanup(ctx context.Context, st Settings, all bool) ([]Leftover, error) {
	cl, ns, err := e.target(&st)
	if err != nil {
		return nil, err
	}
	sel := LabelManaged + "=true"
	var out []Leftover
	keptPods := map[string]bool{}
	visit := func(kind string, m metav1.ObjectMeta, remove func() error) {
		if m.Labels[LabelManaged] != "true" {
			return
		}
		lo := Leftover{Kind: kind, Name: m.Name, Namespace: m.Namespace, Session: m.Annotations[AnnotationSession], Owner: m.Annotations[AnnotationOwner],
			Pool: m.Labels[LabelPool], Pod: m.Labels[LabelPod]}
		lo.Kept = decide(lo.Owner, e.self, all)
		if lo.Kept == "" && kind != "pod" && keptPods[m.Labels[LabelPod]] {
			lo.Kept = "its pod " + m.Labels[LabelPod] + " is kept"
		}
		if lo.Kept == "" {
			if err := remove(); err != nil {
				lo.Kept = "removal failed: " + err.Error()
			} else {
				lo.Removed = true
				e.log.Info("kubernetes.object.removed", "kind", kind, "name", m.Name, "namespace", m.Namespace, "reason", "cleanup")
			}
		}
		if lo.Kept != "" && kind == "pod" {
			keptPods[m.Name] = true
		}
		out = append(out, lo)
	}
	var pods corev1.PodList
	if err := cl.cs.list(ctx, ns, resPods, sel, &pods); err != nil {
		return nil, apiErr("listing pods", err)
	}
	for _, p := range pods.Items {
		pre := &metav1.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}
		visit("pod", p.ObjectMeta, func() error { return ignoreNotFound(cl.cs.removeIf(ctx, ns, resPods, p.Name, pre)) })
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := cl.cs.list(ctx, ns, resClaims, sel, &pvcs); err != nil {
		return out, apiErr("listing PVCs", err)
	}
	for _, c := range pvcs.Items {
		visit("pvc", c.ObjectMeta, func() error { return ignoreNotFound(cl.cs.remove(ctx, ns, resClaims, c.Name)) })
	}
	var nps networkingv1.NetworkPolicyList
	if err := cl.cs.list(ctx, ns, resPolicies, sel, &nps); err != nil {
		return out, apiErr("listing NetworkPolicies", err)
	}
	for _, np := range nps.Items {
		visit("networkpolicy", np.ObjectMeta, func() error { return ignoreNotFound(cl.cs.remove(ctx, ns, resPolicies, np.Name)) })
	}
	return out, nil
}
