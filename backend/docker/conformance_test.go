package docker

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/backend/backendtest"
	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/testkit"
)

// TestConformance runs the backends' conformance suite on docker, built
// as this package's tests build it (newFixture's engine, with the state
// directories secrets' files need), on the real engine and the test
// image, as the caller with a home directory of the test's.
func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{
		// /tmp (TMPDIR, HOME) is the container's own.
		NoScratch: true,
		New: func(t *testing.T) *backendtest.World {
			if testing.Short() {
				t.Skip("docker integration test (-short)")
			}
			cli := dockertest.Engine(t)
			st := DefaultSettings
			st.Image = dockertest.Image(t, cli)
			lb := &testkit.LogBuf{}
			state := dockertest.TestDir(t)
			// The allowlist's proxies, with the certificate authority
			// secrets need (a test's own state directory).
			pool := egress.NewPool(egress.Options{Dir: filepath.Join(state, "net"), Linger: -1, CADir: filepath.Join(state, "ca"), Logger: slog.New(slog.NewTextHandler(lb, nil))})
			t.Cleanup(func() { pool.Close() })
			e := secretsEngine(t, state, pool, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})))
			home := dockertest.TestDir(t)
			t.Setenv("HOME", home)
			return &backendtest.World{Backend: e.Backend(st), Workdir: dockertest.TestDir(t), Home: home, Env: []string{"PATH=/usr/bin:/bin"}}
		},
	})
}
