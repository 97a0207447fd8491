package layer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/dirlist"
)

// tree is a directory (Lower or upper) whose entries are reached by
// relative slash paths without ever following a symlink: every open goes
// through openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so a
// symlink planted by the session (in upper) or on the host (in Lower) is
// read and written as a symlink, never through.
type tree struct {
	fd    int // O_PATH|O_DIRECTORY
	root  string
	spill string // where listings of big directories sort their names ("": os.TempDir)
}

func openTree(dir string) (*tree, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &tree{fd: fd, root: dir}, nil
}

func (t *tree) close() { unix.Close(t.fd) }

// open opens rel (slash path, "" or "." for the root) beneath the tree.
// A symlink in any component, the last included, fails with ELOOP.
func (t *tree) open(rel string, flags int, mode uint32) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	if flags&unix.O_CREAT == 0 {
		how.Mode = 0
	}
	// A path longer than PATH_MAX (a session can nest directories past
	// it) is refused by any one call (ENAMETOOLONG): it is opened as a
	// chain, each link a directory opened beneath the one before with the
	// same resolve flags, so the chain is as confined as one call.
	dirfd, held, walked := t.fd, -1, 0
	defer func() {
		if held >= 0 {
			unix.Close(held)
		}
	}()
	for len(rel)-walked > maxOpenPath {
		chunk := rel[walked : walked+maxOpenPath]
		i := strings.LastIndexByte(chunk, '/')
		if i <= 0 {
			return -1, &os.PathError{Op: "open", Path: t.abs(rel), Err: unix.ENAMETOOLONG}
		}
		dirHow := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: how.Resolve}
		fd, err := openat2(dirfd, chunk[:i], &dirHow)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: t.abs(rel), Err: err}
		}
		if held >= 0 {
			unix.Close(held)
		}
		held, dirfd, walked = fd, fd, walked+i+1
	}
	fd, err := openat2(dirfd, rel[walked:], &how)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: t.abs(rel), Err: err}
	}
	return fd, nil
}

// maxOpenPath is the longest path one openat2(2) takes: PATH_MAX counts
// the terminating NUL.
const maxOpenPath = unix.PathMax - 1

// openat2 is unix.Openat2 retried on EINTR and on EAGAIN, which openat2
// returns when a rename raced RESOLVE_BENEATH.
func openat2(dirfd int, rel string, how *unix.OpenHow) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, rel, how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		return fd, err
	}
}

func (t *tree) abs(rel string) string {
	if rel == "" || rel == "." {
		return t.root
	}
	return t.root + "/" + rel
}

// parent opens rel's parent directory (O_PATH) and returns it with rel's
// last component.
func (t *tree) parent(rel string) (int, string, error) {
	dir, base := path.Split(rel)
	fd, err := t.open(strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
	return fd, base, err
}

// node is what one path of a tree is: Type "file", "dir", "symlink",
// "whiteout" (a character device 0/0) or "other", with Special saying
// which (specialKind); Mode the permission bits; Target a symlink's
// target.
type node struct {
	Type    string
	Special string
	Mode    uint32
	Size    int64
	MTime   int64
	Target  string
	UID     uint32
	GID     uint32
}

// lstat returns rel's node; a missing path (or one below a non-directory)
// is (nil, nil).
func (t *tree) lstat(rel string) (*node, error) {
	var st unix.Stat_t
	if rel == "" || rel == "." {
		if err := unix.Fstat(t.fd, &st); err != nil {
			return nil, err
		}
		return nodeOf(&st, ""), nil
	}
	pfd, base, err := t.parent(rel)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil, nil
		}
		return nil, err
	}
	defer unix.Close(pfd)
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil, nil
		}
		return nil, &os.PathError{Op: "lstat", Path: t.abs(rel), Err: err}
	}
	n := nodeOf(&st, "")
	if n.Type == "symlink" {
		buf := make([]byte, unix.PathMax)
		k, err := unix.Readlinkat(pfd, base, buf)
		if err != nil {
			return nil, &os.PathError{Op: "readlink", Path: t.abs(rel), Err: err}
		}
		n.Target = string(buf[:k])
	}
	return n, nil
}

func nodeOf(st *unix.Stat_t, target string) *node {
	n := &node{Mode: st.Mode & 0o7777, Size: st.Size, MTime: st.Mtim.Nano(), Target: target, UID: st.Uid, GID: st.Gid}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		n.Type = "file"
	case unix.S_IFDIR:
		n.Type = "dir"
	case unix.S_IFLNK:
		n.Type = "symlink"
	case unix.S_IFCHR:
		n.Type = "other"
		if st.Rdev == 0 { // overlayfs.rst: a whiteout is a character device 0/0
			n.Type = "whiteout"
		}
	default:
		n.Type = "other"
	}
	if n.Type == "other" {
		n.Special = specialKind(st.Mode)
	}
	return n
}

// specialKind names the type of a special file (inode(7)): "fifo",
// "socket", "character device", "block device", else "special file".
func specialKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "special file"
}

// list lists directory rel (listDir).
func (t *tree) list(rel string) (*dirlist.Listing, error) {
	fd, err := t.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return dirlist.List(fd, t.abs(rel), t.spill)
}

// empty reports whether directory rel holds no entries, reading at most
// one batch of them.
func (t *tree) empty(rel string) (bool, error) {
	fd, err := t.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return false, err
	}
	f := os.NewFile(uintptr(fd), t.abs(rel))
	defer f.Close()
	names, err := f.Readdirnames(1)
	if err == io.EOF {
		return true, nil
	}
	return len(names) == 0, err
}

// names returns the entries of directory rel, sorted, all in memory: for
// directories that hold few (a git directory's hooks); list the others.
func (t *tree) names(rel string) ([]string, error) {
	l, err := t.list(rel)
	if err != nil {
		return nil, err
	}
	var names []string
	err = l.Each(func(n string) error { names = append(names, n); return nil })
	return names, err
}

// readFile returns the content of regular file rel.
func (t *tree) readFile(rel string) ([]byte, error) {
	fd, err := t.open(rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), t.abs(rel))
	defer f.Close()
	return io.ReadAll(f)
}

// readHead returns up to n bytes from the start of regular file rel.
// The buffer grows with what is read (a diff reads every changed file
// with n past 2 MiB, and most are small).
func (t *tree) readHead(rel string, n int) ([]byte, error) {
	fd, err := t.open(rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b, err := io.ReadAll(io.LimitReader(fdFile(fd), int64(n)))
	if err != nil {
		err = &os.PathError{Op: "read", Path: t.abs(rel), Err: err}
	}
	return b, err
}

// readHeadAt reads the start of file name of directory dirfd, opened
// without following a symlink, into buf and returns what it read; abs
// names it in errors.
func readHeadAt(dirfd int, name, abs string, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: abs, Err: err}
	}
	defer unix.Close(fd)
	return readInto(fdFile(fd), buf, abs)
}

// readInto fills b from r as far as r goes and returns the part filled.
func readInto(r io.Reader, b []byte, abs string) ([]byte, error) {
	k, err := io.ReadFull(r, b)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	if err != nil {
		err = &os.PathError{Op: "read", Path: abs, Err: err}
	}
	return b[:k], err
}

// fdFile reads and writes a raw descriptor: os.NewFile would cost an
// fcntl(2) and a poller registration per file, which adds up over the
// thousands of small files a layer can hold.
type fdFile int

func (f fdFile) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		n, err := unix.Read(int(f), b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

// WriteAt writes b at off (pwrite(2)), all of it or an error.
func (f fdFile) WriteAt(b []byte, off int64) (int, error) {
	done := 0
	for done < len(b) {
		n, err := unix.Pwrite(int(f), b[done:], off+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// Truncate sets the file's length (ftruncate(2)).
func (f fdFile) Truncate(size int64) error {
	return ignoringEINTR(func() error { return unix.Ftruncate(int(f), size) })
}

// ignoringEINTR calls fn again while it fails with EINTR.
func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}

// compareChunk is how much of each file sameContent holds at a time.
const compareChunk = 64 << 10

// sameContent says whether regular files ra of a and rb of b hold the
// same bytes, reading both in step (memory: two chunks, whatever the
// sizes).
func sameContent(a *tree, ra string, b *tree, rb string) (bool, error) {
	fa, err := a.open(ra, unix.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fa)
	fb, err := b.open(rb, unix.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fb)
	x, y := fdFile(fa), fdFile(fb)
	var sx, sy unix.Stat_t
	if unix.Fstat(fa, &sx) == nil && unix.Fstat(fb, &sy) == nil && sx.Size != sy.Size {
		return false, nil
	}
	bx, by := make([]byte, compareChunk), make([]byte, compareChunk)
	for {
		nx, ex := io.ReadFull(x, bx)
		ny, ey := io.ReadFull(y, by)
		if ex != nil && ex != io.EOF && ex != io.ErrUnexpectedEOF {
			return false, ex
		}
		if ey != nil && ey != io.EOF && ey != io.ErrUnexpectedEOF {
			return false, ey
		}
		if nx != ny || !bytes.Equal(bx[:nx], by[:ny]) {
			return false, nil
		}
		if ex != nil || ey != nil {
			return ex != nil && ey != nil, nil
		}
	}
}

// hashFile returns the SHA-256 of regular file rel, read in a stream.
func (t *tree) hashFile(rel string) (string, error) {
	fd, err := t.open(rel, unix.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	h := sha256.New()
	if _, err := io.CopyBuffer(h, fdFile(fd), make([]byte, compareChunk)); err != nil {
		return "", &os.PathError{Op: "read", Path: t.abs(rel), Err: err}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// xattr names overlayfs uses, with the prefix of a mount made in a user
// namespace (userxattr) first, then the one of a mount made by real root.
var xattrPrefixes = []string{"user.overlay.", "trusted.overlay."}

// overlayXattr returns the value of overlay xattr name ("opaque",
// "redirect", "whiteout") on rel, and the prefix it was found under.
func (t *tree) overlayXattr(rel, name string) (string, string, error) {
	fd, err := t.open(rel, unix.O_PATH, 0)
	if err != nil {
		return "", "", err
	}
	defer unix.Close(fd)
	// f*xattr(2) refuses O_PATH descriptors; /proc/self/fd/N names the
	// same inode without a path walk.
	p := fmt.Sprintf("/proc/self/fd/%d", fd)
	buf := make([]byte, 256)
	for _, pre := range xattrPrefixes {
		n, err := unix.Getxattr(p, pre+name, buf)
		if err == nil {
			return string(buf[:n]), pre, nil
		}
		if !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ERANGE) {
			return "", "", &os.PathError{Op: "getxattr", Path: t.abs(rel), Err: err}
		}
	}
	return "", "", nil
}

func (t *tree) setOverlayXattr(rel, prefix, name, value string) error {
	fd, err := t.open(rel, unix.O_PATH, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Setxattr(fmt.Sprintf("/proc/self/fd/%d", fd), prefix+name, []byte(value), 0)
}

func (t *tree) removeOverlayXattr(rel, name string) error {
	fd, err := t.open(rel, unix.O_PATH, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	p := fmt.Sprintf("/proc/self/fd/%d", fd)
	for _, pre := range xattrPrefixes {
		if _, err := unix.Getxattr(p, pre+name, nil); err != nil {
			continue // absent, or trusted.* that only root reads
		}
		if err := unix.Removexattr(p, pre+name); err != nil && !errors.Is(err, unix.ENODATA) {
			return &os.PathError{Op: "removexattr", Path: t.abs(rel), Err: err}
		}
	}
	return nil
}

// opaque reports whether directory rel is marked opaque (overlayfs.rst:
// xattr overlay.opaque "y").
func (t *tree) opaque(rel string) (bool, string, error) {
	v, pre, err := t.overlayXattr(rel, "opaque")
	return v == "y", pre, err
}

// removeAll removes rel and, for a directory, everything below it; a
// missing path is not an error.
func (t *tree) removeAll(rel string) error {
	n, err := t.lstat(rel)
	if err != nil || n == nil {
		return err
	}
	if n.Type == "dir" {
		l, err := t.list(rel)
		if err != nil {
			return err
		}
		if err := l.Each(func(c string) error { return t.removeAll(path.Join(rel, c)) }); err != nil {
			return err
		}
	}
	pfd, base, err := t.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	flags := 0
	if n.Type == "dir" {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(pfd, base, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: t.abs(rel), Err: err}
	}
	return nil
}
