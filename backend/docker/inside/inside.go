package inside

import (
	"fmt"
	"os"
)

// Mode arguments: the first argument of corral's executable that selects a
// helper mode inside a container.
const (
	ModePause   = "__corral-pause"
	ModePrepare = "__corral-prepare"
	ModeRelay   = "__corral-relay"
	ModeKill    = "__corral-kill"
)

// Path is where the docker backend mounts corral's executable in every
// container (read-only).
const Path = "/.corral/corral"

func init() {
	if len(os.Args) < 2 {
		return
	}
	var code int
	switch os.Args[1] {
	case ModePause:
		code = pauseMain()
	case ModePrepare:
		code = prepareMain(os.Args[2:])
	case ModeRelay:
		code = relayMain(os.Args[2:])
	case ModeKill:
		code = killMain(os.Args[2:])
	case ModeAgent:
		code = agentMain(os.Args[2:])
	default:
		return
	}
	os.Exit(code)
}

// fail prints a helper's error on stderr and returns the status 125 that
// corral uses for its own failures.
func fail(mode string, err error) int {
	fmt.Fprintf(os.Stderr, "corral %s: %v\n", mode, err)
	return 125
}
