// Package inside registers the two helper modes of corral's executable that
// run inside an allowlisted sandbox: the forwarder (forward.ForwarderArg)
// and the trampoline (forward.TrampolineArg), whose install step loads
// corral's syscall filter with AF_UNIX sockets denied. Package egress
// imports it, so every binary that can start such a sandbox can also serve
// as its helper, once main (or a test binary's TestMain) calls
// reexec.Init. It links neither net/http nor the host-side proxies.
package inside

import (
	"github.com/corralhq/corral/netproxy/forward"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/seccomp"
)

// init registers the two modes; main dispatches them through reexec.Init.
func init() {
	reexec.Register(forward.ForwarderArg, forward.ForwarderMain)
	reexec.Register(forward.TrampolineArg, func(args []string) int {
		return forward.TrampolineMain(args, restrictCommand)
	})
}

// restrictCommand is the trampoline's install step: it loads corral's
// syscall filter with AF_UNIX sockets denied (seccomp.Install: every
// thread, no_new_privs), so the command it executes next starts under it,
// while the forwarder, an earlier process, keeps its Unix sockets. A
// failure stops the command from running (TrampolineMain exits 125).
func restrictCommand() error {
	return seccomp.Install(seccomp.Options{DenyUnixSockets: true})
}
