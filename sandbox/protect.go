package sandbox

import (
	"fmt"
	"path"
	"strings"
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
// a path.Match wildcard (".git/worktrees/*/commondir"). A leading "**/" means
// "at the top or in any directory below it": "**/.git/hooks" covers the
// hooks of the project's own repository and of repositories nested in it. A
// "**" in the middle stands for any number of directories, none included:
// ".git/modules/*/**/hooks" covers the hooks of a submodule named lib
// (.git/modules/lib/hooks), of one named vendor/lib
// (.git/modules/vendor/lib/hooks) and of a submodule nested in one
// (.git/modules/lib/modules/sub/hooks). A pattern names the path and
// everything below it. One shape is special: a pattern whose last component
// is ".git" names a .git that is NOT a directory, a gitfile ("gitdir: PATH",
// a submodule's or linked worktree's), which tells git where the repository
// is, so rewriting it hands git another repository's hooks and
// configuration. A .git directory itself is never protected whole: that
// would stop every commit.
//
// A ".git" component that more of the pattern follows stands also for the
// git directories of other names that git would use there: the directory a
// .git gitfile points to (`git init --separate-git-dir`, a nested
// repository whose gitfile says "gitdir: ../gd"), and a directory that is
// itself a git directory (a bare repository, remote.git). So
// "**/.git/hooks" covers .gd/hooks, gd/hooks and remote.git/hooks too.
// Telling those apart takes a look at the files: FindProtected and
// MatchProtectedIn look, MatchProtected does not.
//
// Not in the list, on purpose: .gitmodules (`git submodule add` writes it;
// git takes no command from it since CVE-2019-19604, and it is tracked,
// reviewable project content), .gitattributes (it can only name drivers that
// .git/config defines), .envrc (direnv asks again after any change). The
// session home directory and the scratch directory are not writable
// directories in this sense: they are corral's own, nothing on the host runs
// from them, and tools must be free to set up their shell there.
//
// What protection covers of git: the hooks, configuration, config.worktree
// and commondir of the repository at the top and of repositories nested in
// it, of their submodules at any depth (names with a slash, submodules of
// submodules, their linked worktrees), of a git directory a gitfile points
// to inside the writable directory (a separate git directory, in-tree or in
// a dot directory), and of bare repositories; and gitfiles themselves,
// those of submodules at any depth of the working tree included (found from
// their git directories below .git/modules: the .git where the submodule's
// core.worktree or its name leads, third_party/go/lib/.git). For commands,
// "nested" means within the scan's bounds (FindProtected: two directories
// below the top, not in dot directories nor node_modules; a bounded walk
// below .git/modules), and a writable directory wider than the bounds
// fails closed: the backends refuse every command in it until it fits or
// the patterns change (ScanCutError), as what the scan did not see could
// hold a protected path that a command made writable; the file tools
// refuse writes at any depth. Normal git work (objects, refs, the index,
// HEAD, logs) stays writable everywhere.
//
// What protection does not cover: files of the project that run code by
// design (a Makefile, package.json scripts, .husky/, CI files: the project's
// content, which shows in `git diff`), and a core.hooksPath pointing into
// the tree. For commands: repositories (bare ones included) nested deeper
// than the scan looks or in dot directories or node_modules, their
// submodules, git directories that only a gitfile out of the scan's reach
// points to, and the gitfiles of linked worktrees out of its reach, are as
// writable as the rest of the project, and one a command makes there (`git
// init a/b/c`) keeps the configuration the command gave it (the scan after a
// command moves out what appeared within its reach). What the command that
// made the tree wider than the bounds made past them stays too (its result
// warns, and the next command is refused). A directory counts as a
// git directory by what is in it when the scan or a file tool looks (HEAD,
// and objects/ and refs/ or commondir): one that a command leaves incomplete
// and the file tools complete afterwards (hooks first, HEAD last) is taken
// for the person's from then on. A git directory nested inside another's
// data (objects/, refs/; git refuses a submodule there) is not looked for.
// Without a look at the files (MatchProtected), a submodule named x/hooks is
// taken for the hooks of x, and a submodule's branch named hooks or config
// for protected; the scan, which looks, only errs the first way (its git
// directory is read-only for commands). It is a barrier against the known
// ways of planting code for later, not a proof that nothing a sandbox wrote
// will ever run on the host.
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
	// Submodules: "*/**", one directory or more, as a submodule's name may
	// have slashes (vendor/lib) and submodules nest
	// (.git/modules/lib/modules/sub); not "**" alone, which would take a
	// submodule named hooks (.git/modules/hooks) for hooks.
	"**/.git/modules/*/**/hooks",
	"**/.git/modules/*/**/config",
	"**/.git/modules/*/**/config.worktree",
	"**/.git/modules/*/**/commondir",
	// Linked worktrees have one-component names.
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
// absolute, has an empty, "." or ".." component, uses "**" other than as a
// whole component, has "**" twice in a row, ends with "**" or is "**"
// alone, or has a bad wildcard. Errors wrap ErrBadRequest.
func CheckProtected(patterns []string) error {
	for _, p := range patterns {
		if _, err := parsePattern(p); err != nil {
			return err
		}
	}
	return nil
}

// ProtectedPattern is a protected-path pattern parsed (see DefaultProtected
// for the language), in the form the scan of a tree (package hostview) walks.
type ProtectedPattern struct {
	Raw      string   // the pattern as written
	Anywhere bool     // a leading "**/": the rest may start at any depth
	Comps    []string // the components after it ("**" for any directories)
	GitFile  bool     // the last component is ".git": only a non-directory matches
}

func parsePattern(raw string) (ProtectedPattern, error) {
	bad := func(why string) (ProtectedPattern, error) {
		return ProtectedPattern{}, fmt.Errorf("%w: protected path pattern %q %s", ErrBadRequest, raw, why)
	}
	if raw == "" {
		return bad("is empty")
	}
	if strings.HasPrefix(raw, "/") {
		return bad("must be relative to the top of a writable directory")
	}
	comps := strings.Split(raw, "/")
	p := ProtectedPattern{Raw: raw}
	if comps[0] == "**" {
		p.Anywhere, comps = true, comps[1:]
		if len(comps) == 0 {
			return bad("names everything")
		}
	}
	for i, c := range comps {
		switch {
		case c == "" || c == "." || c == "..":
			return bad("has an empty, \".\" or \"..\" component")
		case c == "**" && i == len(comps)-1:
			return bad("ends with ** (a pattern names everything below its path already)")
		case c == "**" && (i == 0 || comps[i-1] == "**"):
			return bad("has ** twice in a row")
		case c != "**" && strings.Contains(c, "**"):
			return bad("uses ** other than as a whole component")
		}
		if _, err := path.Match(c, ""); err != nil {
			return bad("has a bad wildcard")
		}
	}
	p.Comps = comps
	p.GitFile = comps[len(comps)-1] == ".git"
	return p, nil
}

// ParseProtected returns the well-formed patterns of patterns parsed, in
// order; malformed ones are left out (CheckProtected names them).
func ParseProtected(patterns []string) []ProtectedPattern {
	out := make([]ProtectedPattern, 0, len(patterns))
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
// directories here, while FindProtected looks only a bounded depth down,
// and a ".git" component stands for nothing but a .git (MatchProtectedIn
// looks for git directories of other names). Malformed patterns never
// match (see CheckProtected).
func MatchProtected(rel string, dir bool, patterns []string) (string, bool) {
	if rel == "" || rel == "." || strings.HasPrefix(rel, "/") {
		return "", false
	}
	comps := strings.Split(rel, "/")
	for _, p := range ParseProtected(patterns) {
		pat := p.Comps
		if p.Anywhere {
			pat = append([]string{"**"}, pat...)
		}
		// A match may end before the last component (rel lies below the
		// protected path), except a gitfile's: a .git with something below
		// it is a .git directory.
		if matchFrom(pat, comps, 0, func(end int) bool { return !p.GitFile || end == len(comps) && !dir }) {
			return p.Raw, true
		}
	}
	return "", false
}

// matchFrom reports whether pat matches names[i:end] for some end that ok
// accepts; "**" matches any number of names.
func matchFrom(pat, names []string, i int, ok func(end int) bool) bool {
	if len(pat) == 0 {
		return ok(i)
	}
	if pat[0] == "**" {
		for j := i; j <= len(names); j++ {
			if matchFrom(pat[1:], names, j, ok) {
				return true
			}
		}
		return false
	}
	if i == len(names) {
		return false
	}
	if m, _ := path.Match(pat[0], names[i]); !m {
		return false
	}
	return matchFrom(pat[1:], names, i+1, ok)
}
