package inside

import (
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/reaper"
)

// The agent and the relay are child subreapers too (becomeSubreaper), a
// second line behind each command's reaper: a command that kills its own
// reaper (it runs as the command's user, so SIGKILL reaches it) sets its
// processes loose, and they are re-parented here rather than to the
// container's init, where sweepOrphans finds and ends them.
var (
	reapersMu sync.Mutex
	reapers   map[int]bool // the helper pids of the running commands' reapers (made at first use: no allocation at init)
)

// becomeSubreaper makes the calling helper a child subreaper
// (prctl(2) PR_SET_CHILD_SUBREAPER); a failure leaves it as it was.
func becomeSubreaper() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// sweepOrphans kills and reaps every descendant of this process that is
// not a running command's reaper or below one: what a killed reaper left.
// It gives up after a few seconds (a process the kernel does not let go).
func sweepOrphans() {
	self := os.Getpid()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		reapersMu.Lock()
		live := make(map[int]bool, len(reapers))
		for pid := range reapers {
			live[pid] = true
		}
		reapersMu.Unlock()
		left := orphans(self, live, reaper.Descendants(self, reaper.Scan()))
		if len(left) == 0 {
			return
		}
		for _, p := range left {
			reaper.SignalProc(p, syscall.SIGKILL)
			if p.PPid == self {
				// Only these pids: the agent's os/exec waits for its
				// reapers itself.
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(p.Pid, &ws, syscall.WNOHANG, nil)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// orphans is desc (the descendants of self, breadth first) without the
// live reapers and everything below them.
func orphans(self int, live map[int]bool, desc []reaper.Proc) []reaper.Proc {
	kept := map[int]bool{}
	var out []reaper.Proc
	for _, p := range desc {
		if live[p.Pid] || kept[p.PPid] {
			kept[p.Pid] = true
			continue
		}
		out = append(out, p)
	}
	return out
}
