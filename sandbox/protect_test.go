package sandbox

import (
	"errors"
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
		{".git/modules/lib/hooks/post-checkout", false, "**/.git/modules/*/**/hooks"},
		{".git/modules/lib/config", false, "**/.git/modules/*/**/config"},
		{".git/worktrees/wt/commondir", false, "**/.git/worktrees/*/commondir"},
		// Submodules whose name has a slash, nested submodules, and the
		// worktrees of a submodule.
		{".git/modules/vendor/lib/hooks/post-checkout", false, "**/.git/modules/*/**/hooks"},
		{".git/modules/vendor/lib/config", false, "**/.git/modules/*/**/config"},
		{".git/modules/lib/sub/hooks/post-checkout", false, "**/.git/modules/*/**/hooks"},
		{".git/modules/a/modules/b/config", false, "**/.git/modules/*/**/config"},
		{".git/modules/a/modules/b/modules/c/hooks", true, "**/.git/modules/*/**/hooks"},
		{"sub/.git/modules/x/y/z/config", false, "**/.git/modules/*/**/config"},
		{".git/modules/lib/commondir", false, "**/.git/modules/*/**/commondir"},
		{".git/modules/lib/config.worktree", false, "**/.git/modules/*/**/config.worktree"},
		{".git/modules/lib/worktrees/wt/config.worktree", false, "**/.git/modules/*/**/config.worktree"},
		// Without a look at the files, a branch named hooks in a
		// submodule's refs is taken for hooks (the scan knows better).
		{".git/modules/lib/refs/heads/hooks", false, "**/.git/modules/*/**/hooks"},
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
		{".git/modules/lib/refs/heads/main", false, ""},
		{".git/modules/vendor/lib/objects/ab/cd", false, ""},
		{".git/modules/vendor/lib/index", false, ""},
		{".git/modules/a/modules/b/HEAD", false, ""},
		{".git/modules/hooks/objects/ab/cd", false, ""}, // a submodule named hooks
		{".git/modules/config/HEAD", false, ""},
		{".git/modules", true, ""},
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
		// "**" in the middle: any number of directories, none included.
		{[]string{"a/**/b"}, "a/b", true},
		{[]string{"a/**/b"}, "a/x/b", true},
		{[]string{"a/**/b"}, "a/x/y/z/b/c", true},
		{[]string{"a/**/b"}, "a/x/y/z/bb", false},
		{[]string{"a/**/b"}, "x/a/b", false},
		{[]string{"a/**/b"}, "a", false},
		{[]string{"**/a/**/b/*.c"}, "p/q/a/x/b/m.c", true},
		{[]string{"**/a/**/b/*.c"}, "p/q/a/x/b/m.h", false},
		{[]string{"a/*/**/b"}, "a/b", false},
		{[]string{"a/*/**/b"}, "a/x/b", true},
		{[]string{"a/*/**/b"}, "a/b/x", false},
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
		{".git/modules/*/**/hooks", ""},
		{"a/**/b", ""},
		{"**/a/**/b/**/c", ""},
		{"dir/[ab]c", ""},
		{"", "is empty"},
		{"/etc/passwd", "relative"},
		{"a//b", "empty"},
		{"a/./b", "empty"},
		{"../x", "empty"},
		{"**", "names everything"},
		{"a/**", "ends with **"},
		{"**/a/**", "ends with **"},
		{"a/**/**/b", "twice in a row"},
		{"**/**/b", "twice in a row"},
		{"**x/b", "a whole component"},
		{"a/b**", "a whole component"},
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
	if got := (&Request{Policy: Policy{Protected: []string{}}}).ProtectedPatterns(); len(got) != 0 {
		t.Errorf("empty Protected = %q, want: none", got)
	}
}
