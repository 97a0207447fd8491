package egress

import (
	"os"

	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/seccomp"
)

// init dispatches the two helper modes of corral's executable before any
// main runs (see the package documentation).
func init() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case netproxy.ForwarderArg:
		os.Exit(netproxy.ForwarderMain(os.Args[2:]))
	case netproxy.TrampolineArg:
		os.Exit(netproxy.TrampolineMain(os.Args[2:], restrictCommand))
	}
}

// restrictCommand is the trampoline's install step: it loads corral's
// syscall filter with AF_UNIX sockets denied (seccomp.Install: every
// thread, no_new_privs), so the command it executes next starts under it,
// while the forwarder, an earlier process, keeps its Unix sockets. A
// failure stops the command from running (TrampolineMain exits 125).
func restrictCommand() error {
	return seccomp.Install(seccomp.Options{DenyUnixSockets: true})
}
