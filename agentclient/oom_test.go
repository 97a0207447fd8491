package agentclient

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/sandbox"
)

// ended is a Command that has already ended with exit.
type ended struct{ exit inside.Exit }

func (e ended) StartedC() <-chan int {
	c := make(chan int, 1)
	c <- 7
	return c
}

func (e ended) FinishedC() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
func (ended) Signal(syscall.Signal) error     { return nil }
func (e ended) Result() (*inside.Exit, error) { return &e.exit, nil }

// TestWaitReportsMemoryKills: a kill by the container's or pod's memory
// limit is reported whatever the top process's status: the wrapper shell
// of a session exits 137 normally when its child was killed, and a parent
// that outlives its killed children exits 0.
func TestWaitReportsMemoryKills(t *testing.T) {
	for _, tc := range []struct {
		name      string
		exit      inside.Exit
		oom       bool // what the engine would say (asked only as a fallback)
		limit     string
		kills     int
		wantLimit bool
	}{
		{"shell exits 137 after its child was killed", inside.Exit{Code: 137, OOM: true, OOMKnown: true, OOMKills: 1}, false, sandbox.LimitPodMemory, 1, true},
		{"top process killed", inside.Exit{Code: 137, Signal: 9, OOM: true, OOMKnown: true, OOMKills: 2}, false, sandbox.LimitPodMemory, 2, true},
		{"parent went on and exited 0", inside.Exit{Code: 0, OOM: true, OOMKnown: true, OOMKills: 3}, false, sandbox.LimitContainerMemory, 3, false},
		{"count unknown, engine says OOMKilled", inside.Exit{Code: 137, Signal: 9}, true, sandbox.LimitContainerMemory, 0, true},
		{"no kill", inside.Exit{Code: 137, OOMKnown: true}, false, sandbox.LimitPodMemory, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Wait(context.Background(), &sandbox.Request{}, ended{tc.exit}, time.Now(), WaitOptions{
				KillGrace: time.Second, OOM: func() bool { return tc.oom }, OOMLimit: tc.limit,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.LimitHit == tc.limit; got != tc.wantLimit {
				t.Errorf("LimitHit %q, want %q: %v", res.LimitHit, tc.limit, tc.wantLimit)
			}
			if res.MemoryKills != tc.kills {
				t.Errorf("MemoryKills %d, want %d", res.MemoryKills, tc.kills)
			}
			if msg := sandbox.LimitMessage(res, sandbox.Limits{}); (tc.kills > 0 || tc.wantLimit) && msg == "" {
				t.Error("no limit message")
			}
		})
	}
}
