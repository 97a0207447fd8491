package session

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/approval"
	"github.com/corralhq/corral/internal/rmtree"
	"github.com/corralhq/corral/sandbox"
)

// Spec is how a session's commands run, resolved afresh for every command
// (settings are read each time a sandbox is created).
type Spec struct {
	// Backend runs the sandboxes. Required.
	Backend sandbox.Backend
	// Policy is what the session's commands may do, copied whole into
	// every sandbox.Request. Its Workdir is the working directory (the
	// writable tree); a new session's first command starts there. Absolute;
	// when empty the backend's DefaultCwd is used.
	sandbox.Policy
	// Timeout is the default foreground timeout (the timeout setting).
	Timeout time.Duration
	// OutputLimit caps the output kept for a foreground command, in bytes.
	OutputLimit int
	// SessionHome makes HOME a writable per-session directory
	// (home_mode: session).
	SessionHome bool
	// CacheDir is the tools' shared cache directory (tool_caches: shared;
	// sandbox.Request.CacheDir), made when missing; SessionCache gives the
	// session one of its own in its directory instead (tool_caches:
	// session). Neither means no cache.
	CacheDir     string
	SessionCache bool
	// Review puts the working directory behind the session's layer
	// (workspace_mode: review; Session.LayerDir, package layer): the
	// commands write there, and the host's Workdir stays as it was until a
	// person applies the changes.
	Review bool
	// Env is the environment a new session starts from, usually the
	// caller's; the backend filters it. Nil means os.Environ().
	Env []string
	// Ports are TCP ports forwarded to the host's loopback once a
	// background process's sandbox listens on one (the ports setting; see
	// Session.ForwardPort): at the same host port when it is free, else
	// at any free one. Only sandboxes with a network namespace of their
	// own and a host process (bwrap) are forwarded.
	Ports []int
	// Approval is the approval policy of the session's shell commands
	// (the approval and approval_patterns settings), resolved with the
	// rest; nil means none applies. The session does not apply it: a
	// front end that can ask a person (the MCP server) does, before the
	// command runs.
	Approval *approval.Policy
}

// Resolver returns the Spec of the session called name.
type Resolver func(name string) (*Spec, error)

// Options configure a Manager.
type Options struct {
	// StateDir is corral's state directory; sessions live in its
	// "sessions" subdirectory. Required.
	StateDir string
	// Resolve maps a session name to how it runs. Required.
	Resolve Resolver
	// Logger receives structured events (session.opened, ...); nil
	// discards them.
	Logger *slog.Logger
	// MaxIdle is how long an unused session's directory is kept before
	// Prune removes it; zero means 24 hours.
	MaxIdle time.Duration
	// Command is the argv that starts corral with the same settings
	// (executable and --config), the start of Session.ExecPrefix; nil
	// means corral's own executable alone.
	Command []string
	// Helper returns the executable that serves corral's helper modes in
	// the sessions' sandboxes (cmd/corral-helper; Session.Helper), called
	// when one is first needed; nil, or "" from it, means corral's own.
	Helper func() string
}

// Manager owns the sessions of one corral process. It is safe for
// concurrent use.
type Manager struct {
	opts Options
	log  *slog.Logger
	root string

	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool
}

// NewManager returns a manager over opts.StateDir/sessions.
func NewManager(opts Options) *Manager {
	l := opts.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	if opts.MaxIdle == 0 {
		opts.MaxIdle = 24 * time.Hour
	}
	return &Manager{opts: opts, log: l, root: filepath.Join(opts.StateDir, "sessions"), sessions: map[string]*Session{}}
}

// ErrClosed is returned by a Manager or Session that has been closed.
var ErrClosed = errors.New("session closed")

// ErrStateUnreadable means a session's saved state or metadata could not
// be read (permission denied, too many open files, an I/O error): nothing
// was run, and the files were left as they are, never taken for damaged
// and replaced. The wrapped error says why; a retry may succeed when the
// cause passes (EMFILE).
var ErrStateUnreadable = errors.New("the session's saved state could not be read, so nothing was run and it was left as it is")

// ErrStateUnwritable is wrapped by Open when a new session's directory or
// metadata cannot be written (a full disk, a read-only or foreign state
// directory): nothing was run. The wrapped error says why, and the message
// names the directory and the fix.
var ErrStateUnwritable = errors.New("a new session cannot be set up, so nothing was run")

// unwritable wraps err, met writing what, for ErrStateUnwritable, naming
// the fix where the cause is a full or read-only file system.
func unwritable(what, dir string, err error) error {
	fix := ""
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		fix = fmt.Sprintf(": the file system of %s is full; free space there, or give corral another state directory (XDG_STATE_HOME)", dir)
	case errors.Is(err, syscall.EROFS), errors.Is(err, fs.ErrPermission):
		fix = fmt.Sprintf(": %s cannot be written here; give corral a writable state directory (XDG_STATE_HOME)", dir)
	}
	return fmt.Errorf("%w: %s: %w%s", ErrStateUnwritable, what, err, fix)
}

// Open returns the session called name, creating its directory on first
// use. The same name gives the same *Session within a process, and the same
// state across processes.
func (m *Manager) Open(name string) (*Session, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty session name", sandbox.ErrBadRequest)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if s, ok := m.sessions[name]; ok {
		return s, nil
	}
	dir := filepath.Join(m.root, dirName(name))
	for _, d := range []string{dir, filepath.Join(dir, "scratch"), filepath.Join(dir, "bg")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, unwritable("creating the session's directory", m.root, err)
		}
	}
	s := &Session{name: name, dir: dir, m: m, procs: map[string]*Process{}}
	var meta Meta
	if err := readJSON(filepath.Join(dir, "meta.json"), &meta); err != nil {
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errDamaged) {
			// Unreadable (EACCES, EMFILE) is not absent: keep it.
			return nil, fmt.Errorf("%w: %w", ErrStateUnreadable, err)
		}
		now := time.Now()
		meta = Meta{Name: name, Created: now, LastUsed: now}
		if err := writeJSON(filepath.Join(dir, "meta.json"), meta); err != nil {
			return nil, unwritable("writing the session's metadata", m.root, err)
		}
	}
	m.sessions[name] = s
	m.log.Info("session.opened", "session", name, "dir", dir)
	return s, nil
}

// Close ends every background process of every session this manager
// opened. Session state stays on disk.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	ss := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	for _, s := range ss {
		s.Close()
	}
}

// Info describes a session on disk, for `corral sessions list`.
type Info struct {
	Meta
	// Dir is the session's directory; Cwd its current directory.
	Dir string `json:"dir"`
	Cwd string `json:"cwd,omitempty"`
	// Busy is set when a command of the session is running now.
	Busy bool `json:"busy"`
	// Background counts its background processes running now whose
	// sandboxes are on this host (Background).
	Background int `json:"background,omitempty"`
}

// Listed reports whether the session is one that `corral sessions` lists
// and `corral exec` joins: it ran a command (foreground or background:
// Meta.Ran), or one is running now. A session that was only opened (a
// command refused before it ran, an MCP server that ran nothing yet) holds
// no sandbox and no state of its own, and is not listed; README: "A
// session exists once a command ran in it".
func (in Info) Listed() bool { return in.Ran() || in.Busy || in.Background > 0 }

// Ran reports whether a command of the session was started: Open writes
// the metadata without a backend, and a command that starts records the
// backend it ran on (Session.Record).
func (m Meta) Ran() bool { return m.Backend != "" }

// List returns the sessions on disk that are listed (Info.Listed), most
// recently used first.
func (m *Manager) List() ([]Info, error) {
	all, err := m.listAll()
	var out []Info
	for _, in := range all {
		if in.Listed() {
			out = append(out, in)
		}
	}
	return out, err
}

// Lookup returns the session called name as List would, without creating
// anything; ok is false when it is not listed (never opened, or it never
// ran a command: Info.Listed).
func (m *Manager) Lookup(name string) (in Info, ok bool) {
	in, found := m.info(filepath.Join(m.root, dirName(name)))
	if !found || in.Name != name {
		return Info{}, false
	}
	return in, in.Listed()
}

// OnDisk reports whether the session called name has a directory, listed
// or not (an MCP server may hold a session open that has run nothing yet).
func (m *Manager) OnDisk(name string) bool {
	_, err := os.Lstat(filepath.Join(m.root, dirName(name)))
	return err == nil
}

// listAll returns every session directory on disk with readable
// metadata, listed or not (Prune removes the others too), most recently
// used first.
func (m *Manager) listAll() ([]Info, error) {
	ents, err := os.ReadDir(m.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if info, ok := m.info(filepath.Join(m.root, e.Name())); ok {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastUsed.After(out[j].LastUsed) })
	return out, nil
}

// info describes the session in dir; false when dir holds no readable
// metadata.
func (m *Manager) info(dir string) (Info, bool) {
	var info Info
	if readJSON(filepath.Join(dir, "meta.json"), &info.Meta) != nil {
		return info, false
	}
	info.Dir = dir
	var st State
	if readJSON(filepath.Join(dir, "state.json"), &st) == nil {
		info.Cwd = st.Cwd
	} else {
		// No foreground command yet: the next starts in the
		// working directory (loadState).
		info.Cwd = info.Workdir
	}
	info.Background = len(Background(dir))
	if release, ok := tryLock(filepath.Join(dir, "lock")); ok {
		release()
	} else {
		info.Busy = true
	}
	return info, true
}

// Remove deletes the session called name: its state, scratch directory and
// logs. A session with a running command is refused.
func (m *Manager) Remove(name string) error {
	m.mu.Lock()
	s := m.sessions[name]
	delete(m.sessions, name)
	m.mu.Unlock()
	if s != nil {
		s.Close()
	}
	dir := filepath.Join(m.root, dirName(name))
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("no session %q", name)
	}
	return m.removeDir(dir)
}

func (m *Manager) removeDir(dir string) error {
	release, ok := tryLock(filepath.Join(dir, "lock"))
	if !ok {
		return fmt.Errorf("session in %s is running a command; try again when it is done", dir)
	}
	defer release()
	// rmtree: a session's tool cache holds Go's read-only module cache.
	if err := rmtree.RemoveAll(dir); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			// The docker backend's review overlay is mounted by the
			// Docker daemon, as root, and overlayfs leaves root's work
			// files (layer/work/work) that no other user can remove.
			return fmt.Errorf("%w: what is left in %s belongs to another user (under docker review mode, the overlay's work files are root's): remove it as root (sudo rm -rf %s)", err, dir, dir)
		}
		return err
	}
	return nil
}

// Prune removes sessions unused for longer than MaxIdle (a day by default),
// listed or not (Info.Listed), and returns their names. Busy sessions are
// skipped.
func (m *Manager) Prune() ([]string, error) {
	infos, err := m.listAll()
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, in := range infos {
		if in.Busy || time.Since(in.LastUsed) < m.opts.MaxIdle {
			continue
		}
		m.mu.Lock()
		_, live := m.sessions[in.Name]
		m.mu.Unlock()
		if live {
			continue
		}
		if m.removeDir(in.Dir) == nil {
			gone = append(gone, in.Name)
			m.log.Info("session.pruned", "session", in.Name)
		}
	}
	return gone, nil
}

// specFor returns given, a Spec its caller resolved for this one command
// (ExecRequest.Spec), or else resolves the session's.
func (m *Manager) specFor(name string, given *Spec) (*Spec, error) {
	if given == nil {
		return m.spec(name)
	}
	if given.Backend == nil {
		return nil, fmt.Errorf("%w: session %q has no backend", sandbox.ErrBadRequest, name)
	}
	return given, nil
}

// spec resolves a session's Spec.
func (m *Manager) spec(name string) (*Spec, error) {
	if m.opts.Resolve == nil {
		return nil, fmt.Errorf("%w: no session resolver configured", sandbox.ErrBadRequest)
	}
	sp, err := m.opts.Resolve(name)
	if err != nil {
		return nil, err
	}
	if sp.Backend == nil {
		return nil, fmt.Errorf("%w: session %q has no backend", sandbox.ErrBadRequest, name)
	}
	return sp, nil
}

// CacheDirs returns the tool cache directories of the sessions on disk
// (tool_caches: session; Session.CacheDir) that exist, sorted.
func (m *Manager) CacheDirs() []string {
	matches, _ := filepath.Glob(filepath.Join(m.root, "*", "cache"))
	var out []string
	for _, d := range matches {
		if st, err := os.Lstat(d); err == nil && st.IsDir() {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}
