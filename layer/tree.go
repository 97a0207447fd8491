package layer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// tree is a directory (Lower or upper) whose entries are reached by
// relative slash paths without ever following a symlink: every open goes
// through openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so a
// symlink planted by the session (in upper) or on the host (in Lower) is
// read and written as a symlink, never through.
type tree struct {
	fd   int // O_PATH|O_DIRECTORY
	root string
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
// "whiteout" (a character device 0/0) or "other"; Mode the permission
// bits; Target a symlink's target.
type node struct {
	Type   string
	Mode   uint32
	Size   int64
	MTime  int64
	Target string
	UID    uint32
	GID    uint32
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
	return n
}

// names returns the entries of directory rel, sorted.
func (t *tree) names(rel string) ([]string, error) {
	fd, err := t.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), t.abs(rel))
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sortStrings(names)
	return names, nil
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
		names, err := t.names(rel)
		if err != nil {
			return err
		}
		for _, c := range names {
			if err := t.removeAll(path.Join(rel, c)); err != nil {
				return err
			}
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
