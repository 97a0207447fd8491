package agentclient

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// TestSignalAtStart (issue 27, item 9): a person's signal that reaches the
// agent before it has started the command (the signal frame follows the
// start frame at once) ends the command as soon as it starts, and is
// reported as that signal; the agent dropped it (no process group yet),
// and the command ran on until its timeout. The verdict is the result,
// whichever comes first in the agent.
func TestSignalAtStart(t *testing.T) {
	c, _ := localAgent(t)
	for i := 0; i < 10; i++ {
		sigs := make(chan os.Signal, 1)
		sigs <- syscall.SIGTERM
		res := run(t, c, context.Background(), &sandbox.Request{
			Argv:    []string{"sleep", "600"},
			Timeout: 2 * time.Minute, // far past any start: a lost signal is a timeout
			Signals: sigs,
		})
		if res.TimedOut || res.Signal != int(syscall.SIGTERM) || res.ExitCode != 128+int(syscall.SIGTERM) {
			t.Fatalf("try %d: %+v; want ended by SIGTERM (143) at once", i, res)
		}
	}
}
