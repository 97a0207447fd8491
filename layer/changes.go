package layer

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/dirlist"
)

// Kind says what a Change does to a path of Lower.
type Kind string

// The kinds of change.
const (
	// Added: Lower has nothing at the path, the layer has something.
	Added Kind = "added"
	// Modified: same type on both sides, other content (a file's bytes,
	// a symlink's target) or only other permission bits.
	Modified Kind = "modified"
	// Deleted: Lower has something, the layer deleted it (a whiteout, or
	// an opaque directory that does not hold it).
	Deleted Kind = "deleted"
	// TypeChanged: both sides have the path, with another type (file,
	// directory, symlink).
	TypeChanged Kind = "typechange"
)

// Side is one side of a Change.
type Side struct {
	// Type is "file", "dir", "symlink" or "other" (a special file).
	Type string
	// Special says what an "other" side is: "fifo", "socket", "character
	// device", "block device" or "special file" (inode(7)); else empty.
	Special string
	// Mode holds the permission bits (0o7777), Size a file's length in
	// bytes, Target a symlink's target.
	Mode   uint32
	Size   int64
	Target string
}

// Change is what the layer changes at one path relative to Lower.
type Change struct {
	// Path is relative to Lower, slash-separated.
	Path string
	Kind Kind
	// Old is Lower's side (nil when Added), New the layer's (nil when
	// Deleted).
	Old, New *Side
	// ContentChanged and ModeChanged say what a Modified change changes.
	ContentChanged, ModeChanged bool
	// Binary: a file side holds a NUL byte in its first 8 KB (git's
	// test, buffer_is_binary in xdiff-interface.c).
	Binary bool

	lower, upper string // the trees the sides are read from
}

// binarySniff is how much of a file the binary test reads, as git does.
const binarySniff = 8000

// Changes returns what the layer changes relative to Lower, in path
// order (cmpPath: component by component, a directory right before what
// it holds). paths filters the result: each is relative to Lower or
// absolute inside it, and selects itself and everything below; none
// selects all. A file the layer holds identical to Lower's (same type,
// bytes, mode) is no change. Directories appear as changes of their own
// (added, deleted, mode, type) besides the changes below them. It fails
// on a path outside Lower, and on a layer overlayfs made with redirect_dir
// (a renamed directory recorded by an overlay.redirect xattr), which this
// reading does not follow.
//
// The slice holds every selected change: Walk yields them one at a time
// instead, in memory that does not grow with their number.
func Changes(l *Layer, paths []string) ([]Change, error) {
	var out []Change
	for ch, err := range Walk(l, paths) {
		if err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// Walk yields the changes Changes returns, in the same order, one at a
// time, then stops; an error (a path outside Lower, a read failing, an
// overlay.redirect) is yielded once, with a zero Change, and ends it. It
// reads one directory at a time, beneath the layer's and Lower's roots
// without following symlinks: its memory is the names of the
// directories on the way to the change it yields (O(depth x largest
// directory)), not the number of changes. Changes between two reads of
// the layer's directories are seen or not, as with any walk.
func Walk(l *Layer, paths []string) iter.Seq2[Change, error] {
	return func(yield func(Change, error) bool) {
		sel, err := l.selection(paths)
		if err != nil {
			yield(Change{}, err)
			return
		}
		stopped := errors.New("stopped")
		err = l.walk(sel, func(ch Change) error {
			if !sel.match(ch.Path) {
				return nil
			}
			if !yield(ch, nil) {
				return stopped
			}
			return nil
		})
		if err != nil && err != stopped {
			yield(Change{}, err)
		}
	}
}

// walk calls fn with each change in path order that sel selects, and
// with those on the way to sel's paths (the directories above them),
// which the caller filters (Apply takes an added directory above a
// selected change with it). Subtrees sel cannot reach are not read.
func (l *Layer) walk(sel selection, fn func(Change) error) error {
	up, err := openTree(l.Upper())
	if err != nil {
		return fmt.Errorf("reading the layer: %w", err)
	}
	defer up.close()
	lo, err := openTree(l.Lower)
	if err != nil {
		return fmt.Errorf("reading the working directory: %w", err)
	}
	defer lo.close()
	lo.spill, up.spill = l.Dir, l.Dir
	c := &collector{l: l, up: up, lo: lo, sel: sel, fn: fn, head: make([]byte, binarySniff)}
	return c.dir("", false, false)
}

type collector struct {
	l      *Layer
	up, lo *tree
	sel    selection
	fn     func(Change) error
	head   []byte // the binary test's buffer, reused
}

// dir collects the changes of upper directory rel; hidden says Lower's
// directory at rel is not merged in (an opaque directory, or one that
// replaced a non-directory), so Lower's entries missing from upper are
// deleted; fresh says Lower has no directory at rel, so nothing below
// it is looked up there. Upper's and (when hidden) Lower's names are
// merged in order, so that the changes come out sorted without being
// kept.
//
// Each directory is opened once on each side, and its entries looked up
// beneath that descriptor (fstatat(2) of one name, never following it),
// rather than walked to from the root per entry.
func (c *collector) dir(rel string, hidden, fresh bool) error {
	upfd, err := c.up.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(upfd)
	names, err := dirlist.List(upfd, c.up.abs(rel), c.up.spill)
	if err != nil {
		return err
	}
	defer names.Close()
	lofd := -1
	if !fresh {
		// O_PATH: looking names up needs search permission only.
		if lofd, err = c.lo.open(rel, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
			return err
		}
		defer unix.Close(lofd)
	}
	lnames := &dirlist.Listing{}
	if hidden && !fresh {
		ln, err := c.lo.lstat(rel)
		if err != nil {
			return err
		}
		if ln != nil && ln.Type == "dir" {
			if lnames, err = c.lo.list(rel); err != nil {
				return err
			}
			defer lnames.Close()
		}
	}
	un, uok, err := names.Next()
	if err != nil {
		return err
	}
	lname, lok, err := lnames.Next()
	if err != nil {
		return err
	}
	for uok || lok {
		var name string
		inUpper, inLower := true, false
		switch {
		case !lok || uok && un < lname:
			name = un
		case !uok || lname < un:
			name, inUpper, inLower = lname, false, true
		default: // in both
			name, inLower = un, true
		}
		if inUpper {
			if un, uok, err = names.Next(); err != nil {
				return err
			}
		}
		if inLower {
			if lname, lok, err = lnames.Next(); err != nil {
				return err
			}
		}
		p := path.Join(rel, name)
		if !c.sel.visit(p) {
			continue
		}
		if !inUpper {
			err = c.deleted(p)
		} else {
			err = c.entry(p, upfd, lofd, name, hidden)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// entry collects the changes at rel, entry name of upper's directory
// upfd and of Lower's lofd (-1: Lower has no directory there).
func (c *collector) entry(rel string, upfd, lofd int, name string, parentHidden bool) error {
	un, err := lstatAt(upfd, name, c.up.abs(rel))
	if err != nil || un == nil {
		return err
	}
	var ln *node
	if lofd >= 0 {
		if ln, err = lstatAt(lofd, name, c.lo.abs(rel)); err != nil {
			return err
		}
	}
	if un.Type == "file" && un.Size == 0 && xattrWhiteout(upfd, name, c.up, rel) {
		un.Type = "whiteout" // an xattr whiteout (overlayfs.rst, "whiteouts and opaque directories")
	}
	switch un.Type {
	case "whiteout":
		if ln == nil {
			return nil
		}
		return c.deleted(rel)
	case "dir":
		if v, _, err := c.up.overlayXattr(rel, "redirect"); err != nil {
			return err
		} else if v != "" {
			return fmt.Errorf("%s: a directory renamed with overlayfs redirect_dir (overlay.redirect %q) is not supported", c.up.abs(rel), v)
		}
		op, _, err := c.up.opaque(rel)
		if err != nil {
			return err
		}
		switch {
		case ln == nil:
			if err := c.add(Change{Path: rel, Kind: Added, New: side(un)}); err != nil {
				return err
			}
			return c.dir(rel, false, true)
		case ln.Type != "dir":
			if err := c.add(Change{Path: rel, Kind: TypeChanged, Old: side(ln), New: side(un)}); err != nil {
				return err
			}
			return c.dir(rel, false, true)
		}
		if ln.Mode != un.Mode {
			if err := c.add(Change{Path: rel, Kind: Modified, Old: side(ln), New: side(un), ModeChanged: true}); err != nil {
				return err
			}
		}
		return c.dir(rel, op || parentHidden, false)
	}
	if ln == nil {
		ch := Change{Path: rel, Kind: Added, New: side(un)}
		if un.Type == "file" {
			head, err := readHeadAt(upfd, name, c.up.abs(rel), c.head)
			if err != nil {
				return err
			}
			ch.Binary = isBinary(head)
		}
		return c.add(ch)
	}
	if ln.Type != un.Type {
		ch := Change{Path: rel, Kind: TypeChanged, Old: side(ln), New: side(un)}
		for _, s := range []struct {
			t *tree
			n *node
		}{{c.lo, ln}, {c.up, un}} {
			if s.n.Type == "file" {
				b, err := c.binary(s.t, rel)
				if err != nil {
					return err
				}
				ch.Binary = ch.Binary || b
			}
		}
		if err := c.add(ch); err != nil {
			return err
		}
		if ln.Type == "dir" { // what Lower had below is gone with it
			return c.deletedBelow(rel)
		}
		return nil
	}
	ch := Change{Path: rel, Kind: Modified, Old: side(ln), New: side(un), ModeChanged: ln.Mode != un.Mode}
	switch un.Type {
	case "symlink":
		ch.ModeChanged = false // a symlink's mode means nothing (symlink(7))
		ch.ContentChanged = ln.Target != un.Target
	case "file":
		same, bin, err := c.sameFile(rel, ln, un)
		if err != nil {
			return err
		}
		ch.ContentChanged, ch.Binary = !same, bin
	}
	if ch.ContentChanged || ch.ModeChanged {
		return c.add(ch)
	}
	return nil
}

// deleted records Lower's rel and everything below it as deleted.
func (c *collector) deleted(rel string) error {
	ln, err := c.lo.lstat(rel)
	if err != nil || ln == nil {
		return err
	}
	ch := Change{Path: rel, Kind: Deleted, Old: side(ln)}
	if ln.Type == "file" {
		if ch.Binary, err = c.binary(c.lo, rel); err != nil {
			return err
		}
	}
	if err := c.add(ch); err != nil {
		return err
	}
	if ln.Type == "dir" {
		return c.deletedBelow(rel)
	}
	return nil
}

func (c *collector) deletedBelow(rel string) error {
	names, err := c.lo.list(rel)
	if err != nil {
		return err
	}
	return names.Each(func(n string) error {
		if p := path.Join(rel, n); c.sel.visit(p) {
			return c.deleted(p)
		}
		return nil
	})
}

func (c *collector) add(ch Change) error {
	ch.lower, ch.upper = c.l.Lower, c.l.Upper()
	return c.fn(ch)
}

// binary reads the head of file rel, as much as git's test looks at.
func (c *collector) binary(t *tree, rel string) (bool, error) {
	fd, err := t.open(rel, unix.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	b, err := readInto(fdFile(fd), c.head, t.abs(rel))
	return isBinary(b), err
}

// sameFile compares two regular files' bytes, streaming (files of other
// sizes differ unread); bin says either is binary.
func (c *collector) sameFile(rel string, ln, un *node) (same, bin bool, err error) {
	for _, t := range []*tree{c.lo, c.up} {
		b, err := c.binary(t, rel)
		if err != nil {
			return false, false, err
		}
		bin = bin || b
	}
	if ln.Size != un.Size {
		return false, bin, nil
	}
	same, err = sameContent(c.lo, rel, c.up, rel)
	return same, bin, err
}

func isBinary(b []byte) bool {
	if len(b) > binarySniff {
		b = b[:binarySniff]
	}
	return bytes.IndexByte(b, 0) >= 0
}

func side(n *node) *Side {
	t := n.Type
	if t == "whiteout" {
		t = "other"
	}
	return &Side{Type: t, Special: n.Special, Mode: n.Mode, Size: n.Size, Target: n.Target}
}

// selection is a set of slash paths relative to Lower; empty selects all.
type selection []string

// visit says whether a walk must read p: p is selected, or lies on the
// way to a selected path.
func (s selection) visit(p string) bool {
	if s.match(p) {
		return true
	}
	for _, q := range s {
		if strings.HasPrefix(q, p+"/") {
			return true
		}
	}
	return false
}

func (s selection) match(p string) bool {
	if len(s) == 0 {
		return true
	}
	for _, q := range s {
		if q == "" || p == q || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}

// selection turns user paths (relative to Lower, or absolute inside it)
// into slash paths relative to Lower. The check is lexical: the paths
// name entries of the layer, which are then only reached beneath Lower
// and upper by openat2.
func (l *Layer) selection(paths []string) (selection, error) {
	var out selection
	for _, p := range paths {
		q := filepath.Clean(p)
		if filepath.IsAbs(q) {
			r, err := filepath.Rel(l.Lower, q)
			if err != nil {
				return nil, err
			}
			q = r
		}
		if q == ".." || strings.HasPrefix(q, "../") {
			return nil, fmt.Errorf("%w: %s is outside %s", ErrOutside, p, l.Lower)
		}
		if q == "." {
			q = ""
		}
		out = append(out, filepath.ToSlash(q))
	}
	return out, nil
}

// ErrOutside means a path given to select changes is not inside Lower.
var ErrOutside = errors.New("path outside the working directory")

// xattrWhiteout says whether empty file name of upper's directory dirfd
// (rel in t) carries overlayfs's whiteout xattr. The file is opened
// (never following a symlink) and asked with fgetxattr(2): one call per
// prefix, where overlayXattr's O_PATH descriptor needs a lookup of
// /proc/self/fd/N for each, which costs more than the rest of a walk's
// look at an empty file; one that cannot be opened is asked that way.
func xattrWhiteout(dirfd int, name string, t *tree, rel string) bool {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		v, _, err := t.overlayXattr(rel, "whiteout")
		return err == nil && v != ""
	}
	defer unix.Close(fd)
	var buf [64]byte
	for _, pre := range xattrPrefixes {
		// A value is needed, as overlayXattr's callers need one.
		if n, err := unix.Fgetxattr(fd, pre+"whiteout", buf[:]); err == nil && n > 0 || errors.Is(err, unix.ERANGE) {
			return true
		}
	}
	return false
}
