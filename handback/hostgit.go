package handback

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Reasons for paths the host's own repositories make risky (HostGit).
const (
	WhyHooksPath   = "the host repository's core.hooksPath names this directory: git runs the hooks in it"
	WhyIncludePath = "the host repository's configuration includes this file (include.path): it can name programs git runs"
	WhyHookLink    = "a hook of the host repository is a symlink to this file: git runs it"
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
// repository, with git config --file (no includes followed, no system or
// global files). Where git cannot be run there is nothing to run hooks.
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
	r := &hostRepo{files: map[string]bool{}, links: map[string]bool{}}
	cfg := ConfigPaths(gitConfigList(filepath.Join(gitdir, "config")))
	hooks := filepath.Join(gitdir, "hooks")
	if cfg.HooksPath != "" && !strings.HasPrefix(cfg.HooksPath, "~") {
		// Relative to where hooks run: the working tree's top (githooks(5)).
		hp := cfg.HooksPath
		if !filepath.IsAbs(hp) {
			hp = filepath.Join(tree, hp)
		}
		hooks = filepath.Clean(hp)
		r.hooksPath = hooks
	}
	for _, inc := range cfg.Includes {
		if strings.HasPrefix(inc, "~") {
			continue
		}
		if !filepath.IsAbs(inc) {
			inc = filepath.Join(gitdir, inc) // relative to the including file (git-config(1))
		}
		r.files[filepath.Clean(inc)] = true
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
		}
	}
	return c
}
