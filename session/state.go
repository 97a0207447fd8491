package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/atomicfile"
)

// Meta is what a session's directory records about it (meta.json).
type Meta struct {
	// Name is the session's name as given.
	Name string `json:"name"`
	// Created and LastUsed are wall-clock times.
	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"last_used"`
	// Backend and Profile the session last ran with.
	Backend string `json:"backend,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Workdir is the working directory (the writable tree).
	Workdir string `json:"workdir,omitempty"`
	// Unsandboxed and HostPaths are the Traits of that backend
	// (sandbox.Traits) that say how a session's port is reached when it
	// has no background sandbox: on the host's own network (the local
	// backend), or through the sandboxes of its processes (bwrap).
	Unsandboxed bool `json:"unsandboxed,omitempty"`
	HostPaths   bool `json:"host_paths,omitempty"`
}

// State is what carries over between a session's commands.
type State struct {
	// Cwd is the directory the next command starts in.
	Cwd string `json:"cwd"`
	// Env is the exported environment ("KEY=value") after the last command.
	Env []string `json:"env"`
	// Workdir is the working directory the state belongs to.
	Workdir string `json:"workdir,omitempty"`

	moved bool     // loadState: the working directory changed
	notes []string // loadState: what it found wrong with the saved state, for the agent
	saved []byte   // loadState: state.json's bytes as read, when they hold this state
	clean bool     // loadState: the file holds exactly this state (nothing dropped, moved or cleaned)
}

// stateJSON is State as state.json holds it. JSON strings are Unicode:
// bytes that are not UTF-8 would come back as U+FFFD, so a cwd or a
// variable that holds such bytes (a directory named in Latin-1, a binary
// token) is kept base64-encoded in the *_b64 fields instead, and comes
// back byte for byte.
type stateJSON struct {
	Cwd     string   `json:"cwd"`
	CwdB64  string   `json:"cwd_b64,omitempty"`
	Env     []string `json:"env"`
	EnvB64  []string `json:"env_b64,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
}

// MarshalJSON encodes st as stateJSON.
func (st State) MarshalJSON() ([]byte, error) {
	j := stateJSON{Cwd: st.Cwd, Workdir: st.Workdir, Env: []string{}}
	if !utf8.ValidString(st.Cwd) {
		j.Cwd, j.CwdB64 = "", base64.StdEncoding.EncodeToString([]byte(st.Cwd))
	}
	for _, kv := range st.Env {
		if utf8.ValidString(kv) {
			j.Env = append(j.Env, kv)
		} else {
			j.EnvB64 = append(j.EnvB64, base64.StdEncoding.EncodeToString([]byte(kv)))
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes stateJSON into st; a *_b64 field that is not
// base64 is an error (the file is damaged).
func (st *State) UnmarshalJSON(b []byte) error {
	var j stateJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	st.Cwd, st.Env, st.Workdir = j.Cwd, j.Env, j.Workdir
	if j.CwdB64 != "" {
		c, err := base64.StdEncoding.DecodeString(j.CwdB64)
		if err != nil {
			return fmt.Errorf("cwd_b64: %w", err)
		}
		st.Cwd = string(c)
	}
	for _, e := range j.EnvB64 {
		kv, err := base64.StdEncoding.DecodeString(e)
		if err != nil {
			return fmt.Errorf("env_b64: %w", err)
		}
		st.Env = append(st.Env, string(kv))
	}
	return nil
}

// dirName maps a session name to its directory name: a readable prefix
// (letters, digits, '-', '_', '.') and a digest of the whole name, so any
// string is a valid name and two names never share a directory.
func dirName(name string) string {
	var b strings.Builder
	for _, r := range name {
		if b.Len() >= 32 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimLeft(b.String(), ".") + "-" + hex.EncodeToString(sum[:6])
}

// startLockName is the file, in a session's directory, whose flock(2) a
// background command holds shared from Session.Start until its sandbox
// exists (sandbox.Request.OnStart) or its start failed, and LockDir takes
// exclusively: so corral apply never checks for the layer's users while a
// sandbox is between "asked for" and "there", and none starts on the old
// layer while apply changes it.
const startLockName = "start.lock"

// lockFile takes an exclusive flock(2) on path, waiting for it; the
// returned function releases it.
func lockFile(path string) (func(), error) {
	return flockContext(context.Background(), path, unix.LOCK_EX, nil)
}

// lockShared takes a shared flock(2) on path, waiting for it.
func lockShared(path string) (func(), error) {
	return flockContext(context.Background(), path, unix.LOCK_SH, nil)
}

// flockContext takes flock(2) how (unix.LOCK_EX or unix.LOCK_SH) on path,
// made if missing, and returns the function that releases it. When
// another holds the lock it calls waiting (if not nil) once and waits,
// until it gets the lock or ctx ends; then it returns context.Cause(ctx)
// and nothing is held. Errors of open(2) and flock(2) say "session lock".
//
// A blocking flock(2) cannot be called off: a signal does not end it (the
// Go runtime installs its handlers with SA_RESTART, and signal(7) lists
// flock(2) among the calls restarted then), and closing the descriptor
// does not wake it. So it is made in a goroutine of its own; when ctx
// ends first, that goroutine keeps the descriptor and lets the lock go as
// soon as it gets it, and the caller returns at once. That costs the
// goroutine (and the thread it blocks) until the lock's holder lets go;
// nothing polls.
func flockContext(ctx context.Context, path string, how int, waiting func()) (func(), error) {
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	fd, err := openLock(path)
	if err != nil {
		return nil, fmt.Errorf("opening session lock: %w", err)
	}
	closeFd := func() { _ = unix.Close(fd) }
	release := func() { _ = unix.Flock(fd, unix.LOCK_UN); closeFd() }
	err = flockRetry(fd, how|unix.LOCK_NB)
	if err == nil {
		return release, nil
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		closeFd()
		return nil, fmt.Errorf("locking session: %w", err)
	}
	if waiting != nil {
		waiting()
	}
	got := make(chan error, 1)
	go func() { got <- flockRetry(fd, how) }()
	select {
	case err := <-got:
		if err != nil {
			closeFd()
			return nil, fmt.Errorf("locking session: %w", err)
		}
		return release, nil
	case <-ctx.Done():
		go func() {
			if <-got == nil {
				release()
			} else {
				closeFd()
			}
		}()
		return nil, context.Cause(ctx)
	}
}

// openLock opens (creating it, mode 0600) a lock file as a bare
// descriptor: an *os.File would try the runtime's poller (an epoll_ctl
// that fails for a regular file) and, at Fd, set the descriptor blocking
// again, five system calls more at every command for nothing a lock uses.
func openLock(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// flockRetry is flock(2) on fd, made again when a signal interrupted it
// (EINTR).
func flockRetry(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// tryLock takes the lock without waiting; ok is false when it is held.
func tryLock(path string) (release func(), ok bool) {
	fd, err := openLock(path)
	if err != nil {
		return nil, false
	}
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		_ = unix.Close(fd)
		return nil, false
	}
	return func() { _ = unix.Flock(fd, unix.LOCK_UN); _ = unix.Close(fd) }, true
}

// maxStateFile bounds a state or record file corral reads back: its own
// are far smaller (the saved environment is at most maxEnvBytes).
const maxStateFile = 8 << 20

// errDamaged marks a state file whose content is not what corral writes:
// not a regular file (a fifo, a device), over maxStateFile, or not JSON
// of the expected shape. Its cause is wrapped too.
var errDamaged = errors.New("damaged")

// readJSON reads path into v. A read that fails (EACCES, EMFILE, EIO)
// returns the read's error, which says nothing of the content; a file
// that is not a regular file, is too large or does not parse wraps
// errDamaged. It never blocks on a fifo and never reads past
// maxStateFile: the file is opened with O_NONBLOCK and checked with
// fstat(2) before it is read.
func readJSON(path string, v any) error {
	_, err := readJSONBytes(path, v)
	return err
}

// fileStamp is what lstat(2) says of a state file that its contents
// depend on. The state files are replaced whole (atomicfile: a new
// inode, new times), never edited in place, so a file whose stamp is
// unchanged holds the same bytes.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// statRegular returns path's stamp when it is a regular file.
func statRegular(path string) (fileStamp, bool) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fileStamp{}, false
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}

// memo keeps a state file's decoded contents as this process last read
// them, with the file's stamp before that read: readJSONMemo returns them
// again while the stamp is unchanged, sparing a session's every command
// the read and decoding of state.json and meta.json.
type memo[T any] struct {
	mu    sync.Mutex
	ok    bool
	stamp fileStamp
	raw   []byte
	v     T
}

// readJSONMemo is readJSONBytes through m; clone copies a T so that the
// caller's changes do not reach m.
func readJSONMemo[T any](m *memo[T], path string, v *T, clone func(T) T) ([]byte, error) {
	stamp, regular := statRegular(path)
	m.mu.Lock()
	if regular && m.ok && m.stamp == stamp {
		*v = clone(m.v)
		raw := m.raw
		m.mu.Unlock()
		return raw, nil
	}
	m.mu.Unlock()
	raw, err := readJSONBytes(path, v)
	if err != nil || !regular {
		return raw, err
	}
	// Replaced between the stamp and the read, the file's new stamp
	// differs from the one kept: the next call reads it again.
	m.mu.Lock()
	m.ok, m.stamp, m.raw, m.v = true, stamp, raw, clone(*v)
	m.mu.Unlock()
	return raw, nil
}

// readJSONBytes is readJSON that also returns the bytes it decoded.
func readJSONBytes(path string, v any) ([]byte, error) {
	b, err := readRegular(path, maxStateFile)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errDamaged, path, err)
	}
	return b, nil
}

// readRegular returns the contents of path, which must be a regular file
// of at most max bytes (else an error wrapping errDamaged), opened
// without blocking (a fifo would block open(2) and read(2)) and without
// following a final symlink.
func readRegular(path string, max int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%w: %s is a symlink", errDamaged, path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file (%s)", errDamaged, path, fi.Mode().Type())
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%w: %s holds %d bytes, over %d", errDamaged, path, fi.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s grew past %d bytes", errDamaged, path, max)
	}
	return b, nil
}

// writeJSON writes v to path atomically (temporary file and rename), on
// disk before the rename.
func writeJSON(path string, v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600, false)
}

// encodeJSON is v as the state files hold it: indented, a final newline.
func encodeJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}

// writeState writes a session's state.json, which every foreground
// command rewrites, atomically but without an fsync: a crash of the
// machine may leave it empty or zeroed, which loadState takes as damaged
// (moved aside, a note, the session starts afresh), never as a wedge;
// the fsync was a journal commit on every command, 1-3 ms on a busy disk.
func writeState(path string, st *State) error {
	b, err := encodeJSON(st)
	if err != nil {
		return err
	}
	if st.saved != nil && bytes.Equal(b, st.saved) {
		// Most commands change neither cwd nor variables; the file read
		// at the start (under the session's lock) already says this.
		return nil
	}
	if err := atomicfile.WriteUnsynced(path, b, 0o600); err != nil {
		return err
	}
	st.saved = b
	return nil
}

// LockDir takes the locks that the foreground commands of the session in
// directory dir (Session.Dir, Info.Dir) hold while they run and its
// background commands hold while their sandboxes start: flock(2) on
// dir/lock, then on dir/start.lock, waiting for a running command to end
// and a starting one to have started unless wait is false, when held
// reports true at once instead. Release them with the returned function.
// corral apply holds them so that it never changes the session's layer
// under a command, and finds every background command that has one
// (Background).
func LockDir(dir string, wait bool) (release func(), held bool, err error) {
	p, sp := filepath.Join(dir, "lock"), filepath.Join(dir, startLockName)
	var cmdRelease, startRelease func()
	if !wait {
		var ok bool
		if cmdRelease, ok = tryLock(p); !ok {
			if _, err := os.Stat(dir); err != nil {
				return nil, false, err
			}
			return nil, true, nil
		}
		if startRelease, ok = tryLock(sp); !ok {
			cmdRelease()
			return nil, true, nil
		}
		return func() { startRelease(); cmdRelease() }, false, nil
	}
	if cmdRelease, err = lockFile(p); err != nil {
		return nil, false, err
	}
	if startRelease, err = lockFile(sp); err != nil {
		cmdRelease()
		return nil, false, err
	}
	return func() { startRelease(); cmdRelease() }, false, nil
}
