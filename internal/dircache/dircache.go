// Package dircache keeps directory listings between the sandboxes one
// process plans, each used again only while the directory's stat(2) says
// it has not changed since it was listed, so a session's commands do not
// list the same home, credential stores and project tree on every command
// (about 0.4 ms of a 9 ms session command as a user, more for root, whose
// credential stores are walked too).
//
// A directory's inode change time moves whenever an entry is added,
// removed or renamed in it (its mtime changes, and ctime with it) and
// whenever its mode or owner changes (inode(7), "Last status change
// timestamp"); an entry's type can change only by replacing the entry.
// The stamp compared is device, inode, mode, size and both times to the
// nanosecond. Two guards keep it sound where that could fail:
//   - a listing whose directory changed within SettleTime before it was
//     read is not kept: the kernel's inode times come from a coarse clock,
//     so a change in the same tick as the stat could leave the stamp as it
//     was (git's "racy git" problem);
//   - only file systems whose times the kernel keeps itself are cached
//     (ext4, xfs, btrfs, tmpfs, overlayfs, f2fs): a network or FUSE file
//     system may report times it caches or makes up, so its directories
//     are listed afresh every time.
//
// The entries' names and types are cached; Info on an entry stats it at
// the time of the call, as os.ReadDir's entries do.
package dircache

import (
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	_ "github.com/corralhq/corral/internal/linuxonly" // Linux alone: say so elsewhere
)

// SettleTime is how old a directory's last change must be, when it is
// listed, for the listing to be kept (see the package comment).
const SettleTime = 2 * time.Second

// Bounds of what a Cache holds: directories, and entries in all (about 5
// MB of names and entries at most). Past them it starts afresh (a tree
// that large is listed as before).
const (
	maxDirs    = 4096
	maxEntries = 50000
	// maxListing is the largest listing kept; larger ones are not.
	maxListing = 10000
)

// Cache is a set of directory listings, safe for concurrent use. The zero
// value is ready to use.
type Cache struct {
	mu      sync.Mutex
	dirs    map[string]listing
	seen    map[string]bool // listed once (Keep keeps from the second listing)
	entries int
	// now is time.Now, a variable for tests; reads counts the listings
	// read from the file system, for tests.
	now   func() time.Time
	reads int
}

// New returns a Cache whose settle rule reads the clock now (nil:
// time.Now). Tests of the callers pass a clock an hour ahead, so that
// listings of the directories they have just made are kept, and check
// that what the callers find through the cache is what they find without.
func New(now func() time.Time) *Cache { return &Cache{now: now} }

type listing struct {
	stamp stamp
	ents  []fs.DirEntry
}

// stamp is what stat(2) says of a directory that its listing depends on.
type stamp struct {
	dev, ino     uint64
	mode         uint32
	size         int64
	mtime, ctime int64 // nanoseconds since the epoch
}

func stampOf(st *unix.Stat_t) stamp {
	return stamp{dev: st.Dev, ino: st.Ino, mode: st.Mode, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// ReadDir returns the entries of dir sorted by name, as os.ReadDir does
// (symlinks on the way to dir followed), from the cache while dir's stamp
// is the one it had when listed. dir is opened with O_DIRECTORY: a path
// a sandbox replaced with a FIFO fails (ENOTDIR) instead of blocking the
// open. The slice is the caller's. A failed listing is never kept.
func (c *Cache) ReadDir(dir string) ([]fs.DirEntry, error) { return c.ReadDirWith(dir, nil) }

// ReadDirWith is ReadDir with dir's stat(2), which says whether the kept
// listing still holds, asked of stat (nil: stat(2) now): a plan's
// pathres.Resolver.Stat, so a directory the plan resolved already is not
// stat'ed again. The listing returned is then as of that stat, which is
// what the rest of the plan sees of dir too; a listing read afresh is
// stamped by its own fstat(2), so nothing older than it is kept.
func (c *Cache) ReadDirWith(dir string, stat func(string) (fs.FileInfo, error)) ([]fs.DirEntry, error) {
	if ents, ok := c.LookupWith(dir, stat); ok {
		return ents, nil
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	if c != nil {
		c.mu.Lock()
		c.reads++
		c.mu.Unlock()
	}
	var before unix.Stat_t
	if err := unix.Fstat(fd, &before); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	c.Keep(f, &before, ents)
	return ents, nil
}

// Lookup returns the kept listing of dir (a copy, sorted by name) while
// dir's stat(2) stamp is the one it had when it was listed.
func (c *Cache) Lookup(dir string) ([]fs.DirEntry, bool) { return c.LookupWith(dir, nil) }

// LookupWith is Lookup with dir's stat(2) asked of stat (nil: stat(2)
// now; see ReadDirWith).
func (c *Cache) LookupWith(dir string, stat func(string) (fs.FileInfo, error)) ([]fs.DirEntry, bool) {
	if c == nil {
		return nil, false
	}
	var s stamp
	if stat == nil {
		var st unix.Stat_t
		if unix.Stat(dir, &st) != nil {
			return nil, false
		}
		s = stampOf(&st)
	} else {
		fi, err := stat(dir)
		if err != nil {
			return nil, false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil, false
		}
		s = stamp{dev: st.Dev, ino: st.Ino, mode: st.Mode, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
	}
	c.mu.Lock()
	l, ok := c.dirs[dir]
	c.mu.Unlock()
	if !ok || l.stamp != s {
		return nil, false
	}
	return slices.Clone(l.ents), true
}

// Keep keeps ents, the whole listing of the open directory f (its path
// f.Name()), whose fstat(2) before it was read is before: only from the
// directory's second listing in the process, if it is unchanged since,
// settled and on a file system that keeps its own times (see the package
// comment), and within the bounds.
func (c *Cache) Keep(f *os.File, before *unix.Stat_t, ents []fs.DirEntry) {
	if c == nil || len(ents) > maxListing {
		return
	}
	// A directory is kept from its second listing on: a process that
	// plans one sandbox (corral run) lists each once and never asks
	// again, and would pay the checks and the copy for nothing.
	c.mu.Lock()
	if c.seen == nil || len(c.seen) >= maxDirs {
		c.seen = map[string]bool{}
	}
	again := c.seen[f.Name()]
	c.seen[f.Name()] = true
	c.mu.Unlock()
	if !again || !c.keepable(f, before) {
		return
	}
	var after unix.Stat_t
	if unix.Fstat(int(f.Fd()), &after) != nil || stampOf(&after) != stampOf(before) {
		return // changed while it was read: the listing may mix two states
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirs == nil || len(c.dirs) >= maxDirs || c.entries+len(ents) > maxEntries {
		c.dirs, c.entries = map[string]listing{}, 0
	}
	if old, ok := c.dirs[f.Name()]; ok {
		c.entries -= len(old.ents)
	}
	kept := slices.Clone(ents)
	slices.SortFunc(kept, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	c.dirs[f.Name()] = listing{stamp: stampOf(before), ents: kept}
	c.entries += len(ents)
}

// keepable reports whether a listing of the open directory f, whose stat
// before the listing is st, may be kept: it settled, and its file system keeps its
// own times.
func (c *Cache) keepable(f *os.File, st *unix.Stat_t) bool {
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	t := now()
	if t.Sub(time.Unix(0, st.Ctim.Nano())) < SettleTime || t.Sub(time.Unix(0, st.Mtim.Nano())) < SettleTime {
		return false
	}
	var sfs unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &sfs) != nil {
		return false
	}
	return LocalTimes(int64(sfs.Type))
}

// LocalTimes reports whether a file system of type magic (statfs(2)
// f_type) is one whose inode times the kernel keeps itself (see the
// package comment).
func LocalTimes(magic int64) bool {
	switch magic {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC,
		unix.TMPFS_MAGIC, unix.OVERLAYFS_SUPER_MAGIC, unix.F2FS_SUPER_MAGIC:
		return true
	}
	return false
}
