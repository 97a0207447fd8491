package sandboxfs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// write_file and edit_file refuse protected paths by their real location,
// also ones that do not exist yet and ones reached through a symlink, and
// nothing reaches the host.
func TestProtectedPaths(t *testing.T) {
	f := newFix(t)
	ctx := context.Background()
	f.put(t, "work/.git/HEAD", "ref: refs/heads/main\n")
	f.put(t, "work/.git/config", "[core]\n\tbare = false\n")
	os.MkdirAll(filepath.Join(f.work, ".git", "hooks"), 0o755)
	os.MkdirAll(filepath.Join(f.work, ".git", "objects"), 0o755)
	f.put(t, "work/.vscode/settings.json", "{}\n")
	os.Symlink(".git/hooks", filepath.Join(f.work, "innocent"))
	os.Symlink(filepath.Join(f.work, ".mcp.json"), filepath.Join(f.work, "dangling"))

	for _, tc := range []struct {
		path, msg string
	}{
		{".git/hooks/pre-commit", "refused: .git/hooks/pre-commit is a protected path (it runs code on the host later); nothing was written"},
		{".git/config", "refused: .git/config is a protected path"},
		{".mcp.json", "refused: .mcp.json is a protected path"},
		{".claude/settings.json", "refused: .claude/settings.json is a protected path"},
		{".vscode/tasks.json", "refused: .vscode/tasks.json is a protected path"},
		{".bashrc", "refused: .bashrc is a protected path"},
		{"a/b/c/d/e/.git/hooks/post-checkout", "refused: a/b/c/d/e/.git/hooks/post-checkout is a protected path"},
		{"vendor/lib/.git", "refused: vendor/lib/.git is a protected path"},
		// Submodules whose name has a slash, and nested submodules.
		{".git/modules/lib/sub/hooks/post-checkout", "refused: .git/modules/lib/sub/hooks/post-checkout is a protected path"},
		{".git/modules/vendor/lib/config", "refused: .git/modules/vendor/lib/config is a protected path"},
		{".git/modules/a/modules/b/hooks/pre-commit", "refused: .git/modules/a/modules/b/hooks/pre-commit is a protected path"},
		{"innocent/pre-commit", "resolves to .git/hooks/pre-commit, a protected path"},
		{"dangling", "resolves to .mcp.json, a protected path"},
	} {
		_, err := f.c.Write(ctx, tc.path, "#!/bin/sh\necho PWNED\n")
		if kind(err) != ErrProtected || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("write %s: %v, want: %q", tc.path, err, tc.msg)
		}
	}
	for _, p := range []string{".git/hooks/pre-commit", ".mcp.json", ".claude", ".bashrc", "a", "vendor"} {
		if _, err := os.Lstat(filepath.Join(f.work, p)); err == nil {
			t.Errorf("%s exists on the host after a refused write", p)
		}
	}
	for _, tc := range []struct{ path, old, new string }{
		{".git/config", "bare = false", "fsmonitor = evil"},
		{".vscode/settings.json", "{", "{\"terminal.integrated.shell.linux\": \"/tmp/evil\","},
	} {
		if _, err := f.c.Edit(ctx, tc.path, tc.old, tc.new, false); kind(err) != ErrProtected {
			t.Errorf("edit %s: %v", tc.path, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(f.work, ".git", "config")); string(b) != "[core]\n\tbare = false\n" {
		t.Errorf(".git/config changed: %q", b)
	}
	// Normal work goes on: project files, and git's own files that are not
	// protected.
	for _, p := range []string{"main.go", "src/hooks/useThing.ts", ".gitmodules", ".git/info/exclude", "sub/.bashrc"} {
		if _, err := f.c.Write(ctx, p, "x\n"); err != nil {
			t.Errorf("write %s: %v", p, err)
		}
	}
	if _, err := f.c.Edit(ctx, "main.go", "x", "y", false); err != nil {
		t.Errorf("edit main.go: %v", err)
	}
}

// The file server applies the patterns where the bwrap backend does: the
// working directory and read-write binds, not the scratch directory nor the
// session home; the non-dot entries of the home directory when that is the
// working directory.
func TestProtectedRoots(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	for _, d := range []string{"home/project", "home/docs", "home/.config", "scratch", "shome", "data"} {
		os.MkdirAll(filepath.Join(base, d), 0o755)
	}
	os.WriteFile(filepath.Join(home, "notes.txt"), nil, 0o644)
	t.Setenv("HOME", home)
	req := &sandbox.Request{Policy: sandbox.Policy{Workdir: filepath.Join(home, "project"), Binds: []sandbox.Bind{{Src: filepath.Join(base, "data"), Dest: "/tmp/data"}, {Src: "/usr/share", ReadOnly: true}}}, ScratchDir: filepath.Join(base, "scratch"), HomeDir: filepath.Join(base, "shome")}
	got := protectedRoots(req, writableRoots(req))
	if want := []string{filepath.Join(home, "project"), "/tmp/data"}; !slices.Equal(got, want) {
		t.Errorf("protectedRoots = %q, want: %q", got, want)
	}
	req.Workdir = home
	got = protectedRoots(req, writableRoots(req))
	if want := []string{filepath.Join(home, "docs"), filepath.Join(home, "project"), "/tmp/data"}; !slices.Equal(got, want) {
		t.Errorf("protectedRoots with the home directory as working directory = %q, want: %q", got, want)
	}
}

// Git directories not named .git: a separate git directory (the top's
// gitfile points to it), a nested repository's in-tree git directory, bare
// repositories at any depth. Their hooks and configuration are refused,
// git's data in them is not, and git on the host runs no hook afterwards.
func TestProtectedGitDirectories(t *testing.T) {
	f := newFix(t)
	ctx := context.Background()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + f.home, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "LANG=C"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git(f.work, "init", "-q", "--separate-git-dir="+filepath.Join(f.work, ".gd"), f.work)
	nested := filepath.Join(f.work, "nested")
	os.MkdirAll(nested, 0o755)
	git(f.work, "init", "-q", "--separate-git-dir="+filepath.Join(f.work, "gd"), nested)
	os.WriteFile(filepath.Join(nested, ".git"), []byte("gitdir: ../gd\n"), 0o644)
	git(f.work, "init", "-q", "--bare", "remote.git")
	git(f.work, "init", "-q", "--bare", "a/b/c/deep.git")
	os.Remove(filepath.Join(f.work, "a/b/c/deep.git/config"))

	for _, p := range []string{".gd/hooks/pre-commit", ".gd/config", ".gd/config.worktree", "gd/hooks/pre-commit", "gd/config",
		"remote.git/hooks/post-receive", "remote.git/config", "a/b/c/deep.git/hooks/post-receive", "a/b/c/deep.git/config"} {
		_, err := f.c.Write(ctx, p, "#!/bin/sh\necho PWNED > /tmp/pwned\n")
		if kind(err) != ErrProtected || !strings.Contains(err.Error(), "refused: "+p+" is a protected path") {
			t.Errorf("write %s: %v", p, err)
		}
	}
	if _, err := f.c.Edit(ctx, ".gd/config", "[core]", "[core]\n\tfsmonitor = evil", false); kind(err) != ErrProtected {
		t.Errorf("edit .gd/config: %v", err)
	}
	for _, p := range []string{".gd/hooks/pre-commit", "gd/hooks/pre-commit", "remote.git/hooks/post-receive", "a/b/c/deep.git/hooks/post-receive", "a/b/c/deep.git/config"} {
		if _, err := os.Lstat(filepath.Join(f.work, p)); err == nil {
			t.Errorf("%s exists on the host after a refused write", p)
		}
	}
	for _, p := range []string{".gd/info/exclude", "gd/description", "remote.git/description", "nested/a.txt", "a.txt", "hooks/pre-commit", "config"} {
		if _, err := f.c.Write(ctx, p, "x\n"); err != nil {
			t.Errorf("write %s: %v", p, err)
		}
	}
	git(nested, "add", "a.txt")
	git(nested, "commit", "-qm", "nested")
	git(f.work, "add", "a.txt")
	git(f.work, "commit", "-qm", "top")
	git(f.work, "push", "-q", "remote.git", "HEAD:refs/heads/main")
}
