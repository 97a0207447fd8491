package handback

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	bare := func(dir string) bool { return dir == "remote.git" || dir == "a/.gd" }
	for _, tc := range []struct {
		rel  string
		k    Kind
		want string
	}{
		// git at the top and at any depth
		{".git", Dir, ""},
		{".git/hooks", Dir, ""},
		{".git/hooks/pre-commit.sample", File, ""},
		{".git/hooks/pre-commit.sample", Symlink, ""},
		{".git/hooks/x/pre-commit.sample", File, WhyHook},
		{".git/hooks/pre-commit", File, WhyHook},
		{"a/b/c/.git/hooks/pre-commit", File, WhyHook},
		{"a/b/c/.git/config", File, WhyGitConfig},
		{".git/config.worktree", File, WhyGitConfig},
		{".git/commondir", File, WhyCommondir},
		{".git/info/attributes", File, WhyAttributes},
		{".git/info/exclude", File, ""},
		{".git/objects/ab/cdef", File, ""},
		{".git/refs/heads/hooks", File, ""},
		{".git/refs/heads/config", File, ""},
		{".git/logs/refs/heads/main", File, ""},
		{".git/index", File, ""},
		{".git/HEAD", File, ""},
		{".git/packed-refs", File, ""},
		{".git/objects/.bashrc", File, ""},
		// Mercurial, tool managers, Python start-up code, more editors
		{".hg/hgrc", File, WhyHg},
		{"sub/.hg/hgrc", File, WhyHg},
		{".HG/HGRC", File, WhyHg},
		{".hg/sharedpath", File, WhyHg},
		{".hg/store/data/x.i", File, ""},
		{".hg/requires", File, ""},
		{"home/.hgrc", File, WhyHome},
		{".config/hg/hgrc", File, WhyHome},
		{".bash_completion", File, WhyShell},
		{"d/.mise.toml", File, WhyToolConfig},
		{"mise.toml", File, WhyToolConfig},
		{".mise/tasks/build", File, WhyToolConfig},
		{".config/mise/config.toml", File, WhyHome},
		{".config/mise.toml", File, WhyHome},
		{".config/direnv/direnvrc", File, WhyHome},
		{".config/environment.d/10-x.conf", File, WhyHome},
		{".venv/lib/python3.12/site-packages/evil.pth", File, WhyPython},
		{"usr/lib/python3/dist-packages/x.pth", File, WhyPython},
		{"docs/notes.pth", File, ""},
		{".venv/lib/python3.12/site-packages/sitecustomize.py", File, WhyPython},
		{"usercustomize.py", File, WhyPython},
		{".zed/tasks.json", File, WhyEditor},
		{".helix/languages.toml", File, WhyEditor},
		{"src/mise.go", File, ""},
		// submodules (names with slashes, nested) and linked worktrees
		{".git/modules/lib/hooks/post-checkout", File, WhyHook},
		{".git/modules/vendor/lib/config", File, WhyGitConfig},
		{".git/modules/lib/modules/sub/hooks/x", File, WhyHook},
		{".git/modules/refs/config", File, WhyGitConfig},
		{".git/modules/refs/hooks/post-checkout", File, WhyHook},
		{".git/modules/sub/modules/objects/config", File, WhyGitConfig},
		{".git/modules/lib/refs/heads/main", File, ""},
		{".git/modules/lib/objects/ab/cdef", File, ""},
		{".git/worktrees/wt/config.worktree", File, WhyGitConfig},
		{".git/worktrees/wt/commondir", File, WhyCommondir},
		{".git/worktrees/wt/HEAD", File, ""},
		// gitfiles
		{".git", File, WhyGitfile},
		{"sub/.git", File, WhyGitfile},
		{"sub/.git", Symlink, WhyGitfile},
		// what a case-insensitive file system takes for .git
		{".GIT/hooks/pre-commit", File, WhyHook},
		{"x/.Git/config", File, WhyGitConfig},
		{"git~1/config", File, WhyGitConfig},
		{".git./config", File, WhyGitConfig},
		{".git ", File, WhyGitfile},
		// git directories of other names, when the caller knows them
		{"remote.git/hooks/update", File, WhyHook},
		{"remote.git/config", File, WhyGitConfig},
		{"remote.git/objects/x", File, ""},
		{"other.git/hooks/update", File, ""},
		{"a/.gd/config", File, WhyGitConfig},
		// attributes, direnv, shells, editors at any depth
		{".gitattributes", File, WhyAttributes},
		{"src/.gitattributes", File, WhyAttributes},
		{".envrc", File, WhyEnvrc},
		{"deep/er/.envrc", File, WhyEnvrc},
		{".bashrc", File, WhyShell},
		{"home/.zshenv", File, WhyShell},
		{".profile", Symlink, WhyShell},
		{".vscode", Dir, ""},
		{".vscode", File, WhyEditor},
		{".vscode/tasks.json", File, WhyEditor},
		{"app/.idea/workspace.xml", File, WhyEditor},
		{".devcontainer/devcontainer.json", File, WhyEditor},
		{".mcp.json", File, WhyEditor},
		{".claude/settings.json", File, WhyEditor},
		// a home directory's start-up files and configuration
		{".bash_aliases", File, WhyShell},
		{"skel/.cshrc", File, WhyShell},
		{".gitconfig", File, WhyHome},
		{".ssh/config", File, WhyHome},
		{"home/.ssh/authorized_keys", File, WhyHome},
		{".config/git/config", File, WhyHome},
		{".config/fish/config.fish", File, WhyHome},
		{".config/systemd/user/x.service", File, WhyHome},
		{".exrc", File, WhyHome},
		{"src/.dir-locals.el", File, WhyHome},
		{".config/other/settings.json", File, ""},
		// found by the hostile trial: loaded at start, on PATH, units,
		// other agents' MCP settings, mise's other names
		{".vim/plugin/x.vim", File, WhyHome},
		{".emacs.d/init.el", File, WhyHome},
		{".tmux.conf", File, WhyHome},
		{".config/tmux/tmux.conf", File, WhyHome},
		{".config/Code/User/settings.json", File, WhyHome},
		{".pam_environment", File, WhyHome},
		{".local/bin/git", File, WhyHome},
		{".local/share/systemd/user/x.service", File, WhyHome},
		{".local/share/applications/x.desktop", File, WhyHome},
		{".local/share/fonts/x.ttf", File, ""},
		{".local/lib/x", File, ""},
		{".kiro/settings/mcp.json", File, WhyEditor},
		{".roo/mcp.json", File, WhyEditor},
		{".continue/config.yaml", File, WhyEditor},
		{"opencode.json", File, WhyEditor},
		{"mise/config.toml", File, WhyToolConfig},
		{"mise/conf.d/x.toml", File, WhyToolConfig},
		{"mise.dev.toml", File, WhyToolConfig},
		{".mise.dev.toml", File, WhyToolConfig},
		{".rtx.local.toml", File, WhyToolConfig},
		{"mise", File, ""},
		{"src/mise.go", File, ""},
		{"bin/ls", File, ""},
		// the project's own content passes
		{"Makefile", File, ""},
		{"src/main.go", File, ""},
		{"hooks/pre-commit", File, ""},
		{"config", File, ""},
		{".gitignore", File, ""},
		{".gitmodules", File, ""},
		{"docs/bashrc.md", File, ""},
		{".", Dir, ""},
	} {
		if got := Classify(tc.rel, tc.k, bare); got != tc.want {
			t.Errorf("Classify(%q, %d) = %q, want %q", tc.rel, tc.k, got, tc.want)
		}
	}
}

// TestClassifyTopIsGitDir: a destination whose top is a git directory (a
// sandbox's `git init --bare .`) holds its hooks, config and attributes
// like any other git directory's; its data passes. The hostile trial had
// an archive with config (core.pager) and hooks/ at the top written
// through the gate, which looked at the directories below the top only.
func TestClassifyTopIsGitDir(t *testing.T) {
	top := func(dir string) bool { return dir == "." }
	for _, tc := range []struct {
		rel  string
		want string
	}{
		{"config", WhyGitConfig},
		{"hooks/post-checkout", WhyHook},
		{"hooks/pre-commit.sample", ""},
		{"info/attributes", WhyAttributes},
		{"commondir", WhyCommondir},
		{"modules/sub/config", WhyGitConfig},
		{"HEAD", ""},
		{"objects/ab/cdef", ""},
		{"refs/heads/main", ""},
		{"description", ""},
	} {
		if got := Classify(tc.rel, File, top); got != tc.want {
			t.Errorf("top a git directory: Classify(%q) = %q, want %q", tc.rel, got, tc.want)
		}
	}
	if got := Classify("config", File, func(string) bool { return false }); got != "" {
		t.Errorf("top no git directory: Classify(config) = %q", got)
	}
}

// TestLinksOut: a symlink leads out of the destination when its target is
// absolute (but for the system's directories) or climbs above the top
// from the link's own directory.
func TestLinksOut(t *testing.T) {
	for _, tc := range []struct {
		rel, target string
		out         bool
	}{
		{"build.log", "../../root/.bashrc", true},
		{"a/b/link", "../../x", false},
		{"a/b/link", "../../../x", true},
		{"a/link", "b/../../..", true},
		{"link", "..", true},
		{"link", ".", false},
		{"node_modules", "/root/.config/autostart", true},
		{"home", "/home/u", true},
		{"venv/bin/python", "/usr/bin/python3", false},
		{"venv/bin/python", "/usr/../root/x", true},
		{"x", "/usr", false},
		{"x", "/usrx/y", true},
		{"node_modules/.bin/tsc", "../typescript/bin/tsc", false},
		{"x", "", false},
	} {
		if got := LinksOut(tc.rel, tc.target); got != tc.out {
			t.Errorf("LinksOut(%q, %q) = %v, want %v", tc.rel, tc.target, got, tc.out)
		}
	}
	var p Policy
	if why, ok := p.CheckLink("build.log", "/root/.bashrc", nil); why != WhyLinkOut || ok {
		t.Errorf("CheckLink out: %q %v", why, ok)
	}
	p.Include = []string{"build.log"}
	if _, ok := p.CheckLink("build.log", "/root/.bashrc", nil); !ok {
		t.Error("an included link held")
	}
}

func TestClassifyWithoutLook(t *testing.T) {
	if got := Classify("remote.git/hooks/update", File, nil); got != "" {
		t.Errorf("nil isGitDir: %q", got)
	}
}

func TestPolicy(t *testing.T) {
	p := Policy{Protected: []string{"secrets", "**/deploy.key"}, Include: []string{"a/.git/hooks", "./.envrc"}}
	for _, tc := range []struct {
		rel       string
		k         Kind
		risky     bool
		mayWrite  bool
		wantMatch string
	}{
		{"src/x.go", File, false, true, ""},
		{"a/.git/hooks/pre-commit", File, true, true, "hook"},
		{"a/.git/hooks", Dir, false, true, ""},
		{"secrets", Dir, false, true, ""},
		{"a/.git/config", File, true, false, "configuration"},
		{"b/.git/hooks/pre-commit", File, true, false, "hook"},
		{".envrc", File, true, true, "direnv"},
		{"x/.envrc", File, true, false, "direnv"},
		{"secrets/a", File, true, false, "protected path (secrets)"},
		{"x/y/deploy.key", File, true, false, "protected path (**/deploy.key)"},
		{"a/.git/hooksx", File, false, true, ""},
	} {
		why, ok := p.Check(tc.rel, tc.k, nil)
		if (why != "") != tc.risky || ok != tc.mayWrite || !strings.Contains(why, tc.wantMatch) {
			t.Errorf("Check(%q) = %q, %v; want risky %v, write %v, reason with %q", tc.rel, why, ok, tc.risky, tc.mayWrite, tc.wantMatch)
		}
	}
	if !(Policy{Include: []string{"."}}).Included(".git/config") {
		t.Error(`Include "." names everything`)
	}
	if (Policy{Include: []string{"", " "}}).Included(".git/config") {
		t.Error(`an empty Include (an unset variable) names everything`)
	}
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		name, top string
		want      bool
	}{
		{"out", "out", true},
		{"out/a/b", "out", true},
		{"outside", "out", false},
		{"sibling.txt", "out", false},
		{".bashrc", "out", false},
		{"anything", "", true},
		{"x", ".", true},
	} {
		if got := Within(tc.name, tc.top); got != tc.want {
			t.Errorf("Within(%q, %q) = %v", tc.name, tc.top, got)
		}
	}
}

func TestQuotePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain/path.go", "plain/path.go"},
		{"with space", "with space"},
		{"-leading-dash", "-leading-dash"},
		{"dir\n+++ b/evil", `"dir\n+++ b/evil"`},
		{"tab\there", `"tab\there"`},
		{`quo"te`, `"quo\"te"`},
		{`back\slash`, `"back\\slash"`},
		{"caf\xc3\xa9", `"caf\303\251"`},
		{"bad\xff", `"bad\377"`},
		{"esc\x1b[31m", `"esc\033[31m"`},
		{"del\x7f", `"del\177"`},
		{"\a\b\v\f\r", `"\a\b\v\f\r"`},
	} {
		if got := QuotePath(tc.in); got != tc.want {
			t.Errorf("QuotePath(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestQuotePathAsGit checks QuotePath against git itself: the names git
// ls-files prints with core.quotePath on.
func TestQuotePathAsGit(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is needed (apt-get install git):", err)
	}
	d := t.TempDir()
	names := []string{"plain", "with space", "-dash", "new\nline", "tab\tx", `quo"te`, `back\slash`, "caf\xc3\xa9", "bad\xff", "esc\x1b[1m", "del\x7f", "cr\r"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(d, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		cmd := exec.Command(git, args...)
		cmd.Dir = d
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+d)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("init", "-q")
	run("add", "-A")
	got := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(run("-c", "core.quotePath=true", "ls-files"), "\n"), "\n") {
		got[l] = true
	}
	for _, n := range names {
		if q := QuotePath(n); !got[q] {
			t.Errorf("QuotePath(%q) = %s, which git does not print (git printed %v)", n, q, got)
		}
	}
}

// TestIncludeAsPrinted: a path as Risk.String prints it, pasted after
// --include-risky into a shell command line (the shell strips the quotes)
// or in single quotes (it keeps them), names that path.
func TestIncludeAsPrinted(t *testing.T) {
	for _, p := range []string{
		"q/.bashrc", "a b/.envrc", "caf\xc3\xa9/.envrc", "tab\there/.envrc", `quo"te/.envrc`,
		`back\slash/.envrc`, "d$HOME/.envrc", "tick`x`/.envrc", "bad\xff/.envrc", "~x/.envrc", "semi;colon/.envrc",
	} {
		printed := strings.TrimSuffix(Risk{Path: p, Why: "w"}.String(), ": w")
		out, err := exec.Command("sh", "-c", `printf '%s\0' `+printed+` '`+strings.ReplaceAll(printed, `'`, `'\''`)+`'`).Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		args := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if len(args) != 2 {
			t.Errorf("%q printed as %s: the shell splits it: %q", p, printed, args)
			continue
		}
		for _, a := range args {
			if !(Policy{Include: []string{a}}).Included(p) {
				t.Errorf("%q printed as %s: --include-risky %q does not name it", p, printed, a)
			}
		}
	}
	// What reads as no quoted path names only itself.
	if (Policy{Include: []string{`a\q`}}).Included("a") || !(Policy{Include: []string{`a\q`}}).Included(`a\q`) {
		t.Error(`a\q`)
	}
}

// TestPolicyOwn: a hand-back that would write corral's own files or
// directories (its executable, a helper beside it, its settings) is held,
// whatever the path's name; one beside them is not, and none is checked
// without a root.
func TestPolicyOwn(t *testing.T) {
	p := Policy{Own: []string{"/p/corral", "/p/corral-helper", "/home/u/.config/corral"}, Root: "/p"}
	for _, tc := range []struct {
		root, rel string
		held      bool
	}{
		{"/p", "corral", true},
		{"/p", "corral-helper", true},
		{"/p", "corral.txt", false},
		{"/p", "src/corral", false},
		{"/home/u", ".config/corral/config.yaml", true},
		{"/home/u/.config", "corral/config.yaml", true},
		{"/home/u", ".config/corralx", false},
		{"", "corral", false},
	} {
		q := p
		q.Root = tc.root
		why, write := q.Check(tc.rel, File, nil)
		if held := why != "" && !write; held != tc.held || tc.held && !strings.Contains(why, "corral's own") {
			t.Errorf("root %q rel %q: why %q write %v; want held=%v", tc.root, tc.rel, why, write, tc.held)
		}
	}
}

func TestInGitDir(t *testing.T) {
	bare := func(d string) bool { return d == "r.git" }
	top := func(d string) bool { return d == "." }
	for _, tc := range []struct {
		rel   string
		isGit func(string) bool
		want  bool
	}{
		{".git", nil, true},
		{".git/objects/ab/cdef", nil, true},
		{"sub/.git/HEAD", nil, true},
		{".GIT/refs/heads/main", nil, true}, // case-folding file systems
		{"git~1/HEAD", nil, true},           // NTFS short name
		{"src/main.go", nil, false},
		{".gitignore", nil, false},
		{"r.git/refs/heads/main", bare, true},
		{"r.git", bare, true}, // removed whole: one deletion in a layer
		{"README", top, true},
		{"", nil, false},
	} {
		if got := InGitDir(tc.rel, tc.isGit); got != tc.want {
			t.Errorf("InGitDir(%q) = %v, want %v", tc.rel, got, tc.want)
		}
	}
}
