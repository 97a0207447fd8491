package main

import (
	"os"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/k8stest"
)

// routeEmptySecrets: with a secret in the settings and a route whose
// secrets: [] catches sessions "free:*", such a session's commands see no
// stand-in (and need no value), while another session's do; the local
// backend refuses the secret naming the backends that have secrets.
func routeEmptySecrets(t *testing.T, c *cli) {
	real := "ghp_" + strings.Repeat("R0ute", 7) + "x"
	for _, kv := range [][2]string{
		{"profile", "allowlist"},
		{"secrets", `[{name: GITHUB_TOKEN, from: "env:GH_REAL", hosts: [api.example.test]}]`},
		{"routes", `[{sessions: "free:*", secrets: []}]`},
	} {
		if code, so, se := c.run(nil, "config", "set", kv[0], kv[1]); code != 0 {
			t.Fatalf("config set %s: %d %s %s", kv[0], code, so, se)
		}
	}
	sess := itoa(os.Getpid())
	// A session's command is the words joined, run by its shell.
	code, so, se := c.run(nil, "run", "--session", "free:"+sess, "--", `echo "GT=${GITHUB_TOKEN-unset}"`)
	if code != 0 || so != "GT=unset\n" {
		t.Errorf("a session whose route says secrets: []: %d %q %q, want no GITHUB_TOKEN (and GH_REAL is not even set)", code, so, se)
	}
	code, so, se = c.run([]string{"GH_REAL=" + real}, "run", "--session", "held:"+sess, "--", `echo "GT=${GITHUB_TOKEN-unset}"`)
	if si := strings.TrimPrefix(strings.TrimSpace(so), "GT="); code != 0 || len(si) != len(real) || si == real {
		t.Errorf("another session: %d %q %q, want the stand-in", code, so, se)
	}
	c.run(nil, "cleanup")
}

func TestRouteEmptySecrets(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	routeEmptySecrets(t, c)
	// The local backend's refusal names the backends that have secrets.
	code, so, se := c.run([]string{"GH_REAL=ghp_" + strings.Repeat("L0cal", 7) + "x"}, "run", "--backend", "local", "--session", "held:local", "--", "true")
	if code == 0 || !strings.Contains(se, "bwrap, docker, kubernetes") || !strings.Contains(se, "GITHUB_TOKEN") {
		t.Errorf("local backend with a secret: %d %q %q, want a refusal naming bwrap, docker, kubernetes", code, so, se)
	}
}

func TestRouteEmptySecretsDocker(t *testing.T) {
	c, _ := dockerCLI(t)
	routeEmptySecrets(t, c)
}

func TestRouteEmptySecretsKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("kubernetes cluster test (-short)")
	}
	cl := k8stest.Require(t)
	c := newCLI(t)
	c.env = append(c.env, "CORRAL_BACKEND=kubernetes", "CORRAL_KUBERNETES_KUBECONFIG="+os.Getenv(k8stest.EnvKubeconfig),
		"CORRAL_KUBERNETES_NAMESPACE="+cl.Namespace, "CORRAL_KUBERNETES_IMAGE="+cl.Image, "CORRAL_KUBERNETES_MEMORY=256Mi", "CORRAL_KUBERNETES_CPUS=500m")
	routeEmptySecrets(t, c)
}
