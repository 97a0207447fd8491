package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/k8stest"
)

// TestDeployKubernetes deploys corral as a user would (issue 29): the
// image this command writes, imported into the test cluster's containerd
// (no registry), and deploy/base through `kubectl apply -k` with an
// overlay that names a namespace of its own, the test's sandbox image and
// a token; then both replicas must become Ready (their /readyz) and
// `corral doctor --backend kubernetes` run inside one must pass: the
// ServiceAccount's in-cluster configuration, the Role's permissions
// (exactly doctor's table: TestDeployRoleMatchesPermissions) and a probe
// pod of the sandbox image. Root only: the import talks to containerd's
// socket (CORRAL_TEST_KUBE_CONTAINERD).
func TestDeployKubernetes(t *testing.T) {
	c := k8stest.Require(t)
	c.AdminOrSkip(t)
	if os.Geteuid() != 0 {
		t.Skip("importing the image into the cluster's containerd needs root; the root pass runs this")
	}
	sock := os.Getenv("CORRAL_TEST_KUBE_CONTAINERD")
	if sock == "" {
		t.Fatal("CORRAL_TEST_KUBE_CONTAINERD is unset (.ci/k8s-cluster up writes it to /var/tmp/k8s-ready)")
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is not on PATH: the deploy test applies deploy/ as a user does, with kubectl apply -k")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	// The image, from the executables CI built (else built here).
	corral, helper := os.Getenv("CORRAL_TEST_BIN"), ""
	if d := os.Getenv("CORRAL_TEST_HELPERS"); d != "" {
		helper = filepath.Join(d, "static")
	}
	if corral == "" || helper == "" {
		corral, helper = "", ""
	}
	const ref = "localhost/corral:ci"
	archive := filepath.Join(dir, "corral-image.tar")
	if err := inDir(repo, func() error { return run(archive, ref, corral, helper) }); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "ctr", "-a", sock, "-n", "k8s.io", "images", "import", archive)

	ns := "corral-deploy-" + randHex(t, 4)
	overlay := filepath.Join(dir, "overlay")
	if err := os.Mkdir(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	// kustomize takes a base by a relative path only.
	base, err := filepath.Rel(overlay, filepath.Join(repo, "deploy/base"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %s
resources:
  - %s
images:
  - name: localhost/corral
    newTag: ci
secretGenerator:
  - name: corral-token
    files:
      - token
configMapGenerator:
  - name: corral-settings
    behavior: merge
    literals:
      - CORRAL_KUBERNETES_IMAGE=%s
`, ns, base, c.Image)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	// The token as the README makes it (openssl rand -hex 32 > deploy/token):
	// a file that ends with a newline, which the Secret keeps.
	if err := os.WriteFile(filepath.Join(overlay, "token"), []byte(randHex(t, 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := "--kubeconfig=" + os.Getenv(k8stest.EnvAdminKubeconfig)
	t.Cleanup(func() {
		out, err := exec.Command(kubectl, admin, "delete", "namespace", ns, "--wait=true", "--timeout=5m").CombinedOutput()
		if err != nil {
			t.Errorf("deleting namespace %s: %v\n%s", ns, err, out)
		}
	})
	mustRun(t, kubectl, admin, "apply", "-k", overlay)
	if _, err := runOut(kubectl, admin, "-n", ns, "rollout", "status", "deployment/corral", "--timeout=10m"); err != nil {
		desc, _ := runOut(kubectl, admin, "-n", ns, "describe", "pods")
		logs, _ := runOut(kubectl, admin, "-n", ns, "logs", "deployment/corral", "--tail=50")
		t.Fatalf("the replicas did not become Ready: %v\n%s\n%s", err, desc, logs)
	}
	out, err := runOut(kubectl, admin, "-n", ns, "exec", "deployment/corral", "--", "corral", "doctor", "--backend", "kubernetes")
	t.Logf("corral doctor --backend kubernetes in a replica:\n%s", out)
	if err != nil {
		t.Fatalf("corral doctor failed inside a replica: %v", err)
	}
	// A command runs from a replica in a session's pod of the sandbox
	// image: the replica makes the pod, uploads the helper and reaches it
	// over exec streams, all through the ServiceAccount.
	out, err = runOut(kubectl, admin, "-n", ns, "exec", "deployment/corral", "--", "corral", "run", "--", "sh", "-c", "echo from-$(id -u)-in-pod")
	if err != nil || !strings.Contains(out, "from-1000-in-pod") {
		t.Errorf("corral run in a replica: %v\n%s", err, out)
	}
	// The replica runs as the image's user, with its ServiceAccount.
	id, err := runOut(kubectl, admin, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=server",
		"-o", "jsonpath={range .items[*]}{.spec.serviceAccountName} {.spec.securityContext.runAsUser}{\"\\n\"}{end}")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Fields(id); len(lines) != 4 || lines[0] != "corral" || lines[1] != "65532" {
		t.Errorf("replicas' ServiceAccount and user: %q, want two of \"corral 65532\"", id)
	}
}

func inDir(dir string, f func() error) error {
	old, err := os.Getwd()
	if err != nil {
		return err
	}
	if err := os.Chdir(dir); err != nil {
		return err
	}
	defer os.Chdir(old)
	return f()
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := runOut(name, args...); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func runOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
