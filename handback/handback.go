// Package handback is the host's policy for what a sandbox hands back:
// review mode's apply (package layer), `corral cp` out of a workspace and
// `corral sync --pull` (package wscopy, through transfer.Unpack), and any
// later way out. Everything a sandbox hands back is hostile input: a
// command, or a forged helper in a pod, chooses every name, kind and byte
// of it. The host decides, never the sandbox's side.
//
// Two rules, pure functions of names (and of which directories are git
// directories, a look at the files that the caller makes):
//
//   - Containment (Within): an entry lands at or below the top the person
//     asked for, or the whole hand-back is refused (the tar-slip family:
//     kubectl cp's CVE-2018-1002100, CVE-2019-1002101, CVE-2019-11246,
//     CVE-2019-11249 trusted the archive a container's tar sent).
//   - Risk (Classify, Policy): a path that makes the host run code when a
//     person merely uses the project is held back, listed with why, and
//     written only when the person names it (Policy.Include, the CLI's
//     --include-risky PATH): git hooks and configuration at any depth and
//     in git directories of any name (core.fsmonitor, core.hooksPath,
//     core.sshCommand, core.pager, filter and diff drivers run on the next
//     git status; git's safe.directory, CVE-2022-24765, exists for this),
//     gitfiles, git attributes (they pick filter, diff and merge drivers),
//     direnv's .envrc, Mercurial's hgrc, mise's project configuration,
//     Python start-up code (.pth in a site directory, sitecustomize),
//     shell start-up files, editor and agent settings (tasks, launch
//     configurations, MCP servers, hooks), and the configured protected
//     paths.
//
// Names are compared as a case-insensitive file system would take them
// (".GIT", ".Git", NTFS's "git~1" and trailing dots or spaces), so a
// destination on such a file system holds no surprise.
package handback

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/termsafe"
	"github.com/corralhq/corral/sandbox"
)

// Kind is what an entry is.
type Kind uint8

// The kinds of entries a sandbox hands back.
const (
	File Kind = iota
	Dir
	Symlink
	// Other is a fifo, socket or device: never written to the host.
	Other
)

// Risk is a path held back, and why.
type Risk struct {
	// Path is slash-separated, relative to the destination's top.
	Path string `json:"path"`
	// Why says what on the host would run it.
	Why string `json:"why"`
}

// String is the path as a person names it back (QuoteArg: as git prints
// it, in double quotes too when a shell would split or expand it) and the
// reason.
func (r Risk) String() string { return QuoteArg(r.Path) + ": " + r.Why }

// The reasons Classify gives.
const (
	WhyHook       = "a git hook: git runs it (commit, checkout, merge, push, rebase)"
	WhyGitConfig  = "git configuration: it names programs git runs (core.fsmonitor on every git status, core.hooksPath, core.sshCommand, core.pager, filter and diff drivers)"
	WhyCommondir  = "it tells git where a repository's configuration and hooks are"
	WhyGitfile    = "a gitfile: it tells git which repository, with its hooks and configuration, to use"
	WhyAttributes = "git attributes: they pick the filter, diff and merge drivers git runs"
	WhyEnvrc      = "direnv runs it when a shell enters the directory"
	WhyShell      = "a shell start-up file: a shell runs it"
	WhyEditor     = "editor or agent settings: tasks, launch configurations, MCP servers and hooks run programs"
	WhyHome       = "a home directory's configuration: git, ssh, editors or the desktop run programs it names"
	WhyMakesGit   = "it makes its directory a git directory whose configuration or hooks are already there (git would run them)"
	WhyHg         = "Mercurial configuration: its [hooks] and [extensions] run programs on every hg command (hg status)"
	WhyToolConfig = "a tool manager's project configuration: mise's [hooks] and [tasks] run programs when a shell enters the directory"
	WhyPython     = "Python start-up code: a .pth line starting with import, and sitecustomize/usercustomize, run at every start of that Python"
	WhyLinkOut    = "a symlink that leads out of the destination: what a tool on the host writes through it (a build's log, an install) lands there"
	WhyGitDelete  = "it deletes a repository's own data (commits, objects, refs, HEAD, the index): its history on the host would be gone"
)

// InGitDir reports whether rel (slash-separated, clean, relative to the
// destination's top) is a .git or lies inside one, or is or lies inside a
// directory isGitDir calls a git directory (a bare repository, a separate git
// directory; nil takes only .git), the top included. Apply holds a
// deletion there (WhyGitDelete): a diff sums a repository's changes up in
// one line, so a session that removed its objects and refs would
// otherwise take the host's history with an apply nobody read. Pure.
func InGitDir(rel string, isGitDir func(dir string) bool) bool {
	if rel == "" || rel == "." {
		return false
	}
	if isGitDir != nil && isGitDir(".") {
		return true
	}
	comps := strings.Split(rel, "/")
	for i, c := range comps {
		if isDotGit(c) {
			return true
		}
		if isGitDir != nil && isGitDir(strings.Join(comps[:i+1], "/")) {
			return true
		}
	}
	return false
}

// systemDirs are where symlinks a sandbox makes may lead out of the
// destination without being held: a virtual environment's bin/python to
// /usr/bin/python3, tools under /opt or /nix. Writing there takes root.
var systemDirs = []string{"/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/lib32/", "/opt/", "/nix/", "/etc/alternatives/", "/snap/"}

// LinksOut reports whether a symlink at rel (relative to the destination's
// top, slash-separated) with target leads out of the top: an absolute
// target outside the system's directories (systemDirs), or a relative one
// that climbs above the top, resolved from rel's directory as the
// kernel would were no component on the way a symlink (path_resolution(7)).
func LinksOut(rel, target string) bool {
	if target == "" {
		return false
	}
	if strings.HasPrefix(target, "/") {
		t := path.Clean(target) + "/"
		return !slices.ContainsFunc(systemDirs, func(d string) bool { return strings.HasPrefix(t, d) })
	}
	j := path.Join(path.Dir(rel), target)
	return j == ".." || strings.HasPrefix(j, "../")
}

// CheckLink is Check for a symlink at rel to target: one that leads out
// of the destination (LinksOut) is risky too (WhyLinkOut), and written
// only when included.
func (p Policy) CheckLink(rel, target string, isGitDir func(dir string) bool) (why string, write bool) {
	why, write = p.Check(rel, Symlink, isGitDir)
	if why == "" && LinksOut(rel, target) {
		return WhyLinkOut, p.Included(rel)
	}
	return why, write
}

// shellFiles are the shell start-up files (bash(1) INVOCATION, zsh(1)
// STARTUP/SHUTDOWN FILES), risky at any depth: a destination may be a
// home directory, or become one.
var shellFiles = []string{
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".bash_aliases",    // Debian's and Ubuntu's default .bashrc sources it
	".bash_completion", // bash-completion sources it in every interactive shell
	".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
	".kshrc", ".mkshrc", ".cshrc", ".tcshrc", ".login", ".logout",
	".xprofile", ".xsession", ".xsessionrc", ".xinitrc",
}

// homeConfig are files and directories of a home directory that name
// programs to run, risky at any depth as shellFiles are: git's global
// configuration (core.fsmonitor, core.pager, aliases), ssh's (ProxyCommand,
// LocalCommand; authorized_keys' command=), and editors' per-directory
// start-up files (vi's .exrc, Neovim's .nvim.lua, Emacs' .dir-locals.el).
var homeConfig = []string{
	".gitconfig", ".ssh", ".exrc", ".vimrc", ".nvimrc", ".nvim.lua", ".emacs", ".dir-locals.el", ".dir-locals-2.el",
	".hgrc",            // Mercurial's user configuration (hgrc(5)): [hooks], [extensions]
	".vim", ".emacs.d", // vim's plugin/ and Emacs' init.el load at every start
	".tmux.conf",       // run-shell, and if-shell's commands
	".pam_environment", // pam_env(8): LD_PRELOAD for every login
}

// localDirs are directories under ~/.local whose files run: bin/ is on
// PATH (Debian's and Ubuntu's .profile put it there, so a git or ls there
// runs instead of the system's), share/systemd holds user units and
// share/applications desktop entries (their Exec=).
var localDirs = map[string][]string{"bin": nil, "share": {"systemd", "applications", "autostart"}}

// configDirs are directories under ~/.config (XDG_CONFIG_HOME) whose files
// name programs to run: git's global configuration and attributes, fish's
// start-up files, systemd user units, desktop autostart entries,
// environment.d (systemd's user environment: LD_PRELOAD, PATH), direnv's
// direnvrc, mise's and Mercurial's user configuration.
var configDirs = []string{"git", "fish", "systemd", "autostart", "nvim", "environment.d", "direnv", "mise", "mise.toml", "hg",
	// and terminals', multiplexers' and editors' (key bindings and
	// profiles that run programs).
	"tmux", "code", "cursor", "zed", "helix", "kitty", "alacritty", "wezterm", "opencode"}

// toolConfigs are tool managers' per-directory configuration that runs
// programs when a shell enters the directory (mise's [hooks] enter,
// [env] _.source; mise.jdx.dev/configuration.html lists the names).
var toolConfigs = []string{".mise.toml", "mise.toml", ".mise.local.toml", "mise.local.toml", ".mise", ".rtx.toml", ".rtx.local.toml"}

// isToolConfig reports whether the path component f (folded), last or
// not, is one of mise's project configuration names: toolConfigs, a
// mise/ directory (mise/config.toml, mise/conf.d/*.toml), and the
// per-environment mise.ENV.toml and .mise.ENV.toml.
func isToolConfig(f string, last bool) bool {
	switch {
	case slices.Contains(toolConfigs, f):
		return true
	case f == "mise" && !last:
		return true
	case last && strings.HasSuffix(f, ".toml") && (strings.HasPrefix(f, "mise.") || strings.HasPrefix(f, ".mise.")):
		return true
	}
	return false
}

// editorNames are editor and agent settings, files or directories, risky
// at any depth (an editor may open any directory as its workspace): VS
// Code's tasks.json and launch.json, JetBrains' run configurations, dev
// containers' initializeCommand (run on the host), MCP server lists and
// agents' hooks.
var editorNames = []string{
	".vscode", ".idea", ".devcontainer", ".devcontainer.json", ".mcp.json",
	".claude", ".codex", ".cursor", ".gemini",
	".zed", ".helix", // Zed's tasks.json; Helix's languages.toml names language servers
	// other agents' MCP server lists and settings
	".kiro", ".roo", ".continue", ".opencode", "opencode.json", "opencode.jsonc", ".windsurf", ".amazonq",
	".aider.conf.yml", // aider's lint-cmd and test-cmd
}

// fold is a name as a case-insensitive file system takes it: lower case,
// without the trailing dots and spaces NTFS drops.
func fold(name string) string {
	return strings.ToLower(strings.TrimRight(name, ". "))
}

// isDotGit reports whether a path component is a .git as git and the
// file systems it runs on take it (git's is_ntfs_dotgit and is_hfs_dotgit
// guard the same names).
func isDotGit(c string) bool {
	f := fold(c)
	return f == ".git" || f == "git~1"
}

// Classify returns why writing rel to the host is risky, or "" when it is
// not. rel is slash-separated and clean, relative to the destination's
// top (the directory the person named, or, for a single entry, its
// parent); k is what would be written there. isGitDir, when not nil,
// reports whether a directory (relative, as rel) is a git directory under
// another name than .git (a bare repository, a separate git directory: one
// with HEAD, and objects/ and refs/ or commondir, as the files stand after
// the hand-back); nil takes only .git for one.
//
// A directory is never risky: made empty it runs nothing, and the files
// and symlinks below it are judged one by one (a path below a risky name
// is risky too: a hook directory's files, a settings directory's
// contents). Inside a git directory only what makes git run programs is
// risky (hooks/ but for the *.sample files git init writes, which git
// never runs; config, config.worktree, commondir, info/attributes; the
// same of submodules under modules/ and of linked worktrees under
// worktrees/); objects, refs, logs, the index and HEAD are data and pass.
func Classify(rel string, k Kind, isGitDir func(dir string) bool) string {
	if rel == "" || rel == "." || k == Dir {
		return ""
	}
	comps := strings.Split(rel, "/")
	if isGitDir != nil && isGitDir(".") {
		// The destination's top is itself a git directory (a bare
		// repository made by `git init --bare .`): git run there, or
		// anywhere below, reads its config and hooks.
		if why := inGitDir(comps); why != "" {
			return why
		}
	}
	for i, c := range comps {
		last := i == len(comps)-1
		if isDotGit(c) {
			if last {
				return WhyGitfile
			}
			if why := inGitDir(comps[i+1:]); why != "" {
				return why
			}
			// Below a .git, only inGitDir's rules apply: a file named
			// .bashrc among its objects is data.
			return ""
		}
		f := fold(c)
		switch {
		case f == ".gitattributes":
			return WhyAttributes
		case f == ".envrc":
			return WhyEnvrc
		case slices.Contains(shellFiles, f):
			return WhyShell
		case slices.Contains(editorNames, f):
			return WhyEditor
		case slices.Contains(homeConfig, f):
			return WhyHome
		case f == ".config" && !last && slices.Contains(configDirs, fold(comps[i+1])):
			return WhyHome
		case f == ".hg" && !last:
			// hgrc(5): a repository's .hg/hgrc (and hgrc-not-shared);
			// sharedpath points hg at another repository's, as
			// commondir does git.
			switch fold(comps[i+1]) {
			case "hgrc", "hgrc-not-shared", "sharedpath", "hgrc.d":
				return WhyHg
			}
		case f == ".local" && !last:
			if subs, ok := localDirs[fold(comps[i+1])]; ok && (subs == nil || i+2 < len(comps) && slices.Contains(subs, fold(comps[i+2]))) {
				return WhyHome
			}
		case isToolConfig(f, last):
			return WhyToolConfig
		case last && (f == "sitecustomize.py" || f == "usercustomize.py"):
			return WhyPython
		case last && strings.HasSuffix(f, ".pth") && i > 0 && (fold(comps[i-1]) == "site-packages" || fold(comps[i-1]) == "dist-packages"):
			// site(7)'s .pth files are read only in a site directory.
			return WhyPython
		}
		if !last && isGitDir != nil && isGitDir(strings.Join(comps[:i+1], "/")) {
			return inGitDir(comps[i+1:])
		}
	}
	return ""
}

// inGitDir returns why rest, a path below a git directory, is risky.
func inGitDir(rest []string) string {
	if len(rest) == 0 {
		return ""
	}
	switch fold(rest[0]) {
	case "hooks":
		// hook.c's find_hook runs hooks/NAME for a known NAME only; the
		// samples git init writes are named NAME.sample.
		if len(rest) == 2 && strings.HasSuffix(rest[1], ".sample") {
			return ""
		}
		return WhyHook
	case "config", "config.worktree":
		return WhyGitConfig
	case "commondir":
		return WhyCommondir
	case "info":
		if len(rest) > 1 && fold(rest[1]) == "attributes" {
			return WhyAttributes
		}
	case "modules":
		// modules/NAME/..., NAME of one or more components (vendor/lib),
		// any of them a name git uses for data (a submodule named refs),
		// submodules nested (modules/lib/modules/sub): every place a
		// submodule's git directory could start. This errs one way only:
		// a submodule's branch named hooks (refs/heads/hooks) is held.
		for j := 2; j < len(rest); j++ {
			if why := inGitDir(rest[j:]); why != "" {
				return why
			}
		}
	case "worktrees":
		if len(rest) > 2 {
			return inGitDir(rest[2:])
		}
	}
	return ""
}

// Policy is what a hand-back may write: Classify's rules, the configured
// protected paths, and what the person chose to let through.
type Policy struct {
	// Protected are protected-path patterns (sandbox.DefaultProtected's
	// form), matched against the path relative to the destination's top.
	Protected []string
	// Include are paths (relative to the destination's top, as Risk.Path
	// shows them) the person named to be written although risky: a path
	// includes itself and everything below it.
	Include []string
	// Host, when set, says why rel is risky through what the destination
	// already holds ("" when it is not): HostGit.Why, for the paths the
	// host's repositories run from their working trees.
	Host func(rel string) string
	// Own are corral's own files and directories (absolute, symlinks
	// resolved: its executable, a helper beside it, its settings, state
	// and cache directories), and Root the destination's directory that
	// rel paths start from (resolved): a hand-back that would write one
	// of them, or below one, is held, as a sandbox must never replace
	// what corral runs or reads as its settings. Either empty: not
	// checked.
	Own  []string
	Root string
}

// OwnAt returns the entry of own that abs (clean, absolute) is, or lies
// below, or "".
func OwnAt(abs string, own []string) string {
	for _, o := range own {
		if o != "" && (abs == o || strings.HasPrefix(abs, o+"/")) {
			return o
		}
	}
	return ""
}

// Check returns why rel is risky ("" when it is not: Classify, then the
// protected paths, then Host; a directory never is) and whether it may
// be written: not risky, or named in Include.
func (p Policy) Check(rel string, k Kind, isGitDir func(dir string) bool) (why string, write bool) {
	why = Classify(rel, k, isGitDir)
	if why == "" && k != Dir && len(p.Protected) > 0 {
		if m, ok := sandbox.MatchProtected(rel, k == Dir, p.Protected); ok {
			why = fmt.Sprintf("a protected path (%s)", m)
		}
	}
	if why == "" && k != Dir && p.Root != "" {
		if o := OwnAt(filepath.Join(p.Root, rel), p.Own); o != "" {
			why = fmt.Sprintf("corral's own %s: what corral runs or reads as its settings and state is never written from a sandbox", o)
		}
	}
	if why == "" && k != Dir && p.Host != nil {
		why = p.Host(rel)
	}
	if why == "" {
		return "", true
	}
	return why, p.Included(rel)
}

// Included reports whether rel is one of Include or lies below one. An
// Include is taken as given and, when it reads as a quoted path
// (UnquotePath: as Risk.String prints one, with or without the double
// quotes a shell strips), as the path it quotes too.
func (p Policy) Included(rel string) bool {
	for _, inc := range p.Include {
		if strings.TrimSpace(inc) == "" {
			continue // an unset variable names nothing, not everything
		}
		if includes(inc, rel) {
			return true
		}
		if u, ok := UnquotePath(inc); ok && strings.TrimSpace(u) != "" && includes(u, rel) {
			return true
		}
	}
	return false
}

func includes(inc, rel string) bool {
	inc = path.Clean(strings.TrimPrefix(inc, "./"))
	return inc == "." || rel == inc || strings.HasPrefix(rel, inc+"/")
}

// QuoteArg returns p as a person can paste it back into a shell command
// line: QuotePath's form, also in double quotes (with $ and ` escaped)
// when p holds a space or another byte a shell would split at or expand.
// UnquotePath reads it back, whether the shell stripped the quotes or not.
func QuoteArg(p string) string {
	q := QuotePath(p)
	if strings.HasPrefix(q, `"`) {
		return strings.NewReplacer("$", `\$`, "`", "\\`").Replace(q)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("/._-+,:@%=^", c) >= 0) {
			return `"` + strings.NewReplacer("$", `\$`, "`", "\\`").Replace(p) + `"`
		}
	}
	if strings.HasPrefix(p, "~") {
		return `"` + p + `"`
	}
	return p
}

// UnquotePath reads s as QuotePath or QuoteArg print a path: in double
// quotes with C escapes, or, as a shell leaves that after stripping the
// quotes, with the escapes alone. ok is false when s has neither quotes
// nor escapes to read, or an escape QuotePath does not write.
func UnquotePath(s string) (string, bool) {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	} else if !strings.Contains(s, `\`) {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i == len(s) {
			return "", false
		}
		switch c = s[i]; c {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'v':
			b.WriteByte('\v')
		case 'f':
			b.WriteByte('\f')
		case 'r':
			b.WriteByte('\r')
		case '"', '\\', '$', '`':
			b.WriteByte(c)
		default:
			if i+3 > len(s) {
				return "", false
			}
			n, err := strconv.ParseUint(s[i:i+3], 8, 8)
			if err != nil {
				return "", false
			}
			b.WriteByte(byte(n))
			i += 2
		}
	}
	return b.String(), true
}

// Within reports whether name, a clean slash-separated entry name, is top
// or lies below it; top "" (a directory's contents) takes every name.
// Names with ".." or a leading "/" are the caller's to refuse first
// (transfer.CheckEntry).
func Within(name, top string) bool {
	return top == "" || top == "." || name == top || strings.HasPrefix(name, top+"/")
}

// QuotePath returns p as git prints a path with core.quotePath (its
// default, quote.c's quote_c_style); it is termsafe.Path, corral's rule
// for paths in output for people: unchanged when every byte is printable
// ASCII other than a double quote and a backslash, else in double quotes
// with C escapes and three octal digits for every other byte. A name can
// then never forge a line of a diff ("dir\n+++ b/evil"), nor reach a
// terminal as an escape sequence or a bidi override.
func QuotePath(p string) string { return termsafe.Path(p) }

// GitDirMarker reports whether rel is one of the entries that make its
// directory a git directory (HEAD, objects, refs, commondir: git's
// is_git_directory) and returns that directory ("." for the top). A
// .git's own are not counted: what lies in a .git is judged by name
// whatever it holds.
func GitDirMarker(rel string) (dir string, ok bool) {
	switch fold(path.Base(rel)) {
	case "head", "objects", "refs", "commondir":
	default:
		return "", false
	}
	dir = path.Dir(rel)
	if isDotGit(path.Base(dir)) {
		return "", false
	}
	return dir, true
}

// HasGitRunnables reports whether the directory dir, taken for a git
// directory, already holds what git would run or take programs from (a
// configuration, commondir, info/attributes, submodules' git directories,
// a hook other than git init's samples), as exists and list (a
// directory's names; nil when it has none) see the files. A hand-back
// that turns such a directory into a git directory (two hand-backs: first
// the configuration, then HEAD) is held back for it (WhyMakesGit).
func HasGitRunnables(dir string, exists func(rel string) bool, list func(rel string) []string) bool {
	for _, n := range []string{"config", "config.worktree", "commondir", "info/attributes", "modules"} {
		if exists(path.Join(dir, n)) {
			return true
		}
	}
	for _, h := range list(path.Join(dir, "hooks")) {
		if !strings.HasSuffix(h, ".sample") {
			return true
		}
	}
	return false
}
