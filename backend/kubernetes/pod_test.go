package kubernetes

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/corralhq/corral/sandbox"
)

func TestCheckSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Settings)
		is     error  // nil: accepted
		want   string // substring of the error
	}{
		{"defaults", func(*Settings) {}, nil, ""},
		{"scope", func(s *Settings) { s.Scope = "global" }, sandbox.ErrBadRequest, `kubernetes.scope "global"`},
		{"image", func(s *Settings) { s.Image = "" }, sandbox.ErrBadRequest, "kubernetes.image is empty"},
		{"namespace", func(s *Settings) { s.Namespace = "My_NS" }, sandbox.ErrBadRequest, `kubernetes.namespace "My_NS"`},
		{"memory", func(s *Settings) { s.Memory = "1g" }, sandbox.ErrBadRequest, `kubernetes.memory "1g"`},
		{"memory small", func(s *Settings) { s.Memory = "1Mi" }, sandbox.ErrBadRequest, "is below 8Mi"},
		{"cpus", func(s *Settings) { s.CPUs = "0" }, sandbox.ErrBadRequest, `kubernetes.cpus "0"`},
		{"pids", func(s *Settings) { s.Pids = 512 }, sandbox.ErrBadRequest, "kubernetes.pids 512: Kubernetes has no per-pod process limit that corral could set; the nodes' kubelet must hold fork bombs with podPidsLimit (--pod-max-pids"},
		{"selector", func(s *Settings) { s.NodeSelector = []string{"pool"} }, sandbox.ErrBadRequest, `kubernetes.node_selector "pool"`},
		{"toleration", func(s *Settings) { s.Tolerations = []string{"a=b:Never"} }, sandbox.ErrBadRequest, `kubernetes.tolerations "a=b:Never"`},
		{"storage", func(s *Settings) { s.Storage = "hostPath" }, sandbox.ErrBadRequest, `kubernetes.storage "hostPath"`},
		{"runtime class", func(s *Settings) { s.RuntimeClass = "Run SC" }, sandbox.ErrBadRequest, "kubernetes.runtime_class"},
		{"idle", func(s *Settings) { s.IdleTimeout = "soon" }, sandbox.ErrBadRequest, "kubernetes.idle_timeout"},
		{"idle negative", func(s *Settings) { s.IdleTimeout = "-1m" }, sandbox.ErrBadRequest, "kubernetes.idle_timeout"},
		{"idle off", func(s *Settings) { s.IdleTimeout = "0" }, nil, ""},
		{"idle off 0s", func(s *Settings) { s.IdleTimeout = "0s" }, nil, ""},
		{"root", func(s *Settings) { s.User = "0:0" }, sandbox.ErrPolicy, `kubernetes.user "0:0" would run commands as root`},
		{"user form", func(s *Settings) { s.User = "alice" }, sandbox.ErrBadRequest, `kubernetes.user "alice"`},
		{"seccomp", func(s *Settings) { s.SeccompProfile = "/etc/corral.json" }, sandbox.ErrBadRequest, "kubernetes.seccomp_profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := DefaultSettings
			tc.mutate(&st)
			_, err := st.check()
			if tc.is == nil {
				if err != nil {
					t.Fatalf("check = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("check = %v, want %v containing %q", err, tc.is, tc.want)
			}
		})
	}
}

func testPlan() podPlan {
	return podPlan{name: "corral-0123456789ab", namespace: "ns", session: "dir:/work/p", owner: "h/b/1/2", hash: "abc",
		workspace: "/work/p", claim: "corral-0123456789ab-ws", tmp: resource.MustParse("512Mi")}
}

// TestBuildPodLockdown: the default settings give the locked-down pod.
func TestBuildPodLockdown(t *testing.T) {
	st := DefaultSettings
	p, err := st.check()
	if err != nil {
		t.Fatal(err)
	}
	pod := buildPod(&st, p, testPlan())
	s := pod.Spec
	if *s.AutomountServiceAccountToken || *s.EnableServiceLinks || s.HostNetwork || s.HostPID || s.HostIPC || !*s.ShareProcessNamespace {
		t.Errorf("pod spec flags: token %v links %v host %v/%v/%v share %v", *s.AutomountServiceAccountToken, *s.EnableServiceLinks, s.HostNetwork, s.HostPID, s.HostIPC, *s.ShareProcessNamespace)
	}
	if s.RestartPolicy != corev1.RestartPolicyNever || s.RuntimeClassName != nil || s.NodeSelector != nil || s.Tolerations != nil {
		t.Errorf("restart %v runtime class %v selector %v tolerations %v", s.RestartPolicy, s.RuntimeClassName, s.NodeSelector, s.Tolerations)
	}
	ps := s.SecurityContext
	if !*ps.RunAsNonRoot || *ps.RunAsUser != 1000 || *ps.RunAsGroup != 1000 || *ps.FSGroup != 1000 || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", ps)
	}
	if len(s.Containers) != 2 || len(s.InitContainers) != 0 || s.Containers[0].Name != ContainerName || s.Containers[1].Name != HelperContainerName {
		t.Fatalf("containers %d init %d", len(s.Containers), len(s.InitContainers))
	}
	c := s.Containers[0]
	for _, c := range s.Containers {
		cs := c.SecurityContext
		if *cs.Privileged || *cs.AllowPrivilegeEscalation || !*cs.ReadOnlyRootFilesystem || !*cs.RunAsNonRoot || !reflect.DeepEqual(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || cs.Capabilities.Add != nil ||
			cs.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: container security context %+v caps %+v", c.Name, cs, cs.Capabilities)
		}
	}
	// The helper container: another uid than the commands' (a process of
	// theirs could otherwise reach its HelperDir through /proc/PID/root),
	// HelperDir writable and nothing else mounted under a writable
	// profile; the commands' container mounts HelperDir read-only.
	h := s.Containers[1]
	if h.SecurityContext.RunAsUser == nil || *h.SecurityContext.RunAsUser != HelperUID || c.SecurityContext.RunAsUser != nil {
		t.Errorf("helper uid %v, commands' %v (pod %d)", h.SecurityContext.RunAsUser, c.SecurityContext.RunAsUser, *ps.RunAsUser)
	}
	if want := []corev1.VolumeMount{{Name: "corral", MountPath: "/.corral"}}; !reflect.DeepEqual(h.VolumeMounts, want) || h.Image != st.Image || h.WorkingDir != "" {
		t.Errorf("helper container mounts %+v image %q", h.VolumeMounts, h.Image)
	}
	if m := h.Resources.Limits[corev1.ResourceMemory]; m.String() != "128Mi" {
		t.Errorf("helper limits %v", h.Resources.Limits)
	}
	for _, v := range s.Volumes {
		if v.HostPath != nil || (v.EmptyDir == nil && v.PersistentVolumeClaim == nil) {
			t.Errorf("volume %s is not an emptyDir: %+v", v.Name, v.VolumeSource)
		}
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit == nil {
			t.Errorf("volume %s has no size limit", v.Name)
		}
	}
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.Name+":"+m.MountPath)
	}
	if want := []string{"workspace:/work/p", "tmp:/tmp", "corral:/.corral", "net:/.corral-net"}; !reflect.DeepEqual(mounts, want) {
		t.Errorf("mounts %v, want %v", mounts, want)
	}
	if c.VolumeMounts[0].ReadOnly || c.VolumeMounts[1].ReadOnly || !c.VolumeMounts[2].ReadOnly || c.VolumeMounts[3].ReadOnly {
		t.Errorf("read-only mounts under a writable profile: %+v", c.VolumeMounts)
	}
	ro := testPlan()
	ro.readOnly = true
	if m := buildPod(&st, p, ro).Spec.Containers[0].VolumeMounts[0]; m.Name != "workspace" || !m.ReadOnly {
		t.Errorf("restricted: workspace mount %+v", m)
	}
	// Restricted: the helper container mounts the workspace writable,
	// where a session's workspace carried from its old pod is written.
	if want := []corev1.VolumeMount{{Name: "corral", MountPath: "/.corral"}, {Name: "workspace", MountPath: "/work/p"}}; !reflect.DeepEqual(buildPod(&st, p, ro).Spec.Containers[1].VolumeMounts, want) {
		t.Errorf("restricted: helper container mounts %+v, want %+v", buildPod(&st, p, ro).Spec.Containers[1].VolumeMounts, want)
	}
	if m, cpu := c.Resources.Limits[corev1.ResourceMemory], c.Resources.Limits[corev1.ResourceCPU]; m.String() != "1Gi" || cpu.String() != "1" {
		t.Errorf("limits %v", c.Resources.Limits)
	}
	if r := c.Resources.Requests[corev1.ResourceCPU]; r.String() != "100m" {
		t.Errorf("cpu request %v", r.String())
	}
	if pod.Labels[LabelManaged] != "true" || pod.Labels[LabelPod] != "corral-0123456789ab" || pod.Annotations[AnnotationSession] != "dir:/work/p" ||
		pod.Annotations[AnnotationOwner] != "h/b/1/2" || pod.Annotations[AnnotationSeccomp] != "RuntimeDefault" {
		t.Errorf("labels %v annotations %v", pod.Labels, pod.Annotations)
	}
}

// TestBuildPodSettings: every setting lands where it belongs.
func TestBuildPodSettings(t *testing.T) {
	st := DefaultSettings
	st.RuntimeClass, st.ServiceAccount, st.SeccompProfile = "gvisor", "agents", "corral/agent.json"
	st.NodeSelector, st.Tolerations = []string{"pool=agents"}, []string{"agents=yes:NoSchedule", "spot"}
	st.Storage, st.StorageClass, st.StorageSize, st.User, st.Memory, st.CPUs = StoragePVC, "fast", "5Gi", "2000:3000", "512Mi", "250m"
	p, err := st.check()
	if err != nil {
		t.Fatal(err)
	}
	pl := testPlan()
	pod := buildPod(&st, p, pl)
	s := pod.Spec
	if *s.RuntimeClassName != "gvisor" || s.ServiceAccountName != "agents" || *s.AutomountServiceAccountToken {
		t.Errorf("runtime class %v sa %q", s.RuntimeClassName, s.ServiceAccountName)
	}
	if sp := s.SecurityContext.SeccompProfile; sp.Type != corev1.SeccompProfileTypeLocalhost || *sp.LocalhostProfile != "corral/agent.json" || pod.Annotations[AnnotationSeccomp] != "Localhost/corral/agent.json" {
		t.Errorf("seccomp %+v", sp)
	}
	if !reflect.DeepEqual(s.NodeSelector, map[string]string{"pool": "agents"}) {
		t.Errorf("selector %v", s.NodeSelector)
	}
	wantTol := []corev1.Toleration{{Key: "agents", Operator: "Equal", Value: "yes", Effect: "NoSchedule"}, {Key: "spot", Operator: "Exists"}}
	if !reflect.DeepEqual(s.Tolerations, wantTol) {
		t.Errorf("tolerations %+v", s.Tolerations)
	}
	if s.Volumes[0].PersistentVolumeClaim == nil || s.Volumes[0].PersistentVolumeClaim.ClaimName != pl.claim {
		t.Errorf("workspace volume %+v", s.Volumes[0])
	}
	if *s.SecurityContext.RunAsUser != 2000 || *s.SecurityContext.RunAsGroup != 3000 {
		t.Errorf("user %v:%v", *s.SecurityContext.RunAsUser, *s.SecurityContext.RunAsGroup)
	}
	for _, c := range s.Containers {
		if c.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost {
			t.Errorf("%s: seccomp %+v", c.Name, c.SecurityContext.SeccompProfile)
		}
	}
	// Commands that run as the helper's usual uid: the helper takes
	// another.
	st.User = "65532:3000"
	if p, err = st.check(); err != nil {
		t.Fatal(err)
	}
	if u := *buildPod(&st, p, pl).Spec.Containers[1].SecurityContext.RunAsUser; u == 65532 {
		t.Errorf("the helper container runs as the commands' uid %d", u)
	}
	c := buildClaim(&st, p, pl)
	if q := c.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "5Gi" || *c.Spec.StorageClassName != "fast" || c.Labels[LabelPod] != pl.name {
		t.Errorf("claim %+v", c)
	}
}

func TestBuildPolicy(t *testing.T) {
	pl := testPlan()
	if np := buildPolicy(pl, sandbox.ProfileNetwork); np != nil {
		t.Errorf("network profile got a policy")
	}
	for _, pr := range []sandbox.Profile{sandbox.ProfileRestricted, sandbox.ProfileWorkspace} {
		np := buildPolicy(pl, pr)
		if np == nil {
			t.Fatalf("%s: no policy", pr)
		}
		if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 ||
			!reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, map[string]string{LabelPod: pl.name}) || np.Labels[LabelManaged] != "true" {
			t.Errorf("%s: policy %+v", pr, np.Spec)
		}
	}
}

func TestWorkspacePath(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		is   error
	}{
		{"/work/p", "/work/p", nil},
		{"/home/u/src/", "/home/u/src", nil},
		{"/", "", sandbox.ErrBadRequest},
		{"rel", "", sandbox.ErrBadRequest},
		{"/tmp/x", "", sandbox.ErrPolicy},
		{"/usr", "", sandbox.ErrPolicy},
		{"/.corral", "", sandbox.ErrPolicy},
		{"/.corral-net/x", "", sandbox.ErrPolicy},
		{"/var/tmp/ws", "/var/tmp/ws", nil},
		{"/var/lib/x", "", sandbox.ErrPolicy},
	} {
		got, err := workspacePath(tc.in)
		if got != tc.want || !errors.Is(err, tc.is) && !(err == nil && tc.is == nil) {
			t.Errorf("workspacePath(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.is)
		}
	}
}
