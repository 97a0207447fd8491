package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/mcpserver"
	"github.com/corralhq/corral/metrics"
)

// corral serve's probes and metrics (docs/serve.md): /healthz, /readyz,
// /metrics.

// getOnly serves GET and HEAD with h; any other method gets 405 Method
// Not Allowed with "Allow: GET, HEAD" (RFC 9110 section 15.5.6).
func getOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "Method Not Allowed: "+r.URL.Path+" answers GET and HEAD", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// healthz answers that the process serves HTTP; it asks no backend (a
// liveness probe that failed on a lost engine would restart corral for
// nothing).
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintln(w, "ok")
}

// readyzBody writes Host.Ready's checks (pure): "ready" or "not ready",
// then a line per check, "ok   NAME" or "FAIL NAME", with the reason
// after a colon when detail is set (the request carried the token: a
// reason may name a path or an address).
func readyzBody(checks []corral.ReadyCheck, ok, detail bool) string {
	var b strings.Builder
	if ok {
		b.WriteString("ready\n")
	} else {
		b.WriteString("not ready\n")
	}
	for _, c := range checks {
		switch {
		case c.Err == nil:
			fmt.Fprintf(&b, "ok   %s\n", c.Name)
		case detail:
			fmt.Fprintf(&b, "FAIL %s: %s\n", c.Name, strings.ReplaceAll(c.Err.Error(), "\n", " "))
		default:
			fmt.Fprintf(&b, "FAIL %s\n", c.Name)
		}
	}
	return b.String()
}

// readyz answers 200 when Host.Ready holds, else 503 Service
// Unavailable, with readyzBody; the reasons only to a request carrying
// the token (always when serve has none). Host.Ready caches its answer
// for 3 s.
func readyz(h interface {
	Ready(context.Context) ([]corral.ReadyCheck, bool)
}, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checks, ok := h.Ready(r.Context())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, readyzBody(checks, ok, mcpserver.HasToken(r, token)))
	})
}

// newServeMetrics is the registry corral serve serves at /metrics: the
// process and Go families, corral_build_info, and what the Host's MCP
// server and backends add.
func newServeMetrics() *metrics.Registry {
	reg := metrics.NewRegistry()
	metrics.RegisterProcess(reg)
	b := corral.Build()
	reg.GaugeFunc("corral_build_info", "corral's build: version, VCS revision (\"\" when not stamped) and Go toolchain; always 1.",
		[]string{"version", "revision", "goversion"}, func() []metrics.Sample {
			return []metrics.Sample{{Labels: []string{b.Version, b.Revision, b.GoVersion}, Value: 1}}
		})
	return reg
}

// metricsHandler serves reg in the text format 0.0.4.
func metricsHandler(reg *metrics.Registry) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", metrics.ContentType)
		w.Header().Set("Cache-Control", "no-store")
		_ = reg.WriteText(w) // a write error is the client gone
	})
}
