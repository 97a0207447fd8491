// Package forward is the sandbox side of netproxy: the forwarder, which
// relays loopback TCP ports to the proxy sockets bound into a sandbox, and
// the trampoline, which applies the caller's restrictions and executes the
// command (see package netproxy for the whole picture).
//
// It is a package of its own so that the helper modes of corral's
// executable that run inside a sandbox (ForwarderArg, TrampolineArg) link
// neither the host-side proxies nor net/http: a helper's start pays only
// for what it uses.
package forward
