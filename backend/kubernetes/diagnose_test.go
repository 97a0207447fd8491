package kubernetes

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/dockertest"
)

// TestVerdict: the report's verdict from its answers (pure).
func TestVerdict(t *testing.T) {
	ok := func() *Diagnosis {
		d := &Diagnosis{Server: "https://k:6443", Reachable: true, Namespace: "agents", NamespaceExists: "yes",
			RuntimeClasses: []string{"gvisor"}, Seccomp: "Localhost/corral.json", NetworkPolicy: PolicyEnforced}
		for _, p := range Permissions {
			d.Access = append(d.Access, Access{Permission: p, Allowed: true})
		}
		return d
	}
	for _, tc := range []struct {
		name             string
		mut              func(*Diagnosis)
		problem, warning string // substrings; "" means none
	}{
		{"all good", func(*Diagnosis) {}, "", ""},
		{"unreachable", func(d *Diagnosis) { d.Reachable, d.Error = false, "connection refused" }, "not reachable (connection refused): check kubernetes.kubeconfig", ""},
		{"no namespace", func(d *Diagnosis) { d.NamespaceExists = "no" }, "namespace agents does not exist", ""},
		{"namespace unknown", func(d *Diagnosis) { d.NamespaceExists = "unknown" }, "", ""},
		{"exec denied", func(d *Diagnosis) {
			d.Access[slices.IndexFunc(d.Access, func(a Access) bool { return a.Subresource == "exec" })].Allowed = false
		}, "may not create pods/exec in namespace agents", ""},
		{"runtime class missing", func(d *Diagnosis) { d.RuntimeClass = "kata" }, "kubernetes.runtime_class kata is not one", ""},
		{"runtime class present", func(d *Diagnosis) { d.RuntimeClass = "gvisor" }, "", ""},
		{"runtime classes unlistable", func(d *Diagnosis) { d.RuntimeClass, d.RuntimeClassesError = "kata", "forbidden" }, "", ""},
		{"policy not enforced", func(d *Diagnosis) { d.NetworkPolicy = PolicyNotEnforced }, "", "under the restricted, workspace and allowlist profiles a pod still reaches the network"},
		{"policy unknown", func(d *Diagnosis) { d.NetworkPolicy, d.PolicyDetail = PolicyUnknown, "not probed" }, "", "unknown: not probed"},
		{"runtime default", func(d *Diagnosis) { d.Seccomp = "RuntimeDefault" }, "", "kubernetes.seccomp_profile"},
		{"bad settings", func(d *Diagnosis) { d.SettingsError = "kubernetes.memory \"x\"" }, "kubernetes.memory", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := ok()
			tc.mut(d)
			d.Verdict()
			check := func(what string, got []string, want string) {
				if want == "" && len(got) > 0 || want != "" && (len(got) != 1 || !strings.Contains(got[0], want)) {
					t.Errorf("%s %q, want one containing %q", what, got, want)
				}
			}
			check("problems", d.Problems, tc.problem)
			check("warnings", d.Warnings, tc.warning)
			if d.Ready() != (tc.problem == "") {
				t.Errorf("Ready %v with problems %q", d.Ready(), d.Problems)
			}
		})
	}
}

// TestPodPidsLimitOf reads the kubelet's /configz answer.
func TestPodPidsLimitOf(t *testing.T) {
	for in, want := range map[string]string{
		`{"kubeletconfig":{"podPidsLimit":1024}}`: "1024 processes per pod",
		`{"kubeletconfig":{"podPidsLimit":-1}}`:   "none",
		`{"kubeletconfig":{}}`:                    "none",
		`not json`:                                "not readable",
	} {
		if got := podPidsLimitOf([]byte(in)); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q, want %q...", in, got, want)
		}
	}
}

// TestPermissionsTable: every resource the api reaches is in the table,
// with the verbs the code uses.
func TestPermissionsTable(t *testing.T) {
	var got []string
	for _, p := range Permissions {
		got = append(got, p.String())
	}
	for _, w := range []string{"create pods", "get pods", "list pods", "delete pods", "update pods", "create pods/exec", "get pods/exec",
		"create networkpolicies", "list networkpolicies", "delete networkpolicies",
		"create persistentvolumeclaims", "list persistentvolumeclaims", "delete persistentvolumeclaims",
		"get leases", "create leases", "update leases"} {
		if !slices.Contains(got, w) {
			t.Errorf("Permissions lacks %q: %q", w, got)
		}
	}
}

// TestDiagnoseCluster: doctor's report of the real cluster with corral's
// namespace-only credentials: reachable, the namespace there, every
// permission allowed, no runtime class, RuntimeDefault, the pids limit not
// visible, and NetworkPolicy as the cluster says
// (CORRAL_TEST_KUBE_NETWORKPOLICY_ENFORCED); the probe leaves nothing.
func TestDiagnoseCluster(t *testing.T) {
	k := newKube(t)
	d := k.e.Diagnose(context.Background(), k.st, true)
	if !d.Reachable || !strings.HasPrefix(d.Server, "https://") || d.Version == "" {
		t.Errorf("server %q version %q reachable %v: %s", d.Server, d.Version, d.Reachable, d.Error)
	}
	if d.Namespace != k.st.Namespace || d.NamespaceExists != "yes" {
		t.Errorf("namespace %q exists %q", d.Namespace, d.NamespaceExists)
	}
	if len(d.Access) != len(Permissions) {
		t.Fatalf("access %+v", d.Access)
	}
	for _, a := range d.Access {
		if !a.Allowed || a.Error != "" {
			t.Errorf("%s: allowed %v %s", a, a.Allowed, a.Error)
		}
	}
	if d.RuntimeClassesError != "" || d.RuntimeClasses == nil {
		t.Errorf("runtime classes %v: %s", d.RuntimeClasses, d.RuntimeClassesError)
	}
	if d.Seccomp != "RuntimeDefault" || !strings.Contains(d.PidsLimit, "not visible to these credentials") {
		t.Errorf("seccomp %q pids %q", d.Seccomp, d.PidsLimit)
	}
	want := PolicyNotEnforced
	if os.Getenv("CORRAL_TEST_KUBE_NETWORKPOLICY_ENFORCED") == "1" {
		want = PolicyEnforced
	}
	if d.NetworkPolicy != want {
		t.Errorf("NetworkPolicy %q (%s), want %q", d.NetworkPolicy, d.PolicyDetail, want)
	}
	if !d.Ready() {
		t.Errorf("problems %q", d.Problems)
	}
	if want == PolicyNotEnforced && (len(d.Warnings) == 0 || !strings.Contains(d.Warnings[0], "restricted, workspace and allowlist")) {
		t.Errorf("warnings %q", d.Warnings)
	}
	k.waitGone("doctor-probe")
	// A missing runtime class and a namespace the credentials do not
	// reach are problems, found without a probe pod.
	st := k.st
	st.RuntimeClass, st.Namespace = "no-such-class", "corral-no-such-ns"
	d = k.e.Diagnose(context.Background(), st, true)
	if d.Ready() || len(d.Problems) != 2 || !strings.Contains(strings.Join(d.Problems, "|"), "no-such-class") ||
		!strings.Contains(strings.Join(d.Problems, "|"), "may not create pods, get pods") || !strings.HasPrefix(d.PolicyDetail, "not probed") {
		t.Errorf("problems %q (namespace %q, policy %s)", d.Problems, d.NamespaceExists, d.PolicyDetail)
	}
}

// TestDiagnoseUnreachable: a server that does not answer is reported as
// such, with the fix.
func TestDiagnoseUnreachable(t *testing.T) {
	kc := filepath.Join(dockertest.TestDir(t), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: agents}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := NewEngine(Options{})
	defer e.Close()
	st := DefaultSettings
	st.Kubeconfig = kc
	d := e.Diagnose(context.Background(), st, true)
	if d.Reachable || d.Ready() || d.Server != "https://127.0.0.1:1" || d.Namespace != "agents" ||
		len(d.Problems) != 1 || !strings.Contains(d.Problems[0], "https://127.0.0.1:1 is not reachable") ||
		!strings.Contains(d.Problems[0], "kubernetes.kubeconfig") || !strings.Contains(d.Problems[0], "connection refused") {
		t.Errorf("%+v", d)
	}
}
