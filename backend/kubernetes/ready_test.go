package kubernetes

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/metrics"
)

// TestReadyError is the readiness decision on diagnoses as Diagnose
// leaves them (Verdict applied): problems make it unready, warnings do
// not.
func TestReadyError(t *testing.T) {
	allowed := func(deny string) []Access {
		var out []Access
		for _, p := range Permissions {
			out = append(out, Access{Permission: p, Allowed: p.String() != deny})
		}
		return out
	}
	for _, c := range []struct {
		name string
		d    Diagnosis
		want string // "" ready, else a part of the error
	}{
		{"all held", Diagnosis{Reachable: true, NamespaceExists: "yes", Access: allowed(""), NetworkPolicy: PolicyEnforced}, ""},
		{"namespace unknown is not a problem", Diagnosis{Reachable: true, NamespaceExists: "unknown", Access: allowed(""), NetworkPolicy: PolicyEnforced}, ""},
		{"NetworkPolicy not enforced warns only", Diagnosis{Reachable: true, NamespaceExists: "yes", Access: allowed(""), NetworkPolicy: PolicyNotEnforced}, ""},
		{"RuntimeDefault seccomp warns only", Diagnosis{Reachable: true, NamespaceExists: "yes", Access: allowed(""), NetworkPolicy: PolicyUnknown, Seccomp: "RuntimeDefault"}, ""},
		{"unreachable", Diagnosis{Server: "https://10.0.0.1:6443", Error: "dial tcp: connection refused"}, "https://10.0.0.1:6443 is not reachable"},
		{"a permission denied", Diagnosis{Reachable: true, NamespaceExists: "yes", Namespace: "ns", Access: allowed("create pods/exec")}, "may not create pods/exec in namespace ns"},
		{"an answer that failed is not held", Diagnosis{Reachable: true, NamespaceExists: "yes", Access: []Access{{Permission: Permissions[0], Error: "forbidden"}}}, "may not create pods"},
		{"namespace missing", Diagnosis{Reachable: true, NamespaceExists: "no", Namespace: "gone", Access: allowed("")}, "namespace gone does not exist"},
		{"runtime class not the cluster's", Diagnosis{Reachable: true, NamespaceExists: "yes", Access: allowed(""), RuntimeClass: "gvisor", RuntimeClasses: []string{"runc"}}, "gvisor is not one of"},
		{"runtime classes unreadable is not a problem", Diagnosis{Reachable: true, NamespaceExists: "yes", Access: allowed(""), RuntimeClass: "gvisor", RuntimeClassesError: "forbidden"}, ""},
		{"bad settings", Diagnosis{SettingsError: "kubernetes.memory: bad quantity", Reachable: true, NamespaceExists: "yes", Access: allowed("")}, "kubernetes.memory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			d.Verdict()
			err := readyError(&d)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("not ready: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}

// TestAPICallOf names requests as the API server's authorization does.
func TestAPICallOf(t *testing.T) {
	for _, c := range []struct{ method, path, watch, verb, res string }{
		{"POST", "/api/v1/namespaces/ns/pods", "", "create", "pods"},
		{"GET", "/api/v1/namespaces/ns/pods/corral-x", "", "get", "pods"},
		{"GET", "/api/v1/namespaces/ns/pods", "", "list", "pods"},
		{"GET", "/api/v1/namespaces/ns/pods", "true", "watch", "pods"},
		{"PUT", "/api/v1/namespaces/ns/pods/p", "", "update", "pods"},
		{"PATCH", "/api/v1/namespaces/ns/pods/p", "", "patch", "pods"},
		{"DELETE", "/api/v1/namespaces/ns/pods/p", "", "delete", "pods"},
		{"DELETE", "/api/v1/namespaces/ns/pods", "", "deletecollection", "pods"},
		{"GET", "/api/v1/namespaces/ns/pods/p/exec", "", "connect", "pods/exec"},
		{"POST", "/api/v1/namespaces/ns/pods/p/exec", "", "connect", "pods/exec"},
		{"GET", "/api/v1/namespaces/ns/pods/p/log", "", "get", "pods/log"},
		{"GET", "/api/v1/namespaces/corral", "", "get", "namespaces"},
		{"GET", "/api/v1/namespaces", "", "list", "namespaces"},
		{"POST", "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies", "", "create", "networkpolicies"},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "", "create", "selfsubjectaccessreviews"},
		{"GET", "/apis/node.k8s.io/v1/runtimeclasses", "", "list", "runtimeclasses"},
		{"GET", "/api/v1/nodes/n1/proxy/configz", "", "connect", "nodes/proxy"},
		{"GET", "/version", "", "get", "nonresource"},
		{"GET", "/apis", "", "get", "nonresource"},
	} {
		verb, res := apiCallOf(c.method, c.path, c.watch)
		if verb != c.verb || res != c.res {
			t.Errorf("%s %s watch=%q: %s %s, want %s %s", c.method, c.path, c.watch, verb, res, c.verb, c.res)
		}
	}
}

// TestReadyCluster: on the test cluster the backend is ready, and each
// SelfSubjectAccessReview it sent is counted; a namespace the
// credentials cannot reach makes it unready, naming it.
func TestReadyCluster(t *testing.T) {
	reg := metrics.NewRegistry()
	k := newKubeWith(t, func(o *Options) { o.Metrics = reg })
	if err := k.e.Ready(context.Background(), k.st); err != nil {
		t.Fatalf("not ready: %v", err)
	}
	var page bytes.Buffer
	if err := reg.WriteText(&page); err != nil {
		t.Fatal(err)
	}
	want := `corral_kubernetes_api_calls_total{verb="create",resource="selfsubjectaccessreviews",code="2xx"} ` + itoa(len(Permissions))
	if !strings.Contains(page.String(), want+"\n") {
		t.Errorf("no line %q in\n%s", want, page.String())
	}
	st := k.st
	st.Namespace = "corral-no-such-ns"
	err := k.e.Ready(context.Background(), st)
	if err == nil || !strings.Contains(err.Error(), "corral-no-such-ns") {
		t.Errorf("a namespace out of reach: %v, want an error naming it", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
