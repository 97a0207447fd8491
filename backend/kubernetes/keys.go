package kubernetes

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/corralhq/corral/backend/kubernetes/kubeval"
	"github.com/corralhq/corral/config"
)

// The kubernetes.* settings are the kubernetes backend's: declared here
// with their defaults (DefaultSettings) and checks (kubeval's forms),
// registered with config from init, and read back as this package's
// Settings (SettingsOf). config knows none of them by name.
var settingsSection = config.Section{Name: Name, New: func() any { return new(Settings) }, Keys: keys}

func init() { config.RegisterSection(&settingsSection) }

// section returns the kubernetes.* section of st.
func section(st *config.Settings) *Settings { return st.Section(Name).(*Settings) }

// SettingsOf returns the kubernetes.* settings of st (a copy).
func SettingsOf(st *config.Settings) Settings { return *section(st) }

// keys returns the kubernetes.* settings, in the order `corral config list`
// shows them (built at the settings' first use, not at init).
func keys() []config.Key {
	return []config.Key{
		{
			Name: "kubernetes.namespace", Kind: config.KindString, Default: DefaultSettings.Namespace,
			Accepts: "a namespace name (DNS-1123 label), or empty for the kubeconfig context's (else default)",
			Doc:     "kubernetes: namespace of the pods and NetworkPolicies corral makes",
			Check:   kubeName(kubeval.DNSLabel),
			Field:   func(s *config.Settings) any { return &section(s).Namespace },
		},
		{
			Name: "kubernetes.image", Kind: config.KindString, Default: DefaultSettings.Image,
			Accepts: "an image reference",
			Doc:     "kubernetes: image of the pods; it must provide bash, sh, setsid, cat, mkdir, dirname, ls, chmod, mv and sleep (python3 for run_code); corral's own executable is copied in",
			Check:   config.NonEmpty,
			Field:   func(s *config.Settings) any { return &section(s).Image },
		},
		{
			Name: "kubernetes.runtime_class", Kind: config.KindString, Default: DefaultSettings.RuntimeClass,
			Accepts: "a RuntimeClass name (gvisor, kata), or empty for the cluster's default",
			Doc:     "kubernetes: runtimeClassName of the pods (gVisor or Kata where the cluster has them)",
			Check:   kubeName(kubeval.DNSSubdomain),
			Field:   func(s *config.Settings) any { return &section(s).RuntimeClass },
		},
		{
			Name: "kubernetes.memory", Kind: config.KindString, Default: DefaultSettings.Memory,
			Accepts: "a Kubernetes quantity of at least 8Mi such as 512Mi or 1Gi",
			Doc:     "kubernetes: memory of the pod (requests and limits); a command killed by it is reported as out of memory",
			Check:   kubeQuantity(kubeval.MinMemory),
			Field:   func(s *config.Settings) any { return &section(s).Memory },
		},
		{
			Name: "kubernetes.cpus", Kind: config.KindString, Default: DefaultSettings.CPUs,
			Accepts: "a Kubernetes CPU quantity of at least 10m such as 500m or 2",
			Doc:     "kubernetes: CPU limit of the pod (the request is a tenth of it)",
			Check:   kubeQuantity(kubeval.MinCPU),
			Field:   func(s *config.Settings) any { return &section(s).CPUs },
		},
		{
			Name: "kubernetes.pids", Kind: config.KindInt, Default: DefaultSettings.Pids,
			Accepts: "0 (a non-zero value is refused when a session starts)",
			Doc:     "kubernetes: must be 0: Kubernetes has no per-pod process limit corral could set; the nodes' kubelet podPidsLimit (--pod-max-pids) holds fork bombs, and a non-zero value is refused saying so",
			Field:   func(s *config.Settings) any { return &section(s).Pids },
		},
		{
			Name: "kubernetes.node_selector", Kind: config.KindStringList, Default: DefaultSettings.NodeSelector,
			Accepts: "a list of node labels key=value",
			Doc:     "kubernetes: node labels the pods require (nodeSelector), as key=value",
			Check:   kubeSelector,
			Field:   func(s *config.Settings) any { return &section(s).NodeSelector },
		},
		{
			Name: "kubernetes.tolerations", Kind: config.KindStringList, Default: DefaultSettings.Tolerations,
			Accepts: "a list of taints to tolerate, as kubectl taint writes them: key=value:Effect, key:Effect, key=value or key",
			Doc:     "kubernetes: taints the pods tolerate (a missing value tolerates any value, a missing effect any effect)",
			Check:   kubeToleration,
			Field:   func(s *config.Settings) any { return &section(s).Tolerations },
		},
		{
			Name: "kubernetes.storage", Kind: config.KindEnum, Default: DefaultSettings.Storage,
			Values:  []string{StorageEmptyDir, StoragePVC},
			Accepts: "emptyDir or pvc",
			Doc:     "kubernetes: the workspace volume: emptyDir (gone with the pod) or pvc (a PersistentVolumeClaim per session, removed with it)",
			Field:   func(s *config.Settings) any { return &section(s).Storage },
		},
		{
			Name: "kubernetes.storage_size", Kind: config.KindString, Default: DefaultSettings.StorageSize,
			Accepts: "a Kubernetes quantity of at least 8Mi such as 1Gi",
			Doc:     "kubernetes: size of the workspace volume (the emptyDir's sizeLimit, or the PVC's request)",
			Check:   kubeQuantity(kubeval.MinMemory),
			Field:   func(s *config.Settings) any { return &section(s).StorageSize },
		},
		{
			Name: "kubernetes.storage_class", Kind: config.KindString, Default: DefaultSettings.StorageClass,
			Accepts: "a StorageClass name, or empty for the cluster's default",
			Doc:     "kubernetes: storageClassName of the workspace PVC (storage pvc)",
			Check:   kubeName(kubeval.DNSSubdomain),
			Field:   func(s *config.Settings) any { return &section(s).StorageClass },
		},
		{
			Name: "kubernetes.warm_pool", Kind: config.KindInt, Default: DefaultSettings.WarmPool,
			Accepts: "a whole number of pods (0 for none)",
			Doc:     "kubernetes: free locked-down pods (helper copied in) that a long-running corral (mcp, serve) keeps ready per kind of pod; a session claims one instead of starting a pod, and one-shot commands claim those of a live corral",
			Field:   func(s *config.Settings) any { return &section(s).WarmPool },
		},
		{
			Name: "kubernetes.idle_timeout", Kind: config.KindString, Default: DefaultSettings.IdleTimeout,
			Accepts: "a duration such as 30m; 0 or empty for none",
			Doc:     "kubernetes: remove a session's pod after this long without a command or background process; the next command starts a new pod (an emptyDir workspace starts empty, a pvc one is kept)",
			Check:   durationOrOff,
			Field:   func(s *config.Settings) any { return &section(s).IdleTimeout },
		},
		{
			Name: "kubernetes.scope", Kind: config.KindEnum, Default: DefaultSettings.Scope,
			Values:  []string{ScopeSession, ScopeShared, ScopeCluster},
			Accepts: "session, shared or cluster",
			Doc:     "kubernetes: session (a pod per session), shared (one pod for every session with the same settings) or cluster (a pod per session that every corral process serving the session finds by name and shares: the session's turn, cwd and variables live in it, for the replicas of corral serve)",
			Field:   func(s *config.Settings) any { return &section(s).Scope },
		},
		{
			Name: "kubernetes.service_account", Kind: config.KindString, Default: DefaultSettings.ServiceAccount,
			Accepts: "a ServiceAccount name, or empty for the namespace's default",
			Doc:     "kubernetes: serviceAccountName of the pods; its token is never mounted",
			Check:   kubeName(kubeval.DNSSubdomain),
			Field:   func(s *config.Settings) any { return &section(s).ServiceAccount },
		},
		{
			Name: "kubernetes.user", Kind: config.KindString, Default: DefaultSettings.User,
			Accepts: "uid:gid in numbers, uid not 0",
			Doc:     "kubernetes: uid:gid commands run as (runAsUser, runAsGroup, fsGroup); root is refused",
			Check:   kubeUser,
			Field:   func(s *config.Settings) any { return &section(s).User },
		},
		{
			Name: "kubernetes.seccomp_profile", Kind: config.KindString, Default: DefaultSettings.SeccompProfile,
			Accepts: "a path relative to the kubelet's seccomp directory ending in .json, or empty for RuntimeDefault",
			Doc:     "kubernetes: a Localhost seccomp profile the nodes have (corral's, installed by the cluster's admin); empty uses the runtime's default profile, which corral reports",
			Check:   kubeName(kubeval.LocalhostProfile),
			Field:   func(s *config.Settings) any { return &section(s).SeccompProfile },
		},
		{
			Name: "kubernetes.kubeconfig", Kind: config.KindPath, Default: DefaultSettings.Kubeconfig,
			Accepts: "an absolute path, or empty for KUBECONFIG, ~/.kube/config or the in-cluster config",
			Doc:     "kubernetes: the kubeconfig file corral uses",
			Field:   func(s *config.Settings) any { return &section(s).Kubeconfig },
		},
		{
			Name: "kubernetes.context", Kind: config.KindString, Default: DefaultSettings.Context,
			Accepts: "a context of the kubeconfig, or empty for its current context",
			Doc:     "kubernetes: the kubeconfig context corral uses",
			Field:   func(s *config.Settings) any { return &section(s).Context },
		},
	}
}

// kubeQuantity returns an item check for a Kubernetes quantity of at
// least min.
func kubeQuantity(min resource.Quantity) func(string) (string, string) {
	return func(s string) (string, string) {
		if _, reason := kubeval.Quantity(s, min); reason != "" {
			return "", reason
		}
		return strings.TrimSpace(s), ""
	}
}

// kubeName returns an item check for "" or a name that check accepts.
func kubeName(check func(string) string) func(string) (string, string) {
	return func(s string) (string, string) {
		s = strings.TrimSpace(s)
		if s == "" {
			return "", ""
		}
		if r := check(s); r != "" {
			return "", r
		}
		return s, ""
	}
}

// kubeSelector checks one kubernetes.node_selector entry.
func kubeSelector(s string) (string, string) {
	k, v, reason := kubeval.Selector(s)
	if reason != "" {
		return "", reason
	}
	return k + "=" + v, ""
}

// kubeToleration checks one kubernetes.tolerations entry.
func kubeToleration(s string) (string, string) {
	if _, reason := kubeval.ParseToleration(s); reason != "" {
		return "", reason
	}
	return strings.TrimSpace(s), ""
}

// kubeUser checks kubernetes.user.
func kubeUser(s string) (string, string) {
	if _, _, reason := kubeval.RunAs(s); reason != "" {
		return "", reason
	}
	return strings.TrimSpace(s), ""
}

// durationOrOff checks a Go duration; "", "0" (and any zero duration)
// mean off and are kept as "".
func durationOrOff(s string) (string, string) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return "", ""
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return "", "is not a duration"
	}
	if d < 0 {
		return "", "is negative"
	}
	if d == 0 {
		return "", ""
	}
	return s, ""
}
