package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/corralhq/corral/sandbox"
)

// Permission is one API permission corral needs in its namespace, as a
// SelfSubjectAccessReview asks it (authorization.k8s.io/v1).
type Permission struct {
	// Group is the API group ("" for core); Resource and Subresource name
	// what is asked for; Verb the action.
	Group, Resource, Subresource, Verb string
	// Why is where corral uses it.
	Why string `json:"-"`
}

// String is "verb resource[/subresource]".
func (p Permission) String() string {
	r := p.Resource
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	return p.Verb + " " + r
}

// Permissions is every call the backend makes to the API (api.go: create,
// get, list, update, remove, removeIf, execURL) and where: the table doctor checks and
// docs/kubernetes.md lists. The exec stream, a WebSocket (an HTTP GET),
// needs both get and create on pods/exec: the API server authorizes the
// GET as get, and since Kubernetes 1.31 also as create
// (AuthorizePodWebsocketUpgradeCreatePermission). Found by running a
// command from a replica whose Role had create alone (TestDeployKubernetes).
var Permissions = []Permission{
	{Resource: resPods, Verb: "create", Why: "a session's pod (Backend.start)"},
	{Resource: resPods, Verb: "get", Why: "waiting for Ready, memory-kill status, what became of a pod whose agent stream broke (waitReady, oomKilled, lossOf)"},
	{Resource: resPods, Verb: "list", Why: "corral cleanup (Engine.Cleanup)"},
	{Resource: resPods, Verb: "delete", Why: "the session's end, corral cleanup"},
	{Resource: resPods, Verb: "update", Why: "the warm pool: a pool pod marked free, and its claim (kubernetes.warm_pool)"},
	{Resource: resPods, Subresource: "exec", Verb: "create", Why: "corral's agent, uploads, the proxy tunnel, corral cp"},
	{Resource: resPods, Subresource: "exec", Verb: "get", Why: "the same streams: a WebSocket exec is an HTTP GET, which the API server authorizes as get as well as create"},
	{Group: "networking.k8s.io", Resource: resPolicies, Verb: "create", Why: "deny-all policy under restricted/workspace"},
	{Group: "networking.k8s.io", Resource: resPolicies, Verb: "list", Why: "corral cleanup"},
	{Group: "networking.k8s.io", Resource: resPolicies, Verb: "delete", Why: "the session's end, corral cleanup"},
	{Resource: resClaims, Verb: "create", Why: "kubernetes.storage: pvc"},
	{Resource: resClaims, Verb: "list", Why: "corral cleanup"},
	{Resource: resClaims, Verb: "delete", Why: "the session's end, corral cleanup"},
	{Group: "coordination.k8s.io", Resource: resLeases, Verb: "get", Why: "the warm pool's refiller: one per pool key among the corrals of a namespace (lease.go)"},
	{Group: "coordination.k8s.io", Resource: resLeases, Verb: "create", Why: "the warm pool's refiller"},
	{Group: "coordination.k8s.io", Resource: resLeases, Verb: "update", Why: "the warm pool's refiller: renewing, taking over and releasing its Lease"},
}

// Access is the answer for one Permission.
type Access struct {
	Permission
	Allowed bool `json:"allowed"`
	// Error is set when the review itself failed.
	Error string `json:"error,omitempty"`
}

// Values of Diagnosis.NetworkPolicy.
const (
	PolicyEnforced    = "enforced"
	PolicyNotEnforced = "not enforced"
	PolicyUnknown     = "unknown"
)

// Diagnosis is what Engine.Diagnose found out about the cluster of a set
// of Settings (`corral doctor`).
type Diagnosis struct {
	// Server is the API server's URL; Version its gitVersion. Reachable is
	// set when it answered; Error says why not.
	Server    string `json:"server"`
	Version   string `json:"version,omitempty"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Namespace is the one corral uses; NamespaceExists is "yes", "no" or
	// "unknown" (the credentials may not read namespaces; the probe then
	// answers it).
	Namespace       string `json:"namespace"`
	NamespaceExists string `json:"namespace_exists"`
	// Access answers Permissions, in that order.
	Access []Access `json:"access,omitempty"`
	// RuntimeClasses are the cluster's (RuntimeClassesError when they
	// cannot be listed); RuntimeClass is kubernetes.runtime_class.
	RuntimeClasses      []string `json:"runtime_classes"`
	RuntimeClassesError string   `json:"runtime_classes_error,omitempty"`
	RuntimeClass        string   `json:"runtime_class,omitempty"`
	// Seccomp is the pods' profile (AnnotationSeccomp's form).
	Seccomp string `json:"seccomp"`
	// PidsLimit is the node's podPidsLimit as far as it is visible.
	PidsLimit string `json:"pids_limit"`
	// NetworkPolicy is PolicyEnforced, PolicyNotEnforced or PolicyUnknown,
	// found by a probe pod (probeNetworkPolicy); PolicyDetail says how.
	NetworkPolicy string `json:"network_policy"`
	PolicyDetail  string `json:"network_policy_detail"`
	// SettingsError is set when the settings are refused (check).
	SettingsError string `json:"settings_error,omitempty"`
	// Problems are what keeps the backend from running (Verdict);
	// Warnings what weakens it.
	Problems []string `json:"problems,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// Ready reports whether sessions can run on the cluster.
func (d *Diagnosis) Ready() bool { return len(d.Problems) == 0 }

// Verdict fills d.Problems and d.Warnings from d's answers (pure): the
// backend cannot run when the settings are refused, the API server does
// not answer, the namespace does not exist, a permission of Permissions is
// denied, or the runtime class named is not the cluster's. A NetworkPolicy
// that is not enforced, RuntimeDefault seccomp and an invisible pids limit
// are warnings: commands run, with less isolation than the settings say.
func (d *Diagnosis) Verdict() {
	d.Problems, d.Warnings = nil, nil
	if d.SettingsError != "" {
		d.Problems = append(d.Problems, d.SettingsError)
	}
	if !d.Reachable {
		d.Problems = append(d.Problems, fmt.Sprintf("the API server %s is not reachable (%s): check kubernetes.kubeconfig (or KUBECONFIG) and kubernetes.context, and that this machine reaches the server", d.Server, d.Error))
		return
	}
	if d.NamespaceExists == "no" {
		d.Problems = append(d.Problems, fmt.Sprintf("namespace %s does not exist: create it (kubectl create namespace %s) or set kubernetes.namespace", d.Namespace, d.Namespace))
	}
	var denied []string
	for _, a := range d.Access {
		if !a.Allowed {
			denied = append(denied, a.String())
		}
	}
	if len(denied) > 0 {
		d.Problems = append(d.Problems, fmt.Sprintf("the credentials may not %s in namespace %s: grant them with a Role (docs/kubernetes.md lists the rules)", strings.Join(denied, ", "), d.Namespace))
	}
	if d.RuntimeClass != "" && d.RuntimeClassesError == "" && !slices.Contains(d.RuntimeClasses, d.RuntimeClass) {
		d.Problems = append(d.Problems, fmt.Sprintf("kubernetes.runtime_class %s is not one of the cluster's runtime classes %v", d.RuntimeClass, d.RuntimeClasses))
	}
	switch d.NetworkPolicy {
	case PolicyNotEnforced:
		d.Warnings = append(d.Warnings, "the cluster's network plugin does not enforce NetworkPolicy: under the restricted, workspace and allowlist profiles a pod still reaches the network and other pods directly (corral's deny-all policy is made but nothing applies it; allowlist's proxy variables are not a barrier); use a plugin that enforces it (Calico, Cilium) or treat those profiles as network")
	case PolicyUnknown:
		d.Warnings = append(d.Warnings, "whether NetworkPolicy is enforced is unknown: "+d.PolicyDetail)
	}
	if strings.HasPrefix(d.Seccomp, "RuntimeDefault") {
		d.Warnings = append(d.Warnings, "pods run under the container runtime's default seccomp profile: install corral's profile on the nodes and set kubernetes.seccomp_profile")
	}
}

// diagAPI are the API groups only doctor reads.
type diagAPI struct {
	auth, node rest.Interface
}

func newDiagAPI(cfg *rest.Config) (*diagAPI, error) {
	sch := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{authv1.AddToScheme, nodev1.AddToScheme} {
		if err := add(sch); err != nil {
			return nil, err
		}
	}
	codecs := serializer.NewCodecFactory(sch)
	client := func(gv schema.GroupVersion) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath = &gv, "/apis"
		c.NegotiatedSerializer = codecs.WithoutConversion()
		return rest.RESTClientFor(c)
	}
	a, err := client(authv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	n, err := client(nodev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &diagAPI{auth: a, node: n}, nil
}

// Diagnose reports the cluster of st (`corral doctor`): the API server
// and its version, the namespace, each of Permissions by a
// SelfSubjectAccessReview, the runtime classes, the seccomp profile, the
// node's pod pids limit where the credentials may read the kubelet's
// configuration, and whether NetworkPolicy is enforced (a probe pod,
// probeNetworkPolicy, removed before Diagnose returns; labelled as corral's,
// so `corral cleanup` removes it if doctor is killed). probe false skips
// the probe. Verdict has been applied.
func (e *Engine) Diagnose(ctx context.Context, st Settings, probe bool) *Diagnosis {
	d := &Diagnosis{NamespaceExists: "unknown", NetworkPolicy: PolicyUnknown, PidsLimit: "not checked", RuntimeClass: st.RuntimeClass}
	defer d.Verdict()
	p, err := st.check()
	if err != nil {
		d.SettingsError = err.Error()
	}
	d.Seccomp = seccompName(seccompOf(&st))
	cl, namespace, err := e.target(&st)
	if err != nil {
		d.Error = err.Error()
		return d
	}
	d.Server, d.Namespace = cl.cfg.Host, namespace
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	vctx, vcancel := context.WithTimeout(ctx, 10*time.Second)
	raw, err := cl.cs.core.Get().AbsPath("/version").DoRaw(vctx)
	vcancel()
	if err != nil {
		d.Error = err.Error()
		return d
	}
	d.Reachable = true
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	_ = json.Unmarshal(raw, &v)
	d.Version = v.GitVersion
	var ns corev1.Namespace
	switch err := cl.cs.core.Get().Resource("namespaces").Name(d.Namespace).Do(ctx).Into(&ns); {
	case err == nil:
		d.NamespaceExists = "yes"
	case apierrors.IsNotFound(err):
		d.NamespaceExists = "no"
	}
	da, err := newDiagAPI(cl.cfg)
	if err != nil {
		d.Error = err.Error()
		return d
	}
	for _, perm := range Permissions {
		a := Access{Permission: perm}
		in := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
			Namespace: d.Namespace, Verb: perm.Verb, Group: perm.Group, Resource: perm.Resource, Subresource: perm.Subresource}}}
		var out authv1.SelfSubjectAccessReview
		if err := da.auth.Post().Resource("selfsubjectaccessreviews").Body(in).Do(ctx).Into(&out); err != nil {
			a.Error = err.Error()
		} else {
			a.Allowed = out.Status.Allowed
		}
		d.Access = append(d.Access, a)
	}
	var rcs nodev1.RuntimeClassList
	if err := da.node.Get().Resource("runtimeclasses").Do(ctx).Into(&rcs); err != nil {
		d.RuntimeClassesError = err.Error()
	} else {
		d.RuntimeClasses = []string{}
		for _, rc := range rcs.Items {
			d.RuntimeClasses = append(d.RuntimeClasses, rc.Name)
		}
	}
	denied := slices.ContainsFunc(d.Access, func(a Access) bool { return !a.Allowed })
	if !probe || d.SettingsError != "" || d.NamespaceExists == "no" || denied {
		d.PolicyDetail = "not probed (doctor needs valid settings, the namespace and corral's permissions to start a probe pod)"
		return d
	}
	e.probeNetworkPolicy(ctx, cl, &st, p, d)
	return d
}

// probeScript tries a TCP connection to $1:$2 with bash's /dev/tcp (the
// image must have bash: Settings.Image) and exits 0 when it connects, 1
// when refused or unreachable, 124 when it hung for 3 s (a policy that
// drops packets).
const probeScript = `(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null & p=$!
i=0; while [ $i -lt 30 ]; do kill -0 $p 2>/dev/null || { wait $p; exit $?; }; sleep 0.1; i=$((i+1)); done
kill $p 2>/dev/null; exit 124`

// policyWait is how long a connection that a deny-all policy should stop
// is retried: plugins apply a new policy asynchronously.
const policyWait = 15 * time.Second

// probeNetworkPolicy starts a locked-down pod (buildPod of st) without a
// policy, checks that it reaches the API server's address (the control),
// then puts a deny-all NetworkPolicy on it and retries the connection
// until it fails (enforced) or policyWait has passed (not enforced): a
// connection that still succeeds under the policy is the plugin not
// enforcing it. The pod and policy are deleted before it returns.
func (e *Engine) probeNetworkPolicy(ctx context.Context, cl *cluster, st *Settings, p *parsed, d *Diagnosis) {
	host, port := apiHostPort(d.Server)
	name := randomName()
	pl := podPlan{name: name, namespace: d.Namespace, session: "doctor-probe", owner: e.self.String(), hash: "doctor",
		workspace: "/work/doctor-probe", tmp: resource.MustParse("16Mi")}
	st2 := *st
	st2.Storage = StorageEmptyDir
	var podMade, policyMade bool
	defer func() {
		if !podMade {
			return
		}
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deleteObjects(dctx, cl.cs, d.Namespace, name, policyMade, ""); err != nil {
			e.log.Warn("kubernetes.doctor.probe_remove_failed", "pod", name, "error", err)
		}
	}()
	fail := func(what string, err error) {
		d.NetworkPolicy, d.PolicyDetail = PolicyUnknown, fmt.Sprintf("the probe pod could not run (%s: %v)", what, err)
		if apierrors.IsNotFound(err) && strings.Contains(err.Error(), "namespaces") {
			d.NamespaceExists = "no"
		}
	}
	if err := cl.cs.create(ctx, d.Namespace, resPods, buildPod(&st2, p, pl), &corev1.Pod{}); err != nil {
		fail("creating it", err)
		return
	}
	podMade = true
	if d.NamespaceExists == "unknown" {
		d.NamespaceExists = "yes"
	}
	if err := waitReady(ctx, cl.cs, d.Namespace, name); err != nil {
		fail("starting it", err)
		return
	}
	var pod corev1.Pod
	if err := cl.cs.get(ctx, d.Namespace, resPods, name, &pod); err == nil && pod.Spec.NodeName != "" {
		d.PidsLimit = pidsLimit(ctx, cl, pod.Spec.NodeName)
	}
	connect := func() int {
		var out, errb bytes.Buffer
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		code, err := execStream(cctx, cl, d.Namespace, name, ContainerName, []string{"bash", "-c", probeScript, "probe", host, port}, nil, &out, &errb)
		if err != nil {
			return -1
		}
		return code
	}
	if c := connect(); c != 0 {
		d.NetworkPolicy, d.PolicyDetail = PolicyUnknown, fmt.Sprintf("a pod without a policy could not connect to the API server at %s:%s either (status %d), so the probe cannot tell", host, port, c)
		return
	}
	np := buildPolicy(pl, sandbox.ProfileRestricted)
	if err := cl.cs.create(ctx, d.Namespace, resPolicies, np, &networkingv1.NetworkPolicy{}); err != nil {
		fail("creating its deny-all NetworkPolicy", err)
		return
	}
	policyMade = true
	deadline := time.Now().Add(policyWait)
	for {
		c := connect()
		if c != 0 {
			d.NetworkPolicy, d.PolicyDetail = PolicyEnforced, fmt.Sprintf("a probe pod reached the API server at %s:%s, and no longer once a deny-all NetworkPolicy selected it (status %d)", host, port, c)
			return
		}
		if time.Now().After(deadline) {
			d.NetworkPolicy, d.PolicyDetail = PolicyNotEnforced, fmt.Sprintf("a probe pod under a deny-all NetworkPolicy still reached the API server at %s:%s after %s", host, port, policyWait)
			return
		}
		select {
		case <-ctx.Done():
			d.NetworkPolicy, d.PolicyDetail = PolicyUnknown, "the probe ran out of time: "+ctx.Err().Error()
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// apiHostPort returns the host and port of the API server's URL server
// (port 443 when it names none).
func apiHostPort(server string) (string, string) {
	u, err := url.Parse(server)
	if err != nil {
		return server, "443"
	}
	h, p := u.Hostname(), u.Port()
	if p == "" {
		p = "443"
		if u.Scheme == "http" {
			p = "80"
		}
	}
	return h, p
}

// pidsLimit reads the kubelet's podPidsLimit of node through the API
// server's node proxy (GET nodes/NODE/proxy/configz, which needs get on
// nodes/proxy: cluster admins have it, corral's credentials usually not).
func pidsLimit(ctx context.Context, cl *cluster, node string) string {
	raw, err := cl.cs.core.Get().Resource("nodes").Name(node).SubResource("proxy").Suffix("configz").DoRaw(ctx)
	if err != nil {
		if apierrors.IsForbidden(err) {
			return "not visible to these credentials (the kubelet's podPidsLimit, --pod-max-pids; reading it needs get on nodes/proxy)"
		}
		return "not visible: " + err.Error()
	}
	return podPidsLimitOf(raw)
}

// podPidsLimitOf reads podPidsLimit from the kubelet's /configz answer
// ({"kubeletconfig": {...}}) (pure); absent or -1 means no limit per pod.
func podPidsLimitOf(raw []byte) string {
	var c struct {
		K struct {
			Pids *int64 `json:"podPidsLimit"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "not readable: " + err.Error()
	}
	if c.K.Pids == nil || *c.K.Pids < 0 {
		return "none: the kubelet sets no podPidsLimit, so a pod's processes are limited only by the node"
	}
	return fmt.Sprintf("%d processes per pod (the kubelet's podPidsLimit)", *c.K.Pids)
}
