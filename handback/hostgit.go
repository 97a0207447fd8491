package handback

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"time"
)

// Reasons for paths the host's own repositories make risky (HostGit).
const (
	WhyHooksPath   = "the host repository's core.hooksPath names this directory: git runs the hooks in it"
	WhyIncludePath = "the host repository's configuration includes this file (include.path): it can name programs git runs"
	WhyHookLink    = "a hook of the host repository is a symlink to this file: git runs it"
	WhyConfigProg  = "the host's git configuration names this file as a program git runs (core.fsmonitor, core.sshCommand, a filter, diff or merge driver, an alias, ...)"
)

// HostGit finds the paths below a destination that the host's own git
// repositories run from their working trees, which Classify cannot see
// in the path alone: the directory core.hooksPath names (husky's
// .husky, a project's .githooks), files include.path and
// includeIf.*.path name, and the targets of hooks that are symlinks into
// the tree (.git/hooks/pre-commit -> ../../scripts/pre-commit). Writing
// such a path hands the next git commit a program. A repository is the
// nearest directory at or above a path's directory, up to the
// filesystem's root, holding a .git directory or gitfile (git's
// discovery, setup.c); what its configuration says is read once per
// repository, with git config --file over the system, global and
// repository files in git's order (no includes followed), ~/ forms
// expanded for the person running corral; keys that name programs
// (core.fsmonitor, aliases with "!", filter and diff drivers, ...) make
// the tree's files they name risky too. Where git cannot be run there is
// nothing to run hooks.
// A path is judged by its own repository only: a hook of another
// repository that is a symlink out of its own tree, into this one, is
// not seen. It is not safe for concurrent use.
type HostGit struct {
	root  string
	dirs  map[string]*hostRepo // a directory (absolute) -> its repository, nil for none
	repos map[string]*hostRepo // a working tree (absolute) -> what it runs
}

type hostRepo struct {
	hooksPath string          // absolute; "" when unset or outside every tree
	files     map[string]bool // absolute: included files, hook symlinks' targets
	links     map[string]bool
	progs     map[string]bool // absolute: programs the configuration names
}

// NewHostGit returns a HostGit for paths relative to root, an absolute
// host directory (the destination's top).
func NewHostGit(root string) *HostGit {
	return &HostGit{root: filepath.Clean(root), dirs: map[string]*hostRepo{}, repos: map[string]*hostRepo{}}
}

// Why returns why writing rel (slash-separated, relative to the root)
// would give a host repository a program to run (WhyHooksPath,
// WhyIncludePath, WhyHookLink), or "".
func (h *HostGit) Why(rel string) string {
	abs := filepath.Join(h.root, filepath.FromSlash(rel))
	r := h.repoOf(filepath.Dir(abs))
	if r == nil {
		return ""
	}
	if r.hooksPath != "" && (abs == r.hooksPath || strings.HasPrefix(abs, r.hooksPath+string(filepath.Separator))) {
		return WhyHooksPath
	}
	if r.links[abs] {
		return WhyHookLink
	}
	if r.files[abs] {
		return WhyIncludePath
	}
	if r.progs[abs] {
		return WhyConfigProg
	}
	return ""
}

// repoOf returns the repository dir lies in, nil for none.
func (h *HostGit) repoOf(dir string) *hostRepo {
	var walked []string
	var found *hostRepo
	for d := dir; ; d = filepath.Dir(d) {
		if r, ok := h.dirs[d]; ok {
			found = r
			break
		}
		walked = append(walked, d)
		if gitdir := gitDirAt(d); gitdir != "" {
			found = h.repos[d]
			if found == nil {
				found = readHostRepo(d, gitdir)
				h.repos[d] = found
			}
			break
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	for _, d := range walked {
		h.dirs[d] = found
	}
	return found
}

// gitDirAt returns the git directory of a working tree at dir: dir/.git
// when it is a directory, the one a gitfile there names, or "".
func gitDirAt(dir string) string {
	p := filepath.Join(dir, ".git")
	fi, err := os.Lstat(p)
	if err != nil {
		return ""
	}
	if fi.IsDir() {
		return p
	}
	if !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return ""
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	g, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
	if !ok {
		return ""
	}
	g = strings.TrimSpace(g)
	if !filepath.IsAbs(g) {
		g = filepath.Join(dir, g)
	}
	return g
}

// readHostRepo reads what the repository with working tree tree and git
// directory gitdir runs from its tree.
func readHostRepo(tree, gitdir string) *hostRepo {
	r := &hostRepo{files: map[string]bool{}, links: map[string]bool{}, progs: map[string]bool{}}
	// Every file git reads, in its order (git-config(1), FILES): system,
	// global (XDG, then ~/.gitconfig), the repository's own; the last
	// core.hooksPath wins. An include's relative path is relative to the
	// file that includes it.
	var cfg GitConfigPaths
	for _, f := range append(hostConfigFiles(), filepath.Join(gitdir, "config")) {
		c := ConfigPaths(gitConfigList(f))
		if c.HooksPath != "" {
			cfg.HooksPath = c.HooksPath
		}
		for _, inc := range c.Includes {
			if inc = expandHome(inc); inc != "" {
				if !filepath.IsAbs(inc) {
					inc = filepath.Join(filepath.Dir(f), inc)
				}
				r.files[filepath.Clean(inc)] = true
			}
		}
		for _, p := range c.Programs {
			// Commands run in the working tree's top (git-config(1),
			// core.fsmonitor, alias.*).
			if p = expandHome(p); p != "" {
				if !filepath.IsAbs(p) {
					p = filepath.Join(tree, p)
				}
				r.progs[filepath.Clean(p)] = true
			}
		}
	}
	hooks := filepath.Join(gitdir, "hooks")
	if hp := expandHome(cfg.HooksPath); hp != "" {
		// Relative to where hooks run: the working tree's top (githooks(5)).
		if !filepath.IsAbs(hp) {
			hp = filepath.Join(tree, hp)
		}
		hooks = filepath.Clean(hp)
		r.hooksPath = hooks
	}
	ents, _ := os.ReadDir(hooks)
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 || strings.HasSuffix(e.Name(), ".sample") {
			continue
		}
		t, err := os.Readlink(filepath.Join(hooks, e.Name()))
		if err != nil {
			continue
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(hooks, t)
		}
		r.links[filepath.Clean(t)] = true
		if real, err := filepath.EvalSymlinks(filepath.Join(hooks, e.Name())); err == nil {
			r.links[real] = true
		}
	}
	return r
}

// hostConfigFiles are git's system and global configuration files, in
// the order git reads them (git-config(1), FILES), as they are for the
// person running corral: $GIT_CONFIG_SYSTEM or /etc/gitconfig,
// $GIT_CONFIG_GLOBAL or $XDG_CONFIG_HOME/git/config and ~/.gitconfig.
func hostConfigFiles() []string {
	var out []string
	if os.Getenv("GIT_CONFIG_NOSYSTEM") == "" {
		if f := os.Getenv("GIT_CONFIG_SYSTEM"); f != "" {
			out = append(out, f)
		} else {
			out = append(out, "/etc/gitconfig")
		}
	}
	if f := os.Getenv("GIT_CONFIG_GLOBAL"); f != "" {
		return append(out, f)
	}
	home, _ := os.UserHomeDir()
	xdg := os.Getenv("XDG_CONFIG_HOME")
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	if xdg != "" {
		out = append(out, filepath.Join(xdg, "git", "config"))
	}
	if home != "" {
		out = append(out, filepath.Join(home, ".gitconfig"))
	}
	return out
}

// expandHome expands a leading ~/ or ~user/ as git does for pathname
// values (git-config(1), "pathname"); "" when it cannot.
func expandHome(p string) string {
	if !strings.HasPrefix(p, "~") {
		return p
	}
	name, rest, _ := strings.Cut(p[1:], "/")
	var home string
	if name == "" {
		home, _ = os.UserHomeDir()
	} else if u, err := user.Lookup(name); err == nil {
		home = u.HomeDir
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, rest)
}

// gitConfigList returns `git config --file file --null --list`: NUL-ended
// "key\nvalue" records (key lower-cased but for subsections), or nil.
func gitConfigList(file string) []byte {
	if _, err := os.Lstat(file); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "config", "--file", file, "--null", "--list")
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent", "PATH=/usr/local/bin:/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		return nil
	}
	return out
}

// GitConfigPaths are the paths a repository's configuration names that
// make git run programs from files (ConfigPaths).
type GitConfigPaths struct {
	// HooksPath is core.hooksPath's last value ("" when unset), as written.
	HooksPath string
	// Includes are the values of include.path and includeIf.<cond>.path,
	// as written.
	Includes []string
	// Programs are the words that may name files (pathWords) in the
	// values of keys that name commands git runs: core.fsmonitor,
	// core.sshCommand, core.editor, core.pager, core.askPass,
	// sequence.editor, gpg.program, credential.helper, diff.external,
	// diff.<driver>.textconv and .command, filter.<driver>.clean, .smudge
	// and .process, merge.<driver>.driver, and alias.<name> values that
	// start with "!" (git-config(1), gitattributes(5)).
	Programs []string
}

// commandKey reports whether git runs k's value as a command (see
// GitConfigPaths.Programs). k is as git lists it: section and key lower
// case, a subsection as written.
func commandKey(k, v string) bool {
	switch k {
	case "core.fsmonitor":
		// A boolean selects the built-in daemon; anything else is a hook.
		lv := strings.ToLower(v)
		return lv != "true" && lv != "false" && lv != "yes" && lv != "no" && lv != "on" && lv != "off" && lv != "1" && lv != "0" && lv != ""
	case "core.sshcommand", "core.editor", "core.pager", "core.askpass", "sequence.editor", "gpg.program", "credential.helper", "diff.external":
		return true
	}
	sec, rest, ok := strings.Cut(k, ".")
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, '.')
	last := rest[i+1:]
	switch {
	case sec == "alias":
		return strings.HasPrefix(v, "!")
	case sec == "diff" && i > 0:
		return last == "textconv" || last == "command"
	case sec == "filter" && i > 0:
		return last == "clean" || last == "smudge" || last == "process"
	case sec == "merge" && i > 0:
		return last == "driver"
	case sec == "gpg" && i > 0:
		return last == "program"
	case sec == "credential" && i > 0:
		return last == "helper"
	}
	return false
}

// pathWords returns the words of a command line that may name files in
// the working tree, with quotes, a leading "!" and the shell's
// punctuation around a word ("f() { ./x.sh; }") removed: the command
// word when it holds a slash (without one the shell looks it up in PATH,
// not the tree), and every argument but options. `bash fsmon.sh` runs
// fsmon.sh from the working tree as an interpreter's argument. An
// argument that names no file of the tree holds nothing back.
func pathWords(cmd string) []string {
	var out []string
	for i, w := range strings.Fields(strings.TrimPrefix(cmd, "!")) {
		w = strings.Trim(w, `"'(){};&|<>`)
		w = strings.Trim(w, `"'`)
		if w == "" || strings.HasPrefix(w, "-") || strings.ContainsAny(w, "$`*?[") || i == 0 && !strings.Contains(w, "/") {
			continue
		}
		out = append(out, w)
	}
	return out
}

// ConfigPaths picks core.hooksPath and the include paths out of list,
// the output of `git config --null --list`: records "key\nvalue\x00"
// (a key alone, "key\x00", for a key without a value), section and key
// names lower-cased by git, a subsection as written
// (git-config(1), "--null").
func ConfigPaths(list []byte) GitConfigPaths {
	var c GitConfigPaths
	for _, rec := range bytes.Split(list, []byte{0}) {
		key, val, ok := bytes.Cut(rec, []byte{'\n'})
		if !ok {
			continue
		}
		k := string(key)
		switch {
		case k == "core.hookspath":
			c.HooksPath = string(val)
		case k == "include.path":
			c.Includes = append(c.Includes, string(val))
		case strings.HasPrefix(k, "includeif.") && strings.HasSuffix(k, ".path"):
			c.Includes = append(c.Includes, string(val))
		case commandKey(k, string(val)):
			c.Programs = append(c.Programs, pathWords(string(val))...)
		}
	}
	return c
}
