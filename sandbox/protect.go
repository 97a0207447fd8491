package sandbox

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
)

// DefaultProtected are the protected-path patterns a Request has when it
// names none (Request.Protected is nil).
//
// Why: a writable working directory holds more than the project. It holds
// files that programs on the host run, or take programs from, the next time
// the person works there: git runs .git/hooks and takes commands from
// .git/config (core.fsmonitor, core.pager, diff and filter drivers), a shell
// sources its start-up files, editors and agents read tasks, MCP servers and
// hooks from their settings directories. A command that writes one of these
// has planted code that runs outside the sandbox. Protected paths stay
// read-only inside the writable set, while the rest of the project,
// .git/objects, .git/index and refs included, stays writable, so commits,
// branches and fetches work.
//
// Patterns are slash-separated paths relative to the top of a writable
// directory (the working directory, a read-write bind). Each component may be
// a path.Match wildcard (".git/modules/*/hooks"). A leading "**/" means "at
// the top or in any directory below it": "**/.git/hooks" covers the hooks of
// the project's own repository and of repositories nested in it. A pattern
// names the path and everything below it. One shape is special: a pattern
// whose last component is ".git" names a .git that is NOT a directory, a
// gitfile ("gitdir: PATH", a submodule's or linked worktree's), which tells
// git where the repository is, so rewriting it hands git another
// repository's hooks and configuration. A .git directory itself is never
// protected whole: that would stop every commit.
//
// Not in the list, on purpose: .gitmodules (`git submodule add` writes it;
// git takes no command from it since CVE-2019-19604, and it is tracked,
// reviewable project content), .gitattributes (it can only name drivers that
// .git/config defines), .envrc (direnv asks again after any change). The
// session home directory and the scratch directory are not writable
// directories in this sense: they are corral's own, nothing on the host runs
// from them, and tools must be free to set up their shell there.
//
// What protection does not cover: files of the project that run code by
// design (a Makefile, package.json scripts, .husky/, CI files: the project's
// content, which shows in `git diff`), a core.hooksPath pointing into the
// tree, and repositories a command makes below the top of the tree (`git
// init sub`), whose configuration is the command's from the start. It is a
// barrier against the known ways of planting code for later, not a proof
// that nothing a sandbox wrote will ever run on the host.
var DefaultProtected = []string{
	// Git: a gitfile, hooks, configuration and the files that move them
	// elsewhere (commondir redirects config and hooks; config.worktree is
	// read with extensions.worktreeConfig), for the repository at the top,
	// repositories nested below it, submodules and linked worktrees.
	"**/.git",
	"**/.git/hooks",
	"**/.git/config",
	"**/.git/config.worktree",
	"**/.git/commondir",
	"**/.git/modules/*/hooks",
	"**/.git/modules/*/config",
	"**/.git/worktrees/*/config.worktree",
	"**/.git/worktrees/*/commondir",
	// Shell start-up files (a working directory may be someone's home).
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
	// Editor and agent settings: tasks, MCP servers, hooks.
	".vscode", ".idea", ".mcp.json", ".claude", ".codex", ".cursor", ".gemini",
}

// ProtectedPatterns returns the protected-path patterns of r: Protected, or
// DefaultProtected when Protected is nil.
func (r *Request) ProtectedPatterns() []string {
	if r.Protected == nil {
		return DefaultProtected
	}
	return r.Protected
}

// CheckProtected reports the first malformed pattern: one that is empty,
// absolute, has an empty, "." or ".." component, uses "**" other than as
// its whole first component, is "**" alone, or has a bad wildcard. Errors
// wrap ErrBadRequest.
func CheckProtected(patterns []string) error {
	for _, p := range patterns {
		if _, err := parsePattern(p); err != nil {
			return err
		}
	}
	return nil
}

// protPattern is a parsed protected-path pattern.
type protPattern struct {
	raw     string
	any     bool     // a leading "**/"
	comps   []string // the components after it
	gitfile bool     // the last component is ".git": only a non-directory matches
}

func parsePattern(raw string) (protPattern, error) {
	bad := func(why string) (protPattern, error) {
		return protPattern{}, fmt.Errorf("%w: protected path pattern %q %s", ErrBadRequest, raw, why)
	}
	if raw == "" {
		return bad("is empty")
	}
	if strings.HasPrefix(raw, "/") {
		return bad("must be relative to the top of a writable directory")
	}
	comps := strings.Split(raw, "/")
	p := protPattern{raw: raw}
	if comps[0] == "**" {
		p.any, comps = true, comps[1:]
		if len(comps) == 0 {
			return bad("names everything")
		}
	}
	for _, c := range comps {
		switch {
		case c == "" || c == "." || c == "..":
			return bad("has an empty, \".\" or \"..\" component")
		case strings.Contains(c, "**"):
			return bad("uses ** other than as its first component")
		}
		if _, err := path.Match(c, ""); err != nil {
			return bad("has a bad wildcard")
		}
	}
	p.comps = comps
	p.gitfile = comps[len(comps)-1] == ".git"
	return p, nil
}

func parsePatterns(patterns []string) []protPattern {
	out := make([]protPattern, 0, len(patterns))
	for _, raw := range patterns {
		if p, err := parsePattern(raw); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// MatchProtected reports whether rel, a path relative to the top of a
// writable directory (slash-separated, clean, not "."), is a protected path
// or lies below one, and which pattern says so. dir tells whether rel itself
// is (or, for a path to be made, would be) a directory; only gitfile
// patterns care. It looks at no file: "**" stands for any number of
// directories here, while FindProtected looks only a bounded depth down.
// Malformed patterns never match (see CheckProtected).
func MatchProtected(rel string, dir bool, patterns []string) (string, bool) {
	if rel == "" || rel == "." || strings.HasPrefix(rel, "/") {
		return "", false
	}
	comps := strings.Split(rel, "/")
	for _, p := range parsePatterns(patterns) {
		last := 0 // the '**' part may cover comps[:start] for start in [0, last]
		if p.any {
			last = len(comps) - len(p.comps)
		}
		for start := 0; start <= last; start++ {
			end := start + len(p.comps)
			if end > len(comps) || !matchComps(p.comps, comps[start:end]) {
				continue
			}
			if p.gitfile && (end < len(comps) || dir) {
				continue // a .git with something below it, or a .git directory
			}
			return p.raw, true
		}
	}
	return "", false
}

func matchComps(pat, names []string) bool {
	for i, c := range pat {
		if ok, _ := path.Match(c, names[i]); !ok {
			return false
		}
	}
	return true
}

// Bounds of FindProtected's walk for "**": how many levels below the top
// it goes, how many directories it lists (a listing costs tens of
// microseconds, an lstat(2) a few), how many directories it looks into in
// all, and how many entries of one directory it reads (past that, names
// are looked up one by one).
const (
	ScanDepth   = 2
	ScanLists   = 8
	ScanDirs    = 64
	ScanEntries = 4096
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
	// or below an existing directory that the pattern's first component
	// names (a repository nested at sub/ that has a .git but no
	// .git/hooks). A nested directory without a .git at all is not
	// reported: most directories are not repositories.
	Exists bool
	// NotDir is set for gitfile patterns: only a non-directory at Path is
	// protected.
	NotDir bool
	// Links are the symlinks the path passes through, Path itself included
	// when it is one, relative to the root. The scan follows a symlink only
	// while its target stays inside the root.
	Links []string
}

// FindProtected looks for the protected paths under root, an absolute,
// resolved directory, as patterns name them; malformed patterns are
// skipped (see CheckProtected). It reads the file system, so a caller runs
// it afresh for every sandbox (the bwrap backend runs it before and after
// every command).
//
// Its cost is bounded, whatever the size of the tree, because it runs
// around every command: "**" stands for the top and for the directories at
// most ScanDepth levels below it, visited breadth-first in name order, not
// through symlinks, nor into directories whose names start with "." (.git
// itself, .venv, caches) or node_modules; at most ScanLists directories are
// listed (ScanEntries entries of each at most) and ScanDirs looked into,
// and truncated reports that a bound cut the walk short. On the 2-core test
// machine that is under 0.1 ms for a small project and about 0.3 ms for a
// wide tree that reaches the bounds. The trade-off: a repository nested
// deeper, or past the bounds, is not found, so its hooks and configuration
// are as writable as any file of the project; the file tools, which judge
// one path at a time with MatchProtected, refuse to write them wherever
// they lie.
func FindProtected(root string, patterns []string) (found []ProtectedPath, truncated bool) {
	s := &protScanner{root: root, lists: map[string]map[string]fs.DirEntry{}, partial: map[string]bool{}, stats: map[string]fs.DirEntry{}, budget: ScanLists}
	pats := parsePatterns(patterns)
	seen := map[string]bool{}
	emit := func(pp ProtectedPath) {
		if !seen[pp.Rel] {
			seen[pp.Rel] = true
			found = append(found, pp)
		}
	}
	if len(pats) == 0 {
		return nil, false
	}
	if _, ok := s.list(""); !ok {
		return nil, false
	}
	for _, p := range pats {
		s.match(p, "", p.comps, true, nil, emit)
	}
	if slices.ContainsFunc(pats, func(p protPattern) bool { return p.any }) {
		for _, a := range s.anchors() {
			for _, p := range pats {
				if p.any {
					s.match(p, a, p.comps, false, nil, emit)
				}
			}
		}
	}
	return found, s.truncated
}

// protScanner walks one root for FindProtected, caching what it read.
type protScanner struct {
	root      string
	lists     map[string]map[string]fs.DirEntry // directory (relative) -> its entries; nil: unreadable
	partial   map[string]bool                   // directories with more than ScanEntries entries
	stats     map[string]fs.DirEntry            // path (relative) -> lstat result; nil: missing
	budget    int                               // listings left (ScanLists)
	truncated bool
}

func (s *protScanner) abs(rel string) string {
	return filepath.Join(s.root, filepath.FromSlash(rel))
}

// list returns the entries of the directory rel, listing it at most once,
// within the budget (the top of the root is always listed).
func (s *protScanner) list(rel string) (map[string]fs.DirEntry, bool) {
	if m, ok := s.lists[rel]; ok {
		return m, m != nil
	}
	if s.budget <= 0 && rel != "" {
		s.truncated = true
		return nil, false
	}
	s.budget--
	// O_DIRECTORY: a root may be a bound FIFO or device, which a plain
	// open could block on or act upon. syscall.Open and os.NewFile spare
	// the poller set-up of os.OpenFile, which costs as much as the listing.
	fd, err := syscall.Open(s.abs(rel), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		s.lists[rel] = nil
		return nil, false
	}
	f := os.NewFile(uintptr(fd), s.abs(rel))
	ents, err := f.ReadDir(ScanEntries)
	if err == nil && len(ents) == ScanEntries {
		if more, _ := f.ReadDir(1); len(more) > 0 {
			s.partial[rel], s.truncated = true, true
		}
	}
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
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
	st, err := os.Lstat(s.abs(q))
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
			m, ok := s.list(d)
			if !ok {
				continue
			}
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
func (s *protScanner) match(p protPattern, dir string, comps []string, top bool, links []string, emit func(ProtectedPath)) {
	c, rest := comps[0], comps[1:]
	if !hasMeta(c) {
		e, ok := s.entry(dir, c)
		if !ok {
			if top && !slices.ContainsFunc(rest, hasMeta) {
				rel := joinRel(dir, strings.Join(comps, "/"))
				emit(ProtectedPath{Path: s.abs(rel), Rel: rel, Pattern: p.raw, NotDir: p.gitfile, Links: links})
			}
			return
		}
		s.step(p, dir, e, rest, links, emit)
		return
	}
	m, ok := s.list(dir)
	if !ok {
		return
	}
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
func (s *protScanner) step(p protPattern, dir string, e fs.DirEntry, rest []string, links []string, emit func(ProtectedPath)) {
	rel := joinRel(dir, e.Name())
	isDir := e.IsDir()
	if e.Type()&fs.ModeSymlink != 0 {
		links = append(slices.Clip(links), rel)
		t, err := filepath.EvalSymlinks(s.abs(rel))
		if err != nil || !pathWithin(t, s.root) {
			if len(rest) == 0 {
				// The link itself is the protected path: replacing it must
				// be noticed, though its target is not the root's.
				emit(ProtectedPath{Path: s.abs(rel), Rel: rel, Pattern: p.raw, Exists: true, NotDir: p.gitfile, Links: links})
			}
			return
		}
		st, err := os.Stat(t)
		isDir = err == nil && st.IsDir()
	}
	if len(rest) == 0 {
		if !p.gitfile || !isDir {
			emit(ProtectedPath{Path: s.abs(rel), Rel: rel, Pattern: p.raw, Exists: true, NotDir: p.gitfile, Links: links})
		}
		return
	}
	if isDir {
		s.match(p, rel, rest, true, links, emit)
	}
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
