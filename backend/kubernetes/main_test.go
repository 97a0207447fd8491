package kubernetes

import (
	"os"
	"testing"

	"github.com/corralhq/corral/reexec"
)

// TestMain lets the test binary serve as corral's helper modes, as
// corral's main does, and as a replica process of a test (envBgReplica).
func TestMain(m *testing.M) {
	reexec.Init()
	if spec := os.Getenv(envBgReplica); spec != "" {
		os.Exit(bgReplicaMain(spec))
	}
	os.Exit(m.Run())
}
