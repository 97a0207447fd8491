// Command kubeexec runs one command in a pod's container the way
// `kubectl exec` does (kubectl is not installed here): kubeconfig through
// clientcmd, the typed clientset's REST client, the exec subresource over
// WebSocket with a fallback to SPDY (remotecommand.NewFallbackExecutor),
// the command's exit status as its own. It is the raw tool the kubernetes
// benchmark compares corral's agent stream with (bench/kubernetes.sh).
//
//	kubeexec -kubeconfig FILE -n NAMESPACE -c CONTAINER POD -- CMD...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

func main() {
	kc := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	ns := flag.String("n", "default", "namespace")
	container := flag.String("c", "", "container")
	flag.Parse()
	if flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: kubeexec -kubeconfig FILE -n NS -c CONTAINER POD -- CMD...")
		os.Exit(2)
	}
	argv := flag.Args()[1:]
	if argv[0] == "--" {
		argv = argv[1:]
	}
	code, err := run(*kc, *ns, *container, flag.Arg(0), argv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeexec:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(kubeconfig, ns, container, pod string, argv []string) (int, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return 0, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return 0, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return 0, err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return 0, err
	}
	err = ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: os.Stdout, Stderr: os.Stderr})
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return ce.Code, nil
	}
	return 0, err
}
