package kubernetes

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/corralhq/corral/metrics"
)

// engineMetrics are the backend's families in Options.Metrics
// (docs/serve.md, "Metrics"); a nil *engineMetrics counts nothing.
type engineMetrics struct {
	apiCalls *metrics.CounterVec // verb, resource, code
	claims   *metrics.CounterVec // result
}

// newEngineMetrics adds the engine's families to r: its API calls, its
// warm pool's claims, and the free pods its pool holds (read at scrape
// time). Nil for a nil r.
func newEngineMetrics(r *metrics.Registry, e *Engine) *engineMetrics {
	if r == nil {
		return nil
	}
	m := &engineMetrics{
		apiCalls: r.Counter("corral_kubernetes_api_calls_total",
			"Requests corral sent to the Kubernetes API server, by verb (as the API server names them), resource[/subresource] and status class (2xx, 4xx, 5xx; error: no answer).",
			"verb", "resource", "code"),
		claims: r.Counter("corral_kubernetes_pool_claims_total",
			"Warm pool claims by result: claimed (a free pod became the session's), empty (no free pod: a new pod is made), error (the API refused or failed).",
			"result"),
	}
	// Every result from the start, at 0: a scrape before the first claim
	// shows the family, and rate() sees the first one.
	for _, res := range []string{"claimed", "empty", "error"} {
		m.claims.With(res)
	}
	r.GaugeFunc("corral_kubernetes_pool_ready_pods",
		"Free warm-pool pods this corral made, with corral's agent started, that it has not seen claimed.", nil,
		func() []metrics.Sample {
			if pl, ok := e.pool.(*corralPool); ok {
				return []metrics.Sample{{Value: float64(pl.readyCount())}}
			}
			return nil
		})
	return m
}

// claim counts one warm pool claim with result.
func (m *engineMetrics) claim(result string) {
	if m != nil {
		m.claims.With(result).Inc()
	}
}

// wrap returns rt counting each request it carries (rest.Config.Wrap).
func (m *engineMetrics) wrap(rt http.RoundTripper) http.RoundTripper {
	return countingTransport{next: rt, calls: m.apiCalls}
}

// countingTransport counts each API request by verb, resource and the
// class of its answer's status.
type countingTransport struct {
	next  http.RoundTripper
	calls *metrics.CounterVec
}

// RoundTrip implements http.RoundTripper.
func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	verb, res := apiCallOf(r.Method, r.URL.Path, r.URL.Query().Get("watch"))
	resp, err := t.next.RoundTrip(r)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode/100) + "xx"
	}
	t.calls.With(verb, res, code).Inc()
	return resp, err
}

// connectSubresource reports whether the API server serves subresource
// as the "connect" verb (streams), whatever the HTTP method. A switch, not
// a map: a package-level map is built at every start of corral's
// executable (TestInitAllocations).
func connectSubresource(sub string) bool {
	switch sub {
	case "exec", "attach", "portforward", "proxy":
		return true
	}
	return false
}

// apiCallOf names an API request as the API server's authorization and
// audit do (Kubernetes API concepts, "Resource URIs", and the request
// verbs of authorization/v1): verb get, list, watch, create, update,
// patch, delete, deletecollection or connect; resource "pods",
// "pods/exec", "selfsubjectaccessreviews" (the group left out: corral's
// resources do not share names). A path outside /api and /apis (such as
// /version) is resource "nonresource", verb the method in lower case.
// Pure.
func apiCallOf(method, path, watch string) (verb, resource string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	}
	if len(rest) == 0 {
		return strings.ToLower(method), "nonresource"
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:] // a namespaced resource; namespaces/NAME alone is the namespace
	}
	resource = rest[0]
	named := len(rest) >= 2
	if len(rest) >= 3 {
		resource += "/" + rest[2]
		if connectSubresource(rest[2]) {
			return "connect", resource
		}
	}
	switch method {
	case http.MethodGet, http.MethodHead:
		switch {
		case watch == "true" || watch == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(method)
	}
	return verb, resource
}
