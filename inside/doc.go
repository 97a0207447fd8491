// Package inside is the part of corral that runs inside a container (the
// docker backend's, and the kubernetes backend's pods):
// corral's own (static) executable is bind-mounted read-only into every
// container the docker backend starts, and re-executed there in one of a
// few helper modes selected by its first argument, registered with
// reexec, which corral's main dispatches before anything else (the
// pattern of Docker's pkg/reexec):
//
//	__corral-pause    the container's main process: waits for a signal
//	__corral-prepare  checks the image's tools and the workspace mount, once per container
//	__corral-relay    runs one command in a new session and relays its output in frames
//	__corral-kill     signals a command's process group (a fallback when its stream is stuck)
//	__corral-reap     the reaper every command of the agent and the relay runs under (internal/reaper)
//	__corral-sha256   prints a file's SHA-256 (the kubernetes backend checks its copy with it)
//
// The Docker exec API carries only stdin, stdout and stderr and cannot
// signal an exec'd process, so the relay does what a local fork would: it
// starts the command with setsid(2), under corral's reaper (a child
// subreaper of its own, so that the processes the command starts in other
// sessions stay findable and die with it), reports its process group
// first, multiplexes stdout, stderr and any extra output descriptors (fd
// 3, ...) on its stdout as frames (see [WriteFrame]), and reports the exit status, the signal and whether the
// container's memory cgroup killed a process while the command ran.
//
// The helpers must not depend on anything in the image: they are Go code in
// a statically linked executable, and read nothing but /proc, /sys/fs/cgroup
// and the workspace.
package inside
