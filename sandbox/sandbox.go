package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// Profile names a preset of what a sandboxed command may write and reach.
// The first three follow the reference bubblewrap backend; allowlist adds
// egress by host name:
//
//	restricted  working directory read-only, loopback-only network
//	workspace   working directory writable, loopback-only network
//	allowlist   working directory writable, loopback-only network plus
//	            HTTP(S) and SOCKS5 through corral's filtering proxy, which
//	            lets only the hosts of network.allow through
//	network     working directory writable, host network (the default)
type Profile string

// The profiles corral knows.
const (
	ProfileRestricted Profile = "restricted"
	ProfileWorkspace  Profile = "workspace"
	// ProfileAllowlist keeps the sandbox's own empty network namespace and
	// reaches the outside only through corral's proxies (package netproxy),
	// which allow the hosts of Request.NetworkAllow minus those of
	// Request.NetworkDeny; direct connections and DNS fail.
	ProfileAllowlist Profile = "allowlist"
	ProfileNetwork   Profile = "network"
)

// Profiles lists every valid profile, in order of increasing access.
var Profiles = []Profile{ProfileRestricted, ProfileWorkspace, ProfileAllowlist, ProfileNetwork}

// DefaultProfile is the profile used when none is configured.
const DefaultProfile = ProfileNetwork

// ParseProfile returns the profile named s, or an error wrapping
// ErrBadRequest that lists the valid names.
func ParseProfile(s string) (Profile, error) {
	for _, p := range Profiles {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: unknown profile %q (want restricted, workspace, allowlist or network)", ErrBadRequest, s)
}

// Writable reports whether the working directory is writable under p.
func (p Profile) Writable() bool { return p != ProfileRestricted }

// HostNetwork reports whether commands under p share the host's network
// namespace. Under the other profiles only a private loopback exists (and,
// under allowlist, corral's proxies on it).
func (p Profile) HostNetwork() bool { return p == ProfileNetwork }

// DeniesUnixSockets reports whether the syscall filter of commands under p
// refuses to create AF_UNIX sockets (stream and seqpacket socketpair(2) and
// inherited sockets still work; datagram pairs, AF_VSOCK and netlink
// families other than NETLINK_ROUTE are refused too; see
// seccomp.Options.DenyUnixSockets): every profile but
// network, so no socket of the host (the Docker daemon, D-Bus, an ssh
// agent, a database) can be reached. The bwrap backend, where it can,
// mediates connect(2) instead (seccomp.Options.MediatedUnixSockets): stream
// and seqpacket sockets are then allowed and connect only to sockets of the
// sandbox's own network namespace. Under network the host's abstract
// sockets are reachable anyway through the shared network namespace.
func (p Profile) DeniesUnixSockets() bool { return p != ProfileNetwork && p != "" }

// Limits are per-command resource limits. A zero field disables that limit.
type Limits struct {
	// MemoryMB caps memory, in MiB: on bwrap, where corral can use a
	// memory cgroup, the whole command's (all its processes together,
	// swap included; see bwrap.MemoryLimit), elsewhere each process's
	// private writable memory (RLIMIT_DATA, setrlimit(2): what it has
	// mapped writable, since Linux 4.7 mmap(2) as well as brk(2); not
	// address space it only reserves). Other backends have limits of
	// their own (docker.memory, kubernetes.memory).
	MemoryMB int
	// CPUSeconds caps each process's CPU time (RLIMIT_CPU), in seconds. The
	// kernel sends SIGXCPU at the limit and SIGKILL one second later.
	CPUSeconds int
	// MaxProcs caps the processes and threads the command may run:
	// RLIMIT_NPROC (setrlimit(2)), which bwrap's ptrace gate sets once the
	// sandbox's user namespace exists, so only the sandbox's processes
	// count (kernel/ucount.c). Root's own uid is exempt (kernel/fork.c),
	// so a root caller's sandbox runs as its run_as identity. A setuid
	// bwrap run unprivileged gets no gate, and then no process limit.
	MaxProcs int
}

// DefaultLimits are the reference backend's defaults: 1024 MiB of memory
// (docker.memory's default, so one policy holds on every backend; a cold
// go build of a module needs more than 256, which killed it), 30 s of
// CPU per process, 256 processes.
var DefaultLimits = Limits{MemoryMB: 1024, CPUSeconds: 30, MaxProcs: 256}

// Bind is an extra host path mounted into the sandbox.
type Bind struct {
	// Src is the host path (absolute). It may be a directory, a regular
	// file, a Unix socket, a FIFO or a device node.
	Src string `json:"src" yaml:"src" koanf:"src"`
	// Dest is the path inside the sandbox; empty means Src.
	Dest string `json:"dest,omitempty" yaml:"dest,omitempty" koanf:"dest"`
	// ReadOnly mounts the bind read-only. The zero value of a Bind built in
	// Go is read-write; config and flag parsers default it to true, as the
	// reference backend does.
	ReadOnly bool `json:"readonly" yaml:"readonly" koanf:"readonly"`
}

// Target returns where the bind appears inside the sandbox.
func (b Bind) Target() string {
	if b.Dest == "" {
		return b.Src
	}
	return b.Dest
}

// Request is one command to run in a new sandbox.
type Request struct {
	// Argv is the command and its arguments; Argv[0] is looked up in PATH
	// inside the sandbox when it has no slash. Required.
	Argv []string
	// Env is the caller's environment ("KEY=value"); the backend filters it
	// with FilterEnvPolicy and adds its own variables (TMPDIR and the like).
	Env []string
	// PolicyEnv is the environment the sandbox policy reads: the PATH
	// directories under home to show, and the CA bundle variables to bind
	// back. It must be the caller's own, never one a sandboxed command could
	// have written (a session's saved variables). Nil means Env.
	PolicyEnv []string
	// Policy is what the command may do: profile, working directory,
	// binds, limits, environment and network policy.
	Policy
	// Dir is where the command starts; empty means Workdir. It need not lie
	// inside Workdir (the command then runs there read-only).
	Dir string
	// ScratchDir is the session's scratch directory on the host, writable
	// inside the sandbox (read-only under restricted) and named by TMPDIR,
	// TMP and TEMP. Empty means none.
	ScratchDir string
	// HomeDir, when set, is a host directory that becomes the command's
	// HOME (home_mode: session): writable unless the profile is restricted,
	// bound at its own path. Empty keeps the real home directory, seen
	// through the home rules.
	HomeDir string
	// CacheDir, when set, is a host directory of corral's own (inside its
	// state directory: the tool_caches setting, see package toolcache) for
	// the toolchains' download and build caches: under every profile but
	// restricted the bwrap backend binds it read-write at its own path and
	// points npm_config_cache, GOCACHE, GOMODCACHE, PIP_CACHE_DIR,
	// CARGO_HOME and the like into it (toolcache.Env), unless the command's
	// environment sets them to a path the sandbox can write. The docker
	// backend keeps the caches in the container's /tmp instead. Empty
	// means none: the tools keep their defaults, read-only in a sandbox.
	CacheDir string
	// LayerDir, when set, is the session's copy-on-write layer (package
	// layer; the workspace_mode setting's "review"): the command sees
	// Workdir as usual and may write to it, but what it writes lands in
	// the layer, and the host's Workdir is left as it is. A backend that
	// cannot keep that promise refuses the request (ErrPolicy), so that a
	// command never writes to the host's files instead.
	LayerDir string
	// Stdin, Stdout and Stderr are the command's standard streams; nil means
	// /dev/null. An *os.File is passed to the sandbox as is, so a terminal
	// stays a terminal. When Stdout and Stderr are the same writer
	// (SameWriter), the command gets one pipe for both, as os/exec gives
	// it, so what it wrote to either arrives in the order it was written;
	// every backend keeps that promise.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// TTY is set when Stdin is the slave side of a pseudo-terminal that
	// corral allocated for an interactive shell (corral shell): the sandbox
	// then keeps it as its controlling terminal (job control works), and
	// the backend does not start a new session. Never set it for a
	// person's own terminal: a process with that as controlling terminal
	// could inject input into it (TIOCSTI).
	TTY bool
	// ExtraFiles are passed to the sandboxed command as descriptors 3, 4, ...
	// in order (os/exec's ExtraFiles); the caller closes its copies after
	// Run returns.
	ExtraFiles []*os.File
	// Timeout ends the whole sandbox after this long; 0 means none.
	Timeout time.Duration
	// Signals, when set, delivers signals a person sent to corral (^C):
	// the first is passed on to the command's process groups, a second ends
	// the whole sandbox.
	Signals <-chan os.Signal
	// Session names the session the command belongs to, for backends that
	// keep one sandbox per session between commands (docker); "" means a
	// sandbox for this command alone. See SessionBackend.
	Session string
	// OnStart, when set, is called once, when the sandbox exists and the
	// command has been started in it, and not at all when Run fails
	// before that. pid is the host process id of the sandbox's outermost
	// process (bwrap's: it stays in corral's namespaces, the sandbox's are
	// its child's), or 0 where the sandbox has no process on this host
	// (docker, kubernetes: the command runs under the engine or kubelet).
	// Package portfwd enters the sandbox's network namespace through it;
	// package session holds corral apply off until it is called.
	OnStart func(pid int)
	// Progress, when set, receives one-line reports of slow preparation
	// (an image pull, a container start) while Run waits for it.
	Progress func(msg string)
	// User runs the command as another account where the backend can
	// switch users (docker: "uid:gid" or a user name of the image); ""
	// means the backend's own choice. Backends that cannot switch ignore
	// it (bwrap, local).
	User string
}

// Result is what became of a command. A non-zero exit status is data, not a
// Go error: Run returns an error only when the command could not be run in
// a sandbox at all.
type Result struct {
	// ExitCode is the command's exit status, or 128+N when it died of
	// signal N (ExitSignalBase).
	ExitCode int
	// Signal is the signal that ended the command, or 0.
	Signal int
	// TimedOut is set when Request.Timeout ended the command.
	TimedOut bool
	// Duration is the wall-clock time from start to exit.
	Duration time.Duration
	// CPUTime is the user plus system CPU time of the command's processes.
	CPUTime time.Duration
	// LimitHit names the limit that most likely ended the command (one of
	// the Limit* names: "cpu", "memory", "command-memory", "procs",
	// "container-memory", "container-process-memory", "container-procs",
	// "pod-memory") or is empty. See LimitMessage.
	LimitHit string
	// MemoryKills is how many of the command's processes the kernel's OOM
	// killer ended under the whole command's memory limit (the memory
	// cgroup's oom_kill count: memory.oom_control on cgroup v1,
	// memory.events on v2), or 0 where no such limit holds. It can be
	// above 0 while the command itself went on and exited 0 (a parent
	// whose children were killed): LimitMessage then says so.
	MemoryKills int
	// MemoryLimit names the limit MemoryKills were under: "" for the
	// command's own (memory_mb), LimitContainerMemory or LimitPodMemory
	// where the engine's limit holds the whole container or pod.
	MemoryLimit string
	// Warnings are things the person should know that did not stop the
	// command (a skipped bind, a home directory used as working directory).
	Warnings []string
}

// Backend runs commands in sandboxes. Implementations: backend/bwrap,
// backend/docker, backend/local.
type Backend interface {
	// Name is the backend's configuration name ("bwrap", "local").
	Name() string
	// DefaultCwd is where a new session starts when no working directory is
	// configured: an absolute path inside the sandbox, or "~" for the
	// sandbox's own home, which the backend resolves (never on the host);
	// "" means no preference. Called for every command: keep it cheap.
	DefaultCwd() string
	// Run runs req in a new sandbox and waits for it. The error wraps
	// ErrUnavailable, ErrPolicy or ErrBadRequest when the command could not
	// be run; ctx cancellation ends the whole sandbox.
	Run(ctx context.Context, req *Request) (*Result, error)
}

// Traits are what the front ends (session, mcpserver, cmd/corral) need
// to know of a backend to describe it and explain its refusals, so that
// none of them tests a backend's name: a new backend states its Traits in
// its own folder. The zero value is a sandbox of the host's filesystem
// that is not explained by host paths.
type Traits struct {
	// Unsandboxed is true when commands run directly on the host (the
	// local backend): profiles, binds and limits do not apply.
	Unsandboxed bool
	// HostPaths is true when the sandbox sees the host's filesystem
	// through the policy (bwrap), so that a denial can be explained by
	// the host path that was hidden or read-only.
	HostPaths bool
	// Where names the session's own container or pod in a sentence ("a
	// container"), for a backend whose filesystem is an image's rather
	// than the host's; "" for the others.
	Where string
	// OwnWorkspace is true when the workspace is the sandbox's own volume
	// rather than a host directory: files move in and out with corral cp
	// and corral sync (kubernetes).
	OwnWorkspace bool
	// CacheDir is where the tool caches are inside the sandbox when the
	// backend keeps them in each container rather than mounting the
	// host's cache directory (docker); "" otherwise.
	CacheDir string
}

// Traiter is a Backend that states its Traits.
type Traiter interface {
	Traits() Traits
}

// TraitsOf returns be's Traits, the zero Traits when it states none.
func TraitsOf(be Backend) Traits {
	if t, ok := be.(Traiter); ok {
		return t.Traits()
	}
	return Traits{}
}

// SessionBackend is a Backend that keeps a sandbox per session (or one
// shared by sessions) between commands, such as a Docker container.
type SessionBackend interface {
	Backend
	// Release tells the backend that the session called name has ended:
	// its sandbox (or its share of a shared one) can go. Safe to call for a
	// session the backend never saw, and more than once.
	Release(name string)
}

// TurnBackend is a Backend whose session sandbox can be the session's
// home (issue 29: any corral process, on any machine, serves any
// session): the turn of the session's foreground commands, its saved
// state and the marker of its running command are kept in the sandbox
// (kubernetes with kubernetes.shared_sessions), not only in one corral's
// state directory. Package session asks for the turn before each
// foreground command.
type TurnBackend interface {
	Backend
	// Turn waits, in req's session sandbox (started or found as Run
	// would), for the session's turn, recording marker as its running
	// command, until ctx ends (then nothing is held and nothing was run;
	// the error wraps ctx's cause). It returns nil and no error when the
	// session's home is not its sandbox (its settings keep it on the
	// host). Other errors wrap ErrUnavailable, ErrPolicy or ErrBadRequest
	// as Run's do: nothing was run.
	Turn(ctx context.Context, req *Request, marker string) (*SessionTurn, error)
}

// SessionTurn is a session's turn held in its sandbox (TurnBackend).
type SessionTurn struct {
	// State is the session's state as the last command left it there,
	// in the encoding package session gave End (its state.json), or nil
	// when none was saved or it could not be read (StateError says why).
	// It comes from inside the sandbox: hostile input.
	State      []byte
	StateError string
	// Interrupted is the marker of a command that held the turn when the
	// corral running it was lost (killed, its machine gone): it may have
	// run. "" when none. Hostile input, bounded in length.
	Interrupted string
	// End lets the turn go, first saving state as the session's state
	// when it is not nil. Call it exactly once.
	End func(state []byte)
}

// BackgroundBackend is a Backend whose session sandbox, when it is the
// session's home (TurnBackend), also holds the session's background
// processes: each runs detached in the sandbox, its output and exit
// status are kept there, and any corral process serving the session
// lists, reads and kills it, so that it outlives the corral that started
// it (issue 29). Package session uses it when BackgroundHome says so, and
// its own host-held processes otherwise. What these methods return comes
// from inside the sandbox: bounded and checked by the backend, still
// hostile input (a command of the session can rewrite it).
type BackgroundBackend interface {
	Backend
	// BackgroundHome reports whether this backend's session sandboxes
	// hold their sessions' background processes (its settings make the
	// sandbox the session's home). Pure: no sandbox is started.
	BackgroundHome() bool
	// StartBackground starts req (its Argv, Env, Dir; not its Stdin,
	// Stdout, Stderr or OnStart) detached in req.Session's sandbox,
	// started or found as Run would, as process id, killed after timeout
	// when not zero, with command and corral recorded. It returns once
	// the process runs (or did not start: Exit set, with Error), and the
	// process then runs whatever becomes of this corral. Errors wrap
	// ErrUnavailable, ErrPolicy or ErrBadRequest (an id in use, too many
	// processes) as Run's do.
	StartBackground(ctx context.Context, req *Request, id, command, corral string, timeout time.Duration) (*BackgroundInfo, error)
	// BackgroundOutput reads process id's output from byte offset on, at
	// most max bytes (the backend may return fewer). Exit is set when the
	// process had ended before the read: Data then reaches the end of
	// what it wrote. An unknown id wraps ErrBadRequest.
	BackgroundOutput(ctx context.Context, req *Request, id string, offset int64, max int) (*BackgroundChunk, error)
	// KillBackground ends process id and everything it started, and
	// returns once it is gone, with how it ended (an ended one's status
	// as it was). An unknown id wraps ErrBadRequest.
	KillBackground(ctx context.Context, req *Request, id string) (*BackgroundExit, error)
	// ListBackground lists the session's background processes kept in
	// its sandbox.
	ListBackground(ctx context.Context, req *Request) ([]BackgroundInfo, error)
	// SavedState reads the session's state as the last command saved it
	// in its sandbox (TurnBackend), without taking the turn (a
	// background command starts beside a running foreground one): nil
	// when none was saved; stateErr says why it could not be read.
	// Hostile input, at most 8 MiB.
	SavedState(ctx context.Context, req *Request) (state []byte, stateErr string, err error)
}

// BackgroundInfo describes a background process held in a session's
// sandbox (BackgroundBackend).
type BackgroundInfo struct {
	ID      string
	Command string
	// Corral names the corral process that started it ("pid N on HOST").
	Corral  string
	Started time.Time
	// Bytes is the size of the output kept so far.
	Bytes int64
	// Exit is set once it has ended.
	Exit *BackgroundExit
	// Problem says what of it could not be read ("" when all could).
	Problem string
}

// BackgroundExit is how a background process held in a session's sandbox
// ended.
type BackgroundExit struct {
	// Code is its exit status (128+N for signal N, 124 when its timeout
	// ended it: as ExitStatus reports), or 126/127 when it could not be
	// started (Error says why).
	Code     int
	TimedOut bool
	// Killed is set when KillBackground ended it.
	Killed bool
	Error  string
	// Dropped counts the output bytes past the sandbox's bound that were
	// not kept (a note in the output says where).
	Dropped int64
	Ended   time.Time
}

// BackgroundChunk is output of a background process held in a session's
// sandbox, from Offset to Offset+len(Data); Size is all the output kept.
type BackgroundChunk struct {
	Data   []byte
	Offset int64
	Size   int64
	Exit   *BackgroundExit
}

// StreamBackend is a Backend that can hold a long-lived process (a browser,
// a language server) in a session's sandbox with its stdin and stdout open.
// The argv that does so is `corral exec --session NAME [-i] --create --` (see
// session.Session.ExecPrefix), whatever the backend.
type StreamBackend interface {
	Backend
	// SupportsStreams reports whether such processes can run now.
	SupportsStreams() bool
}

// PortBackend is a Backend whose session sandboxes' TCP ports the host
// reaches through the backend itself, one connection at a time (docker: an
// exec of corral's helper in the session's container per connection).
// Package portfwd forwards a host port with it; bwrap needs none (corral
// enters its network namespaces, see Request.OnStart).
type PortBackend interface {
	Backend
	// PortListeners returns the text of /proc/net/tcp followed by
	// /proc/net/tcp6 of the network namespace of req's session sandbox
	// (proc(5)); it starts or joins that sandbox as Run would.
	PortListeners(ctx context.Context, req *Request) ([]byte, error)
	// DialPort connects to addr ("127.0.0.1:3000") inside req's session
	// sandbox. Writes go to the server; CloseWrite, when the result has
	// it, ends them; Close ends the connection.
	DialPort(ctx context.Context, req *Request, addr string) (io.ReadWriteCloser, error)
}

// Layout is implemented by backends whose sandbox does not show host paths
// as they are, or cannot take descriptors (docker): tools that run corral's
// own executable in the sandbox (the file server) ask it where things are.
type Layout interface {
	// HelperPath is the path of corral's executable inside the sandbox;
	// "" means the backend takes it as descriptor 3 (Request.ExtraFiles).
	HelperPath() string
	// WritableRoots are the paths inside the sandbox that commands of req
	// may write, as the file server judges a write's real target.
	WritableRoots(req *Request) []string
}

// SameWriter reports whether a and b are the same writer, as os/exec
// decides whether a command's stdout and stderr share one pipe: equal
// interface values of a comparable type (an uncomparable type is never
// the same). A Request whose Stdout and Stderr are the same writer gets
// the command's output as one stream in write order.
func SameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a != nil && a == b
}

// LeftoverNote is the warning of a command whose first process exited
// while n (> 0) processes it had started still ran, which corral then
// ended (a command's processes end with it, as a bwrap sandbox's do when
// its pid namespace ends): said so that no process ends unseen.
func LeftoverNote(n int) string {
	what := "processes"
	if n == 1 {
		what = "process"
	}
	return fmt.Sprintf("%d %s the command left running (in the background, with setsid or a double fork) ended with it: a command's processes end when it does; start what must outlive it as a background command", n, what)
}
