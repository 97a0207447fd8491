package corral

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corralhq/corral/approval"
	"github.com/corralhq/corral/audit"
	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/helperbin"
	"github.com/corralhq/corral/internal/startdir"
	"github.com/corralhq/corral/mcpserver"
	"github.com/corralhq/corral/metrics"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
	"github.com/corralhq/corral/toolcache"
)

// Options configure a Host. The zero value reads the person's settings as
// the corral command does ($CORRAL_CONFIG, else the default file, and
// CORRAL_* variables of the process's environment) and keeps sessions in
// corral's state directory.
type Options struct {
	// ConfigPath is the settings file; "" means $CORRAL_CONFIG of Environ,
	// else config.DefaultPath. A missing file is not an error (the
	// defaults apply).
	ConfigPath string
	// Settings, when set, are used for every command instead of reading
	// ConfigPath and the environment (routes still apply per session). The
	// Host does not change them, and the caller must not while the Host is
	// open: a session's Spec resolved from them is kept (Host.Spec).
	Settings *config.Settings
	// Override, when set, is called with a copy of the settings of every
	// command, after the session's route is applied, and may change them
	// (the CLI's --profile, --cwd, --bind, ... flags). It must not change
	// the elements of their slices in place (they are shared with the
	// cached settings): assign new slices. Its error refuses the command.
	Override func(st *config.Settings) error
	// Environ is the caller's environment ("KEY=value"): the CORRAL_*
	// settings are read from it and commands start from it (each backend
	// filters it). Nil means os.Environ() at Open.
	Environ []string
	// Logger receives structured events of the Host, its sessions and
	// backends; nil discards them.
	Logger *slog.Logger
	// StateDir is corral's state directory (sessions, caches, the audit
	// log); "" means config.StateDir(). Open fails when neither gives one.
	StateDir string
	// Command is the argv that starts corral with the same settings (its
	// executable and --config), the start of session.Session.ExecPrefix;
	// nil means corral's own executable alone.
	Command []string
	// JoinContainers lets the docker backend run commands in another
	// corral process's live container of the same session (corral exec).
	JoinContainers bool
	// SweepEvery is bwrap.Options.SweepEvery: a one-shot CLI command sets
	// it so that it does not scan /proc for orphaned sandboxes when another
	// corral of this user did within SweepEvery; zero sweeps once per
	// process.
	SweepEvery time.Duration
	// OneShot says the process runs one command and exits (corral run,
	// exec, shell): the kubernetes backend then claims pods of its warm
	// pool but does not refill it (kubernetes.Options.OneShot).
	OneShot bool
	// Metrics, when set, is where the Host's MCP server and backends add
	// their families (tool calls, sessions, the kubernetes backend's API
	// calls and warm pool; docs/serve.md, "Metrics"); corral serve
	// serves it at /metrics. Nil counts nothing.
	Metrics *metrics.Registry
	// Helper is the executable handed to sandboxes, containers and pods
	// for corral's helper modes (cmd/corral-helper; static for docker and
	// kubernetes); "" finds one (package helperbin: next to corral's
	// executable, in corral's cache, else corral's own executable).
	Helper string
}

// Host is corral in one process: the settings, read once and again only
// when the settings file changes; the backends, built once and reused with
// their caches; and the sessions. Every command of a session resolves its
// settings (the session's route, Options.Override) from the cached data.
// A Host is safe for concurrent use. Close it to end the sessions'
// background processes and remove the containers it made.
type Host struct {
	opts     Options
	log      *slog.Logger
	stateDir string
	manager  *session.Manager

	mu        sync.Mutex
	st        *config.Settings // cached settings (nil before the first load)
	stamp     stamp            // the settings file as st was read from it
	path      string           // the settings file (ResolvePath), once found
	instances map[string]registry.Instance
	closed    bool

	// egressMu guards egress, made at its first use by a backend (which
	// may be while h.mu is held: Deps.Egress is called from Open).
	egressMu sync.Mutex
	egress   *egress.Pool

	// helpers finds the helper executable, at its first use.
	helpers *helperbin.Locator

	// resolved keeps, per session name, the Spec last resolved for it and
	// the settings it came from (guarded by mu): while Settings returns
	// the same settings (the file's stamp unchanged), a session's Spec is
	// that one again, its skill directories looked up afresh (specFor).
	resolved map[string]resolvedSpec

	// readyMu guards ready, Ready's cached answer; it is held across a
	// round of checks.
	readyMu sync.Mutex
	ready   readyState

	// stats counts the settings file's stats (Settings' checks for a
	// change), specs the Specs resolved (specOf): tests hold a call of a
	// front end to one of each.
	stats, specs atomic.Int64
}

// ErrNoStateDir is Open's error when neither Options.StateDir nor the
// environment (config.StateDir: XDG_STATE_HOME, HOME) gives a state
// directory. Any other error of Open is the settings'.
var ErrNoStateDir = errors.New("cannot find a state directory for sessions: set HOME or XDG_STATE_HOME")

// Open returns a Host over opts. It reads the settings once, so a bad
// settings file is reported here (an error naming the file and key, from
// config.Load); it fails too when there is no state directory. It starts
// no process.
func Open(opts Options) (*Host, error) {
	if opts.Environ == nil {
		opts.Environ = os.Environ()
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Host{opts: opts, log: log, stateDir: opts.StateDir, instances: map[string]registry.Instance{},
		helpers: helperbin.New(helperbin.Options{Logger: log}), resolved: map[string]resolvedSpec{}}
	if h.stateDir == "" {
		h.stateDir = config.StateDir()
	}
	if h.stateDir == "" {
		return nil, ErrNoStateDir
	}
	if _, err := h.Settings(); err != nil {
		return nil, err
	}
	h.manager = session.NewManager(session.Options{StateDir: h.stateDir, Resolve: h.Spec, Logger: log, Command: opts.Command,
		Helper: func() string { return h.helper(false) }})
	return h, nil
}

// Helpers returns the Host's helper locator: corral doctor builds the
// helper with it (helperbin.Locator.Build).
func (h *Host) Helpers() *helperbin.Locator { return h.helpers }

// helper returns the executable handed to sandboxes for corral's helper
// modes: Options.Helper, else the locator's (static for docker and
// kubernetes), else "" for corral's own.
func (h *Host) helper(static bool) string {
	if h.opts.Helper != "" {
		return h.opts.Helper
	}
	return h.helpers.Path(static)
}

// hiddenDirs are corral's directories, besides the state directory, that
// no sandbox may see or bind: the config directory and the helper's cache
// (whose executables and verdicts corral trusts).
func (h *Host) hiddenDirs() []string {
	dirs := []string{config.ConfigDir()}
	if d := h.helpers.CacheDir(); d != "" {
		dirs = append(dirs, d)
	}
	return dirs
}

// OwnPaths returns corral's own files and directories, absolute with
// symlinks resolved where they exist: its executable, where a helper
// beside it would be, its settings, state and cache directories. A
// hand-back (apply, cp out, sync --pull) never writes them
// (handback.Policy.Own): a sandbox must not replace what corral runs or
// reads as its settings.
func (h *Host) OwnPaths() []string {
	var out []string
	add := func(p string) {
		if p == "" || !filepath.IsAbs(p) {
			return
		}
		out = append(out, filepath.Clean(p))
		if r, err := filepath.EvalSymlinks(p); err == nil && r != filepath.Clean(p) {
			out = append(out, r)
		}
	}
	if exe, err := os.Executable(); err == nil {
		add(exe)
	}
	add(h.helpers.NextPath())
	for _, d := range h.hiddenDirs() {
		add(d)
	}
	add(h.stateDir)
	return out
}

// StateDir returns the Host's state directory.
func (h *Host) StateDir() string { return h.stateDir }

// Manager returns the session manager of the Host, whose resolver is
// Host.Spec.
func (h *Host) Manager() *session.Manager { return h.manager }

// Session returns the session called name (any non-empty string; "dir:" +
// a project directory, "tg:1234"), opening it on first use. Its commands
// run with the settings of name's route. The same name gives the same
// *session.Session for the life of the Host, and the same state (cwd,
// variables, scratch directory) across processes.
func (h *Host) Session(name string) (*session.Session, error) {
	return h.manager.Open(name)
}

// Settings returns the settings in force: Options.Settings, or the
// settings file and environment as read at Open, read again when the file
// has changed since (a stat per call; `corral config set` takes effect at
// the next command, as it did when the file was read for every command).
// The caller must not change the result; ForSession returns a copy.
func (h *Host) Settings() (*config.Settings, error) {
	if h.opts.Settings != nil {
		return h.opts.Settings, nil
	}
	path, err := h.settingsPath()
	if err != nil {
		return nil, err
	}
	h.stats.Add(1)
	stamp := fileStamp(path)
	h.mu.Lock()
	if h.st != nil && h.stamp == stamp {
		st := h.st
		h.mu.Unlock()
		return st, nil
	}
	h.mu.Unlock()
	st, err := config.Load(path, h.opts.Environ)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.st, h.stamp = st, stamp
	h.mu.Unlock()
	for _, w := range st.DeprecatedSet() {
		// Logged at each reading, that is once per change of the file.
		h.log.Warn("config.deprecated", "warning", w)
	}
	return st, nil
}

// settingsPath returns the settings file (config.ResolvePath over
// Options.ConfigPath and Options.Environ, which do not change after Open),
// found once: finding it looks the home directory up, which as root is a
// stat of $HOME.
func (h *Host) settingsPath() (string, error) {
	h.mu.Lock()
	p := h.path
	h.mu.Unlock()
	if p != "" {
		return p, nil
	}
	p, err := config.ResolvePath(h.opts.ConfigPath, h.opts.Environ)
	if err != nil {
		return "", err
	}
	h.mu.Lock()
	h.path = p
	h.mu.Unlock()
	return p, nil
}

// stamp identifies the content of a file without reading it: device,
// inode, size, change times and mode (a rewrite through a rename gets a
// new inode; an edit in place a new mtime and ctime). The zero stamp is a
// missing file's.
type stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
	mode         os.FileMode
}

// fileStamp returns the stamp of the file at path (zero when it is
// missing).
func fileStamp(path string) stamp {
	var st syscall.Stat_t
	err := syscall.Stat(path, &st)
	for err == syscall.EINTR {
		err = syscall.Stat(path, &st)
	}
	if err != nil {
		return stamp{}
	}
	return stamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), mode: os.FileMode(st.Mode)}
}

// settingsFor returns the settings of a command of the session called
// name: a copy with the session's route applied (when route is set; a
// one-off command has none), then Options.Override.
func (h *Host) settingsFor(name string, route bool) (*config.Settings, error) {
	st, err := h.Settings()
	if err != nil {
		return nil, err
	}
	if route {
		st = st.ForSession(name)
	} else {
		st = st.Clone()
	}
	if h.opts.Override != nil {
		if err := h.opts.Override(st); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// Spec is the session resolver of the Host (session.Resolver): the
// settings with the route of the session called name and Options.Override
// applied, as a session.Spec whose Backend is the Host's own backend of
// that name. Errors: unreadable settings (config), a bad override, an
// unknown backend, no working directory.
//
// While the settings file is unchanged (Settings: one stat), a session's
// Spec is the one resolved for it before, copied, with its skill
// directories looked up again (SkillDirs: one that appeared or went since
// shows at once); a changed file, or Options.Override, which may depend
// on more than the settings, resolves it all afresh.
func (h *Host) Spec(name string) (*session.Spec, error) {
	if h.opts.Override != nil {
		st, err := h.settingsFor(name, true)
		if err != nil {
			return nil, err
		}
		return h.specOf(st)
	}
	base, err := h.Settings()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	r, ok := h.resolved[name]
	closed := h.closed
	h.mu.Unlock()
	if ok && r.from == base && !closed {
		h.specs.Add(1)
		return r.spec(), nil
	}
	st := base.ForSession(name)
	sp, err := h.specOf(st)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	if len(h.resolved) >= maxResolved {
		for k := range h.resolved { // drop one at random (map order)
			delete(h.resolved, k)
			break
		}
	}
	kept := *sp
	kept.Ports = slices.Clone(sp.Ports) // sp is the caller's to change
	h.resolved[name] = resolvedSpec{from: base, sp: kept, skills: st.Skills}
	h.mu.Unlock()
	return sp, nil
}

// maxResolved bounds Host.resolved: an HTTP server's clients may name any
// number of sessions.
const maxResolved = 256

// resolvedSpec is a session's Spec as resolved from the settings from,
// and the skills setting it was resolved with.
type resolvedSpec struct {
	from   *config.Settings
	sp     session.Spec
	skills []string
}

// spec returns a copy of r's Spec with its own Ports and the skill
// directories that exist now.
func (r resolvedSpec) spec() *session.Spec {
	sp := r.sp
	sp.Ports = slices.Clone(sp.Ports)
	sp.Skills = SkillDirs(r.skills)
	return &sp
}

func (h *Host) specOf(st *config.Settings) (*session.Spec, error) {
	h.specs.Add(1)
	pol, err := PolicyOf(st)
	if err != nil {
		return nil, err
	}
	ap, err := approval.NewPolicy(st.Approval, st.ApprovalPatterns)
	if err != nil {
		return nil, err
	}
	be, err := h.Backend(st)
	if err != nil {
		return nil, err
	}
	sp := &session.Spec{
		Backend: be, Policy: pol, Timeout: st.Timeout, OutputLimit: st.OutputLimit,
		SessionHome: st.HomeMode == config.HomeModeSession, Review: st.WorkspaceMode == config.WorkspaceReview, Env: h.opts.Environ,
		Ports: slices.Clone(st.Ports), Approval: &ap,
	}
	switch st.ToolCaches {
	case config.ToolCachesShared:
		sp.CacheDir = toolcache.Dir(h.stateDir)
	case config.ToolCachesSession:
		sp.SessionCache = true
	}
	return sp, nil
}

// Command is one command outside any session (corral run): its settings,
// request and backend.
type Command struct {
	// Settings are the settings it runs with (no route applies: it has no
	// session name).
	Settings *config.Settings
	// Request is the sandbox request, with the caller's environment and
	// the settings' policy and timeout; the caller sets the streams, the
	// scratch directory and the like.
	Request *sandbox.Request
	// Backend is the Host's backend that runs it.
	Backend sandbox.Backend
}

// Command returns what it takes to run argv in a new sandbox of its own,
// under the settings (no session route) and Options.Override. Errors are
// those of Spec, and sandbox.ErrPolicy under workspace_mode review (a layer
// is a session's: such a command would write the host's files).
func (h *Host) Command(argv []string) (*Command, error) {
	st, err := h.settingsFor("", false)
	if err != nil {
		return nil, err
	}
	pol, err := PolicyOf(st)
	if err != nil {
		return nil, err
	}
	be, err := h.Backend(st)
	if err != nil {
		return nil, err
	}
	if st.WorkspaceMode == config.WorkspaceReview && pol.Profile != sandbox.ProfileRestricted {
		// A layer belongs to a session; a command of none would write the
		// host's files, which review mode promises it does not.
		return nil, fmt.Errorf("%w: workspace_mode is review, which keeps changes in a session's layer until a person applies them: run the command in a session (corral run --session NAME -- ..., then corral diff --session NAME), or set workspace_mode direct for it (CORRAL_WORKSPACE_MODE=direct)", sandbox.ErrPolicy)
	}
	if len(argv) == 0 {
		argv = nil
	}
	req := &sandbox.Request{Argv: argv, Env: h.opts.Environ, Policy: pol, Timeout: st.Timeout}
	return &Command{Settings: st, Request: req, Backend: be}, nil
}

// PolicyOf returns what a command may do under st: the working directory
// (st.Cwd, else the current directory, made absolute), profile, limits,
// binds, skills (existing directories, "~/" expanded and resolved),
// environment and network lists, and protected paths. Errors: the current
// directory cannot be found.
func PolicyOf(st *config.Settings) (sandbox.Policy, error) {
	wd := st.Cwd
	if wd == "" {
		var err error
		if wd, err = startdir.Get(); err != nil {
			return sandbox.Policy{}, fmt.Errorf("finding the current directory: %w", err)
		}
	}
	if !filepath.IsAbs(wd) {
		abs, err := startdir.Abs(wd)
		if err != nil {
			return sandbox.Policy{}, err
		}
		wd = abs
	}
	return sandbox.Policy{
		Workdir: wd, Profile: st.Profile, Limits: st.Limits(), Binds: st.Binds,
		HomeAllow: st.HomeAllow, Skills: SkillDirs(st.Skills), EnvDeny: st.EnvDeny, EnvAllow: st.EnvAllow,
		TmpSizeMB: st.TmpSizeMB, Protected: st.ProtectedPaths,
		NetworkAllow: st.NetworkAllow, NetworkDeny: st.NetworkDeny, Secrets: st.Secrets,
	}, nil
}

// SkillDirs returns the directories of the skills setting that exist, a
// leading "~/" expanded to the home directory, symlinks resolved; others
// are left out (a skill directory is optional).
func SkillDirs(entries []string) []string {
	home, _ := os.UserHomeDir()
	var out []string
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e, "~/"); ok {
			if home == "" {
				continue
			}
			e = filepath.Join(home, rest)
		}
		// Stat first (it follows symlinks as EvalSymlinks does): one
		// system call answers for a skill directory that is not there, the
		// usual case at every command, where EvalSymlinks lstats each
		// component of the path to find out.
		if fi, err := os.Stat(e); err != nil || !fi.IsDir() {
			continue
		}
		if r, err := filepath.EvalSymlinks(e); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// Backend returns the Host's backend named by st.Backend ("" is the
// backend key's default), from that backend's Instance (Engine): built on
// first use and kept, so a backend's caches, containers and pods live as
// long as the Host (Close ends them). Errors: an unknown backend name
// (*registry.UnknownError), the backend's own for st, a closed Host.
func (h *Host) Backend(st *config.Settings) (sandbox.Backend, error) {
	name := st.Backend
	if name == "" {
		name = config.DefaultBackend()
	}
	in, err := h.Engine(name)
	if err != nil {
		return nil, err
	}
	return in.Backend(st)
}

// Engine returns the Host's Instance of the backend called name (package
// backend/registry), built on first use with the Host's shared
// dependencies (Deps): the one place a backend is built, for commands,
// corral doctor, cleanup and cp alike. Errors: an unknown backend
// (*registry.UnknownError), a closed Host.
func (h *Host) Engine(name string) (registry.Instance, error) {
	d, ok := registry.Lookup(name)
	if !ok {
		return nil, &registry.UnknownError{Name: name}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, session.ErrClosed
	}
	if in := h.instances[name]; in != nil {
		return in, nil
	}
	in := d.Open(h.deps())
	h.instances[name] = in
	return in, nil
}

// deps are what every backend of the Host shares.
func (h *Host) deps() registry.Deps {
	return registry.Deps{
		Logger:         h.log,
		StateDir:       h.stateDir,
		HiddenDirs:     h.hiddenDirs(),
		Egress:         h.egressPool,
		Helper:         h.helper,
		PinFiles:       []string{h.helpers.NextPath()},
		SweepEvery:     h.opts.SweepEvery,
		OneShot:        h.opts.OneShot,
		JoinContainers: h.opts.JoinContainers,
		Metrics:        h.opts.Metrics,
	}
}

// egressPool returns the process's pool of allowlist proxies, made on
// first use (socket directories under <state dir>/net, the secrets'
// certificate authority in <state dir>/ca). Backends are built only
// before Close (Engine), so none asks for it after.
func (h *Host) egressPool() *egress.Pool {
	h.egressMu.Lock()
	defer h.egressMu.Unlock()
	if h.egress == nil {
		h.egress = egress.NewPool(egress.Options{Dir: filepath.Join(h.stateDir, "net"), CADir: filepath.Join(h.stateDir, "ca"), Logger: h.log})
	}
	return h.egress
}

// DirSession returns the default session of a project: "dir:" followed
// by the working directory (the cwd setting, else the current directory),
// so an agent started again in the same project finds its cwd and
// variables again.
func (h *Host) DirSession() (string, error) {
	st, err := h.Settings()
	if err != nil {
		return "", err
	}
	wd := st.Cwd
	if wd == "" {
		if wd, err = startdir.Get(); err != nil {
			return "", fmt.Errorf("finding the current directory: %w", err)
		}
	}
	if abs, err := startdir.Abs(wd); err == nil {
		wd = abs
	}
	return mcpserver.DirSessionName(wd), nil
}

// MCPOptions configure Host.MCPServer.
type MCPOptions struct {
	// DefaultSession is the session of calls that name none (see
	// mcpserver.Options.DefaultSession); "" means Host.DirSession.
	DefaultSession string
	// Version is the version in serverInfo; "" means corral's module
	// version, or "dev".
	Version string
}

// MCPServer returns corral's MCP server (package mcpserver) bound to the
// Host: its sessions, backends and settings (approval and
// approval_patterns per session, the audit log under the state directory;
// an audit log that cannot be opened is logged as mcp.audit.unavailable
// and the server runs without). Serve it with its MCPServer or
// HTTPHandler methods; close it before the Host. Errors: a bad session
// name (mcpserver.ValidSessionName).
func (h *Host) MCPServer(o MCPOptions) (*mcpserver.Server, error) {
	name := o.DefaultSession
	if name == "" {
		var err error
		if name, err = h.DirSession(); err != nil {
			return nil, err
		}
	}
	if err := mcpserver.ValidSessionName(name); err != nil {
		return nil, err
	}
	if o.Version == "" {
		o.Version = Version()
	}
	st, err := h.Settings()
	if err != nil {
		return nil, err
	}
	auditLog, err := audit.Open(audit.Dir(h.stateDir), int64(st.AuditMaxMB)<<20)
	if err != nil {
		h.log.Warn("mcp.audit.unavailable", "error", err)
		auditLog = nil
	}
	return mcpserver.New(mcpserver.Options{
		Manager: h.manager, DefaultSession: name, Spec: h.Spec, Logger: h.log, Version: o.Version,
		Audit: auditLog, Metrics: h.opts.Metrics,
	})
}

// BuildInfo is what the executable says of its own build, from
// runtime/debug.ReadBuildInfo: the module version (set by `go install
// module@version`), the VCS settings the go command stamps into a build
// from a repository (-buildvcs, on by default there), and the toolchain.
type BuildInfo struct {
	// Version is the module version, or "dev" for a build from a working
	// tree ("(devel)" to the go command) or with no build information.
	Version string `json:"version"`
	// Revision is the VCS commit (vcs.revision), "" when not stamped.
	Revision string `json:"revision,omitempty"`
	// Time is the commit's time (vcs.time, RFC 3339), "" when not stamped.
	Time string `json:"time,omitempty"`
	// Modified is set when the working tree had uncommitted changes
	// (vcs.modified).
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the toolchain that built it ("go1.26.8").
	GoVersion string `json:"go_version"`
}

// Build returns the executable's BuildInfo.
func Build() BuildInfo {
	b := BuildInfo{Version: "dev", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		b.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the version as one token: the module version, or for a dev
// build "dev+" and the revision's first 12 hex digits (and "-dirty" for a
// modified tree) when the build was stamped, as in serverInfo.
func (b BuildInfo) String() string {
	if b.Version != "dev" || b.Revision == "" {
		return b.Version
	}
	s := "dev+" + b.Revision[:min(12, len(b.Revision))]
	if b.Modified {
		s += "-dirty"
	}
	return s
}

// Version is Build().String(): corral's module version, or "dev" (with
// the VCS revision where the build has one) for a build from a working
// tree.
func Version() string { return Build().String() }

// CloseLimit bounds how long Close waits for the sessions' background
// sandboxes to end.
const CloseLimit = 10 * time.Second

// Close ends every background process of the Host's sessions (waiting at
// most CloseLimit: a sandbox that does not end must not keep the program
// from exiting; it is then logged as host.close.timeout), removes the
// containers and pods its backends made (each backend's
// registry.Instance.Close), closes its allowlist proxies and what its
// backends keep between commands.
// Session state stays on disk. Calling Close again does nothing.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.manager.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(CloseLimit):
		h.log.Error("host.close.timeout", "waited", CloseLimit.String(),
			"detail", "background sandboxes did not end in time; some of their processes may remain")
	}
	h.mu.Lock()
	ins := h.instances
	h.instances = nil
	h.mu.Unlock()
	var errs []error
	for _, d := range registry.Drivers() {
		if in := ins[d.Name]; in != nil {
			errs = append(errs, in.Close())
		}
	}
	// After the backends, whose sandboxes used the proxies.
	h.egressMu.Lock()
	pool := h.egress
	h.egress = nil
	h.egressMu.Unlock()
	if pool != nil {
		errs = append(errs, pool.Close())
	}
	return errors.Join(errs...)
}
