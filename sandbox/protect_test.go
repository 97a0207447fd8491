package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMatchProtected(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		dir  bool
		want string // matching pattern, "" for none
	}{
		// Git at the top and below it.
		{".git/hooks", true, "**/.git/hooks"},
		{".git/hooks/pre-commit", false, "**/.git/hooks"},
		{".git/config", false, "**/.git/config"},
		{".git/config.worktree", false, "**/.git/config.worktree"},
		{".git/commondir", false, "**/.git/commondir"},
		{"sub/.git/hooks/pre-push", false, "**/.git/hooks"},
		{"a/b/c/d/e/.git/config", false, "**/.git/config"},
		{".git/modules/lib/hooks/post-checkout", false, "**/.git/modules/*/hooks"},
		{".git/modules/lib/config", false, "**/.git/modules/*/config"},
		{".git/worktrees/wt/commondir", false, "**/.git/worktrees/*/commondir"},
		// Normal git work stays possible.
		{".git", true, ""},
		{".git/index", false, ""},
		{".git/index.lock", false, ""},
		{".git/objects/ab/cdef", false, ""},
		{".git/refs/heads/main", false, ""},
		{".git/HEAD", false, ""},
		{".git/COMMIT_EDITMSG", false, ""},
		{".git/config.lock", false, ""},
		{".git/modules/lib/objects/ab/cd", false, ""},
		{".git/modules/lib/refs/heads/hooks", false, ""},
		{".gitmodules", false, ""},
		{".gitignore", false, ""},
		// A gitfile, not a .git directory.
		{".git", false, "**/.git"},
		{"vendor/lib/.git", false, "**/.git"},
		{"vendor/lib/.git", true, ""},
		// Shell start-up files and settings only at the top.
		{".bashrc", false, ".bashrc"},
		{".zshenv", false, ".zshenv"},
		{"sub/.bashrc", false, ""},
		{".vscode", true, ".vscode"},
		{".vscode/settings.json", false, ".vscode"},
		{".vscodex", false, ""},
		{".mcp.json", false, ".mcp.json"},
		{".claude/settings.json", false, ".claude"},
		{"docs/.claude/settings.json", false, ""},
		{".codex/config.toml", false, ".codex"},
		{".idea/workspace.xml", false, ".idea"},
		// Ordinary files.
		{"main.go", false, ""},
		{"src/hooks/useThing.ts", false, ""},
		{"config", false, ""},
		{"hooks/pre-commit", false, ""},
		{"", true, ""},
		{".", true, ""},
		{"/abs/.git/hooks", false, ""},
	} {
		got, ok := MatchProtected(tc.rel, tc.dir, DefaultProtected)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("MatchProtected(%q, dir=%v) = %q, %v, want: %q", tc.rel, tc.dir, got, ok, tc.want)
		}
	}
}

func TestMatchProtectedCustom(t *testing.T) {
	for _, tc := range []struct {
		patterns []string
		rel      string
		want     bool
	}{
		{nil, ".git/hooks/x", false},
		{[]string{}, ".bashrc", false},
		{[]string{"secrets/*.pem"}, "secrets/a.pem", true},
		{[]string{"secrets/*.pem"}, "secrets/a.txt", false},
		{[]string{"secrets/*.pem"}, "x/secrets/a.pem", false},
		{[]string{"**/Makefile"}, "Makefile", true},
		{[]string{"**/Makefile"}, "a/b/Makefile", true},
		{[]string{"**/Makefile"}, "a/b/Makefile.bak", false},
		{[]string{"/abs", "a/../b", "**"}, "b", false}, // malformed patterns never match
	} {
		if _, got := MatchProtected(tc.rel, false, tc.patterns); got != tc.want {
			t.Errorf("MatchProtected(%q, %q) = %v, want: %v", tc.rel, tc.patterns, got, tc.want)
		}
	}
}

func TestCheckProtected(t *testing.T) {
	if err := CheckProtected(DefaultProtected); err != nil {
		t.Fatalf("DefaultProtected: %v", err)
	}
	for _, tc := range []struct {
		pattern string
		err     string // substring; "" means valid
	}{
		{".git/hooks", ""},
		{"**/.git/hooks", ""},
		{".git/modules/*/hooks", ""},
		{"dir/[ab]c", ""},
		{"", "is empty"},
		{"/etc/passwd", "relative"},
		{"a//b", "empty"},
		{"a/./b", "empty"},
		{"../x", "empty"},
		{"**", "names everything"},
		{"a/**/b", "first component"},
		{"**x/b", "first component"},
		{"a/[b", "wildcard"},
	} {
		err := CheckProtected([]string{tc.pattern})
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("CheckProtected(%q) = %v, want: nil", tc.pattern, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrBadRequest)):
			t.Errorf("CheckProtected(%q) = %v, want: ErrBadRequest containing %q", tc.pattern, err, tc.err)
		}
	}
}

func TestProtectedPatterns(t *testing.T) {
	if got := (&Request{}).ProtectedPatterns(); !slices.Equal(got, DefaultProtected) {
		t.Errorf("nil Protected = %q, want: DefaultProtected", got)
	}
	if got := (&Request{Protected: []string{}}).ProtectedPatterns(); len(got) != 0 {
		t.Errorf("empty Protected = %q, want: none", got)
	}
}

// mkTree makes files (name ending in "/" for a directory, "name -> target"
// for a symlink) under a new directory and returns it, resolved.
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
// "rel!" (gitfile), "rel~L1,L2" (through symlinks), sorted.
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
		{"a submodule and a linked worktree", []string{".git/HEAD", ".git/hooks/", ".git/config", ".git/modules/lib/HEAD", ".git/modules/lib/config", ".git/worktrees/wt/commondir", "lib/.git"},
			[]string{".git/commondir?", ".git/config", ".git/config.worktree?", ".git/hooks",
				".git/modules/lib/config", ".git/modules/lib/hooks?", ".git/worktrees/wt/commondir", ".git/worktrees/wt/config.worktree?", "lib/.git!"}, nil},
		{"symlinks inside the root", []string{"real-git/HEAD", "real-git/hooks/", ".git -> real-git", "dotfiles/bashrc", ".bashrc -> dotfiles/bashrc"},
			[]string{".bashrc~.bashrc", ".git/commondir?~.git", ".git/config.worktree?~.git", ".git/config?~.git", ".git/hooks~.git"}, []string{".bashrc?"}},
		{"symlinks out of the root", []string{".git -> /usr", ".bashrc -> /etc/profile", ".vscode -> /nonexistent"},
			[]string{".bashrc~.bashrc", ".git!~.git", ".vscode~.vscode"}, []string{".bashrc?", ".vscode?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := mkTree(t, tc.tree...)
			found, truncated := FindProtected(root, DefaultProtected)
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

// A directory too large to list whole still has its protected names looked
// up one by one.
func TestFindProtectedLargeDirectory(t *testing.T) {
	root := mkTree(t, ".bashrc", ".git/HEAD", ".git/hooks/")
	for i := 0; i < ScanEntries+10; i++ {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, truncated := FindProtected(root, []string{".bashrc", "**/.git/hooks"})
	if got := summary(found); !slices.Equal(got, []string{".bashrc", ".git/hooks"}) || !truncated {
		t.Errorf("found %q, truncated %v; want: .bashrc and .git/hooks, truncated", got, truncated)
	}
}
