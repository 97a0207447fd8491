// Package egress is the part of corral's allowlist profile that every
// backend shares: the host-side proxies of package netproxy, kept one per
// session and policy for the whole corral process ([Pool]), and the
// in-sandbox side, corral's own executable re-executed as the forwarder and
// the trampoline.
//
// How the commands of the allowlist profile reach the network:
//
//	host:    Pool.Get(policy, session) -> netproxy.Server listening on
//	         Dir/<pid>-<n>/http.sock and socks.sock
//	bwrap:   once per server (Pool.Attach), a sandbox with a network
//	         namespace of its own whose only process is [ServeArgv]:
//	             corral __corral-net-forward
//	                 --http 127.0.0.1:3128=DIR/http.sock
//	                 --socks 127.0.0.1:1080=DIR/socks.sock --ready-fd N --serve
//	         every command's bwrap then starts inside that namespace
//	         (nsenter), with its own user, pid and mount namespaces and the
//	         syscall filter that denies AF_UNIX sockets; no Go process runs
//	         per command
//	docker:  the container's main process is [ForwarderArgv] around a
//	         pause process, with the socket directory bound; each command
//	         is started in the container by corral's agent
//	CMD's environment: [Env] (http_proxy, HTTPS_PROXY, ALL_PROXY=socks5h://,
//	NO_PROXY for loopback, npm, pip and yarn settings, NODE_OPTIONS
//	preloading the Node shim each backend binds at [NodeShimDir]).
//
// Importing the package registers both modes with reexec
// (through egress/inside, which links no net/http): a process whose first
// argument is netproxy.ForwarderArg or netproxy.TrampolineArg runs that
// mode and exits when main, or a test binary's TestMain, calls
// reexec.Init first thing. So corral's executable, and every test binary
// that links a backend and dispatches, can serve as the helper.
//
// Sources: package netproxy for the proxies, the forwarder and the
// trampoline; package seccomp for the filter.
package egress
