// Package egress is the part of corral's allowlist profile that every
// backend shares: the host-side proxies of package netproxy, kept one per
// session and policy for the whole corral process ([Pool]), and the
// in-sandbox side, corral's own executable re-executed as the forwarder and
// the trampoline.
//
// How a command of the allowlist profile runs (bwrap; docker the same way
// with its own paths):
//
//	host:    Pool.Get(policy, session) -> netproxy.Server listening on
//	         Dir/<pid>-<n>/http.sock and socks.sock
//	sandbox: the socket directory bound read-only at a fixed path; a
//	         network namespace of its own with nothing but loopback
//	         [ForwarderArgv]: corral __corral-net-forward
//	             --http 127.0.0.1:3128=DIR/http.sock
//	             --socks 127.0.0.1:1080=DIR/socks.sock [--pass-fds N] -- CMD...
//	         -> /proc/self/exe __corral-net-exec -- [prlimit ... --] CMD...
//	            (the trampoline: the syscall filter with AF_UNIX sockets
//	            denied, then execve; prlimit(1) sets the memory and CPU
//	            limits of [LimitArgv])
//	CMD's environment: [Env] (http_proxy, HTTPS_PROXY, ALL_PROXY=socks5h://,
//	NO_PROXY for loopback, npm, pip and yarn settings).
//
// Importing the package installs the dispatch of both modes (an init
// function, as Docker's pkg/reexec does): a process whose first argument is
// netproxy.ForwarderArg or netproxy.TrampolineArg runs that mode and exits
// before main. So corral's executable, and every test binary that links a
// backend, can serve as the helper.
//
// Sources: package netproxy for the proxies, the forwarder and the
// trampoline; package seccomp for the filter; prlimit(1) for the limits.
package egress
