package layer

// The tree writer: a layer opened for writing (trees), through which
// Apply's plan is carried out on Lower and upper. Every step goes through
// a directory descriptor and openat2 beneath the tree (RESOLVE_BENEATH,
// RESOLVE_NO_SYMLINKS), never a path resolved from the root, so that what
// the sandbox made of either tree cannot lead a write outside it. What to
// write, and whether it may be written, is apply.go's.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/internal/sparse"
)

// trees is a layer opened for writing: Lower and upper.
type trees struct {
	lo, up *tree
	root   bool   // the process is root: new entries get their directory's owner
	prefix string // the overlay xattr prefix the layer's mount uses

	// token names this apply's temporary files (journal.Token); temps
	// counts them.
	token string
	temps int
	// lodirs and updirs cache descriptors of Lower's and upper's
	// directories, so that a directory of many files is walked to once;
	// isDir holds paths of Lower known to be directories.
	lodirs, updirs *dirCache
	isDir          dirSet
	// opaqueAt caches, during prune, whether an upper directory is
	// opaque (nil: not cached), at most maxOpaqueCache of them.
	opaqueAt map[string]bool
}

// maxOpaqueCache bounds trees.opaqueAt: paths come in order, so the
// directories asked of recently are those asked of next.
const maxOpaqueCache = 4096

// dirSet is a set of directories of Lower known to exist: the chain
// above the path being written (a passes go through paths in order, so
// what lies beside the chain is not asked of again), so that it holds
// the depth of one path, whatever the number.
type dirSet []string

func (d dirSet) has(p string) bool { return slices.Contains(d, p) }

// add notes directory p, dropping what does not lie above it.
func (d *dirSet) add(p string) {
	s := *d
	for len(s) > 0 && !isUnder(p, s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	if len(s) == 0 || s[len(s)-1] != p {
		s = append(s, p)
	}
	*d = s
}

// forget drops rel and what lies below it ("": all).
func (d *dirSet) forget(rel string) {
	*d = slices.DeleteFunc(*d, func(p string) bool { return rel == "" || isUnder(p, rel) })
}

// mergedFile is a merge's result: the bytes (or, fromUpper, the layer's
// file as it is) and the permission bits.
type mergedFile struct {
	data      []byte
	fromUpper bool
	mode      uint32
}

// mergeMaxSize bounds, in bytes, the files a merge reads into memory
// (the host's, the layer's and git's base): larger ones stay conflicts.
const mergeMaxSize = 8 << 20

// writeUpper replaces the layer's file rel, atomically, keeping its
// owner, by the merge in spool file from (with mode); from "" changes
// only its mode (a merge that takes the layer's file as it is).
func (s *trees) writeUpper(rel, from string, mode uint32) error {
	cur, err := s.up.lstat(rel)
	if err != nil {
		return err
	}
	if cur == nil || cur.Type != "file" {
		return fmt.Errorf("%s is no longer a file in the layer", handback.QuotePath(rel))
	}
	if from == "" {
		return s.chmod(s.up, rel, mode)
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	pfd, base, err := s.up.parentDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	uid, gid := -1, -1
	if s.root {
		uid, gid = int(cur.UID), int(cur.GID)
	}
	tmp := s.tempName()
	if _, err := copyTo(in, pfd, tmp, mode, uid, gid, true); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return err
	}
	if err := unix.Renameat(pfd, tmp, pfd, base); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return &os.PathError{Op: "rename", Path: s.up.abs(rel), Err: err}
	}
	return nil
}

// mergeable says whether a conflict can be merged: a file both sides
// modified (a type change, an addition or a deletion cannot).
func mergeable(ch Change, cur *node) bool {
	return ch.Kind == Modified && ch.ContentChanged && ch.Old != nil && ch.New != nil &&
		ch.Old.Type == "file" && ch.New.Type == "file" && cur != nil && cur.Type == "file"
}

// merge merges Lower's file cur and the layer's at ch.Path over the base
// e (mergeFile). The result keeps the host's permission bits unless the
// session changed them.
func (s *trees) merge(lower string, ch Change, cur *node, e *Entry) (mergedFile, error) {
	if repo, ok := gitIndexOf(ch.Path); ok {
		// A repository's index: the session's commits and staging, against
		// an index the host's git rewrote (git status refreshes it).
		if err := hostIndexClean(lower, repo); err != nil {
			return mergedFile{}, err
		}
		return mergedFile{fromUpper: true, mode: cur.Mode & 0o7777}, nil
	}
	if cur.Size > mergeMaxSize || ch.New.Size > mergeMaxSize {
		return mergedFile{}, fmt.Errorf("%w (over %d MiB: too large to merge)", ErrMergeConflict, mergeMaxSize>>20)
	}
	ours, err := s.lo.readFile(ch.Path)
	if err != nil {
		return mergedFile{}, err
	}
	theirs, err := s.up.readFile(ch.Path)
	if err != nil {
		return mergedFile{}, err
	}
	data, err := mergeFile(lower, ch.Path, e, ours, theirs)
	if err != nil {
		return mergedFile{}, err
	}
	mode := cur.Mode & 0o7777
	if ch.ModeChanged {
		mode = ch.New.Mode
	}
	return mergedFile{data: data, mode: mode}, nil
}

// owner returns the owner a new or replaced entry of Lower gets (-1: the
// process's): as root, a replaced entry's own, else its directory's.
func (s *trees) owner(cur *node, dir dirEnt, typ string) (int, int) {
	if !s.root {
		return -1, -1
	}
	if cur != nil && cur.Type == typ {
		return int(cur.UID), int(cur.GID)
	}
	return int(dir.uid), int(dir.gid)
}

// source opens what journal entry e writes at a file: the merge the
// plan names (e.Merge), or the layer's file; with the mode it gets.
func (s *trees) source(e journalEntry) (io.ReadCloser, uint32, error) {
	if e.Merge != "" {
		f, err := os.Open(e.Merge)
		return f, e.Mode, err
	}
	dir, base := splitRel(e.Path)
	d, err := s.updirs.get(dir)
	if err != nil {
		return nil, 0, err
	}
	fd, err := unix.Openat(d.fd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: s.up.abs(e.Path), Err: err}
	}
	return fdCloser(fd), e.Mode, nil
}

// fdCloser is an fdFile that closes.
type fdCloser int

func (f fdCloser) Read(b []byte) (int, error) { return fdFile(f).Read(b) }
func (f fdCloser) Close() error               { return unix.Close(int(f)) }

// stage reads the plan and writes the journal: each file's new content
// goes into a temporary file beside it in Lower (making the directories
// the layer adds on the way), named in its entry with its hash; it
// fsyncs nothing (Apply syncs each filesystem once). A file Lower
// already holds (Done), or whose way Lower blocks with another type (the
// layer turned a file into a directory), is only hashed here, and the
// latter written by writeEntry after the directory.
func (s *trees) stage(plan string, j *journalWriter) error {
	return readSpool(plan, false, func(e journalEntry) error {
		if e.Type == "file" {
			if err := s.stageFile(&e); err != nil {
				return err
			}
		}
		e.Merged = false
		e.Merge = "" // the merge is in the layer by the time writeEntry reads it
		return j.w.put(e)
	})
}

func (s *trees) stageFile(e *journalEntry) error {
	clear, err := s.clearWay(path.Dir(e.Path))
	if err != nil {
		return err
	}
	if e.Done || !clear {
		in, _, err := s.source(*e)
		if err != nil {
			return err
		}
		h := sha256.New()
		buf := copyBufs.Get().(*[]byte)
		_, err = io.CopyBuffer(h, in, *buf)
		copyBufs.Put(buf)
		in.Close()
		if err != nil {
			return err
		}
		e.SHA256 = hex.EncodeToString(h.Sum(nil))
		return nil
	}
	d, _, cur, err := s.placeOf(e.Path)
	if err != nil {
		return err
	}
	pfd := d.fd
	uid, gid := s.owner(cur, d, "file")
	in, mode, err := s.source(*e)
	if err != nil {
		return err
	}
	tmp := s.tempName()
	e.SHA256, err = copyTo(in, pfd, tmp, mode, uid, gid, false)
	in.Close()
	if err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return err
	}
	e.Tmp = tmp
	return nil
}

// clearWay says whether every directory on the way to dir in Lower is a
// directory or missing (stage may make it), not another type.
func (s *trees) clearWay(dir string) (bool, error) {
	for d := dir; d != "." && d != ""; d = path.Dir(d) {
		if s.isDir.has(d) {
			return true, nil
		}
		cur, err := s.lo.lstat(d)
		if err != nil {
			return false, err
		}
		if cur == nil {
			continue
		}
		if cur.Type != "dir" {
			return false, nil
		}
		s.isDir.add(d)
		return true, nil
	}
	return true, nil
}

// splitRel splits slash path rel into its directory ("." at the top)
// and last component.
func splitRel(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

// dirCache keeps open descriptors of a tree's directories by path (at
// most maxCachedDirs; all are closed when it is full), with their owner.
// Whoever removes or replaces a directory forgets it first.
type dirCache struct {
	t     *tree
	flags int
	ents  map[string]dirEnt
	// devs, when not nil, gets one descriptor (a dup, O_RDONLY) per
	// filesystem the cached directories lie on, for syncfs(2).
	devs map[uint64]int
}

// dirEnt is a cached directory: its descriptor and owner.
type dirEnt struct {
	fd       int
	uid, gid uint32
}

func newDirCache(t *tree, flags int, devs bool) *dirCache {
	c := &dirCache{t: t, flags: flags, ents: map[string]dirEnt{}}
	if devs {
		c.devs = map[uint64]int{}
	}
	return c
}

// maxCachedDirs bounds the descriptors a dirCache keeps open.
const maxCachedDirs = 256

// get returns directory dir ("." the root), opened beneath the tree; the
// descriptor stays the cache's.
func (c *dirCache) get(dir string) (dirEnt, error) {
	if e, ok := c.ents[dir]; ok {
		return e, nil
	}
	if len(c.ents) >= maxCachedDirs {
		c.forget("")
	}
	fd, err := c.t.open(dir, c.flags|unix.O_DIRECTORY, 0)
	if err != nil {
		return dirEnt{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return dirEnt{}, err
	}
	if _, ok := c.devs[st.Dev]; !ok && c.devs != nil {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			unix.Close(fd)
			return dirEnt{}, err
		}
		c.devs[st.Dev] = d
	}
	e := dirEnt{fd: fd, uid: st.Uid, gid: st.Gid}
	c.ents[dir] = e
	return e, nil
}

// forget closes the cached descriptors of rel and below ("": all).
func (c *dirCache) forget(rel string) {
	for d, e := range c.ents {
		if rel == "" || d == rel || strings.HasPrefix(d, rel+"/") {
			unix.Close(e.fd)
			delete(c.ents, d)
		}
	}
}

func (c *dirCache) close() {
	c.forget("")
	for _, fd := range c.devs {
		unix.Close(fd)
	}
}

// dirFD returns Lower's directory dir from the cache, noted as a
// directory.
func (s *trees) dirFD(dir string) (dirEnt, error) {
	e, err := s.lodirs.get(dir)
	if err == nil {
		s.isDir.add(dir)
	}
	return e, err
}

// loStat is Lower's rel, looked up in its cached directory (nil when it
// or its directory is missing).
func (s *trees) loStat(rel string) (*node, error) {
	dir, base := splitRel(rel)
	e, err := s.lodirs.get(dir)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return lstatAt(e.fd, base, s.lo.abs(rel))
}

// forget drops what is cached of Lower's rel and below ("": all), before
// rel is removed or replaced.
func (s *trees) forget(rel string) {
	s.lodirs.forget(rel)
	s.isDir.forget(rel)
}

// syncLower flushes the filesystems of the directories written so far
// (syncfs(2)): their files' data and the directories' entries.
func (s *trees) syncLower() error {
	for _, fd := range s.lodirs.devs {
		if err := unix.Syncfs(fd); err != nil {
			return &os.PathError{Op: "syncfs", Path: s.lo.root, Err: err}
		}
	}
	return nil
}

// lstatAt returns entry name of directory pfd (nil when missing); abs
// names it in errors.
// placeOf makes path's parent directory in Lower when missing and
// returns it, path's last component, and what Lower holds at path now
// (lstatAt): what staging and writing an entry both start from.
func (s *trees) placeOf(path string) (d dirEnt, base string, cur *node, err error) {
	dir, base := splitRel(path)
	if err := s.mkdirs(dir); err != nil {
		return dirEnt{}, "", nil, err
	}
	if d, err = s.dirFD(dir); err != nil {
		return dirEnt{}, "", nil, err
	}
	cur, err = lstatAt(d.fd, base, s.lo.abs(path))
	return d, base, cur, err
}

func lstatAt(pfd int, name, abs string) (*node, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, &os.PathError{Op: "lstat", Path: abs, Err: err}
	}
	n := nodeOf(&st, "")
	if n.Type == "symlink" {
		buf := make([]byte, unix.PathMax)
		k, err := unix.Readlinkat(pfd, name, buf)
		if err != nil {
			return nil, &os.PathError{Op: "readlink", Path: abs, Err: err}
		}
		n.Target = string(buf[:k])
	}
	return n, nil
}

// unstage removes the temporary files the journal at p names from its
// entry from on (counting from 0): those staged and not renamed into
// place. A missing one is no error: it was renamed, or never made.
func (s *trees) unstage(p string, from int) {
	i := 0
	readJournalFile(p, func(e journalEntry) error {
		if i++; i > from && e.Tmp != "" {
			if d, err := s.dirFD(path.Dir(e.Path)); err == nil {
				unix.Unlinkat(d.fd, e.Tmp, 0)
			}
		}
		return nil
	})
}

func (l *Layer) open() (*trees, error) {
	up, err := openTree(l.Upper())
	if err != nil {
		return nil, fmt.Errorf("opening the layer: %w", err)
	}
	lo, err := openTree(l.Lower)
	if err != nil {
		up.close()
		return nil, fmt.Errorf("opening the working directory: %w", err)
	}
	lo.spill, up.spill = l.Dir, l.Dir
	return &trees{lo: lo, up: up, root: os.Geteuid() == 0, prefix: xattrPrefixes[0],
		lodirs: newDirCache(lo, unix.O_RDONLY, true), updirs: newDirCache(up, unix.O_PATH, false)}, nil
}

func (s *trees) close() {
	s.lodirs.close()
	s.updirs.close()
	s.lo.close()
	s.up.close()
}

// holds says whether Lower's entry cur already is what change ch makes
// it: an earlier, interrupted apply wrote it.
func (s *trees) holds(ch Change, cur *node) (bool, error) {
	if ch.New == nil {
		return cur == nil, nil
	}
	if cur == nil || cur.Type != ch.New.Type {
		return false, nil
	}
	switch cur.Type {
	case "dir":
		return cur.Mode == ch.New.Mode, nil
	case "symlink":
		return cur.Target == ch.New.Target, nil
	case "file":
		if cur.Mode != ch.New.Mode || cur.Size != ch.New.Size {
			return false, nil
		}
		return sameContent(s.lo, ch.Path, s.up, ch.Path)
	}
	return false, nil
}

// write makes Lower's entry at ch.Path what the layer has.
func (s *trees) write(ch Change) error {
	return s.writeEntry(planEntry(ch))
}

// writeEntry makes Lower's entry at e.Path what journal entry e says:
// its staged temporary file (e.Tmp) renamed into place, or the layer's
// entry written now.
func (s *trees) writeEntry(e journalEntry) error {
	if e.Type == "" {
		s.forget(e.Path)
		return s.lo.removeAll(e.Path)
	}
	d, base, cur, err := s.placeOf(e.Path)
	if err != nil {
		return err
	}
	pfd := d.fd
	uid, gid := s.owner(cur, d, e.Type)
	if e.Type == "dir" {
		if cur != nil && cur.Type == "dir" {
			return s.chmod(s.lo, e.Path, e.Mode)
		}
		if cur != nil {
			if err := s.lo.removeAll(e.Path); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(pfd, base, e.Mode&0o777); err != nil {
			return &os.PathError{Op: "mkdir", Path: s.lo.abs(e.Path), Err: err}
		}
		if uid >= 0 {
			if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
		}
		s.isDir.add(e.Path)
		// The umask, a setgid parent or chown may have changed the bits.
		if now, err := lstatAt(pfd, base, s.lo.abs(e.Path)); err != nil || now == nil || now.Mode != e.Mode || uid >= 0 {
			return s.chmod(s.lo, e.Path, e.Mode)
		}
		return nil
	}
	if cur != nil && cur.Type == "dir" { // a type change: rename cannot replace a directory
		s.forget(e.Path)
		if err := s.lo.removeAll(e.Path); err != nil {
			return err
		}
	}
	tmp := ""
	switch e.Type {
	case "symlink":
		tmp = s.tempName()
		if err := unix.Symlinkat(e.Target, pfd, tmp); err != nil {
			return &os.PathError{Op: "symlink", Path: s.lo.abs(e.Path), Err: err}
		}
		if uid >= 0 {
			unix.Fchownat(pfd, tmp, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		}
	case "file":
		if e.Tmp != "" {
			tmp = e.Tmp
			break
		}
		in, mode, err := s.source(e)
		if err != nil {
			return err
		}
		tmp = s.tempName()
		_, err = copyTo(in, pfd, tmp, mode, uid, gid, true)
		in.Close()
		if err != nil {
			unix.Unlinkat(pfd, tmp, 0)
			return err
		}
	default:
		return fmt.Errorf("%s: cannot apply %s", handback.QuotePath(s.lo.abs(e.Path)), article(""))
	}
	if err := unix.Renameat(pfd, tmp, pfd, base); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return &os.PathError{Op: "rename", Path: s.lo.abs(e.Path), Err: err}
	}
	return nil
}

// article puts "a" or "an" before a special file's kind.
func article(kind string) string {
	if kind == "" {
		kind = "special file"
	}
	return "a " + kind
}

// copyTo copies in into a new file tmp of directory pfd, with mode and
// (uid >= 0) owner, fsynced when sync; it returns the SHA-256 (hex) of
// what it wrote. It streams: memory does not grow with the file. Blocks
// of zeros become holes (internal/sparse): a sparse file in the layer
// (`truncate -s 100G` takes no disk there) takes no more disk on the host.
func copyTo(in io.Reader, pfd int, tmp string, mode uint32, uid, gid int, sync bool) (string, error) {
	// Made with its final permission bits (it holds what the file will):
	// an fchmod(2) is needed only for bits mkdir's umask or chown take.
	dst, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode&0o777)
	if err != nil {
		return "", &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	h := sha256.New()
	buf := copyBufs.Get().(*[]byte)
	sw := sparse.NewWriter(fdFile(dst))
	_, err = io.CopyBuffer(io.MultiWriter(sw, h), in, *buf)
	copyBufs.Put(buf)
	if err == nil {
		err = sw.Finish()
	}
	if err == nil && uid >= 0 {
		err = unix.Fchown(dst, uid, gid)
	}
	if err == nil && (mode&^0o777 != 0 || mode&processUmask() != 0) {
		err = unix.Fchmod(dst, mode) // after chown, which clears setuid bits
	}
	if err == nil && sync {
		err = unix.Fsync(dst)
	}
	if err != nil {
		err = &os.PathError{Op: "write", Path: tmp, Err: err}
	}
	return hex.EncodeToString(h.Sum(nil)), errors.Join(err, unix.Close(dst))
}

// processUmask is the process's umask, read from /proc/self/status
// (umask(2) reads it only by changing it, which would race other
// threads' creations); 0o777 when unknown, so that every file is
// chmodded.
var processUmask = sync.OnceValue(func() uint32 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(m)
			}
		}
	}
	return 0o777
})

// copyBufs holds copyTo's buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

// tempPrefix starts the names of Apply's temporary files; the journal's
// token and a counter follow.
const tempPrefix = ".corral-apply-"

func (s *trees) tempName() string {
	s.temps++
	return fmt.Sprintf("%s%s-%d", tempPrefix, s.token, s.temps)
}

// mkdirs makes the directories of Lower on the way to dir that are
// missing, with the layer's modes.
func (s *trees) mkdirs(dir string) error {
	if dir == "." || dir == "" || s.isDir.has(dir) {
		return nil
	}
	cur, err := s.lo.lstat(dir)
	if err != nil {
		return err
	}
	if cur != nil {
		if cur.Type != "dir" {
			return fmt.Errorf("%s is not a directory", handback.QuotePath(s.lo.abs(dir)))
		}
		s.isDir.add(dir)
		return nil
	}
	if err := s.mkdirs(path.Dir(dir)); err != nil {
		return err
	}
	un, err := s.up.lstat(dir)
	if err != nil {
		return err
	}
	mode := uint32(0o755)
	if un != nil && un.Type == "dir" {
		mode = un.Mode
	}
	return s.write(Change{Path: dir, Kind: Added, New: &Side{Type: "dir", Mode: mode}})
}

// chmod sets the mode of directory or file rel of t through a descriptor,
// so that a symlink is never followed.
func (s *trees) chmod(t *tree, rel string, mode uint32) error {
	fd, err := t.open(rel, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, mode); err != nil {
		return &os.PathError{Op: "chmod", Path: t.abs(rel), Err: err}
	}
	return nil
}

// parentDir opens rel's parent directory for reading (so that it can be
// fsynced) and returns it with rel's last component.
func (t *tree) parentDir(rel string) (int, string, error) {
	dir, base := path.Split(rel)
	fd, err := t.open(strings.TrimSuffix(dir, "/"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	return fd, base, err
}

// hidden says whether a directory above rel in upper is opaque, so that
// Lower's entries at rel do not show through.
func (s *trees) hidden(rel string) (bool, error) {
	for a := path.Dir(rel); a != "."; a = path.Dir(a) {
		if op, ok := s.opaqueAt[a]; ok {
			if op {
				return true, nil
			}
			continue
		}
		op, err := s.opaqueDir(a)
		if err != nil || op {
			return op, err
		}
	}
	return false, nil
}

// opaqueDir says whether upper's a is an opaque directory, cached in
// opaqueAt during prune.
func (s *trees) opaqueDir(a string) (op bool, err error) {
	defer func() {
		if err == nil && s.opaqueAt != nil {
			if len(s.opaqueAt) >= maxOpaqueCache {
				clear(s.opaqueAt)
			}
			s.opaqueAt[a] = op
		}
	}()
	n, err := s.up.lstat(a)
	if err != nil || n == nil || n.Type != "dir" {
		return false, err
	}
	op, _, err = s.up.opaque(a)
	return op, err
}

// unwhiteout makes Lower's rel show again where a whiteout hides it or a
// directory above it: a whiteout of rel is removed, a whiteout of a
// directory above becomes an opaque directory (the rest stays deleted).
func (s *trees) unwhiteout(rel string) error {
	var chain []string
	for a := rel; a != "."; a = path.Dir(a) {
		chain = append([]string{a}, chain...)
	}
	for _, a := range chain {
		n, err := s.up.lstat(a)
		if err != nil {
			return err
		}
		if n == nil || n.Type != "whiteout" {
			continue
		}
		if err := s.up.removeAll(a); err != nil {
			return err
		}
		if a == rel {
			return nil
		}
		ln, err := s.lo.lstat(a)
		if err != nil {
			return err
		}
		pfd, base, err := s.up.parent(a)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(pfd, base, ln.Mode&0o7777)
		unix.Close(pfd)
		if err != nil {
			return &os.PathError{Op: "mkdir", Path: s.up.abs(a), Err: err}
		}
		if err := s.up.setOverlayXattr(a, s.prefix, "opaque", "y"); err != nil {
			return fmt.Errorf("marking %s opaque: %w", handback.QuotePath(s.up.abs(a)), err)
		}
	}
	return nil
}

// unopaque takes the opaque mark off upper's directory p when upper
// holds every name Lower's does (so the mark hides nothing), marking
// opaque instead each of its subdirectories that has one in Lower too;
// else it keeps p as it is. pre is the xattr prefix p's mark has. Upper's
// and Lower's listings are merged in order: memory stays bounded however
// many names they hold.
func (s *trees) unopaque(p, pre string) (pruned, error) {
	unames, err := s.up.list(p)
	if err != nil {
		return kept, err
	}
	defer unames.Close()
	lnames, err := s.lo.list(p)
	if err != nil {
		return kept, err
	}
	defer lnames.Close()
	un, uok, err := unames.Next()
	for err == nil {
		var ln string
		var lok bool
		if ln, lok, err = lnames.Next(); err != nil || !lok {
			break
		}
		for err == nil && uok && un < ln {
			un, uok, err = unames.Next()
		}
		if err == nil && (!uok || un != ln) {
			return kept, nil // Lower has a name upper does not: the mark hides it
		}
	}
	if err != nil {
		return kept, err
	}
	unames.Close()
	if unames, err = s.up.list(p); err != nil {
		return kept, err
	}
	err = unames.Each(func(n string) error {
		c := path.Join(p, n)
		cu, err := s.up.lstat(c)
		if err != nil {
			return err
		}
		cl, err := s.lo.lstat(c)
		if err != nil {
			return err
		}
		if cu != nil && cu.Type == "dir" && cl != nil && cl.Type == "dir" {
			if err := s.up.setOverlayXattr(c, pre, "opaque", "y"); err != nil {
				return fmt.Errorf("marking %s opaque: %w", handback.QuotePath(s.up.abs(c)), err)
			}
		}
		return nil
	})
	if err != nil {
		return kept, err
	}
	return unopaqued, s.up.removeOverlayXattr(p, "opaque")
}

// copyIn copies Lower's rel (a directory with all it holds) into upper.
func (s *trees) copyIn(rel string) error {
	ln, err := s.lo.lstat(rel)
	if err != nil || ln == nil {
		return err
	}
	pfd, base, err := s.up.parentDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	switch ln.Type {
	case "dir":
		if err := unix.Mkdirat(pfd, base, ln.Mode&0o7777); err != nil {
			return &os.PathError{Op: "mkdir", Path: s.up.abs(rel), Err: err}
		}
		names, err := s.lo.list(rel)
		if err != nil {
			return err
		}
		return names.Each(func(n string) error { return s.copyIn(path.Join(rel, n)) })
	case "symlink":
		return unix.Symlinkat(ln.Target, pfd, base)
	case "file":
		fd, err := s.lo.open(rel, unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		in := os.NewFile(uintptr(fd), s.lo.abs(rel))
		defer in.Close()
		_, err = copyTo(in, pfd, base, ln.Mode, -1, -1, false)
		return err
	}
	return fmt.Errorf("%s: cannot copy a special file into the layer", handback.QuotePath(s.lo.abs(rel)))
}

func (s *trees) pruneOne(p string) (pruned, error) {
	un, err := s.up.lstat(p)
	if err != nil || un == nil {
		return kept, err
	}
	ln, err := s.lo.lstat(p)
	if err != nil {
		return kept, err
	}
	if un.Type == "whiteout" {
		if ln != nil {
			return kept, nil
		}
		return removed, s.up.removeAll(p)
	}
	hidden, err := s.hidden(p)
	if err != nil || ln == nil || ln.Type != un.Type {
		return kept, err
	}
	switch un.Type {
	case "file", "symlink":
		if hidden {
			return kept, nil
		}
		same, err := s.holds(Change{Path: p, New: side(un)}, ln)
		if err != nil || !same {
			return kept, err
		}
		return removed, s.up.removeAll(p)
	case "dir":
		op, pre, err := s.up.opaque(p)
		if err != nil {
			return kept, err
		}
		if op {
			return s.unopaque(p, pre)
		}
		empty, err := s.up.empty(p)
		if err != nil {
			return kept, err
		}
		if hidden || !empty || un.Mode != ln.Mode {
			return kept, nil
		}
		s.updirs.forget(p)
		return removed, s.up.removeAll(p)
	}
	return kept, nil
}
