package local

import (
	"testing"

	"github.com/corralhq/corral/backend/backendtest"
)

// TestConformance runs the cases of the backends' conformance suite that
// apply to a backend without a sandbox (sandbox.Traits.Unsandboxed): exit
// codes, the timeout, the environment policy, and the refusals of secrets
// and review mode.
func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{
		NoReview: true,
		New: func(t *testing.T) *backendtest.World {
			home := t.TempDir()
			t.Setenv("HOME", home)
			return &backendtest.World{Backend: New(nil), Workdir: t.TempDir(), Home: home, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home}}
		},
	})
}
