package reexec

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// RlimitsEnv names the variable that carries resource limits to a helper
// mode: corral sets it in the environment of a container whose engine
// cannot limit it by cgroups (the docker backend on a rootless Podman
// without them), so that every helper started there, the container's
// main process and each exec'd agent or relay, sets them on itself
// before its mode runs and the commands it starts inherit them
// (setrlimit(2): limits pass through fork and execve). Init applies it
// and removes it from the environment, so no command sees it.
//
// Its value is a comma-separated list of NAME=SOFT:HARD, in the form of
// Docker's --ulimit (go-units' Ulimit.String): NAME one of "data"
// (RLIMIT_DATA, bytes), "nproc" (RLIMIT_NPROC, processes and threads)
// and "cpu" (RLIMIT_CPU, seconds); -1 is unlimited.
const RlimitsEnv = "__CORRAL_RLIMITS"

// Rlimit is one limit of RlimitsEnv: Resource is unix.RLIMIT_*; Soft and
// Hard are the kernel's values (unix.RLIM_INFINITY for -1).
type Rlimit struct {
	Name     string
	Resource int
	Soft     uint64
	Hard     uint64
}

// rlimitOf returns the resource of a limit RlimitsEnv may carry, by its
// name. A switch, not a map: a package-level map costs allocations at
// every start of corral and of every helper (cmd/corral's
// TestInitAllocations).
func rlimitOf(name string) (int, bool) {
	switch name {
	case "data":
		return unix.RLIMIT_DATA, true
	case "nproc":
		return unix.RLIMIT_NPROC, true
	case "cpu":
		return unix.RLIMIT_CPU, true
	}
	return 0, false
}

// ParseRlimits parses RlimitsEnv's value ("" is none); an unknown name,
// a malformed or negative value other than -1, a soft limit above the
// hard one or a name given twice is an error. Pure.
func ParseRlimits(s string) ([]Rlimit, error) {
	if s == "" {
		return nil, nil
	}
	var out []Rlimit
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		name, val, ok := strings.Cut(item, "=")
		res, known := rlimitOf(name)
		if !ok || !known {
			return nil, fmt.Errorf("%s: %q: want data, nproc or cpu=SOFT:HARD", RlimitsEnv, item)
		}
		if seen[name] {
			return nil, fmt.Errorf("%s: %s given twice", RlimitsEnv, name)
		}
		seen[name] = true
		soft, hard, ok := strings.Cut(val, ":")
		if !ok {
			return nil, fmt.Errorf("%s: %q: want %s=SOFT:HARD", RlimitsEnv, item, name)
		}
		num := func(v string) (uint64, error) {
			if v == "-1" {
				return unix.RLIM_INFINITY, nil
			}
			n, err := strconv.ParseUint(v, 10, 63)
			if err != nil {
				return 0, fmt.Errorf("%s: %q: %q is not a limit (a number, or -1 for none)", RlimitsEnv, item, v)
			}
			return n, nil
		}
		l := Rlimit{Name: name, Resource: res}
		var err error
		if l.Soft, err = num(soft); err != nil {
			return nil, err
		}
		if l.Hard, err = num(hard); err != nil {
			return nil, err
		}
		if l.Soft > l.Hard {
			return nil, fmt.Errorf("%s: %q: the soft limit is above the hard one", RlimitsEnv, item)
		}
		out = append(out, l)
	}
	return out, nil
}

// lowered is the limit to set for want where cur holds: each of soft and
// hard at most both want's and cur's hard (an unprivileged process can
// lower its limits but never raise a hard one, setrlimit(2)), the soft
// at most the hard. Pure.
func lowered(cur unix.Rlimit, want Rlimit) unix.Rlimit {
	hard := min(want.Hard, cur.Max)
	return unix.Rlimit{Cur: min(want.Soft, hard), Max: hard}
}

// commandCPU is the "cpu" limit of RlimitsEnv, in seconds, once
// applyRlimits has set it (0: none): this helper lives across commands
// (a container's agent), so its own RLIMIT_CPU is the soft limit alone,
// and each command's is set where it starts (CommandCPU).
var commandCPU uint64

// CommandCPU returns the CPU time limit, in seconds, that RlimitsEnv gave
// this process and that every command it starts must hold as a hard
// limit too, or 0 for none. A long-lived helper keeps only the soft limit
// on itself (a hard one would SIGKILL it once its own CPU time over the
// container's life reached it), which a command could raise again
// (setrlimit(2): an unprivileged process may raise its soft limit up to
// the hard one), in itself or, through prlimit(2) on a process of its own
// uid, in the helper that starts the next commands. So the value comes
// from here, read once before anything of the container ran, never from
// the limits the starter holds when a command starts: internal/reaper,
// which starts every command of the agent and the relay, sets it as the
// soft limit and that plus a second as the hard one before the command
// runs, as bwrap's gate does (SIGXCPU, then SIGKILL a second later).
func CommandCPU() uint64 { return commandCPU }

// applyRlimits sets the limits of RlimitsEnv's value s on this process,
// never above what it has, and removes the variable from the
// environment.
func applyRlimits(s string) error {
	ls, err := ParseRlimits(s)
	if err != nil {
		return err
	}
	for _, l := range ls {
		if l.Resource == unix.RLIMIT_CPU && l.Soft != unix.RLIM_INFINITY {
			commandCPU = l.Soft
		}
		var cur unix.Rlimit
		if err := unix.Getrlimit(l.Resource, &cur); err != nil {
			return fmt.Errorf("getrlimit %s: %w", l.Name, err)
		}
		nl := lowered(cur, l)
		if err := unix.Setrlimit(l.Resource, &nl); err != nil {
			return fmt.Errorf("setrlimit %s %d:%d: %w", l.Name, nl.Cur, nl.Max, err)
		}
	}
	return os.Unsetenv(RlimitsEnv)
}
