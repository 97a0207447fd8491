package handback

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

func TestConfigPaths(t *testing.T) {
	for _, tc := range []struct {
		list     string
		hooks    string
		includes []string
	}{
		{"", "", nil},
		{"core.bare\nfalse\x00core.hookspath\n.husky\x00", ".husky", nil},
		{"core.hookspath\na\x00core.hookspath\nb\x00", "b", nil}, // the last wins, as in git
		{"include.path\n../shared.cfg\x00includeif.gitdir:~/w/.path\n/etc/x\x00", "", []string{"../shared.cfg", "/etc/x"}},
		{"core.hookspath\x00", "", nil},                         // a key without a value
		{"alias.x\n!sh\ncore.hookspath\nnot-this\x00", "", nil}, // a value holding a newline is one record
		{"includeif.onbranch:main.path\n.gitconfig.main\x00", "", []string{".gitconfig.main"}},
	} {
		got := ConfigPaths([]byte(tc.list))
		if got.HooksPath != tc.hooks || !slices.Equal(got.Includes, tc.includes) {
			t.Errorf("ConfigPaths(%q) = %+v, want hooks %q includes %q", tc.list, got, tc.hooks, tc.includes)
		}
	}
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %q: %v\n%s", args, err, out)
	}
}

// TestHostGit: what a host repository runs from its working tree, read
// from its configuration and hooks, at and below the destination.
func TestHostGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (apt-get install git)")
	}
	repo := t.TempDir()
	git(t, repo, "init", "-q")
	git(t, repo, "config", "core.hooksPath", ".husky")
	git(t, repo, "config", "include.path", "../shared.gitconfig")
	git(t, repo, "config", "includeIf.onbranch:main.path", "/nonexistent/abs.cfg")
	os.MkdirAll(filepath.Join(repo, "scripts"), 0o755)
	// A second repository nested below, with default hooks.
	nested := filepath.Join(repo, "vendor", "lib")
	os.MkdirAll(nested, 0o755)
	git(t, nested, "init", "-q")
	// A worktree whose .git is a gitfile.
	wt := filepath.Join(repo, "wt")
	os.MkdirAll(wt, 0o755)
	other := t.TempDir()
	git(t, other, "init", "-q")
	git(t, other, "config", "core.hooksPath", "githooks")
	os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: "+filepath.Join(other, ".git")+"\n"), 0o644)

	h := NewHostGit(repo)
	for rel, want := range map[string]string{
		".husky/pre-commit":       WhyHooksPath,
		".husky/_/husky.sh":       WhyHooksPath,
		".huskyx/pre-commit":      "",
		"shared.gitconfig":        WhyIncludePath,
		"vendor/lib/scripts/x":    "",
		"src/main.go":             "",
		"wt/githooks/post-commit": WhyHooksPath,
		"wt/.husky/pre-commit":    "", // wt's repository is another one
	} {
		if got := h.Why(rel); got != want {
			t.Errorf("Why(%q) = %q, want %q", rel, got, want)
		}
	}
	nh := NewHostGit(nested)
	os.MkdirAll(filepath.Join(nested, "s"), 0o755)
	if err := os.Symlink("../../s/hook", filepath.Join(nested, ".git", "hooks", "post-checkout")); err != nil {
		t.Fatal(err)
	}
	if got := nh.Why("s/hook"); got != WhyHookLink {
		t.Errorf("a hook's symlink target in the tree: %q", got)
	}
	// A destination below the repository's top: its paths are judged by
	// the repository above.
	os.MkdirAll(filepath.Join(repo, "pkg"), 0o755)
	if got := NewHostGit(filepath.Join(repo, ".husky")).Why("pre-push"); got != WhyHooksPath {
		t.Errorf("a destination inside core.hooksPath: %q", got)
	}
	if got := NewHostGit(filepath.Join(repo, "pkg")).Why("a.go"); got != "" {
		t.Errorf("an ordinary path below the top: %q", got)
	}
	// Through Policy: held unless included; directories never.
	p := Policy{Host: NewHostGit(repo).Why}
	if why, ok := p.Check(".husky/pre-commit", File, nil); why != WhyHooksPath || ok {
		t.Errorf("Check: %q %v", why, ok)
	}
	if why, _ := p.Check(".husky", Dir, nil); why != "" {
		t.Errorf("a directory: %q", why)
	}
	p.Include = []string{".husky"}
	if _, ok := p.Check(".husky/pre-commit", File, nil); !ok {
		t.Error("an included path held")
	}
}

// TestHostGitGlobalAndPrograms: core.hooksPath from the global
// configuration, a ~/ form, and the files other keys name as programs
// (core.fsmonitor, an alias, a filter driver) are what git runs too.
func TestHostGitGlobalAndPrograms(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (apt-get install git)")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	global := filepath.Join(home, "global.gitconfig")
	t.Setenv("GIT_CONFIG_GLOBAL", global)
	repo := filepath.Join(home, "ws")
	os.MkdirAll(repo, 0o755)
	git(t, repo, "init", "-q")
	if err := os.WriteFile(global, []byte("[core]\n\thooksPath = .githooks\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "config", "core.fsmonitor", "./fsmon.sh")
	git(t, repo, "config", "alias.up", "!sh ./tools/up.sh --fast")
	git(t, repo, "config", "filter.lfsx.clean", `"./bin/clean" %f`)
	git(t, repo, "config", "core.pager", "less")
	// An interpreter and its script (hostile trial: `bash fsmon2.sh` was
	// not held, and git status ran what the sandbox wrote there).
	git(t, repo, "config", "core.editor", "bash edit.sh")
	git(t, repo, "config", "alias.lint", "!sh lint.sh -q")
	git(t, repo, "config", "alias.fn", "!f() { sh ./fn.sh; }; f")
	g := NewHostGit(repo)
	for rel, want := range map[string]string{
		".githooks/pre-commit": WhyHooksPath,
		"fsmon.sh":             WhyConfigProg,
		"tools/up.sh":          WhyConfigProg,
		"bin/clean":            WhyConfigProg,
		"edit.sh":              WhyConfigProg,
		"lint.sh":              WhyConfigProg,
		"fn.sh":                WhyConfigProg,
		"less":                 "",
		"bash":                 "",
		"src/main.go":          "",
	} {
		if got := g.Why(rel); got != want {
			t.Errorf("Why(%q) = %q, want %q", rel, got, want)
		}
	}
	// The repository's own ~/ form wins over the global value.
	git(t, repo, "config", "core.hooksPath", "~/ws/.hk3")
	g = NewHostGit(repo)
	if got := g.Why(".hk3/pre-commit"); got != WhyHooksPath {
		t.Errorf("~/ form: Why = %q", got)
	}
	if got := g.Why(".githooks/pre-commit"); got != "" {
		t.Errorf("overridden global hooksPath still held: %q", got)
	}
}
