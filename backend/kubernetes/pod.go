package kubernetes

import (
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/sandbox"
)

// Labels and annotations on every object corral makes in a cluster. Label
// values are limited to 63 characters of a small alphabet, so what may be
// longer (a session's name, the owner) is an annotation.
const (
	// LabelManaged is "true" on every pod, NetworkPolicy and PVC of corral;
	// `corral cleanup` lists by it and never touches anything else.
	LabelManaged = "corral.io/managed"
	// LabelPod is the pod's name, on the pod and on its NetworkPolicy and
	// PVC; the policy selects the pod by it.
	LabelPod = "corral.io/pod"
	// AnnotationSession is the session's name ("" for one command, "shared"
	// for a pod of scope shared).
	AnnotationSession = "corral.io/session"
	// AnnotationOwner is the owning corral process (owner.ID.String():
	// HOST/BOOT/PID/START), so a crashed corral's pods are found.
	AnnotationOwner = "corral.io/owner"
	// AnnotationSettings is a hash of the settings the pod was made with.
	AnnotationSettings = "corral.io/settings-hash"
	// AnnotationSeccomp says which seccomp profile the pod runs under
	// ("RuntimeDefault" or "Localhost/PATH").
	AnnotationSeccomp = "corral.io/seccomp"
)

// NamePrefix starts every pod's name: corral-<12 hex>.
const NamePrefix = "corral-"

// Home is HOME and TMPDIR in the pod: its writable /tmp.
const Home = "/tmp"

// ContainerName is the name of the pod's container where commands, the
// agent, the tunnel and the copies of `corral cp` run.
const ContainerName = "sandbox"

// HelperContainerName is the name of the pod's second container, the
// only one that can write HelperDir: corral's executable, the trust
// bundle and the Node preload are uploaded into it (exec into this
// container), while ContainerName mounts HelperDir read-only, so a
// command cannot replace the helper that `corral cp` and the agent run.
// It runs the image's sleep as HelperUID and nothing else.
const HelperContainerName = "corral-helper"

// HelperDir is the emptyDir corral's executable is copied into
// (inside.Path lies in it): writable in HelperContainerName only.
var HelperDir = filepath.Dir(inside.Path)

// helperDirSize bounds the helper's emptyDir: corral's static executable
// is some tens of MiB.
var helperDirSize = *resource.NewQuantity(256<<20, resource.BinarySI)

// netDirSize bounds NetDir's emptyDir, which holds two sockets.
var netDirSize = *resource.NewQuantity(1<<20, resource.BinarySI)

// homeNetDirSize bounds NetDir's emptyDir in a session's home pod, which
// also holds the session's state (inside.MaxTurnState) and its background
// processes (inside.MaxBgProcs outputs of inside.MaxBgOutput bytes and
// their records): an emptyDir past its sizeLimit gets the pod evicted.
var homeNetDirSize = *resource.NewQuantity(1<<20+inside.MaxTurnState+inside.MaxBgProcs*(inside.MaxBgOutput+64<<10), resource.BinarySI)

// HelperUID is the uid of HelperContainerName's processes (helperUID
// picks HelperUID+1 when the settings give the pod's commands this one).
// It must differ from the commands' uid: the pod shares one process
// namespace, and a process of the same uid could reach the helper
// container's writable HelperDir through /proc/PID/root of its sleep, or
// signal and ptrace what runs there.
const HelperUID = 65532

// helperUID returns the helper container's uid for a pod whose commands
// run as uid (pure): never uid itself.
func helperUID(uid int64) int64 {
	if uid == HelperUID {
		return HelperUID + 1
	}
	return HelperUID
}

// helperResources are HelperContainerName's: it sleeps, and receives an
// upload now and then (sh, cat and the helper hashing it). The memory
// limit leaves room for the page cache of a helper being written.
var helperResources = corev1.ResourceRequirements{
	Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceCPU: resource.MustParse("500m")},
	Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi"), corev1.ResourceCPU: resource.MustParse("10m")},
}

// podPlan is what one pod is made of besides the settings.
type podPlan struct {
	name, namespace string
	// session is AnnotationSession; owner AnnotationOwner; hash
	// AnnotationSettings.
	session, owner, hash string
	// workspace is where the workspace volume appears (the session's
	// working directory, so paths match the host's); claim is the PVC's
	// name under StoragePVC.
	workspace, claim string
	// tmp is the size of /tmp.
	tmp resource.Quantity
	// readOnly mounts the workspace read-only (profile restricted).
	readOnly bool
	// poolKey, when set, makes a warm-pool pod: labelled LabelPool
	// PoolWarming and LabelPoolKey poolKey, annotated AnnotationMaker
	// maker.
	poolKey, maker string
	// existingClaim: the PVC named claim exists already (a session's
	// workspace kept when its idle pod was removed); it is not made.
	existingClaim bool
	// policyName, when set, names the NetworkPolicy instead of name: a
	// home pod's, one per corral that makes it (homePolicyName), so that
	// the policy of a pod of the same name being removed is never the
	// new pod's.
	policyName string
	// home is set for a session's home pod (ScopeCluster): NetDir also
	// holds the session's state and its background processes' output
	// (homeNetDirSize).
	home bool
}

// systemTrees are paths a workspace may not be mounted at or below: the
// image's own trees, and what corral mounts itself (/tmp, HelperDir,
// NetDir).
var systemTrees = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run", "/sbin", "/sys", "/usr", "/var/lib", "/var/run", "/var/log", "/var/spool", "/var/cache", "/tmp", "/.corral", "/.corral-net"}

// workspacePath checks the session's working directory as the mount point
// of the workspace volume: absolute, below / and outside systemTrees.
func workspacePath(wd string) (string, error) {
	if !filepath.IsAbs(wd) || filepath.Clean(wd) == "/" {
		return "", fmt.Errorf("%w: kubernetes backend: the working directory %q is not an absolute path below /", sandbox.ErrBadRequest, wd)
	}
	wd = filepath.Clean(wd)
	for _, t := range systemTrees {
		if wd == t || strings.HasPrefix(wd, t+"/") {
			return "", fmt.Errorf("%w: kubernetes backend: the working directory %s lies in %s, which the pod's system uses; set cwd to a path such as /work", sandbox.ErrPolicy, wd, t)
		}
	}
	return wd, nil
}

// seccompOf returns the pod's seccomp profile: Localhost with the
// configured path, else RuntimeDefault (the container runtime's default
// filter, weaker than corral's own).
func seccompOf(st *Settings) *corev1.SeccompProfile {
	if st.SeccompProfile != "" {
		p := st.SeccompProfile
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &p}
	}
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
}

// seccompName is AnnotationSeccomp's value.
func seccompName(sp *corev1.SeccompProfile) string {
	if sp.Type == corev1.SeccompProfileTypeLocalhost {
		return "Localhost/" + *sp.LocalhostProfile
	}
	return string(sp.Type)
}

// buildPod returns the locked-down pod of plan pl (pure): a container
// (ContainerName) running the image's sleep as a non-root uid, all
// capabilities dropped, no privilege escalation, a read-only root
// filesystem, writable volumes only at the workspace (read-only under
// pl.readOnly), /tmp and NetDir, HelperDir read-only; beside it
// HelperContainerName, locked down the same way but running as another
// uid (helperUID) with HelperDir writable and nothing else mounted (but
// a read-only workspace, writable there: helperMounts), to receive
// corral's uploads; the seccomp profile of seccompOf, no
// service-account token, no host namespaces or paths, no service links,
// the pod's own process namespace shared with the pause container (which
// reaps orphans, as docker's --init does), resources from the settings
// (the helper container's are helperResources), and restartPolicy Never
// (a pod that died is replaced, not restarted with its state gone). A
// warm-pool pod (pl.poolKey) is the same pod with the pool's labels.
func buildPod(st *Settings, p *parsed, pl podPlan) *corev1.Pod {
	f, t := false, true
	sc := seccompOf(st)
	uid, gid := p.uid, p.gid
	grace := int64(1)
	var ws corev1.VolumeSource
	if st.Storage == StoragePVC {
		ws.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pl.claim}
	} else {
		size := p.storage
		ws.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: &size}
	}
	tmp, hd, nd := pl.tmp, helperDirSize, netDirSize
	if pl.home {
		nd = homeNetDirSize
	}
	huid := helperUID(uid)
	lockdown := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{
			Privileged:               &f,
			AllowPrivilegeEscalation: &f,
			ReadOnlyRootFilesystem:   &t,
			RunAsNonRoot:             &t,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           sc,
		}
	}
	helperSC := lockdown()
	helperSC.RunAsUser = &huid
	res := corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: p.memory, corev1.ResourceCPU: p.cpu},
		Requests: corev1.ResourceList{corev1.ResourceMemory: p.memory, corev1.ResourceCPU: p.cpuRequest},
	}
	labels := map[string]string{LabelManaged: "true", LabelPod: pl.name}
	annots := map[string]string{
		AnnotationSession: pl.session, AnnotationOwner: pl.owner, AnnotationSettings: pl.hash,
		AnnotationSeccomp: seccompName(sc),
	}
	if pl.poolKey != "" {
		labels[LabelPool], labels[LabelPoolKey] = PoolWarming, pl.poolKey
		annots[AnnotationMaker] = pl.maker
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pl.name, Namespace: pl.namespace,
			Labels: labels, Annotations: annots,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			ShareProcessNamespace:         &t,
			ServiceAccountName:            st.ServiceAccount,
			RuntimeClassName:              ptrOrNil(st.RuntimeClass),
			NodeSelector:                  p.nodeSelector,
			Tolerations:                   p.tolerations,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &t, RunAsUser: &uid, RunAsGroup: &gid, FSGroup: &gid,
				SeccompProfile: sc,
			},
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: ws},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &tmp}}},
				{Name: "corral", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &hd}}},
				{Name: "net", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &nd}}},
			},
			Containers: []corev1.Container{{
				Name:  ContainerName,
				Image: st.Image,
				// The image's sleep holds the container; commands run
				// under corral's agent, started by exec.
				Command:         []string{"sleep", "2147483647"},
				WorkingDir:      pl.workspace,
				Env:             []corev1.EnvVar{{Name: "HOME", Value: Home}, {Name: "TMPDIR", Value: Home}},
				Resources:       res,
				ImagePullPolicy: corev1.PullIfNotPresent,
				VolumeMounts: []corev1.VolumeMount{
					{Name: "workspace", MountPath: pl.workspace, ReadOnly: pl.readOnly},
					{Name: "tmp", MountPath: "/tmp"},
					// Read-only: what runs here cannot replace the helper
					// (uploads go through HelperContainerName).
					{Name: "corral", MountPath: HelperDir, ReadOnly: true},
					{Name: "net", MountPath: NetDir},
				},
				SecurityContext: lockdown(),
			}, {
				Name:  HelperContainerName,
				Image: st.Image,
				// The same sleep; uploads arrive by exec.
				Command:         []string{"sleep", "2147483647"},
				Resources:       helperResources,
				ImagePullPolicy: corev1.PullIfNotPresent,
				VolumeMounts:    helperMounts(pl),
				SecurityContext: helperSC,
			}},
		},
	}
}

// buildPolicy returns the NetworkPolicy of pod pl under profile (pure):
// under restricted, workspace and allowlist one that selects the pod and
// allows no ingress and no egress (both policy types, no rules:
// NetworkPolicy's "default deny"); nil under network (the pod keeps the
// cluster's network). allowlist's egress goes to corral's proxy through
// an exec stream (tunnelFor), which no NetworkPolicy governs. A
// NetworkPolicy holds only where the cluster's network plugin enforces
// it.
func buildPolicy(pl podPlan, profile sandbox.Profile) *networkingv1.NetworkPolicy {
	if profile.HostNetwork() || profile == "" {
		return nil
	}
	name := pl.name
	if pl.policyName != "" {
		name = pl.policyName
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: pl.namespace,
			Labels:      map[string]string{LabelManaged: "true", LabelPod: pl.name},
			Annotations: map[string]string{AnnotationSession: pl.session, AnnotationOwner: pl.owner},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelPod: pl.name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// buildClaim returns the workspace PVC of pl under StoragePVC (pure).
func buildClaim(st *Settings, p *parsed, pl podPlan) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: pl.claim, Namespace: pl.namespace,
			Labels:      map[string]string{LabelManaged: "true", LabelPod: pl.name},
			Annotations: map[string]string{AnnotationSession: pl.session, AnnotationOwner: pl.owner},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptrOrNil(st.StorageClass),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: p.storage}},
		},
	}
}

// helperMounts are HelperContainerName's volumes (pure): HelperDir, and
// under pl.readOnly the workspace, writable, at the same path: the
// commands' container mounts it read-only, so a session's workspace
// carried over from its pod of other settings (carryWorkspace) is
// written there. Nothing runs in that container but corral's uploads.
func helperMounts(pl podPlan) []corev1.VolumeMount {
	m := []corev1.VolumeMount{{Name: "corral", MountPath: HelperDir}}
	if pl.readOnly {
		m = append(m, corev1.VolumeMount{Name: "workspace", MountPath: pl.workspace})
	}
	return m
}

func ptrOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
