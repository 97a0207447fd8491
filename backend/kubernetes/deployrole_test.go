package kubernetes

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestDeployRoleMatchesPermissions holds deploy/'s Role and the table
// corral doctor checks (Permissions) together: every permission the
// backend uses is granted, and nothing else is (least privilege, issue 29).
func TestDeployRoleMatchesPermissions(t *testing.T) {
	// By the source's own path: the unprivileged pass runs the binary
	// outside the package's directory.
	_, self, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "../../deploy/base/role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		t.Fatalf("deploy/base/role.yaml: %v", err)
	}
	granted := grantsOf(t, role.Rules)
	var want []string
	for _, p := range Permissions {
		want = append(want, p.Group+"|"+p.String())
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(granted, want) {
		t.Errorf("deploy/base/role.yaml grants\n  %q\nbut corral doctor's table (Permissions) is\n  %q", granted, want)
	}
}

// grantsOf expands rules into "group|verb resource[/subresource]" strings,
// sorted; a wildcard, a resource name or a non-resource URL is an error
// (the Role must name each permission).
func grantsOf(t *testing.T, rules []rbacv1.PolicyRule) []string {
	t.Helper()
	var out []string
	for i, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %d: resourceNames or nonResourceURLs: the Role names whole resources", i)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" {
						t.Errorf("rule %d: a wildcard grants more than corral uses", i)
					}
					out = append(out, g+"|"+v+" "+res)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestGrantsOf(t *testing.T) {
	got := grantsOf(t, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "pods/exec"}, Verbs: []string{"create"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "create"}},
	})
	want := []string{"networking.k8s.io|create networkpolicies", "networking.k8s.io|list networkpolicies", "|create pods", "|create pods/exec"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("grantsOf = %q, want %q", got, want)
	}
	// Permissions' own strings use the same form for a subresource.
	if s := (Permission{Resource: "pods", Subresource: "exec", Verb: "create"}).String(); s != "create pods/exec" {
		t.Errorf("Permission.String() = %q", s)
	}
}
