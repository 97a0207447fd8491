package layer

import (
	"path"
	"path/filepath"

	"github.com/corralhq/corral/handback"
)

// GatePolicy is the host's policy for a review-mode layer's changes:
// package handback's rules (which hold what sandbox.DefaultProtected
// names, with git's sample hooks taken for the data they are), the
// protected-path patterns of the setting protected_paths (nil when it is
// unset), matched relative to Lower, what lower's own repositories run
// from their trees (handback.HostGit), corral's own files and
// directories (own, handback.Policy.Own), and include (paths relative to
// Lower; a directory includes what lies below it) let through.
func GatePolicy(lower string, protected, include, own []string) handback.Policy {
	root := lower
	if r, err := filepath.EvalSymlinks(lower); err == nil {
		root = r
	}
	return handback.Policy{Protected: protected, Include: include, Host: handback.NewHostGit(lower).Why, Own: own, Root: root}
}

// Risky returns the changes of cs that write (add, modify, change the
// type of) a path p calls risky, with why, in cs's order; with
// onlyHeld, only those p does not let through. A deletion is risky only
// inside a git directory (handback.WhyGitDelete: a repository's history
// lost); elsewhere removing a file runs nothing. Whether a directory is a git
// directory (HEAD, and objects/ and refs/ or commondir) is judged on the
// tree the session sees: the layer's entries over Lower's.
func Risky(cs []Change, p handback.Policy, onlyHeld bool) ([]handback.Risk, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	v, err := openMergedView(cs[0].lower, cs[0].upper)
	if err != nil {
		return nil, err
	}
	defer v.close()
	if p.Host == nil {
		p.Host = handback.NewHostGit(cs[0].lower).Why
	}
	var out []handback.Risk
	for _, ch := range cs {
		why, ok := v.risk(p, ch)
		if why == "" || onlyHeld && ok {
			continue
		}
		out = append(out, handback.Risk{Path: ch.Path, Why: why})
	}
	return out, nil
}

// risk returns why change ch is risky under p ("" when it is not: a
// deletion only inside a git directory of Lower's), and whether p lets
// it through (Include).
func (v *mergedView) risk(p handback.Policy, ch Change) (why string, ok bool) {
	if ch.New == nil {
		if handback.InGitDir(ch.Path, v.lowerGitDir) {
			return handback.WhyGitDelete, p.Included(ch.Path)
		}
		return "", false
	}
	why, ok = p.Check(ch.Path, kindOfSide(ch.New), v.isGitDir)
	if ch.New.Type == "symlink" {
		why, ok = p.CheckLink(ch.Path, ch.New.Target, v.isGitDir)
	}
	if d, marker := handback.GitDirMarker(ch.Path); why == "" && marker && v.isGitDir(d) && !v.lowerGitDir(d) && v.lowerGitRunnables(d) {
		// Lower already holds a configuration or hooks there (an
		// earlier apply's): this change would make git run them.
		why, ok = handback.WhyMakesGit, p.Included(ch.Path)
	}
	return why, ok
}

// kindOfSide is a side's kind for handback.
func kindOfSide(s *Side) handback.Kind {
	switch s.Type {
	case "file":
		return handback.File
	case "dir":
		return handback.Dir
	case "symlink":
		return handback.Symlink
	}
	return handback.Other
}

// mergedView is the tree a session sees: the layer's entries over Lower's.
// gitDirs caches isGitDir's answers (every path asks of each directory
// above it), at most maxGitDirCache of them: changes come in path order,
// so the directories asked of recently are those asked of next.
type mergedView struct {
	lo, up  *tree
	gitDirs map[string]bool
}

// maxGitDirCache bounds mergedView.gitDirs.
const maxGitDirCache = 4096

func openMergedView(lower, upper string) (*mergedView, error) {
	lo, err := openTree(lower)
	if err != nil {
		return nil, err
	}
	up, err := openTree(upper)
	if err != nil {
		lo.close()
		return nil, err
	}
	return &mergedView{lo: lo, up: up, gitDirs: map[string]bool{}}, nil
}

func (v *mergedView) close() { v.lo.close(); v.up.close() }

// typeOf returns rel's type in the mergedView ("" when absent). An opaque
// directory's hiding of Lower is not followed: a path it hides counts as
// there, which can only make more paths risky, never fewer.
func (v *mergedView) typeOf(rel string) string {
	if n, err := v.up.lstat(rel); err == nil && n != nil {
		if n.Type == "whiteout" {
			return ""
		}
		if n.Type != "file" || n.Size != 0 {
			return n.Type
		}
		if w, _, err := v.up.overlayXattr(rel, "whiteout"); err == nil && w != "" {
			return ""
		}
		return n.Type
	}
	if n, err := v.lo.lstat(rel); err == nil && n != nil {
		return n.Type
	}
	return ""
}

// isGitDir is git's is_git_directory on the mergedView.
func (v *mergedView) isGitDir(d string) bool {
	if is, ok := v.gitDirs[d]; ok {
		return is
	}
	// Any kind counts: git follows symlinks there (a HEAD linking to
	// refs/heads/main, objects linked elsewhere).
	has := func(n string) bool { return v.typeOf(path.Join(d, n)) != "" }
	is := has("HEAD") && (has("objects") && has("refs") || has("commondir"))
	if len(v.gitDirs) >= maxGitDirCache {
		clear(v.gitDirs)
	}
	v.gitDirs[d] = is
	return is
}

// lowerGitDir is isGitDir on Lower alone: before the changes.
func (v *mergedView) lowerGitDir(d string) bool {
	has := func(n string) bool { nd, err := v.lo.lstat(path.Join(d, n)); return err == nil && nd != nil }
	return has("HEAD") && (has("objects") && has("refs") || has("commondir"))
}

// lowerGitRunnables is handback.HasGitRunnables on Lower.
func (v *mergedView) lowerGitRunnables(d string) bool {
	exists := func(p string) bool { n, err := v.lo.lstat(p); return err == nil && n != nil }
	list := func(p string) []string { n, _ := v.lo.names(p); return n }
	return handback.HasGitRunnables(d, exists, list)
}
