package inside

import (
	"fmt"
	"os"
	"time"

	"github.com/corralhq/corral/internal/reaper"
	"github.com/corralhq/corral/reexec"
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
	reexec.Register(ModeBgKeep, func(args []string) int { harden(); return bgKeepMain(args) })
	reexec.Register(ModeBg, bgMain)
	reexec.Register(ModeSHA256, sha256Main)
	reexec.Register(ModeUntar, untarMain)
	reexec.Register(ModeTar, tarMain)
	reexec.Register(ModePortList, portListMain)
	reexec.Register(ModePortConnect, func(args []string) int { harden(); return portConnectMain(args) })
}

// harden readies a long-lived helper (the agent, a relay) for the
// commands it runs: reaper.Harden, as the reaper under each command.
func harden() { reaper.Harden(12, 20*time.Millisecond) }

// fail prints a helper's error on stderr and returns the status 125 that
// corral uses for its own failures.
func fail(mode string, err error) int {
	fmt.Fprintf(os.Stderr, "corral %s: %v\n", mode, err)
	return 125
}
