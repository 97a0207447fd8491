package netproxy

import (
	"context"

	"github.com/corralhq/corral/netproxy/forward"
)

// The sandbox side of the egress filter lives in package netproxy/forward,
// which links no net/http (it runs in every allowlisted sandbox). These
// names keep it reachable from here.
const (
	// ForwarderArg selects [ForwarderMain]; see forward.ForwarderArg.
	ForwarderArg = forward.ForwarderArg
	// TrampolineArg selects [TrampolineMain]; see forward.TrampolineArg.
	TrampolineArg = forward.TrampolineArg
)

// Forwarder relays loopback TCP connections to a Unix socket; see
// forward.Forwarder.
type Forwarder = forward.Forwarder

// ListenForward is forward.ListenForward.
func ListenForward(listen, socket string) (*Forwarder, error) {
	return forward.ListenForward(listen, socket)
}

// Forward is forward.Forward.
func Forward(ctx context.Context, listen, socket string) error {
	return forward.Forward(ctx, listen, socket)
}

// ForwarderMain is forward.ForwarderMain: the forwarder mode's entry
// point; it returns the exit status.
func ForwarderMain(args []string) int { return forward.ForwarderMain(args) }

// TrampolineMain is forward.TrampolineMain: the trampoline mode's entry
// point; install is the restriction applied before the command runs.
func TrampolineMain(args []string, install func() error) int {
	return forward.TrampolineMain(args, install)
}
