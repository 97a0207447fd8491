package inside

import (
	"fmt"
	"github.com/corralhq/corral/reexec"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Mode arguments: the first argument of corral's executable that selects a
// helper mode inside a container.
const (
	ModePause   = "__corral-pause"
	ModePrepare = "__corral-prepare"
	ModeRelay   = "__corral-relay"
	ModeKill    = "__corral-kill"
	// ModeAgents prints how many agents (ModeAgent) run in the container,
	// leaving out the pid given with --except.
	ModeAgents = "__corral-agents"
)

// Path is where the docker backend mounts corral's executable in every
// container (read-only).
const Path = "/.corral/corral"

// init registers the helper modes with reexec; main dispatches them
// through reexec.Init. The long-lived ones (relay, agent) harden first.
func init() {
	reexec.Register(ModePause, func([]string) int { return pauseMain() })
	reexec.Register(ModePrepare, prepareMain)
	reexec.Register(ModeRelay, func(args []string) int { harden(); return relayMain(args) })
	reexec.Register(ModeKill, killMain)
	reexec.Register(ModeAgent, func(args []string) int { harden(); return agentMain(args) })
	reexec.Register(ModeAgents, agentsMain)
	reexec.Register(ModeSHA256, sha256Main)
	reexec.Register(ModeUntar, untarMain)
	reexec.Register(ModeTar, tarMain)
	reexec.Register(ModePortList, portListMain)
	reexec.Register(ModePortConnect, func(args []string) int { harden(); return portConnectMain(args) })
}

// harden readies a long-lived helper (the agent, a relay) for the commands
// it runs, which share its uid: it makes itself non-dumpable
// (prctl(2) PR_SET_DUMPABLE 0), so they can neither ptrace it nor open its
// /proc/PID/fd, mem or environ (a write to its stdout would forge frames);
// and it starts a few OS threads up front, which the Go runtime keeps and
// reuses, so that a command that exhausts the container's pids limit does
// not leave the helper unable to make the thread a blocking call needs
// (the runtime cannot go on without it).
func harden() {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := unix.Timespec{Nsec: 20e6}
			_ = unix.Nanosleep(&ts, nil) // a blocking call: a thread of its own
		}()
	}
	wg.Wait()
}

// fail prints a helper's error on stderr and returns the status 125 that
// corral uses for its own failures.
func fail(mode string, err error) int {
	fmt.Fprintf(os.Stderr, "corral %s: %v\n", mode, err)
	return 125
}
