package hostview

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// mkTree makes files (name ending in "/" for a directory, "name -> target"
// for a symlink, "name := content" for a file with content; ROOT in a
// target or content stands for the root) under a new directory and returns
// it, resolved.
func mkTree(t *testing.T, entries ...string) string {
	t.Helper()
	base := os.Getenv("CORRAL_TEST_DIR")
	if base == "" {
		base = "/var/tmp"
	}
	root, err := os.MkdirTemp(base, "corral-protect-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	root, _ = filepath.EvalSymlinks(root)
	for _, e := range entries {
		if name, content, ok := strings.Cut(e, " := "); ok {
			p := filepath.Join(root, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(strings.ReplaceAll(content, "ROOT", root)), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if name, target, ok := strings.Cut(e, " -> "); ok {
			p := filepath.Join(root, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.Symlink(strings.ReplaceAll(target, "ROOT", root), p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		p := filepath.Join(root, e)
		if strings.HasSuffix(e, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// summary renders found paths as "rel" (existing), "rel?" (missing),
// "rel!" (gitfile), "rel@" (in a git directory a .git stood for),
// "rel~L1,L2" (through symlinks), sorted.
func summary(found []ProtectedPath) []string {
	var out []string
	for _, f := range found {
		s := f.Rel
		if !f.Exists {
			s += "?"
		}
		if f.NotDir {
			s += "!"
		}
		if f.Aliased {
			s += "@"
		}
		if len(f.Links) > 0 {
			s += "~" + strings.Join(f.Links, ",")
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func TestFindProtected(t *testing.T) {
	top := []string{".bash_login?", ".bash_logout?", ".bash_profile?", ".bashrc?", ".claude?", ".codex?", ".cursor?", ".gemini?", ".idea?", ".mcp.json?", ".profile?", ".vscode?", ".zlogin?", ".zlogout?", ".zprofile?", ".zshenv?", ".zshrc?"}
	without := func(list []string, drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(list), func(s string) bool { return slices.Contains(drop, s) })
	}
	gitMissing := []string{".git?!", ".git/commondir?", ".git/config.worktree?", ".git/config?", ".git/hooks?"}
	for _, tc := range []struct {
		name  string
		tree  []string
		extra []string // expected beyond the missing top-level files
		drop  []string // expected top-level entries that are not missing
	}{
		{"empty tree", nil, gitMissing, nil},
		{"a repository", []string{".git/HEAD", ".git/config", ".git/hooks/", ".git/objects/", "main.go"},
			[]string{".git/commondir?", ".git/config", ".git/config.worktree?", ".git/hooks"}, nil},
		{"a repository without hooks", []string{".git/HEAD", ".git/config"},
			[]string{".git/commondir?", ".git/config", ".git/config.worktree?", ".git/hooks?"}, nil},
		{"settings present", []string{".vscode/settings.json", ".bashrc", ".mcp.json"}, append(slices.Clone(gitMissing), ".vscode", ".bashrc", ".mcp.json"), []string{".vscode?", ".bashrc?", ".mcp.json?"}},
		{"a gitfile", []string{".git"}, []string{".git!"}, nil},
		{"nested repositories", []string{".git/HEAD", ".git/hooks/", "a/.git/HEAD", "a/.git/hooks/", "b/c/.git/config", "b/c/d/.git/config", "e/README", ".hidden/.git/config", "node_modules/x/.git/config"},
			[]string{".git/commondir?", ".git/config.worktree?", ".git/config?", ".git/hooks",
				"a/.git/commondir?", "a/.git/config.worktree?", "a/.git/config?", "a/.git/hooks",
				"b/c/.git/commondir?", "b/c/.git/config", "b/c/.git/config.worktree?", "b/c/.git/hooks?"}, nil},
		{"a submodule and a linked worktree", []string{".git/HEAD", ".git/hooks/", ".git/config", ".git/modules/lib/HEAD", ".git/modules/lib/objects/", ".git/modules/lib/refs/", ".git/modules/lib/config", ".git/worktrees/wt/commondir", "lib/.git"},
			[]string{".git/commondir?", ".git/config", ".git/config.worktree?", ".git/hooks",
				".git/modules/lib/commondir?", ".git/modules/lib/config", ".git/modules/lib/config.worktree?", ".git/modules/lib/hooks?",
				".git/worktrees/wt/commondir", ".git/worktrees/wt/config.worktree?", "lib/.git!"}, nil},
		{"submodules at any depth", []string{".git/HEAD", ".git/objects/", ".git/refs/", ".git/hooks/", ".git/config",
			".git/modules/vendor/lib/HEAD", ".git/modules/vendor/lib/objects/hooks/", ".git/modules/vendor/lib/refs/heads/hooks", ".git/modules/vendor/lib/logs/refs/heads/config", ".git/modules/vendor/lib/config", ".git/modules/vendor/lib/hooks/",
			".git/modules/vendor/lib/modules/inner/HEAD", ".git/modules/vendor/lib/modules/inner/objects/", ".git/modules/vendor/lib/modules/inner/refs/", ".git/modules/vendor/lib/modules/inner/config",
			".git/modules/vendor/lib/worktrees/wt/HEAD", ".git/modules/vendor/lib/worktrees/wt/commondir",
			".git/modules/hooks/HEAD", ".git/modules/hooks/objects/", ".git/modules/hooks/refs/", ".git/modules/hooks/hooks/"},
			[]string{".git/commondir?", ".git/config", ".git/config.worktree?", ".git/hooks",
				".git/modules/vendor/lib/commondir?", ".git/modules/vendor/lib/config", ".git/modules/vendor/lib/config.worktree?", ".git/modules/vendor/lib/hooks",
				".git/modules/vendor/lib/modules/inner/commondir?", ".git/modules/vendor/lib/modules/inner/config", ".git/modules/vendor/lib/modules/inner/config.worktree?", ".git/modules/vendor/lib/modules/inner/hooks?",
				".git/modules/vendor/lib/worktrees/wt/commondir", ".git/modules/vendor/lib/worktrees/wt/config.worktree?", ".git/modules/vendor/lib/worktrees/wt/config?", ".git/modules/vendor/lib/worktrees/wt/hooks?",
				".git/modules/hooks/commondir?", ".git/modules/hooks/config.worktree?", ".git/modules/hooks/config?", ".git/modules/hooks/hooks"}, nil},
		{"a separate git directory", []string{".git := gitdir: .gd\n", ".gd/HEAD", ".gd/objects/", ".gd/refs/", ".gd/hooks/", ".gd/config",
			".gd/modules/x/y/HEAD", ".gd/modules/x/y/objects/", ".gd/modules/x/y/refs/", ".gd/modules/x/y/config"},
			[]string{".git!", ".gd/commondir?@", ".gd/config.worktree?@", ".gd/config@", ".gd/hooks@",
				".gd/modules/x/y/commondir?@", ".gd/modules/x/y/config.worktree?@", ".gd/modules/x/y/config@", ".gd/modules/x/y/hooks?@"}, nil},
		{"git directories that gitfiles point to", []string{
			"nested/.git := gitdir: ../gd\n", "gd/HEAD", "gd/objects/", "gd/refs/", "gd/hooks/", "gd/config",
			"deep/er/.git := gitdir: ../../.hidden-gd\r\n", ".hidden-gd/HEAD", ".hidden-gd/objects/", ".hidden-gd/refs/", ".hidden-gd/hooks/pre-commit",
			"abs/.git := gitdir: ROOT/.abs-gd", ".abs-gd/config",
			"plain/.git := gitdir: ../.plain\n", ".plain/hooks/",
			"bad/out/.git := gitdir: /usr\n", "bad/junk/.git := not a gitfile", "bad/none/.git := gitdir: ../missing\n"},
			append(slices.Clone(gitMissing), "nested/.git!", "deep/er/.git!", "abs/.git!", "plain/.git!", "bad/out/.git!", "bad/junk/.git!", "bad/none/.git!",
				"gd/commondir?@", "gd/config.worktree?@", "gd/config@", "gd/hooks@",
				".hidden-gd/commondir?@", ".hidden-gd/config.worktree?@", ".hidden-gd/config?@", ".hidden-gd/hooks@",
				".abs-gd/commondir?@", ".abs-gd/config.worktree?@", ".abs-gd/config@", ".abs-gd/hooks?@",
				".plain/commondir?@", ".plain/config.worktree?@", ".plain/config?@", ".plain/hooks@"), nil},
		{"bare repositories", []string{"remote.git/HEAD", "remote.git/objects/", "remote.git/refs/", "remote.git/hooks/post-receive", "remote.git/config",
			"remote.git/info/.git/config", // not a project: a git directory is not looked into
			"srv/b.git/HEAD", "srv/b.git/objects/", "srv/b.git/refs/",
			"srv/x/c.git/HEAD", "srv/x/c.git/objects/", "srv/x/c.git/refs/", "srv/x/c.git/hooks/", // too deep
			"notgit/HEAD", "notgit/hooks/", "notgit/config", // no objects/ nor refs/: not a git directory
			"wt/HEAD", "wt/commondir", "wt/config.worktree"},
			append(slices.Clone(gitMissing), "remote.git/commondir?@", "remote.git/config.worktree?@", "remote.git/config@", "remote.git/hooks@",
				"srv/b.git/commondir?@", "srv/b.git/config.worktree?@", "srv/b.git/config?@", "srv/b.git/hooks?@",
				"wt/commondir@", "wt/config.worktree@", "wt/config?@", "wt/hooks?@"), nil},
		{"the root is a bare repository", []string{"HEAD", "objects/", "refs/", "hooks/", "config", "info/.git/config"},
			append(slices.Clone(gitMissing), "commondir?@", "config.worktree?@", "config@", "hooks@"), nil},
		{"symlinks inside the root", []string{"real-git/HEAD", "real-git/hooks/", ".git -> real-git", "dotfiles/bashrc", ".bashrc -> dotfiles/bashrc"},
			[]string{".bashrc~.bashrc", ".git/commondir?~.git", ".git/config.worktree?~.git", ".git/config?~.git", ".git/hooks~.git"}, []string{".bashrc?"}},
		{"symlinks out of the root", []string{".git -> /usr", ".bashrc -> /etc/profile", ".vscode -> /nonexistent"},
			[]string{".bashrc~.bashrc", ".git!~.git", ".vscode~.vscode"}, []string{".bashrc?", ".vscode?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := mkTree(t, tc.tree...)
			found, truncated := FindProtected(root, sandbox.DefaultProtected)
			want := append(without(top, tc.drop...), tc.extra...)
			slices.Sort(want)
			if got := summary(found); !slices.Equal(got, want) {
				t.Errorf("FindProtected:\n got: %q\nwant: %q", got, want)
			}
			if truncated {
				t.Errorf("truncated in a small tree")
			}
			for _, f := range found {
				if f.Path != filepath.Join(root, f.Rel) {
					t.Errorf("%s: Path %s, want: under %s", f.Rel, f.Path, root)
				}
			}
		})
	}
}

func TestFindProtectedBounds(t *testing.T) {
	var tree []string
	for i := 0; i < ScanDirs+10; i++ {
		tree = append(tree, fmt.Sprintf("d%03d/x/", i))
	}
	tree = append(tree, ".git/HEAD", ".git/hooks/", "zzz/.git/hooks/", "d000/deep/er/.git/hooks/")
	root := mkTree(t, tree...)
	found, truncated := FindProtected(root, []string{"**/.git/hooks"})
	if !truncated {
		t.Errorf("not truncated with %d directories", ScanDirs+10)
	}
	if got := summary(found); !slices.Equal(got, []string{".git/hooks"}) {
		t.Errorf("found %q, want: the top repository's hooks only (zzz is past the bound, d000/deep/er too deep)", got)
	}
	if found, _ := FindProtected(root, nil); len(found) != 0 {
		t.Errorf("no patterns found %q", summary(found))
	}
}

// The walk below .git/modules is bounded too: it lists at most
// ScanDeepDirs directories, and it does not look into a git directory's
// data (objects, refs), where a branch may be named hooks.
func TestFindProtectedDeepBounds(t *testing.T) {
	tree := []string{".git/HEAD", ".git/objects/", ".git/refs/", ".git/hooks/", ".git/config",
		".git/modules/zz-flat/HEAD", ".git/modules/zz-flat/objects/", ".git/modules/zz-flat/refs/heads/hooks/x", ".git/modules/zz-flat/config",
		".git/modules/zzz/lib/HEAD", ".git/modules/zzz/lib/objects/", ".git/modules/zzz/lib/refs/", ".git/modules/zzz/lib/config"}
	for i := 0; i < ScanDeepDirs+10; i++ {
		tree = append(tree, fmt.Sprintf(".git/modules/d%03d/x/", i))
	}
	root := mkTree(t, tree...)
	found, truncated := FindProtected(root, []string{"**/.git/modules/*/**/config"})
	if got := summary(found); !truncated || !slices.Equal(got, []string{".git/modules/zz-flat/config"}) {
		t.Errorf("found %q, truncated %v; want: the flat submodule's config only, truncated", got, truncated)
	}
	// Within the bounds, the nested one is found, and nothing in refs.
	root = mkTree(t, tree[:13]...)
	found, truncated = FindProtected(root, []string{"**/.git/modules/*/**/config", "**/.git/modules/*/**/hooks"})
	if got := summary(found); truncated || !slices.Equal(got, []string{".git/modules/zz-flat/config", ".git/modules/zz-flat/hooks?", ".git/modules/zzz/lib/config", ".git/modules/zzz/lib/hooks?"}) {
		t.Errorf("found %q, truncated %v", got, truncated)
	}
}

// A gitfile or commondir that is a FIFO is not read (opening one for
// reading would wait for a writer).
func TestFindProtectedFIFOGitfile(t *testing.T) {
	root := mkTree(t, "sub/", "gd/HEAD", "gd/objects/", "gd/refs/", "wt/.git := gitdir: ../gd\n")
	for _, p := range []string{".git", "sub/.git", "gd/commondir"} {
		if err := syscall.Mkfifo(filepath.Join(root, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan []string)
	go func() {
		found, _ := FindProtected(root, []string{"**/.git", "**/.git/hooks"})
		done <- summary(found)
	}()
	select {
	case got := <-done:
		if want := []string{".git!", "gd/hooks?@", "sub/.git!", "wt/.git!"}; !slices.Equal(got, want) {
			t.Errorf("found %q, want: %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("FindProtected blocks on a FIFO")
	}
}

// A directory too large to list whole still has its protected names looked
// up one by one, and its directories, symlinks and the names the patterns'
// globs match are kept past ScanEntries, so that a walk of it is whole
// (a new user's project with a directory of 66,000 files was refused);
// past the bounds of that, the scan is cut.
func TestFindProtectedLargeDirectory(t *testing.T) {
	root := mkTree(t, ".bashrc", ".git/HEAD", ".git/hooks/", "zz-nested/.git/HEAD", "zz-nested/.git/hooks/", "zz-nested/.git/objects/", "zz-nested/.git/refs/", "x.envrc-like")
	for i := 0; i < ScanEntries+10; i++ {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pats := []string{".bashrc", "**/.git/hooks", "**/*.envrc-like"}
	found, truncated := FindProtected(root, pats)
	if got, want := summary(found), []string{".bashrc", ".git/hooks", "x.envrc-like", "zz-nested/.git/hooks"}; !slices.Equal(got, want) || truncated {
		t.Errorf("found %q, truncated %v; want: %q, whole", got, truncated, want)
	}
	defer func(r, k int) { scanRestEntries, scanKeptEntries = r, k }(scanRestEntries, scanKeptEntries)
	scanRestEntries = 3
	found, truncated = FindProtected(root, pats)
	if got := summary(found); !slices.Contains(got, ".bashrc") || !truncated {
		t.Errorf("past the bound of entries read: found %q, truncated %v; want .bashrc, truncated", got, truncated)
	}
}

// gitT runs git in dir, with no settings of the person's.
func gitT(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "LANG=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %q: %v\n%s", args, err, out)
	}
}

// Real git layouts: git directories not named .git, and submodules whose
// name has a slash, are found by the scan and refused by MatchProtectedIn;
// git's data in them is not.
func TestProtectedGitDirectories(t *testing.T) {
	root := mkTree(t, "src/a.txt", "plain/hooks/x", "plain/config")
	gitT(t, root, "init", "-q", "--separate-git-dir="+filepath.Join(root, ".gd"), root)
	os.MkdirAll(filepath.Join(root, "nested"), 0o755)
	gitT(t, root, "init", "-q", "--separate-git-dir="+filepath.Join(root, "gd"), filepath.Join(root, "nested"))
	os.WriteFile(filepath.Join(root, "nested", ".git"), []byte("gitdir: ../gd\n"), 0o644)
	gitT(t, root, "init", "-q", "--bare", "remote.git")
	// A submodule named vendor/lib, with a submodule of its own.
	base := submoduleSources(t)
	gitT(t, root, "submodule", "add", "-q", filepath.Join(base, "lib-src"), "vendor/lib")
	gitT(t, root, "submodule", "update", "-q", "--init", "--recursive")

	found, truncated := FindProtected(root, sandbox.DefaultProtected)
	if truncated {
		t.Errorf("truncated")
	}
	got := summary(found)
	for _, want := range []string{".gd/hooks@", ".gd/config@", "gd/hooks@", "gd/config@", "remote.git/hooks@", "remote.git/config@",
		".gd/modules/vendor/lib/hooks@", ".gd/modules/vendor/lib/config@",
		".gd/modules/vendor/lib/modules/inner/hooks@", ".gd/modules/vendor/lib/modules/inner/config@"} {
		if !slices.Contains(got, want) {
			t.Errorf("FindProtected does not find %s: %q", want, got)
		}
	}
	for _, f := range found {
		if strings.Contains(f.Rel, "objects") || strings.Contains(f.Rel, "refs") || strings.HasPrefix(f.Rel, "plain/") {
			t.Errorf("FindProtected found %s", f.Rel)
		}
	}

	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{".gd/hooks/pre-commit", true},
		{".gd/hooks", true},
		{".gd/config", true},
		{".gd/config.worktree", true},
		{".gd/commondir", true},
		{".gd/modules/vendor/lib/hooks/post-checkout", true},
		{".gd/modules/vendor/lib/config", true},
		{".gd/modules/vendor/lib/modules/inner/config", true},
		{"gd/hooks/pre-commit", true},
		{"gd/config", true},
		{"remote.git/hooks/post-receive", true},
		{"remote.git/config", true},
		{".gd/objects/ab/cdef", false},
		{".gd/refs/heads/main", false},
		{".gd/index", false},
		{".gd/HEAD", false},
		{"gd/objects/info/packs", false},
		{"remote.git/refs/heads/main", false},
		{"remote.git/description", false},
		{"plain/hooks/x", false},
		{"plain/config", false},
		{"src/a.txt", false},
		{"vendor/lib/x.c", false},
	} {
		_, ok := MatchProtectedIn(root, tc.rel, false, sandbox.DefaultProtected)
		if ok != tc.want {
			t.Errorf("MatchProtectedIn(%q) = %v, want: %v", tc.rel, ok, tc.want)
		}
	}
	if _, ok := MatchProtectedIn(root, ".gd/hooks/pre-commit", false, []string{}); ok {
		t.Errorf("an empty list protects .gd/hooks")
	}
}

// TestProtectedGitDirectorySymlinks: a bare repository whose objects (or
// refs) is a symlink still counts as a git directory, whatever corral finds
// at the link's end: a target like /proc/self/cwd/objects.real leads
// elsewhere for git, run from another directory, than for corral.
func TestProtectedGitDirectorySymlinks(t *testing.T) {
	root := mkTree(t)
	gitT(t, root, "init", "-q", "--bare", "remote.git")
	bare := filepath.Join(root, "remote.git")
	if err := os.Rename(filepath.Join(bare, "objects"), filepath.Join(root, ".objs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/self/cwd/objects.real", filepath.Join(bare, "objects")); err != nil {
		t.Fatal(err)
	}
	found, _ := FindProtected(root, sandbox.DefaultProtected)
	if got := summary(found); !slices.Contains(got, "remote.git/hooks@") {
		t.Errorf("FindProtected misses remote.git/hooks with a dangling objects link: %q", got)
	}
	if _, ok := MatchProtectedIn(root, "remote.git/hooks/post-receive", false, sandbox.DefaultProtected); !ok {
		t.Error("MatchProtectedIn lets remote.git/hooks/post-receive through with a dangling objects link")
	}
}

// The gitfiles of submodules are found at any depth of the working tree,
// from their git directories below .git/modules: by core.worktree (a
// submodule whose name is not its path) and by name (nested submodules).
func TestFindProtectedSubmoduleGitfiles(t *testing.T) {
	root := mkTree(t, "src/a.txt")
	gitT(t, root, "init", "-q")
	base := submoduleSources(t)
	gitT(t, root, "submodule", "add", "-q", filepath.Join(base, "lib-src"), "third_party/go/lib")
	gitT(t, root, "submodule", "add", "-q", "--name", "other", filepath.Join(base, "inner-src"), "a/b/c/d")
	gitT(t, root, "submodule", "update", "-q", "--init", "--recursive")
	// A module git directory without core.worktree: found by its name.
	for _, e := range []string{".git/modules/x/y/z/HEAD", ".git/modules/x/y/z/objects/", ".git/modules/x/y/z/refs/", "x/y/z/.git"} {
		p := filepath.Join(root, e)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if strings.HasSuffix(e, "/") {
			os.MkdirAll(p, 0o755)
		} else {
			os.WriteFile(p, []byte("gitdir: ../../../.git/modules/x/y/z\n"), 0o644)
		}
	}
	found, truncated := FindProtected(root, sandbox.DefaultProtected)
	if truncated {
		t.Errorf("truncated")
	}
	got := summary(found)
	for _, want := range []string{"third_party/go/lib/.git!", "third_party/go/lib/inner/.git!", "a/b/c/d/.git!", "x/y/z/.git!",
		".git/modules/third_party/go/lib/config", ".git/modules/third_party/go/lib/modules/inner/config", ".git/modules/other/config"} {
		if !slices.Contains(got, want) {
			t.Errorf("FindProtected does not find %s: %q", want, got)
		}
	}
	if found, _ := FindProtected(root, []string{"**/.git/hooks"}); slices.ContainsFunc(found, func(f ProtectedPath) bool { return strings.HasSuffix(f.Rel, "/.git") }) {
		t.Errorf("gitfiles found without a gitfile pattern: %q", summary(found))
	}
}

// An ordinary project wider than the old bounds (40 top-level directories
// with a few below each, a submodule at vendor/lib) fits the scan.
func TestFindProtectedOrdinaryProject(t *testing.T) {
	tree := []string{".git/HEAD", ".git/objects/", ".git/refs/", ".git/hooks/", ".git/config",
		".git/modules/vendor/lib/HEAD", ".git/modules/vendor/lib/objects/", ".git/modules/vendor/lib/refs/", ".git/modules/vendor/lib/config",
		"vendor/lib/.git := gitdir: ../../.git/modules/vendor/lib\n", "sub/.git/HEAD", "sub/.git/config"}
	for i := 0; i < 40; i++ {
		for j := 0; j < 5; j++ {
			tree = append(tree, fmt.Sprintf("d%02d/s%d/f.go", i, j))
		}
	}
	root := mkTree(t, tree...)
	found, truncated := FindProtected(root, sandbox.DefaultProtected)
	if truncated {
		t.Errorf("truncated")
	}
	got := summary(found)
	for _, want := range []string{"vendor/lib/.git!", ".git/modules/vendor/lib/config", "sub/.git/config"} {
		if !slices.Contains(got, want) {
			t.Errorf("FindProtected does not find %s: %q", want, got)
		}
	}
}

// BenchmarkFindProtected measures the scan of a small project and of a
// wide tree at the bounds.
func BenchmarkFindProtected(b *testing.B) {
	small := []string{".git/HEAD", ".git/objects/", ".git/refs/", ".git/hooks/", ".git/config", "README", "cmd/x/main.go", "internal/a/a.go", "docs/d.md"}
	var wide []string
	// ScanLists-2 directories with 3 each: ScanLists-1 listings, 1016 of
	// the ScanDirs directories.
	for i := 0; i < ScanLists-2; i++ {
		for j := 0; j < 3; j++ {
			wide = append(wide, fmt.Sprintf("d%03d/s%d/", i, j))
		}
	}
	wide = append(wide, ".git/HEAD", ".git/objects/", ".git/refs/", ".git/hooks/", ".git/config")
	// 40 top-level directories with 5 each: a project the old bounds cut.
	mid := slices.Clone(small)
	for i := 0; i < 40; i++ {
		for j := 0; j < 5; j++ {
			mid = append(mid, fmt.Sprintf("d%02d/s%d/", i, j))
		}
	}
	for _, tc := range []struct {
		name string
		tree []string
	}{{"small", small}, {"40x5", mid}, {"bounds", wide}} {
		b.Run(tc.name, func(b *testing.B) {
			root := b.TempDir()
			for _, e := range tc.tree {
				p := filepath.Join(root, e)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if strings.HasSuffix(e, "/") {
					os.MkdirAll(p, 0o755)
				} else {
					os.WriteFile(p, nil, 0o644)
				}
			}
			root, _ = filepath.EvalSymlinks(root)
			var cut bool
			for b.Loop() {
				_, cut = FindProtected(root, sandbox.DefaultProtected)
			}
			b.ReportMetric(float64(boolInt(cut)), "truncated")
		})
	}
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// submoduleSources makes a directory holding two repositories to add as
// submodules: inner-src, and lib-src, which has inner-src as its submodule
// "inner".
func submoduleSources(t *testing.T) string {
	t.Helper()
	base := mkTree(t)
	for _, r := range []string{"inner-src", "lib-src"} {
		gitT(t, base, "init", "-q", r)
		gitT(t, filepath.Join(base, r), "commit", "-q", "--allow-empty", "-m", r)
	}
	gitT(t, filepath.Join(base, "lib-src"), "submodule", "add", "-q", "../inner-src", "inner")
	gitT(t, filepath.Join(base, "lib-src"), "commit", "-q", "-m", "inner")
	return base
}

// The refusal names the bound a wide working directory meets first: the
// listings of its top levels (a trial found 300 top-level directories
// refused by a message that spoke of 1024).
func TestScanCutTextNamesTheBounds(t *testing.T) {
	msg := ScanCutError("/w", true).Error()
	for _, want := range []string{fmt.Sprintf("at most %d directories in its top %d levels", ScanLists, ScanDepth), fmt.Sprintf("%d in all", ScanDirs), fmt.Sprintf("at most %d entries of one directory (files count) past its first %d", scanRestEntries, ScanEntries), "protected_paths"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}
