package kubernetes

import (
	"context"
	"net/url"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// api is the part of the Kubernetes API corral uses: pods (and their exec
// subresource) and PVCs of core/v1, NetworkPolicies of networking/v1,
// Leases of coordination/v1 (the warm pool's refiller: lease.go).
// It is built on client-go's REST client with a scheme of those three
// groups only, not on the typed clientset (k8s.io/client-go/kubernetes):
// that one registers every API group at package initialisation, about
// 14,000 allocations that every start of corral's executable (each helper
// re-executed in a sandbox included) would pay (measured 2026-12-01 with
// GODEBUG=inittrace=1: 20,919 in all against 6,300 without it).
type api struct {
	core, net, coord rest.Interface
	params           runtime.ParameterCodec
	cfg              *rest.Config
}

// newAPI returns the api of cfg.
func newAPI(cfg *rest.Config) (*api, error) {
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		return nil, err
	}
	if err := networkingv1.AddToScheme(sch); err != nil {
		return nil, err
	}
	if err := coordv1.AddToScheme(sch); err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(sch)
	client := func(gv schema.GroupVersion, path string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath = &gv, path
		c.NegotiatedSerializer = codecs.WithoutConversion()
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		return rest.RESTClientFor(c)
	}
	core, err := client(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	nc, err := client(networkingv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	cc, err := client(coordv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	return &api{core: core, net: nc, coord: cc, params: runtime.NewParameterCodec(sch), cfg: cfg}, nil
}

// resource kinds of the api.
const (
	resPods     = "pods"
	resClaims   = "persistentvolumeclaims"
	resPolicies = "networkpolicies"
)

// client returns the REST client of resource.
func (a *api) client(resource string) rest.Interface {
	switch resource {
	case resPolicies:
		return a.net
	case resLeases:
		return a.coord
	}
	return a.core
}

// create posts obj to resource in ns.
func (a *api) create(ctx context.Context, ns, resource string, obj, out runtime.Object) error {
	return a.client(resource).Post().Namespace(ns).Resource(resource).Body(obj).Do(ctx).Into(out)
}

// get reads name of resource in ns into out.
func (a *api) get(ctx context.Context, ns, resource, name string, out runtime.Object) error {
	return a.client(resource).Get().Namespace(ns).Resource(resource).Name(name).Do(ctx).Into(out)
}

// list reads resource's objects in ns matching selector into out.
func (a *api) list(ctx context.Context, ns, resource, selector string, out runtime.Object) error {
	return a.client(resource).Get().Namespace(ns).Resource(resource).
		VersionedParams(&metav1.ListOptions{LabelSelector: selector}, a.params).Do(ctx).Into(out)
}

// remove deletes name of resource in ns at once (grace period 0, the
// dependents in the background).
func (a *api) remove(ctx context.Context, ns, resource, name string) error {
	zero := int64(0)
	bg := metav1.DeletePropagationBackground
	return a.client(resource).Delete().Namespace(ns).Resource(resource).Name(name).
		Body(&metav1.DeleteOptions{GracePeriodSeconds: &zero, PropagationPolicy: &bg}).Do(ctx).Error()
}

// update replaces name of resource in ns with obj (a PUT: the API server
// refuses it with 409 Conflict when obj's resourceVersion is not the
// current one).
func (a *api) update(ctx context.Context, ns, resource, name string, obj, out runtime.Object) error {
	return a.client(resource).Put().Namespace(ns).Resource(resource).Name(name).Body(obj).Do(ctx).Into(out)
}

// removeIf deletes name like remove, only while it still matches pre
// (UID and resourceVersion; 409 Conflict otherwise).
func (a *api) removeIf(ctx context.Context, ns, resource, name string, pre *metav1.Preconditions) error {
	zero := int64(0)
	bg := metav1.DeletePropagationBackground
	return a.client(resource).Delete().Namespace(ns).Resource(resource).Name(name).
		Body(&metav1.DeleteOptions{GracePeriodSeconds: &zero, PropagationPolicy: &bg, Preconditions: pre}).Do(ctx).Error()
}

// execURL is the URL of an exec in pod's container.
func (a *api) execURL(ns, pod string, o *corev1.PodExecOptions) *url.URL {
	return a.core.Post().Namespace(ns).Resource(resPods).Name(pod).SubResource("exec").VersionedParams(o, a.params).URL()
}
