package hostview

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/dircache"
	"github.com/corralhq/corral/internal/pathres"
	"github.com/corralhq/corral/sandbox"
)

// MatchProtectedIn is MatchProtected for a path below root (an absolute,
// resolved writable directory) whose files it may look at: a directory on
// the way to rel that git takes as a git directory (HEAD, and objects/ and
// refs/ or commondir) stands for a .git there, so the hooks and
// configuration of a bare repository (remote.git/hooks), of a separate git
// directory (.gd/config) or of a submodule's git directory match the
// patterns that name those of a .git, at any depth. It judges the
// directories as they are: one that is not yet a git directory protects
// nothing. The file tools use it; it costs an lstat(2) or two per
// directory of rel.
func MatchProtectedIn(root, rel string, dir bool, patterns []string) (string, bool) {
	if m, ok := sandbox.MatchProtected(rel, dir, patterns); ok || len(patterns) == 0 {
		return m, ok
	}
	if rel == "" || rel == "." || strings.HasPrefix(rel, "/") {
		return "", false
	}
	s := newScanner(root)
	comps := strings.Split(rel, "/")
	for i := range comps { // the directory comps[:i]
		if i > 0 && comps[i-1] == ".git" || !s.isGitDir(strings.Join(comps[:i], "/")) {
			continue
		}
		alias := slices.Concat(comps[:i], []string{".git"}, comps[i:])
		if m, ok := sandbox.MatchProtected(strings.Join(alias, "/"), dir, patterns); ok {
			return m, true
		}
	}
	return "", false
}

// Bounds of FindProtected's walk for "**": how many levels below the top
// it goes, how many directories it lists (a listing costs tens of
// microseconds, an lstat(2) a few), how many directories it looks into in
// all, and how many entries of one directory it reads (past that, names
// are looked up one by one; a walk that enumerates such a directory is cut).
// They fit ordinary projects (a few hundred directories in the top two
// levels, a few hundred submodule directories), since a cut walk fails
// closed (ScanCutError). A "**" in the middle of a pattern has a bound
// of its own, for all such walks of a scan together: how many directories
// they list (a git directory's listing costs less than the lstat(2)s of
// what the walk asks of it).
const (
	ScanDepth    = 2
	ScanLists    = 256
	ScanDirs     = 1024
	ScanEntries  = 65536
	ScanDeepDirs = 512
)

// ProtectedPath is a protected path FindProtected found below a root.
type ProtectedPath struct {
	// Path is the root joined with Rel: the path as the pattern names it,
	// symlinks in it not resolved.
	Path string
	// Rel is Path relative to the root, slash-separated.
	Rel string
	// Pattern is the pattern that names it.
	Pattern string
	// Exists is set when something was at Path during the scan. A missing
	// path is reported only where a command could make it and the pattern
	// has no wildcard left: at the top of the root (for "**/" patterns too),
	// below an existing directory that the pattern's first component names
	// (a repository nested at sub/ that has a .git but no .git/hooks), in a
	// git directory that a ".git" stood for (Aliased), and in a git
	// directory that a "**" in the middle stands for. A nested directory
	// without a .git at all is not reported: most directories are not
	// repositories.
	Exists bool
	// NotDir is set for gitfile patterns: only a non-directory at Path is
	// protected.
	NotDir bool
	// Links are the symlinks the path passes through, Path itself included
	// when it is one, relative to the root. The scan follows a symlink only
	// while its target stays inside the root.
	Links []string
	// Aliased is set when the pattern's ".git" component stood for a git
	// directory of another name: the target of a gitfile, or a directory
	// that is itself a git directory (a bare repository). Rel is then the
	// real path (gitfile targets are resolved), and missing members are
	// reported as for a .git directory.
	Aliased bool
}

// FindProtected looks for the protected paths under root, an absolute,
// resolved directory, as patterns name them; malformed patterns are
// skipped (see CheckProtected). It reads the file system, so a caller runs
// it afresh for every sandbox (the bwrap backend runs it before and after
// every command).
//
// Its cost is bounded, whatever the size of the tree, because it runs
// around every command: a leading "**" stands for the top and for the
// directories at most ScanDepth levels below it, visited breadth-first in
// name order, not through symlinks, nor into directories whose names start
// with "." (.git itself, .venv, caches) or node_modules, nor into a git
// directory (a bare repository's objects are not projects); at most
// ScanLists directories are listed (ScanEntries entries of each at most)
// and ScanDirs looked into, and truncated reports that a bound cut the
// walk short. A "**" in the middle stands for the directory before it and
// those below it at any depth, visited breadth-first in name order, not
// through symlinks, within ScanDeepDirs; a git directory
// it goes into only through its modules/ and worktrees/ (the rest is git's
// data: objects, refs, where a branch may be named hooks). A ".git"
// component that more of the pattern follows also stands for the
// directory a .git gitfile there points to (and that one's commondir),
// when it lies inside the root, and for the directory itself when it is a
// git directory: HEAD, and objects/ and refs/ or commondir, what git's
// is_git_directory asks. A "**/.git" pattern also names the gitfiles of
// the submodules whose git directories that walk finds below the modules/
// of the repositories at the top and the anchors: the .git in the directory
// the submodule's core.worktree names and in the one its name names, at
// any depth. On the 2-core test machine that is about 0.13 ms for a small
// project and about 15 ms for a wide tree that reaches the bounds (255
// listings, an lstat(2) of .git and one of HEAD in each of about 1000
// directories; BenchmarkFindProtected), and about 15 µs more per submodule
// (a listing each). The trade-off: a repository nested deeper is not
// found, so its hooks and configuration are as writable as any file of the
// project; the file tools, which judge one path at a time with
// MatchProtectedIn, refuse to write them wherever they lie. A tree wider
// than the bounds reports truncated, and the backends then refuse commands
// (ScanCutError). So does a scan that could not open a directory or a
// gitfile for a passing cause (too many open files): what it did not look
// at may hold a protected path; FindProtectedErr tells that cause apart.
func FindProtected(root string, patterns []string) (found []ProtectedPath, truncated bool) {
	found, truncated, err := FindProtectedErr(root, patterns)
	return found, truncated || err != nil
}

// FindProtectedErr is FindProtected with the passing failure (an error
// IsTransient accepts: EMFILE, ENFILE, ENOMEM) that kept the scan from
// opening a directory or a gitfile it had to read, which FindProtected
// reports as truncated: the paths found are then not all there are, and
// a command must not run on them.
func FindProtectedErr(root string, patterns []string) (found []ProtectedPath, truncated bool, err error) {
	return FindProtectedIn(root, patterns, nil, nil)
}

// FindProtectedIn is FindProtectedErr with the directories' complete
// listings taken from, and kept in, dirs (nil: none), where their stamps
// say they did not change (dircache), and the lstat(2)s and symlinks
// resolved through res, one plan's (pathres; nil: afresh; a scan after a
// command must not use the plan's). Gitfiles are read afresh: their
// contents can change without their directory's.
func FindProtectedIn(root string, patterns []string, dirs *dircache.Cache, res *pathres.Resolver) (found []ProtectedPath, truncated bool, err error) {
	s := newScanner(root)
	s.dirs, s.res = dirs, res
	pats := sandbox.ParseProtected(patterns)
	for _, p := range pats {
		for _, c := range p.Comps {
			if c != "**" && hasMeta(c) {
				s.globs = append(s.globs, c)
			}
		}
	}
	seen := map[string]bool{}
	emit := func(pp ProtectedPath) {
		if !seen[pp.Rel] {
			seen[pp.Rel] = true
			found = append(found, pp)
		}
	}
	if len(pats) == 0 {
		return nil, false, nil
	}
	if _, ok := s.list("", &s.budget); !ok {
		return nil, false, s.err
	}
	for _, p := range pats {
		s.match(p, "", p.Comps, true, nil, emit)
	}
	var anchors []string
	if slices.ContainsFunc(pats, func(p sandbox.ProtectedPattern) bool { return p.Anywhere }) {
		anchors = s.anchors()
		for _, a := range anchors {
			for _, p := range pats {
				if p.Anywhere {
					s.match(p, a, p.Comps, false, nil, emit)
				}
			}
		}
	}
	for _, p := range pats {
		if p.Anywhere && p.GitFile && len(p.Comps) == 1 {
			s.submoduleGitfiles(p, append([]string{""}, anchors...), emit)
		}
	}
	return found, s.truncated, s.err
}

// submoduleGitfiles reports, for the gitfile pattern p ("**/.git"), the
// gitfiles of the submodules of the repositories at repos (the top and the
// anchors), at any depth in the working tree: for each submodule git
// directory the walk finds below a repository's modules/ (.git/modules, or
// that of the git directory its gitfile points to), the .git in the
// directory its core.worktree names (relative to the submodule's git
// directory) and the .git in the directory its name names (vendor/lib for
// .git/modules/vendor/lib; a/b for .git/modules/a/modules/b), when that is
// a gitfile. The walk is the one "**" in the middle makes, within
// ScanDeepDirs.
func (s *protScanner) submoduleGitfiles(p sandbox.ProtectedPattern, repos []string, emit func(ProtectedPath)) {
	for _, r := range repos {
		var gitDirs []string
		if e, ok := s.entry(r, ".git"); ok && e.IsDir() {
			gitDirs = append(gitDirs, joinRel(r, ".git"))
		}
		gitDirs = append(gitDirs, s.gitfileTargets(r)...)
		for _, g := range gitDirs {
			modules := joinRel(g, "modules")
			if e, ok := s.entry(g, "modules"); !ok || !e.IsDir() {
				continue
			}
			// worktrees of each submodule git directory found, by its path.
			wts := map[string][]string{}
			var owners []string // git directories seen, in walk order
			for _, w := range s.walk(modules) {
				if !w.git {
					continue
				}
				ownerWts, name := []string{s.abs(r)}, strings.TrimPrefix(w.rel, modules+"/")
				for _, o := range owners {
					if rest, ok := strings.CutPrefix(w.rel, o+"/modules/"); ok && len(o) > 0 {
						ownerWts, name = wts[o], rest
					} else if strings.HasPrefix(w.rel, o+"/worktrees/") {
						name = "" // a linked worktree's git directory, not a submodule's
					}
				}
				owners = append(owners, w.rel)
				if name == "" || name == w.rel {
					continue
				}
				var mine []string
				if c := coreWorktree(s.abs(w.rel)); c != "" {
					mine = append(mine, c)
				}
				for _, ow := range ownerWts {
					mine = append(mine, ow+"/"+name)
				}
				for _, m := range mine {
					t, err := filepath.EvalSymlinks(m)
					if err != nil || !pathWithin(t, s.root) || slices.Contains(wts[w.rel], t) {
						continue
					}
					wts[w.rel] = append(wts[w.rel], t)
					rel := strings.TrimPrefix(strings.TrimPrefix(t, s.root), "/")
					if rel == "" {
						continue // the top's .git is matched already
					}
					if e, ok := s.entry(rel, ".git"); ok {
						s.step(p, rel, e, nil, nil, emit)
					}
				}
			}
		}
	}
}

// coreWorktree returns the core.worktree of the git directory gd (an
// absolute path) from its config file, made absolute (a relative one is
// relative to gd, as git takes it), or "".
func coreWorktree(gd string) string {
	b, ok := readLimited(filepath.Join(gd, "config"), 1<<16)
	if !ok {
		return ""
	}
	section, val := "", ""
	for line := range strings.Lines(b) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			h, _, _ := strings.Cut(line[1:], "]")
			section = strings.ToLower(strings.TrimSpace(h))
			continue
		}
		if section != "core" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "worktree") {
			continue
		}
		v = strings.TrimSpace(v)
		if strings.HasPrefix(v, `"`) {
			v, _, _ = strings.Cut(v[1:], `"`)
		} else if i := strings.IndexAny(v, "#;"); i >= 0 {
			v = strings.TrimSpace(v[:i])
		}
		val = v
	}
	if val == "" {
		return ""
	}
	if !filepath.IsAbs(val) {
		val = gd + "/" + val
	}
	return val
}

// protScanner walks one root for FindProtected, caching what it read.
type protScanner struct {
	root    string
	dirs    *dircache.Cache                   // complete listings kept between scans; nil: none
	lists   map[string]map[string]fs.DirEntry // directory (relative) -> its entries; nil: unreadable
	partial map[string]bool                   // directories with more than ScanEntries entries
	// complete marks a partial directory whose every entry that a walk
	// enumerates (a directory, a symlink, a name a pattern's glob
	// matches) is in its listing all the same (listRest).
	complete  map[string]bool
	globs     []string               // the patterns' components with glob characters, "**" aside
	stats     map[string]fs.DirEntry // path (relative) -> lstat result; nil: missing
	res       *pathres.Resolver      // the plan's lstat and symlinks (FindProtectedIn)
	gitDirs   map[string]bool        // directory (relative) -> is a git directory
	walks     map[string][]walked    // start -> what a "**" in the middle stands for
	gitfiles  map[string][]string    // directory (relative) -> where its .git gitfile leads
	budget    int                    // listings left (ScanLists)
	deepDirs  int                    // directories "**" in the middle may still list
	truncated bool
	// err is the first passing failure (IsTransient) to open what the scan
	// had to read: unlike a directory that is missing or unreadable, it
	// says nothing of what the directory holds.
	err error
}

// stat is how the scan's dircache lookups stat a directory: through the
// plan's resolver, or stat(2) now (nil).
func (s *protScanner) stat() func(string) (fs.FileInfo, error) {
	if s.res == nil {
		return nil
	}
	return s.res.Stat
}

// failed notes err, from opening or reading what the scan needs, when it
// is a passing failure.
func (s *protScanner) failed(err error) {
	if s.err == nil && sandbox.IsTransient(err) {
		s.err = err
	}
}

func newScanner(root string) *protScanner {
	return &protScanner{root: root, lists: map[string]map[string]fs.DirEntry{}, partial: map[string]bool{}, complete: map[string]bool{}, stats: map[string]fs.DirEntry{},
		gitDirs: map[string]bool{}, walks: map[string][]walked{}, gitfiles: map[string][]string{},
		budget: ScanLists, deepDirs: ScanDeepDirs}
}

func (s *protScanner) abs(rel string) string {
	return filepath.Join(s.root, filepath.FromSlash(rel))
}

// list returns the entries of the directory rel, listing it at most once,
// within the budget (the top of the root is always listed).
func (s *protScanner) list(rel string, budget *int) (map[string]fs.DirEntry, bool) {
	if m, ok := s.lists[rel]; ok {
		return m, m != nil
	}
	if *budget <= 0 && rel != "" {
		s.truncated = true
		return nil, false
	}
	*budget--
	if ents, ok := s.dirs.LookupWith(s.abs(rel), s.stat()); ok {
		// Kept only whole (below ScanEntries), so never partial.
		m := make(map[string]fs.DirEntry, len(ents))
		for _, e := range ents {
			m[e.Name()] = e
		}
		s.lists[rel] = m
		return m, true
	}
	// O_DIRECTORY: a root may be a bound FIFO or device, which a plain
	// open could block on or act upon. syscall.Open and os.NewFile spare
	// the poller set-up of os.OpenFile, which costs as much as the listing.
	fd, err := syscall.Open(s.abs(rel), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		s.failed(&os.PathError{Op: "open", Path: s.abs(rel), Err: err})
		s.lists[rel] = nil
		return nil, false
	}
	f := os.NewFile(uintptr(fd), s.abs(rel))
	var before unix.Stat_t
	stamped := s.dirs != nil && unix.Fstat(fd, &before) == nil
	ents, err := f.ReadDir(ScanEntries)
	if stamped && len(ents) < ScanEntries && (err == nil || errors.Is(err, io.EOF)) {
		s.dirs.Keep(f, &before, ents)
	}
	if err == nil && len(ents) == ScanEntries {
		if more, _ := f.ReadDir(1); len(more) > 0 {
			// Names are looked up one by one past the listing; only a
			// walk that enumerates the directory is cut (see enumerated),
			// unless what it enumerates is all kept (listRest).
			s.partial[rel] = true
			var done bool
			if ents, done = s.listRest(f, append(ents, more...)); done {
				s.complete[rel] = true
			}
		}
	}
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		s.failed(err)
		s.lists[rel] = nil
		return nil, false
	}
	m := make(map[string]fs.DirEntry, len(ents))
	for _, e := range ents {
		m[e.Name()] = e
	}
	s.lists[rel] = m
	return m, true
}

// scanRestEntries bounds how many entries of one directory past
// ScanEntries listRest reads (a directory of a project's data: 100,000
// images, a million small files), and scanKeptEntries how many of them it
// keeps. Variables so that tests can make them small.
var (
	scanRestEntries = 1 << 20
	scanKeptEntries = ScanEntries
)

// listRest reads the rest of a directory past ScanEntries, keeping of it
// only what a walk enumerates: directories, symlinks, and names a glob of
// the patterns matches; a regular file is otherwise found by lstat(2)
// when a pattern names it (entry). Reading a directory of files costs
// about 50 ns an entry, so a project with one big directory of data is
// checked instead of refused (a new user's directory of 66,000 files was).
// done is false when the directory holds more than the bounds let it
// read or keep.
func (s *protScanner) listRest(f *os.File, ents []fs.DirEntry) ([]fs.DirEntry, bool) {
	keep := func(e fs.DirEntry) bool {
		if e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			return true
		}
		for _, g := range s.globs {
			if ok, _ := path.Match(g, e.Name()); ok {
				return true
			}
		}
		return false
	}
	kept, read := 0, 0
	for i := ScanEntries; i < len(ents); i++ {
		if keep(ents[i]) {
			ents[ScanEntries+kept] = ents[i]
			kept++
		}
	}
	ents = ents[:ScanEntries+kept]
	for {
		more, err := f.ReadDir(4096)
		for _, e := range more {
			if read++; keep(e) {
				ents = append(ents, e)
				kept++
			}
		}
		if read > scanRestEntries || kept > scanKeptEntries {
			return ents, false
		}
		if err != nil || len(more) == 0 {
			return ents, errors.Is(err, io.EOF) || err == nil
		}
	}
}

// enumerated notes that the names of the directory rel were enumerated:
// the walk is cut when its listing was partial (past ScanEntries) and
// listRest could not keep all a walk enumerates.
func (s *protScanner) enumerated(rel string) {
	if s.partial[rel] && !s.complete[rel] {
		s.truncated = true
	}
}

// entry returns the entry name of the directory rel: from its listing when
// it was listed whole, else by lstat(2).
func (s *protScanner) entry(rel, name string) (fs.DirEntry, bool) {
	if m, ok := s.lists[rel]; ok {
		if e, found := m[name]; found || !s.partial[rel] {
			return e, found
		}
	}
	q := joinRel(rel, name)
	if e, ok := s.stats[q]; ok {
		return e, e != nil
	}
	st, err := s.res.Lstat(s.abs(q))
	if err != nil {
		s.stats[q] = nil
		return nil, false
	}
	e := fs.FileInfoToDirEntry(st)
	s.stats[q] = e
	return e, true
}

// anchors lists the directories below the root that "**" stands for,
// breadth-first, within the bounds.
func (s *protScanner) anchors() []string {
	var out []string
	level := []string{""}
	for depth := 1; depth <= ScanDepth && len(level) > 0; depth++ {
		var next []string
		for _, d := range level {
			m, ok := s.list(d, &s.budget)
			if !ok || s.isGitDir(d) {
				continue // a git directory holds git's data, not projects
			}
			s.enumerated(d)
			names := make([]string, 0, len(m))
			for n, e := range m {
				if e.IsDir() && !strings.HasPrefix(n, ".") && n != "node_modules" {
					names = append(names, n)
				}
			}
			slices.Sort(names)
			for _, n := range names {
				if len(out)+len(next) >= ScanDirs {
					s.truncated = true
					break
				}
				next = append(next, joinRel(d, n))
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// match matches comps from the directory dir (relative to the root). top
// says whether a missing path may be reported from here (see
// ProtectedPath.Exists); links are the symlinks passed so far.
func (s *protScanner) match(p sandbox.ProtectedPattern, dir string, comps []string, top bool, links []string, emit func(ProtectedPath)) {
	c, rest := comps[0], comps[1:]
	if c == "**" {
		for _, w := range s.walk(dir) {
			s.match(p, w.rel, rest, w.git, links, emit)
		}
		return
	}
	if c == ".git" && len(rest) > 0 {
		s.gitAliases(p, dir, rest, links, emit)
	}
	if !hasMeta(c) {
		e, ok := s.entry(dir, c)
		if !ok {
			if top && !slices.ContainsFunc(rest, hasMeta) {
				rel := joinRel(dir, strings.Join(comps, "/"))
				emit(ProtectedPath{Path: s.abs(rel), Rel: rel, Pattern: p.Raw, NotDir: p.GitFile, Links: links})
			}
			return
		}
		s.step(p, dir, e, rest, links, emit)
		return
	}
	m, ok := s.list(dir, &s.budget)
	if !ok {
		return
	}
	s.enumerated(dir)
	names := make([]string, 0, len(m))
	for n := range m {
		if ok, _ := path.Match(c, n); ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		s.step(p, dir, m[n], rest, links, emit)
	}
}

// step continues a match through e, an existing entry of dir.
func (s *protScanner) step(p sandbox.ProtectedPattern, dir string, e fs.DirEntry, rest []string, links []string, emit func(ProtectedPath)) {
	rel := joinRel(dir, e.Name())
	isDir := e.IsDir()
	if e.Type()&fs.ModeSymlink != 0 {
		links = append(slices.Clip(links), rel)
		t, err := s.res.EvalSymlinks(s.abs(rel))
		if err != nil || !pathWithin(t, s.root) {
			if len(rest) == 0 {
				// The link itself is the protected path: replacing it must
				// be noticed, though its target is not the root's.
				emit(ProtectedPath{Path: s.abs(rel), Rel: rel, Pattern: p.Raw, Exists: true, NotDir: p.GitFile, Links: links})
			}
			return
		}
		st, err := s.res.Stat(t)
		isDir = err == nil && st.IsDir()
	}
	if len(rest) == 0 {
		if !p.GitFile || !isDir {
			emit(ProtectedPath{Path: s.abs(rel), Rel: rel, Pattern: p.Raw, Exists: true, NotDir: p.GitFile, Links: links})
		}
		return
	}
	if isDir {
		s.match(p, rel, rest, true, links, emit)
	}
}

// walked is a directory a "**" in the middle of a pattern stands for, and
// whether it is a git directory (unknown past the bounds: false).
type walked struct {
	rel string
	git bool
}

// walk returns dir and the directories below it, breadth-first in name
// order, not through symlinks, entering a git directory only through its
// modules/ and worktrees/, within ScanDeepDirs (shared by all walks of the
// scan). dir itself is always in the result; past the bound, it is not
// looked into (git is false).
func (s *protScanner) walk(dir string) []walked {
	if w, ok := s.walks[dir]; ok {
		return w
	}
	out := []walked{{rel: dir}}
	for i := 0; i < len(out); i++ {
		d := out[i].rel
		m, ok := s.list(d, &s.deepDirs)
		if !ok {
			continue
		}
		var names []string
		if s.isGitDir(d) {
			out[i].git = true
			for _, n := range []string{"modules", "worktrees"} {
				if e, ok := s.entry(d, n); ok && e.IsDir() {
					names = append(names, n)
				}
			}
		} else {
			s.enumerated(d)
			for n, e := range m {
				if e.IsDir() {
					names = append(names, n)
				}
			}
			slices.Sort(names)
		}
		for _, n := range names {
			if len(out) > ScanDeepDirs {
				s.truncated = true
				break
			}
			out = append(out, walked{rel: joinRel(d, n)})
		}
	}
	s.walks[dir] = out
	return out
}

// isGitDir reports whether the directory rel is one git takes as a git
// directory (setup.c, is_git_directory): it holds HEAD, and objects/ and
// refs/, or a commondir file (a linked worktree's, whose objects and refs
// are elsewhere). HEAD's content is not checked: a false positive protects
// a few more files, no more.
func (s *protScanner) isGitDir(rel string) bool {
	if v, ok := s.gitDirs[rel]; ok {
		return v
	}
	v := false
	if e, ok := s.entry(rel, "HEAD"); ok && (e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0) {
		if e, ok := s.entry(rel, "commondir"); ok && (e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0) {
			v = true
		} else {
			v = s.dirAt(rel, "objects") && s.dirAt(rel, "refs")
		}
	}
	s.gitDirs[rel] = v
	return v
}

// dirAt reports whether name in the directory rel is a directory or a
// symlink. Any symlink counts, whatever corral finds at its end: git follows
// it from its own working directory, and a target such as
// /proc/self/cwd/objects (or one a command changes later) leads elsewhere
// for git than for corral, so a lookup here cannot say what git will see.
func (s *protScanner) dirAt(rel, name string) bool {
	e, ok := s.entry(rel, name)
	return ok && (e.IsDir() || e.Type()&fs.ModeSymlink != 0)
}

// gitAliases matches rest, what a pattern names below a ".git" in dir, in
// the git directories of other names that git would use there: where a
// .git gitfile in dir leads, and dir itself when it is a git directory.
// What they hold is reported as Aliased, missing members too.
func (s *protScanner) gitAliases(p sandbox.ProtectedPattern, dir string, rest []string, links []string, emit func(ProtectedPath)) {
	targets, bare := s.gitfileTargets(dir), s.isGitDir(dir)
	if len(targets) == 0 && !bare {
		return // the common case
	}
	aliased := func(pp ProtectedPath) {
		pp.Aliased = true
		emit(pp)
	}
	for _, g := range targets {
		s.match(p, g, rest, true, nil, aliased)
	}
	if bare {
		s.match(p, dir, rest, true, links, aliased)
	}
}

// gitfileTargets returns, relative to the root and resolved, the directory
// that the gitfile dir/.git points to and the common directory that one's
// commondir names, those of them that lie inside the root.
func (s *protScanner) gitfileTargets(dir string) []string {
	if t, ok := s.gitfiles[dir]; ok {
		return t
	}
	var out []string
	add := func(base, target string) string {
		if !filepath.IsAbs(target) {
			// As git does: relative to the directory, no cleaning before
			// the symlinks are resolved.
			target = base + "/" + target
		}
		t, err := s.res.EvalSymlinks(target)
		if err != nil || !pathWithin(t, s.root) {
			return ""
		}
		if st, err := s.res.Stat(t); err != nil || !st.IsDir() {
			return ""
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(t, s.root), "/")
		if !slices.Contains(out, rel) {
			out = append(out, rel)
		}
		return t
	}
	if e, ok := s.entry(dir, ".git"); ok && !e.IsDir() {
		if b, ok := s.readSmall(s.abs(joinRel(dir, ".git"))); ok {
			if target, ok := strings.CutPrefix(strings.TrimRight(b, "\r\n"), "gitdir: "); ok && target != "" {
				if base, err := s.res.EvalSymlinks(s.abs(dir)); err == nil {
					if t := add(base, target); t != "" {
						if c, ok := s.readSmall(filepath.Join(t, "commondir")); ok {
							if c = strings.TrimRight(c, "\r\n"); c != "" {
								add(t, c)
							}
						}
					}
				}
			}
		}
	}
	s.gitfiles[dir] = out
	return out
}

// readSmall reads the regular file p if it is small, as git reads a gitfile
// or commondir, without blocking on a FIFO put in its place; a passing
// failure to open it is noted (failed).
func (s *protScanner) readSmall(p string) (string, bool) {
	b, ok, err := readLimitedErr(p, 4096)
	if err != nil {
		s.failed(err)
	}
	return b, ok
}

// readLimited reads the regular file p if it holds at most max bytes,
// as readSmall.
func readLimited(p string, max int64) (string, bool) {
	b, ok, _ := readLimitedErr(p, max)
	return b, ok
}

// readLimitedErr is readLimited with the error of opening p.
func readLimitedErr(p string, max int64) (string, bool, error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", false, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() > max {
		return "", false, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil || int64(len(b)) > max {
		return "", false, nil
	}
	return string(b), true, nil
}

func hasMeta(c string) bool { return strings.ContainsAny(c, `*?[\`) }

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// pathWithin reports whether p is dir or lies below it (both clean and
// absolute).
func pathWithin(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// ScanCutError is the error a backend returns, before a command, when
// FindProtected was cut short in the writable directory dir (truncated):
// what it did not look at could hold a protected path a command made
// (a nested repository, a submodule's git directory or gitfile) that the
// command to come could write, so the command does not run. It wraps
// ErrPolicy.
// workdir says whether dir is the working directory (else another
// directory commands may write: a read-write bind).
func ScanCutError(dir string, workdir bool) error {
	return fmt.Errorf("%w: %s", sandbox.ErrPolicy, scanCutText(dir, workdir))
}

// ScanCutWarning is the warning a backend adds to a command's result when
// FindProtected, after the command, was cut short in dir: the next command
// will be refused.
func ScanCutWarning(dir string, workdir bool) string {
	return scanCutText(dir, workdir) + "; the next command will be refused until then"
}

func scanCutText(dir string, workdir bool) string {
	what := "the working directory"
	if !workdir {
		what = "the writable directory"
	}
	return fmt.Sprintf("%s %s is larger than corral checks for protected paths (git hooks and configuration, gitfiles): it lists at most %d directories in its top %d levels, looks into %d in all and %d below .git/modules, and reads at most %d entries of one directory (files count) past its first %d, keeping at most %d subdirectories and symlinks of them, so a command could hide one from the check: "+
		"run corral in a narrower working directory, or set protected_paths to a list without \"**\" patterns, or to [] to turn protection off", what, dir, ScanLists, ScanDepth, ScanDirs, ScanDeepDirs, scanRestEntries, ScanEntries, scanKeptEntries)
}
