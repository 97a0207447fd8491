package secrets

import (
	"fmt"

	"golang.org/x/sys/unix"

	_ "github.com/corralhq/corral/internal/linuxonly" // Linux alone: say so elsewhere
)

// ProtectProcess makes this process non-dumpable (prctl(2)
// PR_SET_DUMPABLE 0) for the rest of its life: when it crashes the kernel
// writes no core, whatever ulimit -c and kernel.core_pattern say, and a
// process of the same user cannot ptrace it or read its memory through
// /proc/PID/mem. A core of corral would hold every real value it read.
// [Resolve] calls it before it reads one; it is cheap and may be called
// again. The programs corral starts are not affected: execve(2) makes a
// new program dumpable again. Errors are prctl's.
func ProtectProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_DUMPABLE 0: %w", err)
	}
	return nil
}

// Dumpable reports whether this process may dump core (prctl
// PR_GET_DUMPABLE), for tests and corral doctor.
func Dumpable() (bool, error) {
	n, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	return n != 0, err
}
