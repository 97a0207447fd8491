package bwrap

import (
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/pathres"
)

// otherHomeScan is the process's cache of otherHomeCredentials: kept across
// Backends (the CLI builds one per command), as idmaps is.
var otherHomeScan homeScanCache

// homeScanCache remembers, for a root caller, which credential stores and
// files exist in the other people's homes, with the fingerprint
// (homesStamp) of every directory whose change could alter that answer.
type homeScanCache struct {
	mu sync.Mutex
	// asked is set by the first lookup, which scans without a stamp: a
	// process that makes one sandbox (corral run) never asks again, and
	// the stamp costs about as much as the scan (a stat(2) of every
	// directory the answer depends on). The next lookups stamp and keep.
	asked bool
	home  string
	stamp []dirStamp
	found []string
}

// dirStamp is what a directory's stat(2) says of its entries and modes:
// the inode change time moves whenever an entry is added, removed or
// renamed (the directory's mtime changes, and with it ctime) and whenever
// its mode or owner changes (inode(7), "Last status change timestamp").
type dirStamp struct {
	path       string
	dev, ino   uint64
	mode       uint32
	ctimeNanos int64 // -1: the path did not exist (or was not statable)
}

// settleTime is how old every stamped change must be before an answer is
// kept: the kernel's inode times come from a coarse clock, so a change made
// in the same tick as the stat could leave the stamp as it was (the "racy
// git" problem); an answer read that close to a change is used once and
// not kept.
const settleTime = 2 * time.Second

// otherHomeCredentials returns the credential stores and files
// (credentialStores, credentialFiles) of the homes of /etc/passwd's people
// other than home (otherHomes) that exist (lstat(2)) and whose directory
// anyone may enter (searchableByOthers), in a stable order. The answer is
// kept while none of the directories it depends on changed (homesStamp:
// each home, the directories between it and /, and every directory of the
// store paths within it); /etc/passwd is read afresh each call, so a new
// home is seen at once.
func (c *homeScanCache) otherHomeCredentials(home string) []string {
	return c.lookup(home, otherHomes(home), time.Now())
}

// lookup is otherHomeCredentials for the given list of other homes, at
// time now.
func (c *homeScanCache) lookup(home string, homes []string, now time.Time) []string {
	c.mu.Lock()
	first := !c.asked
	c.asked = true
	c.mu.Unlock()
	if first {
		return scanOtherHomes(homes) // fresh, so never stale; not kept
	}
	// The stamp is taken before the scan, so a change made while the scan
	// runs is seen by the next lookup.
	stamp, settled := homesStamp(homes, now)
	c.mu.Lock()
	if c.found != nil && c.home == home && slices.Equal(c.stamp, stamp) {
		found := c.found
		c.mu.Unlock()
		return found
	}
	c.mu.Unlock()
	found := scanOtherHomes(homes)
	if settled {
		c.mu.Lock()
		c.home, c.stamp, c.found = home, stamp, found
		c.mu.Unlock()
	}
	return found
}

// scanOtherHomes is otherHomeCredentials without the cache. It resolves
// through a resolver of its own (each home's parents stat'ed once, not
// once per name found), made after lookup's stamp and not the plan's: an
// answer read from before the stamp could be kept as the stamp's.
func scanOtherHomes(homes []string) []string {
	found := []string{}
	res := pathres.New()
	for _, h := range homes {
		for _, rel := range credentialRels() {
			abs := filepath.Join(h, rel)
			if _, err := res.Lstat(abs); err != nil || !searchableByOthers(res, filepath.Dir(abs)) {
				// Behind a directory only its owner can enter: root in
				// the sandbox's user namespace has no power over files
				// of unmapped users, so it cannot reach it (nor could
				// bwrap mount over it).
				continue
			}
			found = append(found, abs)
		}
	}
	return found
}

// credentialRels is credentialStores then credentialFiles.
var credentialRels = sync.OnceValue(func() []string {
	return append(slices.Clone(credentialStores), credentialFiles...)
})

// credentialDirs are the directories, relative to a home, that hold a
// credential store or file or lie between one and the home (".config",
// ".local", ".local/share", ...): an entry made or removed in one of them
// changes its stamp.
var credentialDirs = sync.OnceValue(func() []string {
	var dirs []string
	for _, rel := range credentialRels() {
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	slices.Sort(dirs)
	return dirs
})

// homesStamp stats the directories scanOtherHomes's answer depends on: for
// each home the directories from / down to it, the home, and its
// credentialDirs. settled reports that every change they record is older
// than settleTime before now.
func homesStamp(homes []string, now time.Time) (stamp []dirStamp, settled bool) {
	settled = true
	seen := map[string]bool{}
	add := func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		s := dirStamp{path: p, ctimeNanos: -1}
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			s.dev, s.ino, s.mode = st.Dev, st.Ino, st.Mode
			s.ctimeNanos = st.Ctim.Nano()
			if now.Sub(time.Unix(0, s.ctimeNanos)) < settleTime {
				settled = false
			}
		}
		stamp = append(stamp, s)
	}
	for _, h := range homes {
		var up []string
		for d := filepath.Dir(h); ; d = filepath.Dir(d) {
			up = append(up, d)
			if d == "/" {
				break
			}
		}
		for _, d := range slices.Backward(up) {
			add(d)
		}
		add(h)
		for _, rel := range credentialDirs() {
			add(filepath.Join(h, rel))
		}
	}
	return stamp, settled
}
