package kubernetes

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/corralhq/corral/backend/kubernetes/kubeval"
	"github.com/corralhq/corral/sandbox"
)

// Scopes of Settings.Scope (as docker.scope).
const (
	// ScopeSession gives every session a pod of its own.
	ScopeSession = "session"
	// ScopeShared gives all sessions with the same settings one pod,
	// removed when the last of them ends.
	ScopeShared = "shared"
	// ScopeCluster gives every session a pod of its own that is the
	// session's home in the cluster (issue 29): every corral process that
	// serves the session (the replicas of corral serve) finds it by its
	// name (homePodName), and the session's turn, saved state and running
	// command live in it (Backend.Turn), so any of them serves the
	// session's next call. Its pod outlives the corral that made it.
	ScopeCluster = "cluster"
)

// Storage kinds of Settings.Storage.
const (
	// StorageEmptyDir keeps the workspace in an emptyDir volume, gone with
	// the pod.
	StorageEmptyDir = "emptyDir"
	// StoragePVC keeps it in a PersistentVolumeClaim made per session and
	// removed with it (not with a pod removed for idle_timeout: the
	// session's next pod mounts it again).
	StoragePVC = "pvc"
)

// Settings are the kubernetes section of corral's settings (keys
// kubernetes.*, declared in keys.go). Quantities are Kubernetes' ("1Gi",
// "500m").
type Settings struct {
	// Namespace holds corral's pods and NetworkPolicies; "" means the
	// kubeconfig context's namespace, else "default".
	Namespace string
	// Image is the pods' image; it must provide bash, sh, setsid, cat,
	// mkdir, dirname, ls, chmod, mv and sleep (python3 for run_code).
	Image string
	// RuntimeClass is the pods' runtimeClassName ("" for the cluster's
	// default; gvisor, kata where installed).
	RuntimeClass string
	// Memory is the pod's memory (request and limit).
	Memory string
	// CPUs is the pod's CPU limit; the request is a tenth of it.
	CPUs string
	// Pids must be 0: Kubernetes has no per-pod process limit field (the
	// kubelet's podPidsLimit, --pod-max-pids, holds every pod of a node,
	// KubeletConfiguration), so corral cannot apply one; a non-zero value
	// is refused naming what the nodes must set.
	Pids int
	// NodeSelector are node labels "key=value" the pods require.
	NodeSelector []string
	// Tolerations are taints the pods tolerate, as kubeval.ParseToleration
	// reads them.
	Tolerations []string
	// Storage is StorageEmptyDir or StoragePVC; StorageSize its size;
	// StorageClass the PVC's class ("" for the default).
	Storage, StorageSize, StorageClass string
	// WarmPool is the number of free pods a long-running corral keeps
	// ready per pool key (poolKey: settings, namespace, workspace path,
	// profile, helper); a session claims one instead of starting a pod.
	// 0: none.
	WarmPool int
	// IdleTimeout is "" or a Go duration: a session's pod that has run no
	// command (background processes included) for that long is removed;
	// the next command starts a new one (the workspace emptyDir is reset;
	// a PVC is kept).
	IdleTimeout string
	// Scope is ScopeSession or ScopeShared.
	Scope string
	// ServiceAccount is the pods' serviceAccountName ("" for the
	// namespace's default); its token is never mounted.
	ServiceAccount string
	// User is "uid:gid" of every process in the pod; uid 0 is refused.
	User string
	// SeccompProfile is a Localhost profile path the nodes have, relative
	// to the kubelet's seccomp directory; "" means RuntimeDefault.
	SeccompProfile string
	// Kubeconfig and Context select the cluster; "" means KUBECONFIG (or
	// ~/.kube/config), or the in-cluster config, and the current context.
	Kubeconfig, Context string
}

// DefaultSettings are the defaults of the kubernetes.* keys.
var DefaultSettings = Settings{
	Image: "python:3.12-slim", Memory: "1Gi", CPUs: "1", Storage: StorageEmptyDir, StorageSize: "1Gi",
	Scope: ScopeSession, User: "1000:1000",
}

// parsed are Settings in Kubernetes' types.
type parsed struct {
	memory, cpu, cpuRequest, storage resource.Quantity
	uid, gid                         int64
	nodeSelector                     map[string]string
	tolerations                      []corev1.Toleration
	idle                             time.Duration
}

// check validates s and converts it (kubeval has the forms). Errors wrap
// sandbox.ErrBadRequest, or sandbox.ErrPolicy for a value that would weaken
// the pod's lockdown, and name the key.
func (s *Settings) check() (*parsed, error) {
	var p parsed
	bad := func(key, val, reason string) error {
		return fmt.Errorf("%w: kubernetes.%s %q %s", sandbox.ErrBadRequest, key, val, reason)
	}
	switch s.Scope {
	case ScopeSession, ScopeShared, ScopeCluster:
	default:
		return nil, bad("scope", s.Scope, "is not session, shared or cluster")
	}
	if s.Scope == ScopeCluster && s.Storage == StoragePVC {
		// A PVC kept between a session's pods would have to be shared
		// by every corral serving it: not built yet.
		return nil, bad("storage", s.Storage, "is not available with kubernetes.scope cluster yet; use emptyDir")
	}
	if s.Image == "" {
		return nil, fmt.Errorf("%w: kubernetes.image is empty", sandbox.ErrBadRequest)
	}
	if s.Namespace != "" {
		if r := kubeval.DNSLabel(s.Namespace); r != "" {
			return nil, bad("namespace", s.Namespace, r)
		}
	}
	for key, v := range map[string]string{"runtime_class": s.RuntimeClass, "service_account": s.ServiceAccount, "storage_class": s.StorageClass} {
		if v != "" {
			if r := kubeval.DNSSubdomain(v); r != "" {
				return nil, bad(key, v, r)
			}
		}
	}
	var r string
	if p.memory, r = kubeval.Quantity(s.Memory, kubeval.MinMemory); r != "" {
		return nil, bad("memory", s.Memory, r)
	}
	if p.cpu, r = kubeval.Quantity(s.CPUs, kubeval.MinCPU); r != "" {
		return nil, bad("cpus", s.CPUs, r)
	}
	p.cpuRequest = *resource.NewMilliQuantity(max(p.cpu.MilliValue()/10, 1), resource.DecimalSI)
	if s.Pids != 0 {
		return nil, fmt.Errorf("%w: kubernetes.pids %d: Kubernetes has no per-pod process limit that corral could set; the nodes' kubelet must hold fork bombs with podPidsLimit (--pod-max-pids, e.g. 1024) in its KubeletConfiguration; set kubernetes.pids to 0", sandbox.ErrBadRequest, s.Pids)
	}
	if len(s.NodeSelector) > 0 {
		p.nodeSelector = map[string]string{}
	}
	for _, e := range s.NodeSelector {
		k, v, r := kubeval.Selector(e)
		if r != "" {
			return nil, bad("node_selector", e, r)
		}
		p.nodeSelector[k] = v
	}
	for _, e := range s.Tolerations {
		t, r := kubeval.ParseToleration(e)
		if r != "" {
			return nil, bad("tolerations", e, r)
		}
		p.tolerations = append(p.tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	switch s.Storage {
	case StorageEmptyDir, StoragePVC:
	default:
		return nil, bad("storage", s.Storage, "is not emptyDir or pvc")
	}
	if p.storage, r = kubeval.Quantity(s.StorageSize, kubeval.MinMemory); r != "" {
		return nil, bad("storage_size", s.StorageSize, r)
	}
	if s.WarmPool < 0 {
		return nil, fmt.Errorf("%w: kubernetes.warm_pool %d is negative", sandbox.ErrBadRequest, s.WarmPool)
	}
	if s.IdleTimeout != "" && s.IdleTimeout != "0" {
		// "0" is off, as "" is (the other settings' 0 disables too).
		d, err := time.ParseDuration(s.IdleTimeout)
		if err != nil || d < 0 {
			return nil, bad("idle_timeout", s.IdleTimeout, "is not a duration such as 30m (0 is off)")
		}
		p.idle = d
	}
	if p.uid, p.gid, r = kubeval.RunAs(s.User); r != "" {
		if r == kubeval.ReasonRoot {
			return nil, fmt.Errorf("%w: kubernetes.user %q %s", sandbox.ErrPolicy, s.User, r)
		}
		return nil, bad("user", s.User, r)
	}
	if r := kubeval.LocalhostProfile(s.SeccompProfile); r != "" {
		return nil, bad("seccomp_profile", s.SeccompProfile, r)
	}
	return &p, nil
}
