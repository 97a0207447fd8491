package hostview

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/dircache"
	"github.com/corralhq/corral/internal/pathres"
	"github.com/corralhq/corral/sandbox"
)

// This file reads the facts DecideBind judges a bind by. It reads the file
// system (lstat, readdir, /etc/passwd) and never writes; the policy itself
// is the pure DecideBind.

// Bounds of ScanSockets: how many levels below a bind's source it looks,
// how many directories it lists, and how many entries it reads in all. A
// directory listing costs tens of microseconds and an entry's type comes
// with it (only a socket is lstat'ed). The scan runs before every command
// that has binds: on the 2-core test machine (busy) one that reaches the
// bounds costs about 0.13 s, a Go module cache of 720 directories about
// 35 ms (BenchmarkScanSockets), a project of a few dozen directories well
// under a millisecond. Past a bound the scan stops and says so
// (BindSource.ScanCut): DecideBind then refuses the bind for a sandbox
// that holds host root and warns otherwise.
const (
	ScanSocketDepth   = 32
	ScanSocketDirs    = 4096
	ScanSocketEntries = 262144
)

// StoreBudget bounds the entries CredentialTargets examines in one
// credential store.
const StoreBudget = 50000

// ScanSockets finds the Unix sockets at or below root (absolute, resolved),
// breadth-first within the bounds ScanSocketDepth, ScanSocketDirs and
// ScanSocketEntries. It never follows a symlink (so it never leaves the
// tree through one; mounts below root are crossed, as a recursive bind
// shows them) and reads nothing but directory listings and the lstat(2) of
// each socket. unread are the directories it could not list (permission);
// cut reports that a bound stopped it.
func ScanSockets(root string) (socks []Socket, unread []string, cut bool) {
	st, err := os.Lstat(root)
	if err != nil {
		return nil, nil, false
	}
	if st.Mode()&fs.ModeSocket != 0 {
		return []Socket{socketOf(root, st)}, nil, false
	}
	if !st.IsDir() {
		return nil, nil, false
	}
	type dir struct {
		path  string
		depth int
	}
	queue := []dir{{root, 0}}
	listed, entries := 0, 0
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if listed == ScanSocketDirs {
			return socks, unread, true
		}
		listed++
		f, err := os.Open(d.path)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				unread = append(unread, d.path)
			}
			continue
		}
		for {
			batch, err := f.ReadDir(1024)
			for _, e := range batch {
				if entries++; entries > ScanSocketEntries {
					f.Close()
					return socks, unread, true
				}
				p := filepath.Join(d.path, e.Name())
				switch t := e.Type(); {
				case t&fs.ModeSocket != 0:
					if st, err := os.Lstat(p); err == nil && st.Mode()&fs.ModeSocket != 0 {
						socks = append(socks, socketOf(p, st))
					}
				case t.IsDir():
					if d.depth+1 > ScanSocketDepth {
						cut = true
						continue
					}
					queue = append(queue, dir{p, d.depth + 1})
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					unread = append(unread, d.path)
				}
				break
			}
		}
		f.Close()
	}
	return socks, unread, cut
}

func socketOf(p string, st fs.FileInfo) Socket {
	s := Socket{Path: p, Mode: st.Mode()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.UID, s.GID = sys.Uid, sys.Gid
	}
	return s
}

// InspectBindSource reads the facts about b's source that DecideBind needs,
// given the host facts h (which homes, hidden paths and targets to look
// for). It resolves the source, lists the home directories (and their
// .config, .local and .local/share) at or below it, or that it lies in,
// lstat's the paths the policy may cover below it, and scans it for
// sockets (ScanSockets).
func InspectBindSource(b sandbox.Bind, h *BindHost) *BindSource {
	s := &BindSource{Kinds: map[string]fs.FileMode{}, Listings: map[string][]string{}}
	if !filepath.IsAbs(b.Src) {
		s.Err = fmt.Errorf("%q is not an absolute path", b.Src)
		return s
	}
	r, err := h.Res.EvalSymlinks(filepath.Clean(b.Src))
	if err != nil {
		s.Err = err
		return s
	}
	st, err := h.Res.Stat(r)
	if err != nil {
		s.Err = err
		return s
	}
	s.Resolved, s.Mode = r, st.Mode()
	lstat := func(p string) {
		if !Within(p, r) {
			return
		}
		if st, err := h.Res.Lstat(p); err == nil {
			s.Kinds[p] = st.Mode().Type()
		}
	}
	for _, home := range h.homes() {
		if !Within(home, r) && !Within(r, home) {
			continue
		}
		for _, rel := range append([]string{""}, NestedHomeDirs...) {
			dir := filepath.Join(home, rel)
			if !Within(dir, r) {
				continue
			}
			lstat(dir)
			if k, ok := s.Kinds[dir]; !ok || !k.IsDir() {
				continue
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					s.Unread = append(s.Unread, dir)
				}
				continue
			}
			names := make([]string, 0, len(ents))
			for _, e := range ents {
				names = append(names, e.Name())
				s.Kinds[filepath.Join(dir, e.Name())] = e.Type()
			}
			s.Listings[dir] = names
		}
		for _, rel := range append(slices.Clone(CredentialStores), CredentialFiles...) {
			lstat(filepath.Join(home, rel))
		}
	}
	for _, group := range [][]string{h.HiddenDirs, h.CredentialTargets, h.MaskFiles, h.Secrets} {
		for _, p := range group {
			lstat(p)
		}
	}
	if s.Mode.IsDir() || s.Mode&fs.ModeSocket != 0 {
		var unread []string
		s.Sockets, unread, s.ScanCut = ScanSockets(r)
		for _, u := range unread {
			if !slices.Contains(s.Unread, u) {
				s.Unread = append(s.Unread, u)
			}
		}
	}
	return s
}

// GatherBindHost reads the facts of h that live on the host: the
// credential targets of every home in h (Home and OtherHomes; see
// CredentialTargets) and the system secrets that exist (SystemSecrets). It
// replaces h.CredentialTargets and h.Secrets and returns warnings about
// stores too large to examine whole.
func GatherBindHost(h *BindHost) (warnings []string) {
	h.CredentialTargets = nil
	for _, home := range h.homes() {
		t, w := credentialTargetsIn(home, nil, listedUnder(home, nil, h.Res), h.Res)
		for _, p := range t {
			if !slices.Contains(h.CredentialTargets, p) {
				h.CredentialTargets = append(h.CredentialTargets, p)
			}
		}
		warnings = append(warnings, w...)
	}
	h.Secrets = secretFiles(h.Res)
	return warnings
}

// SecretFiles returns the regular files that SystemSecrets match.
func SecretFiles() []string { return secretFiles(nil) }

// secretFiles is SecretFiles, lstat'ing through res.
func secretFiles(res *pathres.Resolver) []string {
	var out []string
	for _, pat := range SystemSecrets {
		matches, _ := res.Glob(pat)
		for _, m := range matches {
			if st, err := res.Lstat(m); err == nil && st.Mode().IsRegular() {
				out = append(out, m)
			}
		}
	}
	return out
}

// CredentialTargets returns the credential stores and files (CredentialStores,
// CredentialFiles) of home that exist, where their symlinks lead, and where
// the symlinks inside the stores lead, however deep (a store's symlinks to
// directories are not descended: their targets are hidden whole), except
// inside OwnStores, which are not walked. At most
// StoreBudget entries of one store are examined; warnings name a store
// that has more. A store corral cannot read yields what it can.
func CredentialTargets(home string) (targets, warnings []string) {
	return CredentialTargetsIn(home, nil, nil)
}

// CredentialTargetsIn is CredentialTargets with the stores' directories
// listed through dirs (nil: afresh every time), which keeps a listing
// while its directory's stamp says it did not change (dircache), and the
// paths resolved through res, one plan's (pathres; nil: afresh). Where
// the symlinks lead is resolved afresh every plan: a target can change
// without any directory of the store changing.
func CredentialTargetsIn(home string, dirs *dircache.Cache, res *pathres.Resolver) (targets, warnings []string) {
	return credentialTargetsIn(home, dirs, listedUnder(home, dirs, res), res)
}

// credentialTargetsIn is CredentialTargetsIn with the test of which names
// may exist given (listedUnder; the tests compare it with one that says
// yes to every name, so each name is lstat'ed).
func credentialTargetsIn(home string, dirs *dircache.Cache, listed func(rel string) bool, res *pathres.Resolver) (targets, warnings []string) {
	if home == "" || home == "/" {
		return nil, nil
	}
	seen := map[string]bool{}
	add := func(q string) {
		if !seen[q] {
			seen[q] = true
			targets = append(targets, q)
		}
	}
	var walk func(dir string, budget *int)
	walk = func(dir string, budget *int) {
		ents, err := res.ReadDir(dir, listWith(dirs, res))
		if err != nil {
			return
		}
		for _, e := range ents {
			if *budget--; *budget < 0 {
				return
			}
			q := filepath.Join(dir, e.Name())
			if e.Type()&fs.ModeSymlink != 0 {
				if t, err := res.EvalSymlinks(q); err == nil {
					add(t)
				}
				continue
			}
			if e.IsDir() {
				walk(q, budget)
			}
		}
	}
	// Which of the ~70 known names exist is read off their parents'
	// listings (through dirs: a stat of each parent while it is unchanged)
	// rather than by a stat of each name; only the names listed are
	// looked at.
	for _, rel := range append(slices.Clone(CredentialStores), CredentialFiles...) {
		if !listed(rel) {
			continue
		}
		abs := filepath.Join(home, rel)
		st, err := res.Lstat(abs)
		if err != nil {
			continue
		}
		add(abs)
		t, err := res.EvalSymlinks(abs)
		if err != nil {
			continue
		}
		add(t)
		if slices.Contains(OwnStores, rel) {
			continue
		}
		if tst, err := res.Stat(t); err == nil && tst.IsDir() && (st.IsDir() || st.Mode()&fs.ModeSymlink != 0) {
			budget := StoreBudget
			walk(t, &budget)
			if budget < 0 {
				warnings = append(warnings, fmt.Sprintf("%s has more than %d entries; symlinks beyond them were not followed, so a secret they point at outside the store may be visible", abs, StoreBudget))
			}
		}
	}
	return targets, warnings
}

// listWith lists a directory through dirs, its stamp from res
// (dircache.ReadDirWith; nil res: stat(2) now).
func listWith(dirs *dircache.Cache, res *pathres.Resolver) func(string) ([]fs.DirEntry, error) {
	if res == nil {
		return dirs.ReadDir
	}
	return func(dir string) ([]fs.DirEntry, error) { return dirs.ReadDirWith(dir, res.Stat) }
}

// listedUnder returns a test of whether rel, a clean relative path below
// home, may exist: false only when the listing of one of its parents
// (through dirs, and read once per call) lacks the next name. A parent
// that is a symlink, or cannot be listed (a home of mode 0711), answers
// true: the caller's lstat(2) decides. Listings are sorted by name
// (dircache.ReadDir).
func listedUnder(home string, dirs *dircache.Cache, res *pathres.Resolver) func(rel string) bool {
	lists := map[string][]fs.DirEntry{}
	failed := map[string]bool{}
	return func(rel string) bool {
		dir := home
		for name := range strings.SplitSeq(rel, "/") {
			if failed[dir] {
				return true
			}
			ents, ok := lists[dir]
			if !ok {
				var err error
				if ents, err = res.ReadDir(dir, listWith(dirs, res)); err != nil {
					failed[dir] = true
					return true
				}
				lists[dir] = ents
			}
			i, found := slices.BinarySearchFunc(ents, name, func(e fs.DirEntry, n string) int { return strings.Compare(e.Name(), n) })
			if !found {
				return false
			}
			if !ents[i].IsDir() {
				return true // the name itself, or a symlink on the way
			}
			dir = filepath.Join(dir, name)
		}
		return true
	}
}

// ParsePasswdHomes returns the home directories of the people in a passwd
// database (the text of /etc/passwd): uid 0 and uids from 1000 (the
// UID_MIN of login.defs on Debian and Fedora), not nobody (65534); system
// accounts are left out. Paths are cleaned, in file order, repeats
// dropped.
func ParsePasswdHomes(data []byte) []string {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 7 {
			continue
		}
		if uid, err := strconv.Atoi(f[2]); err != nil || uid != 0 && uid < 1000 || uid == 65534 {
			continue
		}
		h := filepath.Clean(f[5])
		if filepath.IsAbs(h) && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// PeopleHomes returns the home directories of /etc/passwd's people
// (ParsePasswdHomes) that exist as directories, resolved, other than
// exclude (the caller's) and /.
func PeopleHomes(exclude string) []string {
	data, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return nil
	}
	var out []string
	for _, h := range ParsePasswdHomes(data) {
		if r, err := filepath.EvalSymlinks(h); err == nil {
			h = r
		}
		if h == exclude || h == "/" || slices.Contains(out, h) {
			continue
		}
		if st, err := os.Stat(h); err == nil && st.IsDir() {
			out = append(out, h)
		}
	}
	return out
}
