// Package portfwd makes a TCP port inside a sandbox's own network namespace
// reachable from the host's loopback: a dev server started as a session's
// background process under the workspace or allowlist profile.
//
// The host side (Forward) listens on 127.0.0.1:HOSTPORT in corral's own
// network namespace. One long-lived relay helper per forward, corral's own
// executable re-executed in the relay mode (registered with package
// reexec), runs inside the sandbox's network namespace; corral passes it
// each accepted connection's descriptor over a Unix socket (SCM_RIGHTS,
// unix(7)), and the helper connects to 127.0.0.1:PORT (or [::1]:PORT) there
// and copies both ways. The helper lives in no pid namespace of the
// sandbox, so nothing inside can see or signal it, and it ends when
// corral closes its end of that socket (or dies): closing the forward
// leaves no listener and no process behind.
//
// Nothing inside a sandbox can open a host port: a forward is made only
// by corral, on a person's request (corral port) or the ports setting.
//
// Finding the target is pure (ParseProcNetTCP, DialTarget, NotListening):
// the listening sockets of a network namespace are read from
// /proc/PID/net/tcp and tcp6 of a process inside it (proc(5)).
package portfwd
