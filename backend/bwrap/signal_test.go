package bwrap

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// TestSignalAtBirth (issue 27, item 9): a person's signal that comes while
// the sandbox is being made (before bwrap reports its pid 1, or before pid
// 1 has forked the command) ends the sandbox and is reported as that
// signal (143), never as corral's SIGKILL (137), and is never lost (the
// command then running on as if nothing came: here it would sleep until
// the timeout). The signal is sent at the earliest instants a caller has:
// already waiting on the channel when Run is called, and from OnStart.
// The verdict is the exit status, whichever window each try hits.
func TestSignalAtBirth(t *testing.T) {
	e := newEnv(t)
	for _, when := range []string{"before Run", "at OnStart"} {
		t.Run(strings.ReplaceAll(when, " ", "_"), func(t *testing.T) {
			for i := 0; i < 10; i++ {
				sigs := make(chan os.Signal, 1)
				o := e.sh(`sleep 600`, func(r *sandbox.Request) {
					r.Timeout = 2 * time.Minute // far past any start: a lost signal is a timeout
					r.Signals = sigs
					if when == "before Run" {
						sigs <- syscall.SIGTERM
					} else {
						r.OnStart = func(int) { sigs <- syscall.SIGTERM }
					}
				})
				if o.res.TimedOut {
					t.Fatalf("try %d: the signal was lost and the command ran until its timeout: %s", i, o)
				}
				if o.res.ExitCode != 128+int(syscall.SIGTERM) || o.res.Signal != int(syscall.SIGTERM) {
					t.Fatalf("try %d: exit %d, signal %d; want 143, SIGTERM: %s", i, o.res.ExitCode, o.res.Signal, o)
				}
			}
		})
	}
}
