package kubernetes

import (
	"testing"

	"github.com/corralhq/corral/backend/backendtest"
	"github.com/corralhq/corral/internal/dockertest"
)

// TestConformanceKubernetes runs the backends' conformance suite on the
// test cluster (CI's cluster lane; without a cluster newKube skips, as
// every test of this file's kind does), with the engine of the egress
// tests (corral's proxies, secrets' files).
func TestConformanceKubernetes(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{
		// workspace_mode review is refused (Backend.refuse).
		NoReview: true,
		// The pod is on another machine: no host path is mounted, and
		// /tmp (TMPDIR, HOME) is the pod's own.
		NoHostBinds: true,
		NoScratch:   true,
		// A NetworkPolicy, not the pod's interfaces, cuts it off.
		PolicyNetwork: true,
		New: func(t *testing.T) *backendtest.World {
			k := newEgressKube(t)
			home := dockertest.TestDir(t)
			t.Setenv("HOME", home)
			return &backendtest.World{Backend: k.b, Workdir: k.ws, Home: home, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}
		},
	})
}
