package inside

import (
	"os"
	"testing"

	"github.com/corralhq/corral/reexec"
)

// TestMain lets the test binary serve as corral's helper modes, as
// corral's main does: tests start sandboxes that re-execute it.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}
