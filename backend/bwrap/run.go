package bwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/atomicfile"
	"github.com/corralhq/corral/internal/dircache"
	"github.com/corralhq/corral/internal/forkfds"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// Options configure a Backend.
type Options struct {
	// BwrapPath is the bwrap executable (absolute); "" takes it from
	// SystemBinDirs. PATH is never searched.
	BwrapPath string
	// StateDir is corral's state directory (hidden from every sandbox); an
	// empty mask file and the bwrap version cache live there. Required.
	StateDir string
	// HiddenDirs are more directories that no sandbox may see (corral's
	// config directory).
	HiddenDirs []string
	// RunUserDir replaces /run/user/UID, the directory of agent and bus
	// sockets that every sandbox sees as an empty tmpfs ("" keeps it).
	RunUserDir string
	// SecretFiles are files no sandbox may read or write (the settings file
	// in use); see Host.SecretFiles.
	SecretFiles []string
	// MaskFiles replace the default list of sockets that read as empty
	// files in every sandbox (/run/docker.sock and the like); nil keeps it.
	MaskFiles []string
	// Logger receives structured events (bwrap.sandbox.start, ...); nil
	// discards them.
	Logger *slog.Logger
	// KillGrace is how long a timed-out or cancelled sandbox gets between
	// SIGTERM to its processes and SIGKILL of the whole pid namespace.
	// Zero means 2 s.
	KillGrace time.Duration
	// RunAs is the run_as setting: the host identity ("UID[:GID]" or
	// "USER[:GROUP]", never root) that holds the sandbox when corral runs
	// as root; "" picks the working directory's owner, or nobody when
	// that is root (sandbox.ResolveRunAs). Ignored when corral is not root:
	// the sandbox then holds the caller's own identity.
	RunAs string
	// Egress serves the proxies of the allowlist profile, one per session
	// and policy (egress.Pool). Nil makes one of the backend's own under
	// StateDir/net on first use, whose servers close a minute after their
	// last command. Share one Pool per process, so that a session's
	// commands reuse its server, and close it when the process ends.
	Egress *egress.Pool
	// SweepEvery spaces out the orphan sweep (SweepOrphans, a read of
	// every /proc/N/comm) of short-lived processes: the first sandbox of a
	// process sweeps only when StateDir's stamp file (sweepStamp, whose
	// mtime is the last sweep) is missing or older than SweepEvery. Zero
	// sweeps at the first sandbox of every process (a long-lived server).
	SweepEvery time.Duration
	// FindHelper returns the executable that serves corral's helper modes
	// inside sandboxes (cmd/corral-helper: the git credential helper of
	// secrets, the allowlist's forwarder and trampoline), called when one
	// is first needed; nil, or "" from it, means corral's own executable.
	// corral.Host passes its helperbin.Locator's.
	FindHelper func() string
	// PinFiles are more executables corral runs on the host besides its
	// own (the helper candidates, which corral runs to check them: package
	// helperbin), bound read-only onto themselves where a sandbox could
	// write them.
	PinFiles []string
}

// Backend runs each command in its own bubblewrap sandbox. It is safe for
// concurrent use.
type Backend struct {
	opts Options
	log  *slog.Logger
	// dirs keeps directory listings between this backend's plans and
	// protected-path checks (Host.Dirs).
	dirs dircache.Cache

	mu  sync.Mutex
	bin *Binary

	pwOnce sync.Once
	pwHome string

	poolOnce sync.Once
	pool     *egress.Pool

	// helperFound is set once FindHelper was called (helperExecutable).
	helperFound atomic.Bool

	// filters holds the sealed syscall filters, one per seccomp.Options.
	filters filterCache
	// layers are the review layers' holders (layerhold_linux.go).
	layers layerHolders
	// cgroups counts the memory cgroups whose removal waits for the last
	// task of a command to leave (memCgroup.remove); Close waits for them.
	cgroups sync.WaitGroup

	// noFilter leaves bwrap's --seccomp out (the benchmark's baseline
	// only).
	noFilter bool
	// forceNsenter makes the allowlist profile enter its namespace through
	// nsenter(1) even where the gate could (tests of that path).
	forceNsenter bool
	// noUnixMediation refuses AF_UNIX sockets outright where they would be
	// mediated (the benchmark's "before").
	noUnixMediation bool
	// noGate makes every start take the path of a machine that refuses
	// the ptrace gate (tests of that path).
	noGate bool
	// joinedBy is how the last allowlist command entered its namespace:
	// "ptrace gate" or "nsenter" (CheckEgress reports it).
	joinedBy atomic.Value
}

// egressPool returns Options.Egress, or the backend's own pool.
func (b *Backend) egressPool() *egress.Pool {
	b.poolOnce.Do(func() {
		b.pool = b.opts.Egress
		if b.pool == nil {
			b.pool = egress.NewPool(egress.Options{Dir: filepath.Join(b.opts.StateDir, "net"), CADir: filepath.Join(b.opts.StateDir, "ca"), Logger: b.log})
		}
	})
	return b.pool
}

// nsenterLocate finds nsenter(1), or returns an error wrapping
// sandbox.ErrUnavailable when it is missing.
func nsenterLocate() (string, error) {
	nsenter, err := LocateTool("nsenter", "")
	if err != nil {
		return "", fmt.Errorf("%w: the allowlist profile starts bwrap in the session's network namespace with nsenter here, which is missing (install util-linux), so the command does not run: %v", sandbox.ErrUnavailable, err)
	}
	return nsenter, nil
}

// throughNsenter makes cmd (bwrap, its argv complete and its ExtraFiles
// laid out) start inside ens through nsenter(1): the namespace
// descriptors go to nsenter as its own last descriptors, named
// /proc/self/fd/N, and bash closes them before it executes bwrap
// (egressNS.joinFDArgv), so none reaches the sandbox. nsenter is not
// named corral's descriptors (/proc/CORRAL-PID/fd/N): once corral has read
// a secret it is non-dumpable (secrets.Protect), and /proc/PID/fd of a
// non-dumpable process is closed to other processes of its uid
// (ptrace_may_access, PTRACE_MODE_READ_FSCREDS), so nsenter could not open
// them. Only where bash is missing is that form used (joinArgv).
// nsenter is nsenter(1)'s path (nsenterLocate).
func throughNsenter(cmd *exec.Cmd, ens *egressNS, nsenter string) {
	var prefix []string
	if bash, berr := LocateTool("bash", ""); berr == nil {
		prefix = ens.joinFDArgv(nsenter, bash, 3+len(cmd.ExtraFiles))
		cmd.ExtraFiles = append(cmd.ExtraFiles, ens.files()...)
	} else {
		prefix = ens.joinArgv(nsenter)
	}
	cmd.Path, cmd.Args = prefix[0], append(prefix, cmd.Args...)
}

// egressLease is a command's hold on its session's egress namespace.
type egressLease struct {
	*egressNS // nil under workspace_mode review
	srv       *netproxy.Server
	release   func()
}

// egressAcquireTries bounds how often egress asks the pool for a holder
// that is closed before the command can take its reference: each time
// another command found it dead and started the next one.
const egressAcquireTries = 3

// egress returns the egress namespace of req's session, network policy
// and secrets (secs, resolved by prepareSecrets)
// (starting the proxy server and the namespace's holder when there is
// none), and keeps both up until the lease's release: the server leased,
// the namespace's descriptors referenced (egressNS.acquire). Errors wrap
// sandbox.ErrUnavailable (the command must not run),
// sandbox.ErrBadRequest (a malformed network.allow or network.deny entry)
// or sandbox.ErrTransient (holders kept dying as the command started).
//
// Under workspace_mode review the namespace is the layer holder's, not
// the pool's (see layerhold_linux.go): the lease then holds only the
// server (srv), and attempt starts the holder's forwarder for it.
func (b *Backend) egress(bin *Binary, req *sandbox.Request, secs []secrets.Secret) (*egressLease, error) {
	if bin.Setuid && os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: the allowlist profile needs a bwrap that is not setuid (%s is: unprivileged user namespaces seem blocked here), so the command does not run", sandbox.ErrUnavailable, bin.Path)
	}
	pool := b.egressPool()
	// A secret's hosts are allowed egress: the real value goes nowhere
	// else, and naming them twice would be a trap.
	allow := append(slices.Clone(req.NetworkAllow), sandbox.SecretHosts(req.Secrets)...)
	srv, release, err := pool.Get(netproxy.Policy{Allow: allow, Deny: req.NetworkDeny}, req.Session, secs...)
	if err != nil {
		return nil, err
	}
	if req.LayerDir != "" {
		return &egressLease{srv: srv, release: release}, nil
	}
	for range egressAcquireTries {
		v, err := pool.Attach(srv, egressAttachment, func() (io.Closer, error) {
			return b.startEgressNS(bin, srv, req.Session, nil)
		})
		if err != nil {
			release()
			return nil, err
		}
		// Closed between Attach and here (another command found it dead):
		// Attach then starts the next one.
		if ens := v.(*egressNS); ens.acquire() {
			return &egressLease{egressNS: ens, srv: srv, release: func() { ens.release(); release() }}, nil
		}
	}
	release()
	return nil, sandbox.Transient(fmt.Errorf("%w: the allowlist profile's network namespace ended %d times as the command started, so it does not run", sandbox.ErrUnavailable, egressAcquireTries))
}

// New returns a bwrap backend. It does not look for bwrap yet: the first
// Run (or Check) does, so a missing bwrap is reported per call.
func New(opts Options) *Backend {
	l := opts.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	if opts.KillGrace == 0 {
		opts.KillGrace = 2 * time.Second
	}
	return &Backend{opts: opts, log: l}
}

// Close releases what the Backend keeps between commands (its sealed
// syscall-filter memfds). Sandboxes already started are not affected; a
// later Run builds what it needs again. It returns the first close error.
func (b *Backend) Close() error {
	b.layers.closeAll()
	// The commands' memory cgroups still being removed, for at most
	// cgroupRemoveWait: a process that exits next (corral run) leaves
	// none behind; one that outlasts the wait is swept by the next
	// corral (sweepMemCgroupsIn).
	done := make(chan struct{})
	go func() { b.cgroups.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cgroupRemoveWait):
		b.log.Warn("bwrap.memcg.close_timeout", "waited", cgroupRemoveWait.String())
	}
	return b.filters.close()
}

// Name implements sandbox.Backend.
func (b *Backend) Name() string { return "bwrap" }

var _ sandbox.Traiter = (*Backend)(nil)

// Traits implements sandbox.Traiter: the sandbox sees the host's files
// through the policy.
func (b *Backend) Traits() sandbox.Traits { return sandbox.Traits{HostPaths: true} }

// Binary returns the bwrap executable in use, looking it up on first use.
// The version is cached in the state directory keyed by the executable's
// inode, size and modification time, so a new process does not pay for a
// `bwrap --version` run. Errors wrap sandbox.ErrUnavailable.
func (b *Backend) Binary(ctx context.Context) (*Binary, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bin != nil {
		return b.bin, nil
	}
	p, err := LocateTool("bwrap", b.opts.BwrapPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v; %s", sandbox.ErrUnavailable, err, InstallHint)
	}
	cache := filepath.Join(b.opts.StateDir, "bwrap-version")
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	// The trailing field is the cache format: a cache of an older format
	// (without the features) does not match and is written again.
	key := fmt.Sprintf("%s\t%d\t%d\t%d\t2", p, inode(st), st.Size(), st.ModTime().UnixNano())
	if data, err := os.ReadFile(cache); err == nil {
		if k, v, ok := strings.Cut(strings.TrimSpace(string(data)), "\n"); ok && k == key {
			if ver, err := ParseVersion(v); err == nil && ver.AtLeast(MinVersion.Major, MinVersion.Minor, MinVersion.Patch) {
				b.bin = &Binary{Path: p, Version: ver, Setuid: st.Mode()&os.ModeSetuid != 0, BindFD: slices.Contains(strings.Fields(v), "bind-fd")}
				return b.bin, nil
			}
		}
	}
	bin, err := FindBinary(ctx, p)
	if err != nil {
		return nil, err
	}
	line := "bubblewrap " + bin.Version.String()
	if bin.BindFD {
		line += " bind-fd"
	}
	_ = writeFileAtomic(cache, []byte(key+"\n"+line+"\n"), 0o600)
	b.bin = bin
	return bin, nil
}

// SupportsStreams implements sandbox.StreamBackend: every command has a
// sandbox of its own, so a long-lived process (corral exec) gets one built
// from the session's settings, as its commands do.
func (b *Backend) SupportsStreams() bool { return true }

// hostFor is host with the secret facts of the request (nil: none)
// added.
func (b *Backend) hostFor(facts *SecretFacts) (Host, error) {
	h, err := b.host()
	if err != nil || facts == nil {
		return h, err
	}
	h.Secrets = facts
	return h, nil
}

// host gathers the facts a plan depends on.
func (b *Backend) host() (Host, error) {
	h := Host{UID: os.Getuid(), MaskFiles: b.opts.MaskFiles, RunUserDir: b.opts.RunUserDir, Dirs: &b.dirs}
	if h.RunUserDir == "" {
		h.RunUserDir = fmt.Sprintf("/run/user/%d", h.UID)
	}
	if h.MaskFiles == nil {
		h.MaskFiles = dockerSockets
	}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		if r, err := filepath.EvalSymlinks(home); err == nil {
			h.Home = r
		}
	}
	if b.opts.StateDir == "" {
		return h, fmt.Errorf("%w: no state directory configured", sandbox.ErrBadRequest)
	}
	if err := os.MkdirAll(b.opts.StateDir, 0o700); err != nil {
		return h, fmt.Errorf("creating state directory: %w", err)
	}
	if h.UID == 0 {
		f, err := gitTrustAll(b.opts.StateDir)
		if err != nil {
			return h, err
		}
		h.GitSystemConfig = f
	}
	for _, d := range append([]string{b.opts.StateDir}, b.opts.HiddenDirs...) {
		if d != "" && filepath.IsAbs(d) {
			h.HiddenDirs = append(h.HiddenDirs, filepath.Clean(d))
			if r, err := filepath.EvalSymlinks(d); err == nil && r != filepath.Clean(d) {
				h.HiddenDirs = append(h.HiddenDirs, r)
			}
		}
	}
	// As root with $HOME pointing at another user's home (sudo -E), the
	// home rules protect that one; root's own home is hidden whole.
	if pw := b.passwdHome(); pw != "" && pw != "/" && pw != h.Home {
		h.HiddenDirs = append(h.HiddenDirs, pw)
	}
	h.SecretFiles = b.opts.SecretFiles
	if exe, err := os.Executable(); err == nil {
		h.PinFiles = append(h.PinFiles, exe)
	}
	h.PinFiles = append(h.PinFiles, b.opts.PinFiles...)
	if b.opts.FindHelper != nil {
		// Asked here only when the helper was needed already (secrets,
		// allowlist): a plain command does not pay for finding it.
		if p := b.helperIfFound(); p != "" {
			h.PinFiles = append(h.PinFiles, p)
		}
	}
	if b.bin != nil {
		h.PinFiles = append(h.PinFiles, b.bin.Path)
	}
	empty, err := ensureEmptyFile(filepath.Join(b.opts.StateDir, "empty"))
	if err != nil {
		return h, err
	}
	h.EmptyFile = empty
	// Needed by allowlist sandboxes only, but written once per process:
	// cheap, and a failure only costs Node its preload (plan warns).
	if d, err := egress.WriteNodeShim(filepath.Join(b.opts.StateDir, "trust", "node")); err == nil {
		h.NodeShim = d
	} else {
		b.log.Warn("bwrap.nodeshim.failed", "err", err)
	}
	return h, nil
}

// identity sets plan.RunAs when corral runs as root: Options.RunAs, or the
// owner of the working directory, or nobody (sandbox.ResolveRunAs). Errors
// wrap sandbox.ErrBadRequest (a malformed run_as).
func (b *Backend) identity(plan *Plan) error {
	if os.Getuid() != 0 {
		if plan.LayerDir != "" {
			plan.InsideUID, plan.InsideGID = os.Getuid(), os.Getgid()
		}
		return nil
	}
	ra, err := b.runAs(plan.Workdir)
	if err != nil {
		return err
	}
	plan.RunAs = &ra
	plan.InsideUID, plan.InsideGID = os.Getuid(), os.Getgid()
	return b.ownSecretCopies(plan, ra)
}

// runAs returns the identity a root caller's sandbox over workdir holds:
// Options.RunAs, or workdir's owner, or nobody (sandbox.ResolveRunAs).
// Errors wrap sandbox.ErrBadRequest (a malformed run_as).
func (b *Backend) runAs(workdir string) (sandbox.RunAs, error) {
	fixed, isFixed, err := sandbox.ParseRunAs(b.opts.RunAs)
	if err != nil {
		return sandbox.RunAs{}, err
	}
	ownerUID, ownerGID := 0, 0
	var st unix.Stat_t
	if unix.Stat(workdir, &st) == nil {
		ownerUID, ownerGID = int(st.Uid), int(st.Gid)
	}
	return sandbox.ResolveRunAs(fixed, isFixed, ownerUID, ownerGID), nil
}

// passwdHome returns the home directory of the real uid from the passwd
// database (resolved), looked up once.
func (b *Backend) passwdHome() string {
	b.pwOnce.Do(func() {
		if u, err := user.LookupId(strconv.Itoa(os.Getuid())); err == nil && filepath.IsAbs(u.HomeDir) {
			if r, err := filepath.EvalSymlinks(u.HomeDir); err == nil {
				b.pwHome = r
			}
		}
	})
	return b.pwHome
}

// ensureEmptyFile makes sure p is an empty read-only regular file and
// returns its resolved path.
func ensureEmptyFile(p string) (string, error) {
	st, err := os.Lstat(p)
	if err == nil && st.Mode().IsRegular() && st.Size() == 0 && st.Mode().Perm()&0o222 == 0 {
		return p, nil
	}
	_ = os.Remove(p)
	if err := writeFileAtomic(p, nil, 0o444); err != nil {
		return "", fmt.Errorf("creating the empty mask file: %w", err)
	}
	return p, nil
}

// DefaultCwd implements sandbox.Backend: commands start in the working
// directory, whose paths are the host's.
func (b *Backend) DefaultCwd() string { return "" }

// Run implements sandbox.Backend. When bwrap fails before the command
// starts because the host's mounts changed under it (see hostChangedLine)
// and a fresh probe does not say the machine cannot sandbox (it passes, or
// fails the same way), the request is planned and run again, at most
// maxStartAttempts times in all, and then fails with an error wrapping
// sandbox.ErrHostChanged; bwrap's messages of the attempts that were
// retried are not written to req.Stderr. A request whose stdin cannot be
// rewound (a reader that is neither a file nor an io.Seeker) is not
// retried.
func (b *Backend) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	sweepOnce.Do(func() {
		// Off the command's path: a /proc scan costs every `corral run`
		// a few milliseconds, and nothing here depends on it.
		go func() {
			if n, _ := sweepIfDue(b.opts.StateDir, b.opts.SweepEvery, time.Now(), SweepOrphans); n > 0 {
				b.log.Warn("bwrap.orphans.ended", "count", n)
			}
		}()
	})
	bin, err := b.Binary(ctx)
	if err != nil {
		return nil, b.unavailable(err)
	}
	secs, facts, err := b.prepareSecrets(req)
	if err != nil {
		if errors.Is(err, sandbox.ErrUnavailable) {
			return nil, b.unavailable(err)
		}
		return nil, err
	}
	host, err := b.hostFor(facts)
	if err != nil {
		return nil, err
	}
	var ens *egressNS
	var srv *netproxy.Server // under allowlist: the session's proxy server
	if req.Profile == sandbox.ProfileAllowlist {
		// Fail closed: no proxy, no command.
		lease, err := b.egress(bin, req, secs)
		if err != nil {
			if errors.Is(err, sandbox.ErrUnavailable) {
				return nil, b.unavailable(err)
			}
			return nil, err
		}
		defer lease.release()
		ens, srv = lease.egressNS, lease.srv
	}
	rewind := stdinRewinder(req)
	for attempt := 1; ; attempt++ {
		// Each attempt plans from the host as it is now: the one before
		// failed because it changed.
		if attempt > 1 {
			if host, err = b.hostFor(facts); err != nil {
				return nil, err
			}
		}
		hold := holdStderr(req)
		areq := req
		if hold != nil {
			r := *req
			r.Stderr = hold
			if sandbox.SameWriter(req.Stdout, req.Stderr) {
				// os/exec gives one writer one pipe: keep the command's
				// stdout and stderr the same pipe, in order (a file for
				// both too: passed as it is for stdout, it would be
				// written apart from stderr's pipe).
				r.Stdout = hold
			}
			areq = &r
		}
		res, err := b.attempt(ctx, bin, host, areq, ens, srv)
		var sf *startFailure
		if !errors.As(err, &sf) {
			hold.release(true)
			return res, err
		}
		if attempt < maxStartAttempts && ctx.Err() == nil && rewind != nil && rewind() {
			// Nothing ran: bwrap's message of this attempt is not shown.
			hold.release(false)
			b.log.Warn("bwrap.start.retry", "attempt", attempt, "bwrap", sf.line)
			continue
		}
		hold.release(true)
		b.log.Error("bwrap.start.host_changed", "attempts", attempt, "bwrap", sf.line)
		return nil, sf.final(attempt)
	}
}

// attempt plans req against host and runs it once. Under review with
// allowlist (ens nil, srv the session's proxy server) the layer holder's
// forwarder is made to relay to srv first.
func (b *Backend) attempt(ctx context.Context, bin *Binary, host Host, req *sandbox.Request, ens *egressNS, srv *netproxy.Server) (*sandbox.Result, error) {
	host.JavaMaxRAMMB = b.perProcessMemory(req.Limits.MemoryMB, bin, true)
	if req.LayerDir != "" {
		// The plan reads the working directory as the layer shows it. A
		// root caller's new holder is made from the host view of the plan
		// without it (layerFor), planned only then.
		first := func() (*Plan, error) {
			p, err := BuildPlan(req, host)
			if err != nil {
				return nil, err
			}
			return p, b.identity(p)
		}
		h, err := b.layerFor(bin, req, first)
		if err != nil {
			return nil, err
		}
		defer h.release()
		host.view = h
		if srv != nil {
			if err := h.forwardTo(b, bin, srv, req.Session); err != nil {
				return nil, err
			}
		}
	}
	plan, err := BuildPlan(req, host)
	if err != nil {
		return nil, err
	}
	if err := b.identity(plan); err != nil {
		return nil, err
	}
	if msg, code := checkCommand(req.Argv[0], plan.Env, plan.Chdir); code != 0 {
		fmt.Fprintln(stderrOf(req), msg)
		return &sandbox.Result{ExitCode: code, Warnings: plan.Warnings}, nil
	}
	for _, w := range plan.Warnings {
		// Front ends show Result.Warnings to the person; log for the record.
		b.log.Debug("bwrap.policy.warning", "message", w)
	}
	for _, d := range plan.EnvWithheld {
		b.log.Info("bwrap.env.withheld", "name", d.Name, "kind", d.Kind)
	}
	if w := plan.writableRootOf(bin.Path); w != "" {
		return nil, fmt.Errorf("%w: bwrap %s lies in %s, which the sandbox can write, so a command could replace it; install bwrap in a system directory", sandbox.ErrPolicy, bin.Path, w)
	}
	if err := scanCutError(plan); err != nil {
		return nil, err
	}
	b.prepareProtected(plan)
	res, err := b.run(ctx, bin, plan, req, ens)
	// The sandbox is gone (its pid namespace with it), whatever the
	// outcome: look at what it left at protected paths.
	swept := b.checkProtected(plan)
	if res != nil {
		res.Warnings = append(append(plan.Warnings, res.Warnings...), swept...)
	}
	// The result's warnings say it to the caller (the CLI prints them):
	// the log says it at Warn only when there is no result to carry them,
	// or the CLI, whose log is stderr, would say it twice.
	lvl := slog.LevelInfo
	if res == nil {
		lvl = slog.LevelWarn
	}
	for _, w := range swept {
		b.log.Log(context.Background(), lvl, "bwrap.protected.changed", "message", w)
	}
	return res, err
}

// Command returns the bwrap argv (program first) and environment that Run
// would use for req, without running anything (`corral run --dry-run`, and
// the benchmark's raw-bwrap baseline). The limits gate, the status pipe and
// the descriptors Run passes (the syscall filter's --seccomp) are not part
// of the argv; under allowlist it starts with nsenter(1) into the session's
// network namespace, shown as --net=SESSION-NETNS (Run joins the
// namespace's owning user namespace too when corral is not root; see
// egressNS). Protected paths show as
// --ro-bind P P; a missing member of a git directory that Run would make
// first (.git/hooks) is shown bound although Command does not make it.
func (b *Backend) Command(ctx context.Context, req *sandbox.Request) (argv, env, warnings []string, err error) {
	bin, err := b.Binary(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	_, facts, err := b.prepareSecrets(req)
	if err != nil {
		return nil, nil, nil, err
	}
	host, err := b.hostFor(facts)
	if err != nil {
		return nil, nil, nil, err
	}
	host.JavaMaxRAMMB = b.perProcessMemory(req.Limits.MemoryMB, bin, false)
	plan, err := BuildPlan(req, host)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := b.identity(plan); err != nil {
		return nil, nil, nil, err
	}
	argv = append([]string{bin.Path}, Argv(plan, FeaturesFor(bin.Version), -1, req.Argv)...)
	if plan.Egress {
		argv = append([]string{"nsenter", "--net=SESSION-NETNS", "--"}, argv...)
	}
	return argv, bwrapEnv, plan.Warnings, nil
}

// joinedBySetns is how a root caller's allowlist command enters its
// namespace (CheckEgress): the thread that starts bwrap calls setns(2)
// itself (startAs), needing neither the gate nor nsenter(1).
const joinedBySetns = "setns by the starting thread"

// bwrapEnv is the whole environment of the bwrap (and prlimit) process.
var bwrapEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}

// checkCommand finds argv0 as execvp(3) would inside the sandbox (the
// sandbox sees the host's files at the same paths), so a missing command is
// reported as exit 127 with a message instead of bwrap's exit 1.
func checkCommand(argv0 string, env []string, dir string) (string, int) {
	if strings.HasPrefix(argv0, "/proc/self/fd/") {
		return "", 0 // a descriptor passed in (ExtraFiles): only the sandbox can judge it
	}
	if strings.Contains(argv0, "/") {
		p := argv0
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		st, err := os.Stat(p)
		switch {
		case err != nil:
			return fmt.Sprintf("corral: %s: no such file or directory", argv0), sandbox.ExitNotFound
		case st.IsDir():
			return fmt.Sprintf("corral: %s: is a directory", argv0), sandbox.ExitCannotInvoke
		case st.Mode().Perm()&0o111 == 0:
			return fmt.Sprintf("corral: %s: permission denied (not executable)", argv0), sandbox.ExitCannotInvoke
		}
		return "", 0
	}
	path, _ := hostview.LookupEnv(env, "PATH")
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		if st, err := os.Stat(filepath.Join(d, argv0)); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return "", 0
		}
	}
	return fmt.Sprintf("corral: %s: command not found", argv0), sandbox.ExitNotFound
}

func stderrOf(req *sandbox.Request) io.Writer {
	if req.Stderr != nil {
		return req.Stderr
	}
	return io.Discard
}

// unavailable logs a failure to build the sandbox and returns it: nothing
// was run. What degraded_mode means is the front ends' choice.
func (b *Backend) unavailable(err error) error {
	b.log.Error("bwrap.unavailable", "error", err)
	return err
}

type status struct {
	childPid int
	exitCode *int
}

// run starts bwrap for plan (start), waits for it (wait) and releases
// what the start took. Errors are start's and wait's.
func (b *Backend) run(ctx context.Context, bin *Binary, plan *Plan, req *sandbox.Request, ens *egressNS) (*sandbox.Result, error) {
	markInheritedCloexec()
	sb, err := b.start(bin, plan, req, ens)
	if err != nil {
		return nil, err
	}
	defer sb.close()
	if req.OnStart != nil {
		req.OnStart(sb.cmd.Process.Pid)
	}
	return b.wait(ctx, bin, req, sb)
}

// bwrapLinesOf returns bwrap's own messages held back from req.Stderr when
// Run wrapped it (startHold), or nil.
func bwrapLinesOf(req *sandbox.Request) []string {
	h, _ := req.Stderr.(*startHold)
	return h.bwrapLines()
}

// waitExited waits until process pid (a child) has exited, without reaping
// it (waitid(2) WNOWAIT), so that its pid stays taken until cmd.Wait.
// Errors (ECHILD once reaped) end the wait.
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// terminate ends a sandbox that timed out or was cancelled: SIGTERM to the
// command's process groups (the children of the sandbox's pid 1), then after
// the grace period SIGKILL to bwrap, which takes the whole pid namespace
// with it. Without a known pid 1 it kills at once. live guards the SIGTERM
// (see run). It returns the grace timer, or nil, for the caller to stop
// once bwrap is gone.
func (b *Backend) terminate(childPid int, kill func(), live func(func())) *time.Timer {
	if childPid <= 0 {
		kill()
		return nil
	}
	live(func() { signalCommand(childPid, unix.SIGTERM) })
	return time.AfterFunc(b.opts.KillGrace, kill)
}

// signalCommand sends sig to the sandboxed command: to the process group
// of the sandbox's pid 1 (bwrap's --new-session makes pid 1 a session and
// group leader, and the command starts in its group) and to the groups of
// pid 1's children. Pid 1 itself, bwrap's reaper, has no handler and so
// ignores it (pid_namespaces(7)).
func signalCommand(childPid int, sig syscall.Signal) {
	groups := map[int]bool{childPid: true}
	for _, c := range childrenOf(childPid) {
		if g, err := unix.Getpgid(c); err == nil {
			groups[g] = true
		}
	}
	for g := range groups {
		_ = unix.Kill(-g, sig)
	}
}

// childrenOf returns the children of pid (Linux 3.5+, /proc/PID/task/TID/children).
func childrenOf(pid int) []int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		var n int
		if _, err := fmt.Sscan(f, &n); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// markInheritedCloexec sets close-on-exec on every descriptor above stderr.
// Descriptors corral inherited without it (from a shell, a supervisor, a
// test harness) would otherwise pass through bwrap into the sandbox, where a
// directory descriptor is a way out (runc CVE-2024-21626). Go's own
// descriptors are close-on-exec already; os/exec clears the flag on the ones
// it hands to the child (dup2). Uses close_range(2) (Linux 5.11) and falls
// back to fcntl over /proc/self/fd.
func markInheritedCloexec() {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil && fd > 2 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// maxStatus bounds what is kept of the status stream: bubblewrap writes
// two short lines.
const maxStatus = 64 << 10

// readStatus reads bwrap's --json-status-fd stream: {"child-pid": N} when the
// sandbox's pid 1 has been started (sent on pidC at once, so a timeout can
// signal the command while it runs), {"exit-code": N} when the command,
// having been executed, has ended. It returns at the end of the stream, or
// when r's read deadline passes: run sets it once bwrap has been reaped,
// and readStatus then reads what the pipe still holds without waiting for
// its end, so the status is complete whoever else still holds the write
// end (bwrap closes it in the sandbox before anything runs there).
func readStatus(r *os.File, pidC chan<- int) status {
	var st status
	var pending []byte
	kept := 0
	feed := func(p []byte) {
		if kept += len(p); kept > maxStatus {
			return
		}
		pending = append(pending, p...)
		for {
			line, rest, ok := bytes.Cut(pending, []byte("\n"))
			if !ok {
				return
			}
			st.parse(line, pidC)
			pending = rest
		}
	}
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		feed(buf[:n])
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			drain(r, feed)
		}
		break
	}
	st.parse(pending, pidC) // a last line without its newline
	return st
}

// drain reads what the pipe r holds now, without waiting for more.
func drain(r *os.File, feed func([]byte)) {
	rc, err := r.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		if unix.SetNonblock(int(fd), true) != nil {
			return
		}
		buf := make([]byte, 4096)
		for {
			n, err := unix.Read(int(fd), buf)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if n <= 0 {
				return // EAGAIN: empty for now; 0: the end
			}
			feed(buf[:n])
		}
	})
}

// parse takes one line of the status stream.
func (st *status) parse(line []byte, pidC chan<- int) {
	var m map[string]any
	if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &m) != nil {
		return
	}
	if v, ok := m["child-pid"].(float64); ok && st.childPid == 0 && v > 0 {
		st.childPid = int(v)
		pidC <- st.childPid
	}
	if v, ok := m["exit-code"].(float64); ok {
		n := int(v)
		st.exitCode = &n
	}
}

// startWithPrlimit is the fallback when the ptrace gate cannot be used (a
// setuid bwrap loses its privileges when traced): prlimit(1) from util-linux
// sets RLIMIT_DATA (dataLimit) and RLIMIT_CPU on itself and executes bwrap.
// No memory cgroup holds such a command: only the gate moves bwrap into one
// before it runs. RLIMIT_NPROC is not set here: before the user namespace
// exists it would be counted against every process of the uid on the
// machine.
func (b *Backend) startWithPrlimit(cmd *exec.Cmd, lim sandbox.Limits) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	joinSandboxKeyring(b.log)
	if lim.MemoryMB > 0 || lim.CPUSeconds > 0 {
		pl, err := LocateTool("prlimit", "")
		if err != nil {
			return fmt.Errorf("%w: prlimit not found, so limits cannot be applied (install util-linux)", sandbox.ErrUnavailable)
		}
		args := []string{pl}
		if lim.MemoryMB > 0 {
			args = append(args, fmt.Sprintf("--data=%d", dataLimit(lim.MemoryMB)))
		}
		if lim.CPUSeconds > 0 {
			args = append(args, fmt.Sprintf("--cpu=%d:%d", lim.CPUSeconds, lim.CPUSeconds+1))
		}
		args = append(args, "--")
		cmd.Args = append(args, cmd.Args...)
		cmd.Path = pl
	}
	if lim.MaxProcs > 0 {
		b.log.Warn("bwrap.limit.nproc_unenforced", "reason", "setuid bwrap or no ptrace")
	}
	return forkfds.Start(cmd)
}

// rebuild returns a fresh copy of an unstarted-but-failed cmd.
func rebuild(c *exec.Cmd) *exec.Cmd {
	n := exec.Command(c.Path, c.Args[1:]...)
	n.Env, n.Stdin, n.Stdout, n.Stderr, n.ExtraFiles, n.WaitDelay = c.Env, c.Stdin, c.Stdout, c.Stderr, c.ExtraFiles, c.WaitDelay
	attr := *c.SysProcAttr
	attr.Ptrace = false
	n.SysProcAttr = &attr
	return n
}

// memoryCgroup makes the command's memory cgroup, or returns nil where
// memory_mb is per process instead: no limit, no usable cgroup hierarchy
// (memCgroups.get), or no ptrace gate to move bwrap in before its first
// instruction (a setuid bwrap run by an unprivileged caller, or the gate
// turned off). A cgroup that cannot be made is logged and the command gets
// RLIMIT_DATA.
func (b *Backend) memoryCgroup(lim sandbox.Limits, bin *Binary, root bool) *memCgroup {
	p, ok := b.memoryCgroupPlace(lim.MemoryMB, bin, root)
	if !ok {
		return nil
	}
	cg, err := processMemCgroups.newMemCgroup(p, lim.MemoryMB)
	if err != nil {
		b.log.Warn("bwrap.memcg.failed", "error", err)
		return nil
	}
	return cg
}

// memoryCgroupPlace returns where a command's memory cgroup is made, and
// false where memory_mb is per process instead (see memoryCgroup).
func (b *Backend) memoryCgroupPlace(memoryMB int, bin *Binary, root bool) (memPlace, bool) {
	if memoryMB <= 0 || b.noGate || bin.Setuid && !root {
		return memPlace{}, false
	}
	p := processMemCgroups.get(b.log)
	return p, p.Version != 0
}

// perProcessMemory returns memoryMB (MiB) where it becomes RLIMIT_DATA on
// each process of a command (memoryCgroupPlace finds no cgroup), else 0.
// decide false asks without deciding (memCgroups.forecast), so nothing
// moves: for Command, which runs nothing.
func (b *Backend) perProcessMemory(memoryMB int, bin *Binary, decide bool) int {
	if memoryMB <= 0 {
		return 0
	}
	if !decide && !b.noGate && !(bin.Setuid && os.Getuid() != 0) {
		if processMemCgroups.forecast().Place.Version != 0 {
			return 0
		}
		return memoryMB
	}
	if _, ok := b.memoryCgroupPlace(memoryMB, bin, os.Getuid() == 0); ok {
		return 0
	}
	return memoryMB
}

// MemoryPerCommand reports whether memory_mb (MiB; 0 or less: no limit)
// bounds each of this backend's commands as a whole, all its processes
// together in a memory cgroup, rather than each process's memory
// (RLIMIT_DATA): the choice Run makes, asked without making a cgroup. It
// finds bwrap (Binary) and this process's cgroup place (done once per
// process, as by the first command with a memory limit, which may move
// corral into a systemd user scope: userscope.go); where bwrap
// cannot be had the answer is false.
func (b *Backend) MemoryPerCommand(ctx context.Context, memoryMB int) bool {
	bin, err := b.Binary(ctx)
	if err != nil {
		return false
	}
	_, ok := b.memoryCgroupPlace(memoryMB, bin, os.Getuid() == 0)
	return ok
}

// memoryPerProcess is lim as limitHit should judge it: without memory_mb
// when the cgroup, not RLIMIT_DATA, held the memory (an allocation then does
// not fail with a message; the OOM killer ends a process).
func memoryPerProcess(lim sandbox.Limits, cg *memCgroup) sandbox.Limits {
	if cg.inside() {
		lim.MemoryMB = 0
	}
	return lim
}

// limitHit decides which limit, if any, ended the command.
func limitHit(res *sandbox.Result, lim sandbox.Limits, stderr *tail.Buffer) string {
	if res.TimedOut {
		return ""
	}
	// The process limit is reported even when the command recovered from
	// refused forks: the person should know it was reached.
	if stderr != nil && lim.MaxProcs > 0 && sandbox.ForkRefused(stderr.String()) {
		return sandbox.LimitProcs
	}
	if res.ExitCode == 0 {
		return ""
	}
	if lim.CPUSeconds > 0 {
		if res.Signal == int(syscall.SIGXCPU) ||
			res.Signal == int(syscall.SIGKILL) && res.CPUTime >= time.Duration(lim.CPUSeconds)*time.Second {
			return sandbox.LimitCPU
		}
	}
	if stderr != nil && lim.MemoryMB > 0 && sandbox.RanOutOfMemory(stderr.String()) {
		return sandbox.LimitMemory
	}
	return ""
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func inode(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

// writeFileAtomic writes data to p (creating its directory), atomically.
func writeFileAtomic(p string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(p, data, perm, false)
}

// gitTrustAllConfig is the git system configuration of a root caller's
// sandboxes (Host.GitSystemConfig): the host's own, included (a missing
// file is skipped), and every repository trusted.
const gitTrustAllConfig = "[include]\n\tpath = /etc/gitconfig\n[safe]\n\tdirectory = *\n"

// gitTrustAll returns the path of the file holding gitTrustAllConfig in
// stateDir, written when it holds anything else (mode 0644: the run_as
// identity reads it).
func gitTrustAll(stateDir string) (string, error) {
	f := filepath.Join(stateDir, "gitconfig-sandbox")
	if b, err := os.ReadFile(f); err == nil && string(b) == gitTrustAllConfig {
		return f, nil
	}
	if err := atomicfile.Write(f, []byte(gitTrustAllConfig), 0o644, false); err != nil {
		return "", fmt.Errorf("writing the sandbox's git settings: %w", err)
	}
	return f, nil
}
