package local

import (
	"os"
	"testing"

	"github.com/corralhq/corral/reexec"
)

// TestMain lets the test binary serve as corral's reaper
// (internal/reaper), as corral's main does.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}
