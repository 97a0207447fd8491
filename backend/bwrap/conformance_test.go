package bwrap

import (
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/backend/backendtest"
	"github.com/corralhq/corral/egress"
)

// TestConformance runs the backends' conformance suite on bwrap, built as
// this package's tests build it (newEnv), with an egress pool for the
// allowlist profile and secrets.
func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{
		New: func(t *testing.T) *backendtest.World {
			e := newEnv(t)
			pool := egress.NewPool(egress.Options{Dir: filepath.Join(e.base, "net"), Linger: -1, CADir: filepath.Join(e.state, "ca")})
			t.Cleanup(func() { _ = pool.Close() })
			e.backend = New(Options{StateDir: e.state, HiddenDirs: []string{filepath.Join(e.home, ".config", "corral")}, Egress: pool})
			return &backendtest.World{Backend: e.backend, Workdir: e.work, Home: e.home, Env: e.envv}
		},
	})
}
