// Package bwrap is corral's bubblewrap backend: every command runs in its own
// bwrap(1) sandbox over a read-only view of the host root, with a writable
// working directory, hidden credentials and per-command resource limits.
//
// The package is split the way runc splits policy from execution:
//
//   - policy.go: the shipped lists (home allowlist, credential stores,
//     credential files, CA bundle variables) and path predicates;
//   - plan.go: Plan turns a sandbox.Request plus what is on the host into an
//     ordered list of mounts, refusing what the policy refuses;
//   - argv.go: Argv turns a plan into bwrap's argument vector (pure);
//   - gate_linux.go: applies rlimits to bwrap before it
//     runs a single instruction;
//   - run.go: Backend, which checks, plans and runs a command: start.go
//     starts bwrap (the gate, the prlimit fallback, the memory cgroup,
//     run_as's thread, the Unix socket supervisor) with the descriptors
//     fds.go lays out (pure), and wait.go waits (internal/waitloop, shared
//     with backend/local) and reports. Every sandbox loads corral's
//     syscall filter (package seccomp) through `bwrap --seccomp FD`;
//   - egressns.go: the allowlist profile's network namespace, one per
//     session and policy, held by a long-lived sandbox whose only process
//     is corral's forwarder to the proxies of package egress; each command's
//     bwrap starts inside it (nsenter(1)) instead of unsharing its own;
//     under workspace_mode review the layer's holder (layerhold_linux.go)
//     holds the namespace instead, and the forwarder is started into it;
//   - runas.go (pure) and hostview_linux.go: a root caller's sandbox is
//     held by an unprivileged identity (run_as), started from a thread in a
//     private mount namespace with the session's directories idmapped;
//   - retry.go: a start that failed because the host changed is retried;
//   - cgroup.go (pure) and cgroup_linux.go: the memory cgroup that bounds a
//     whole command by memory_mb where corral can make one (the gate moves
//     bwrap in at its exec stop), its OOM kills, its removal and the sweep
//     of ones a crashed corral left.
//   - unixsock.go (pure) and unixsock_linux.go: under restricted, workspace
//     and allowlist, connect(2) is answered by corral, which lets a
//     command's own Unix sockets work and no host socket be reached (the
//     design and why are in unixsock.go).
//
// Behaviour follows the reference bubblewrap backend (shared/seeds) as
// translated by corral's issue "corral run: the bubblewrap backend".
package bwrap
