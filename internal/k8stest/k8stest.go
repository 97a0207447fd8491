// Package k8stest gives tests the single-node Kubernetes cluster that
// `.ci/k8s-cluster up` starts on this machine (issue 16): a client-go
// clientset with corral's own credentials, one with the admin's, the
// namespace corral may use and the test image.
//
// `.ci/k8s-cluster up` writes the coordinates to /var/tmp/k8s-ready as
// shell lines; .ci/run exports them (`set -a; . /var/tmp/k8s-ready`):
//
//	CORRAL_TEST_KUBECONFIG             corral's kubeconfig (a ServiceAccount token; RBAC in its namespace only)
//	CORRAL_TEST_KUBE_NAMESPACE         that namespace
//	CORRAL_TEST_KUBE_IMAGE             the test image (bash, coreutils, git, curl, python3), imported, never pulled
//	CORRAL_TEST_KUBE_ADMIN_KUBECONFIG  the cluster admin's kubeconfig (root and the docker group)
//
// Require skips a test when they are unset or the cluster does not answer,
// naming what is missing, except under CORRAL_REQUIRE_KUBERNETES=1 (set by
// .ci/run), where it fails the test instead.
package k8stest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
)

// The variables Require reads (see the package doc).
const (
	EnvKubeconfig      = "CORRAL_TEST_KUBECONFIG"
	EnvNamespace       = "CORRAL_TEST_KUBE_NAMESPACE"
	EnvImage           = "CORRAL_TEST_KUBE_IMAGE"
	EnvAdminKubeconfig = "CORRAL_TEST_KUBE_ADMIN_KUBECONFIG"
	// EnvRequire set to 1 turns every skip of Require into a failure.
	EnvRequire = "CORRAL_REQUIRE_KUBERNETES"
)

// Cluster is the test cluster as one test sees it.
type Cluster struct {
	// Config and Client carry corral's credentials: what corral itself may
	// do (pods, pods/exec, pods/log, PVCs, NetworkPolicies in Namespace;
	// events read; runtime classes read).
	Config *rest.Config
	Client kubernetes.Interface
	// AdminConfig and Admin are the cluster admin's, for what a test checks
	// behind corral's back (nodes, other namespaces). Nil when the admin
	// kubeconfig is unset or unreadable (corraltest outside the docker
	// group); AdminOrSkip then skips.
	AdminConfig *rest.Config
	Admin       kubernetes.Interface
	// Namespace is where corral's pods go; Image the test image.
	Namespace string
	Image     string
}

// Require returns the cluster named by the environment, skipping (or, under
// CORRAL_REQUIRE_KUBERNETES=1, failing) the test when a variable is unset,
// a kubeconfig cannot be read, or the apiserver does not answer within
// 20 s.
func Require(t testing.TB) *Cluster {
	t.Helper()
	c, err := load()
	if err != nil {
		msg := fmt.Sprintf("no test Kubernetes cluster: %v (start one as root with `.ci/k8s-cluster build && .ci/k8s-cluster up`, then `set -a; . /var/tmp/k8s-ready; set +a`)", err)
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal(msg + "; " + EnvRequire + "=1 forbids skipping")
		}
		t.Skip(msg)
	}
	return c
}

func load() (*Cluster, error) {
	c := &Cluster{Namespace: os.Getenv(EnvNamespace), Image: os.Getenv(EnvImage)}
	kc := os.Getenv(EnvKubeconfig)
	for _, v := range [][2]string{{EnvKubeconfig, kc}, {EnvNamespace, c.Namespace}, {EnvImage, c.Image}} {
		if v[1] == "" {
			return nil, fmt.Errorf("%s is not set", v[0])
		}
	}
	var err error
	if c.Config, c.Client, err = clientFor(kc); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// corral's own read in its namespace: the apiserver answers and the
	// token is still good.
	if _, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return nil, fmt.Errorf("listing pods in %s with %s: %w", c.Namespace, kc, err)
	}
	if akc := os.Getenv(EnvAdminKubeconfig); akc != "" {
		if cfg, cli, err := clientFor(akc); err == nil {
			c.AdminConfig, c.Admin = cfg, cli
		}
	}
	return c, nil
}

func clientFor(kubeconfig string) (*rest.Config, kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cli, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, cli, nil
}

// AdminOrSkip returns the admin clientset, skipping the test (failing under
// CORRAL_REQUIRE_KUBERNETES=1) when the admin kubeconfig is not readable.
func (c *Cluster) AdminOrSkip(t testing.TB) kubernetes.Interface {
	t.Helper()
	if c.Admin == nil {
		msg := fmt.Sprintf("no admin credentials: %s is unset or unreadable (root and the docker group read it)", EnvAdminKubeconfig)
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal(msg + "; " + EnvRequire + "=1 forbids skipping")
		}
		t.Skip(msg)
	}
	return c.Admin
}

// Exec runs argv in a container of a pod through the apiserver's exec
// subresource, WebSocket first and SPDY when the server refuses it
// (remotecommand.NewFallbackExecutor). A non-zero exit comes back as an
// error satisfying k8s.io/client-go/util/exec.ExitError (CodeExitError).
//
// containerd's CRI exec closes the command's stdin as soon as its stdout
// ends: a command that takes stdin must keep stdout open until it has read
// it all (for example `sh -c 'cat >f; echo done'`, not `sh -c 'cat >f'`,
// which the shell turns into an exec of cat whose stdout is the file), and
// the caller must check what arrived (field notes).
func (c *Cluster) Exec(ctx context.Context, pod, container string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	req := c.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.Namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   argv,
			Stdin:     stdin != nil,
			Stdout:    stdout != nil,
			Stderr:    stderr != nil,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.Config, "GET", req.URL().String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
	if err != nil {
		return err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// Output runs argv like Exec without stdin and returns its stdout; stderr
// is in the error when the command fails.
func (c *Cluster) Output(ctx context.Context, pod, container string, argv ...string) (string, error) {
	var out, errb bytes.Buffer
	if err := c.Exec(ctx, pod, container, argv, nil, &out, &errb); err != nil {
		return out.String(), fmt.Errorf("%v: %w (stderr %q)", argv, err, errb.String())
	}
	return out.String(), nil
}
