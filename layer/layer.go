// Package layer is a session's copy-on-write layer over its working
// directory (the workspace_mode setting's "review"): the session's
// commands, background processes and file tools see the working directory
// as usual and may write to it, but every change lands in the layer, and
// the host's files stay as they were until a person applies them.
//
// On disk a layer is a directory of the session's (Dir):
//
//	upper/       an overlayfs upper directory (Documentation/filesystems/
//	             overlayfs.rst): the files the session made or changed,
//	             whiteouts (character devices 0/0) for what it deleted,
//	             directories marked opaque (xattr trusted.overlay.opaque or,
//	             for a mount made in a user namespace, user.overlay.opaque)
//	             that replaced one of the host's
//	work/        overlayfs's work directory (same filesystem as upper/)
//	base.json    what the working directory held when the layer was made
//	             (path, type, size, mode, mtime), so that apply can tell a
//	             file the host changed since from one it did not
//	generation   a counter that apply and discard raise: a mount built at
//	             an older generation is stale and rebuilt before the next
//	             command (overlayfs forbids changing layers under a live
//	             mount)
//
// The mount itself is the backends' (backend/bwrap: one overlay per
// session, held by a process of corral's, which every command's sandbox
// joins; backend/docker: an overlay volume the engine mounts as the
// session's container's workspace); this package only reads and writes
// the directories.
package layer

import (
	"errors"
	"fmt"
	"github.com/corralhq/corral/internal/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Layer is one session's layer: Dir holds it, Lower is the host working
// directory it lies over (absolute, clean).
type Layer struct {
	Dir   string
	Lower string
}

// New returns the layer in dir over lower; nothing is read or made.
func New(dir, lower string) *Layer {
	return &Layer{Dir: filepath.Clean(dir), Lower: filepath.Clean(lower)}
}

// Open returns the layer that Ensure made in dir, over the working
// directory recorded there. It fails with ErrNoLayer when dir holds no
// layer (a session whose workspace_mode is direct).
func Open(dir string) (*Layer, error) {
	b, err := os.ReadFile(filepath.Join(dir, "lower"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s", ErrNoLayer, dir)
	}
	if err != nil {
		return nil, err
	}
	l := New(dir, strings.TrimSpace(string(b)))
	if _, err := os.Stat(l.BasePath()); err != nil {
		return nil, fmt.Errorf("%w in %s (no base manifest: %v)", ErrNoLayer, dir, err)
	}
	return l, nil
}

// ErrNoLayer means a directory holds no layer.
var ErrNoLayer = errors.New("no layer")

// Upper returns the overlayfs upper directory.
func (l *Layer) Upper() string { return filepath.Join(l.Dir, "upper") }

// Work returns the overlayfs work directory.
func (l *Layer) Work() string { return filepath.Join(l.Dir, "work") }

// BasePath returns the path of the base manifest.
func (l *Layer) BasePath() string { return filepath.Join(l.Dir, "base.json") }

func (l *Layer) generationPath() string { return filepath.Join(l.Dir, "generation") }

// lowerPath records which working directory the layer lies over: a layer
// is never put over another directory than the one it was made for.
func (l *Layer) lowerPath() string { return filepath.Join(l.Dir, "lower") }

// Entry is what base.json records of one path of the working directory
// when the layer was made.
type Entry struct {
	// Path is relative to Lower, slash-separated.
	Path string `json:"path"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	// Size in bytes, Mode the permission bits, MTime in nanoseconds since
	// the epoch (lstat(2)); Target a symlink's target.
	Size   int64  `json:"size,omitempty"`
	Mode   uint32 `json:"mode"`
	MTime  int64  `json:"mtime"`
	Target string `json:"target,omitempty"`
}

// Ensure makes the layer's directories (0700) and records its base when
// they do not exist yet; an existing layer is left as it is. It fails when
// the layer was made over another working directory (ErrOtherLower), and
// when upper and work cannot be made on one filesystem.
func (l *Layer) Ensure() error {
	if err := l.checkApart(); err != nil {
		return err
	}
	if b, err := os.ReadFile(l.lowerPath()); err == nil {
		if got := strings.TrimSpace(string(b)); got != l.Lower {
			return fmt.Errorf("%w: the layer in %s lies over %s, not %s", ErrOtherLower, l.Dir, got, l.Lower)
		}
		if _, err := os.Stat(l.BasePath()); err == nil {
			return nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, d := range []string{l.Dir, l.Upper(), l.Work()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("making the layer: %w", err)
		}
	}
	// overlayfs takes the merged root's attributes from upper's root: the
	// session must see the working directory's own mode, not 0700 (the
	// layer's directory, 0700, keeps others out).
	if fi, err := os.Stat(l.Lower); err == nil {
		if err := os.Chmod(l.Upper(), fi.Mode().Perm()); err != nil {
			return fmt.Errorf("making the layer: %w", err)
		}
	}
	var a, b syscall.Stat_t
	if syscall.Stat(l.Upper(), &a) == nil && syscall.Stat(l.Work(), &b) == nil && a.Dev != b.Dev {
		return fmt.Errorf("making the layer: %s and %s are on different filesystems", l.Upper(), l.Work())
	}
	if err := writeAtomic(l.lowerPath(), []byte(l.Lower+"\n")); err != nil {
		return err
	}
	// Written as it is read: memory does not grow with Lower's size.
	w, err := l.newBaseWriter()
	if err != nil {
		return err
	}
	if err := scanTo(l.Lower, l.Dir, w.put); err != nil {
		w.abort()
		return fmt.Errorf("recording what %s holds: %w", l.Lower, err)
	}
	return w.commit()
}

// ErrInsideLower means the layer's directory lies inside the working
// directory it would lie over (corral's state directory is in the
// working directory, as with a working directory of $HOME): overlayfs
// refuses layers that overlap (ELOOP, "overlapping upperdir path";
// Documentation/filesystems/overlayfs.rst), and the layer would review
// itself.
var ErrInsideLower = errors.New("the session's layer lies inside the working directory")

// checkApart fails with ErrInsideLower, naming the fix, when Dir is Lower
// or below it (symlinks resolved where they exist).
func (l *Layer) checkApart() error {
	real := func(p string) string {
		// The layer's directory may not exist yet: resolve its parent.
		for q, rest := p, ""; q != "/" && q != "."; q, rest = filepath.Dir(q), filepath.Join(filepath.Base(q), rest) {
			if r, err := filepath.EvalSymlinks(q); err == nil {
				return filepath.Join(r, rest)
			}
		}
		return p
	}
	dir, lower := real(l.Dir), real(l.Lower)
	if dir == lower || strings.HasPrefix(dir, lower+"/") || lower == "/" {
		return fmt.Errorf("%w: the layer %s is in %s, whose changes it would hold: give corral a state directory outside the working directory (XDG_STATE_HOME), or work in a narrower directory", ErrInsideLower, l.Dir, l.Lower)
	}
	return nil
}

// ErrOtherLower means a layer directory belongs to another working
// directory.
var ErrOtherLower = errors.New("layer made over another working directory")

// Scan returns what dir holds, every path below it (not following
// symlinks), in path order (a directory right before what it holds, each
// directory's names sorted).
func Scan(dir string) ([]Entry, error) {
	var out []Entry
	err := scanTo(dir, "", func(e Entry) error { out = append(out, e); return nil })
	return out, err
}

// Generation returns the layer's generation (0 before the first apply or
// discard).
func (l *Layer) Generation() (int64, error) {
	b, err := os.ReadFile(l.generationPath())
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// Bump raises the generation, so that a mount built before is rebuilt.
func (l *Layer) Bump() error {
	g, err := l.Generation()
	if err != nil {
		return err
	}
	return writeAtomic(l.generationPath(), []byte(strconv.FormatInt(g+1, 10)+"\n"))
}

// writeAtomic writes data to p (0600) through a synced temporary file
// renamed over it (atomicfile.Write).
func writeAtomic(p string, data []byte) error { return atomicfile.Write(p, data, 0o600, false) }
