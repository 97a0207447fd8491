package layer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/handback"
	"time"
)

// testRoot returns a fresh directory under $CORRAL_TEST_DIR (else
// /var/tmp), removed after the test.
func testRoot(t *testing.T) string {
	t.Helper()
	base := os.Getenv("CORRAL_TEST_DIR")
	if base == "" {
		base = "/var/tmp"
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp(base, "corral-layer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				os.Chmod(p, 0o700) // overlayfs leaves work/work mode 000
			}
			return nil
		})
		os.RemoveAll(root)
	})
	return root
}

// requireOverlay skips when a user namespace cannot mount an overlay here.
func requireOverlay(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) is missing: cannot make a real overlay mount")
	}
}

// inOverlay runs script with the layer mounted over Lower (in a user and
// mount namespace of its own, as a session's commands see it), in Lower,
// and returns its output.
func inOverlay(t *testing.T, l *Layer, script string) string {
	t.Helper()
	opts := "lowerdir=" + l.Lower + ",upperdir=" + l.Upper() + ",workdir=" + l.Work() + ",userxattr"
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", "sh", "-ec",
		`mount -t overlay overlay -o "$1" "$2"; cd "$2"; eval "$3"`, "sh", opts, l.Lower, script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("overlay script: %v\n%s", err, out)
	}
	return string(out)
}

// view lists a tree (type, mode, symlink target, file hash of each
// path), to compare what a session sees with Lower.
const view = `find . -path ./.corral -prune -o -printf '%p %y %m %l\n' | LC_ALL=C sort; find . -type f -exec md5sum {} + | LC_ALL=C sort`

func hostView(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", view)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return string(out)
}

func write(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, mode)
}

// project makes a Lower of every kind of entry and a layer over it.
func project(t *testing.T) *Layer {
	t.Helper()
	requireOverlay(t)
	root := testRoot(t)
	lower := filepath.Join(root, "lower")
	write(t, filepath.Join(lower, "keep.txt"), "same\n", 0o644)
	write(t, filepath.Join(lower, "mod.txt"), "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", 0o644)
	write(t, filepath.Join(lower, "del.txt"), "bye\n", 0o644)
	write(t, filepath.Join(lower, "mv.txt"), "move\n", 0o644)
	write(t, filepath.Join(lower, "exec.sh"), "#!/bin/sh\n", 0o644)
	write(t, filepath.Join(lower, "touch.txt"), "t\n", 0o644)
	write(t, filepath.Join(lower, "dir", "a"), "a\n", 0o644)
	write(t, filepath.Join(lower, "dir", "b"), "b\n", 0o644)
	write(t, filepath.Join(lower, "opq", "x"), "x\n", 0o644)
	write(t, filepath.Join(lower, "opq", "y"), "y\n", 0o644)
	write(t, filepath.Join(lower, "bin.dat"), "a\x00b", 0o644)
	write(t, filepath.Join(lower, "tc"), "was a file\n", 0o644)
	if err := os.Symlink("keep.txt", filepath.Join(lower, "link")); err != nil {
		t.Fatal(err)
	}
	l := New(filepath.Join(root, "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	return l
}

// session makes, through a real overlay mount, every kind of change.
const session = `
printf 'new\n' > added.txt
sed -i 's/^3$/three/' mod.txt
rm del.txt
mv mv.txt moved.txt
chmod 755 exec.sh
touch touch.txt
mv dir dir2
rm -rf opq; mkdir opq; echo new > opq/x
printf 'a\0c' > bin.dat
ln -sfn mod.txt link
rm tc; mkdir tc; echo in > tc/in
ln -s /etc esc
`

type got struct {
	Path string
	Kind Kind
	Type string
}

func summary(cs []Change) []got {
	var out []got
	for _, c := range cs {
		s := c.New
		if s == nil {
			s = c.Old
		}
		out = append(out, got{c.Path, c.Kind, s.Type})
	}
	return out
}

func TestChangesOfARealOverlay(t *testing.T) {
	l := project(t)
	inOverlay(t, l, session)
	cs, err := Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []got{
		{"added.txt", Added, "file"},
		{"bin.dat", Modified, "file"},
		{"del.txt", Deleted, "file"},
		{"dir", Deleted, "dir"},
		{"dir/a", Deleted, "file"},
		{"dir/b", Deleted, "file"},
		{"dir2", Added, "dir"},
		{"dir2/a", Added, "file"},
		{"dir2/b", Added, "file"},
		{"esc", Added, "symlink"},
		{"exec.sh", Modified, "file"},
		{"link", Modified, "symlink"},
		{"mod.txt", Modified, "file"},
		{"moved.txt", Added, "file"},
		{"mv.txt", Deleted, "file"},
		{"opq/x", Modified, "file"},
		{"opq/y", Deleted, "file"},
		{"tc", TypeChanged, "dir"},
		{"tc/in", Added, "file"},
	}
	if g := summary(cs); !reflect.DeepEqual(g, want) {
		t.Fatalf("changes:\n got %v\nwant %v", g, want)
	}
	byPath := map[string]Change{}
	for _, c := range cs {
		byPath[c.Path] = c
	}
	if c := byPath["exec.sh"]; c.ContentChanged || !c.ModeChanged || c.New.Mode != 0o755 {
		t.Errorf("exec.sh: %+v", c)
	}
	if c := byPath["bin.dat"]; !c.Binary || !c.ContentChanged {
		t.Errorf("bin.dat: %+v", c)
	}
	if c := byPath["mod.txt"]; c.Binary || c.ModeChanged {
		t.Errorf("mod.txt: %+v", c)
	}
	if c := byPath["link"]; c.Old.Target != "keep.txt" || c.New.Target != "mod.txt" {
		t.Errorf("link: %+v %+v", c.Old, c.New)
	}

	for _, tc := range []struct {
		paths []string
		want  []string
	}{
		{[]string{"opq"}, []string{"opq/x", "opq/y"}},
		{[]string{filepath.Join(l.Lower, "dir2") + "/"}, []string{"dir2", "dir2/a", "dir2/b"}},
		{[]string{"./mod.txt", "esc"}, []string{"esc", "mod.txt"}},
		{[]string{"nothing"}, nil},
	} {
		cs, err := Changes(l, tc.paths)
		if err != nil {
			t.Fatal(err)
		}
		var ps []string
		for _, c := range cs {
			ps = append(ps, c.Path)
		}
		if !reflect.DeepEqual(ps, tc.want) {
			t.Errorf("Changes(%q) = %q, want %q", tc.paths, ps, tc.want)
		}
	}
	if _, err := Changes(l, []string{"../x"}); !errors.Is(err, ErrOutside) {
		t.Errorf("../x: %v", err)
	}
	if _, err := Changes(l, []string{"/etc"}); !errors.Is(err, ErrOutside) {
		t.Errorf("/etc: %v", err)
	}
}

func TestDiffText(t *testing.T) {
	l := project(t)
	inOverlay(t, l, session)
	cs, err := Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Diff(&b, cs, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"diff --git a/mod.txt b/mod.txt\n--- a/mod.txt\n+++ b/mod.txt\n@@ -1,6 +1,6 @@\n 1\n 2\n-3\n+three\n 4\n 5\n 6\n",
		"diff --git a/added.txt b/added.txt\nnew file mode 100644\n--- /dev/null\n+++ b/added.txt\n@@ -0,0 +1 @@\n+new\n",
		"diff --git a/del.txt b/del.txt\ndeleted file mode 100644\n--- a/del.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n",
		"diff --git a/exec.sh b/exec.sh\nold mode 100644\nnew mode 100755\ndiff --git",
		"diff --git a/bin.dat b/bin.dat\nBinary files a/bin.dat and b/bin.dat differ\n",
		"diff --git a/link b/link\n--- a/link\n+++ b/link\n@@ -1 +1 @@\n-keep.txt\n\\ No newline at end of file\n+mod.txt\n\\ No newline at end of file\n",
		"diff --git a/esc b/esc\nnew file mode 120000\n--- /dev/null\n+++ b/esc\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n",
		"diff --git a/tc b/tc\ndeleted file mode 100644\n--- a/tc\n+++ /dev/null\n@@ -1 +0,0 @@\n-was a file\n",
		"diff --git a/tc/in b/tc/in\nnew file mode 100644\n",
		"diff --git a/opq/y b/opq/y\ndeleted file mode 100644\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks\n%s\n---- diff:\n%s", want, out)
		}
	}
	if strings.Contains(out, "touch.txt") || strings.Contains(out, "keep.txt b/") || strings.Contains(out, "\x1b[") {
		t.Errorf("diff shows an unchanged file or colour:\n%s", out)
	}
	if git, err := exec.LookPath("git"); err == nil {
		// The hunks are git's own for a plain edit.
		before, after := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
		os.WriteFile(before, []byte("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"), 0o644)
		os.WriteFile(after, []byte("1\n2\nthree\n4\n5\n6\n7\n8\n9\n10\n"), 0o644)
		g, _ := exec.Command(git, "diff", "--no-index", "--no-color", before, after).Output()
		if i := bytes.Index(g, []byte("@@")); i < 0 || !strings.Contains(out, string(g[i:])) {
			t.Errorf("git's hunk\n%s\nnot in ours", g)
		}
	}

	b.Reset()
	if err := Diff(&b, cs, DiffOptions{Color: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\x1b[31m-3\x1b[m\n\x1b[32m+three\x1b[m\n") || !strings.Contains(b.String(), "\x1b[36m@@ -1,6 +1,6 @@\x1b[m") {
		t.Errorf("colour diff:\n%q", b.String())
	}

	b.Reset()
	mod, _ := Changes(l, []string{"mod.txt", "added.txt", "bin.dat", "exec.sh"})
	if err := Diff(&b, mod, DiffOptions{Stat: true}); err != nil {
		t.Fatal(err)
	}
	wantStat := " added.txt | 1 +\n bin.dat   | Bin 3 -> 3 bytes\n exec.sh   | 0 \n mod.txt   | 2 +-\n 4 files changed, 2 insertions(+), 1 deletion(-)\n"
	if b.String() != wantStat {
		t.Errorf("stat:\n%q\nwant\n%q", b.String(), wantStat)
	}
}

// A repository's internals (objects, refs, the index) changed in the
// layer are one line per git directory, not a patch per object (a fresh
// user's trial saw compressed objects printed as text).
func TestDiffSummarizesGitDirectories(t *testing.T) {
	l := project(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed (apt-get install git); CI installs it")
	}
	inOverlay(t, l, `git init -q sub && cd sub && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m one && echo x > ../mod.txt`)
	cs, err := Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Diff(&b, cs, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// The new repository's configuration is risky: listed and shown
	// first; its data is summed up; git init's sample hooks are data.
	if !strings.HasPrefix(out, "# 1 risky path: ") || !strings.Contains(out, "#   sub/.git/config: git configuration") ||
		!strings.Contains(out, "diff --git a/sub/.git/config b/sub/.git/config") || strings.Count(out, "diff --git a/sub/.git/") != 1 ||
		strings.Index(out, "sub/.git/config b/") > strings.Index(out, "+++ b/mod.txt") ||
		!strings.Contains(out, "git directory sub/.git: ") || !strings.Contains(out, "corral apply sub/.git") || !strings.Contains(out, "+++ b/mod.txt") {
		t.Errorf("diff:\n%s", out)
	}
	b.Reset()
	if err := Diff(&b, cs, DiffOptions{Stat: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Count(b.String(), "sub/.git/") != 2 || !strings.Contains(b.String(), " sub/.git/config ") || !strings.Contains(b.String(), "git directory sub/.git: ") {
		t.Errorf("stat:\n%s", b.String())
	}
}

// TestDiffRenames: a moved file reads as a rename, as git diff shows it:
// exact (100%), with edits (the hunks follow), with a mode change, in
// --stat; two identical files deleted and one added pair once; a file
// too unlike the deleted one stays an addition.
func TestDiffRenames(t *testing.T) {
	l := project(t)
	var long strings.Builder
	for i := range 40 {
		fmt.Fprintf(&long, "line %d\n", i)
	}
	write(t, filepath.Join(l.Lower, "long.txt"), long.String(), 0o644)
	write(t, filepath.Join(l.Lower, "twin1"), "twin\n", 0o644)
	write(t, filepath.Join(l.Lower, "twin2"), "twin\n", 0o644)
	write(t, filepath.Join(l.Lower, "other.txt"), "alpha\nbeta\ngamma\ndelta\n", 0o644)
	// The base must know them: record it again.
	if err := os.Remove(l.BasePath()); err != nil {
		t.Fatal(err)
	}
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	inOverlay(t, l, `mv mv.txt moved.txt
mv long.txt sub-long.txt; sed -i 's/^line 7$/line seven/' sub-long.txt
mv exec.sh run.sh; chmod 755 run.sh
rm twin1 twin2; echo twin > twin3
mv dir dir2
mv other.txt new.txt; printf 'one\ntwo\nthree\nfour\n' > new.txt`)
	cs, err := Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Diff(&b, cs, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"diff --git a/mv.txt b/moved.txt\nsimilarity index 100%\nrename from mv.txt\nrename to moved.txt\ndiff --git",
		"diff --git a/long.txt b/sub-long.txt\nsimilarity index 9", // 97%: one line of 40 changed
		"rename from long.txt\nrename to sub-long.txt\n--- a/long.txt\n+++ b/sub-long.txt\n@@ -5,7 +5,7 @@\n line 4\n line 5\n line 6\n-line 7\n+line seven\n",
		"diff --git a/exec.sh b/run.sh\nold mode 100644\nnew mode 100755\nsimilarity index 100%\nrename from exec.sh\nrename to run.sh\n",
		"diff --git a/dir/a b/dir2/a\nsimilarity index 100%\nrename from dir/a\nrename to dir2/a\n",
		"diff --git a/other.txt b/other.txt\ndeleted file mode 100644\n",
		"diff --git a/new.txt b/new.txt\nnew file mode 100644\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks\n%s\n---- diff:\n%s", want, out)
		}
	}
	// One of the twins is renamed, the other deleted.
	if n := strings.Count(out, "rename to twin3\n"); n != 1 {
		t.Errorf("twin3 renamed %d times:\n%s", n, out)
	}
	if n := strings.Count(out, "deleted file mode 100644\n--- a/twin"); n != 1 {
		t.Errorf("want one twin deleted:\n%s", out)
	}
	if strings.Contains(out, "deleted file mode 100644\n--- a/mv.txt") || strings.Contains(out, "+++ b/moved.txt") {
		t.Errorf("an exact rename shows content:\n%s", out)
	}
	b.Reset()
	if err := Diff(&b, cs, DiffOptions{Stat: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" mv.txt => moved.txt ", " long.txt => sub-long.txt ", "| 2 +-\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("stat lacks %q:\n%s", want, b.String())
		}
	}
	// Apply still sees a deletion and an addition: the rename lands whole.
	if _, err := Apply(l, []string{"mv.txt", "moved.txt"}, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.Lower, "mv.txt")); !os.IsNotExist(err) {
		t.Errorf("mv.txt still on the host after apply: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(l.Lower, "moved.txt")); err != nil || string(got) != "move\n" {
		t.Errorf("moved.txt on the host: %q, %v", got, err)
	}
}

// TestUsers: a process in a mount namespace that holds the layer's
// overlay is found, and is gone from the list once it ends.
func TestUsers(t *testing.T) {
	l := project(t)
	opts := "lowerdir=" + l.Lower + ",upperdir=" + l.Upper() + ",workdir=" + l.Work() + ",userxattr"
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", "sh", "-ec",
		`mount -t overlay overlay -o "$1" "$2"; cd "$2"; exec sleep 600`, "sh", opts, l.Lower)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	found := false
	for deadline := time.Now().Add(time.Minute); !found && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ps, err := Users(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			found = found || p.PID == cmd.Process.Pid && len(p.Args) > 0 && p.Args[0] == "sleep"
		}
	}
	if !found {
		t.Fatalf("the process holding the overlay (pid %d) is not among the layer's users", cmd.Process.Pid)
	}
	other := New(l.Dir+"-other", l.Lower)
	if ps, _ := Users(other); len(ps) != 0 {
		t.Errorf("another layer has users: %+v", ps)
	}
	cmd.Process.Kill()
	<-done
	done <- nil
	if ps, _ := Users(l); len(ps) != 0 {
		t.Errorf("users after the process ended: %+v", ps)
	}
}

// TestApplyHoldsRisky: a repository the session made three levels down,
// with an executable hook and core.fsmonitor in its configuration, a
// .bashrc, a bare repository's hook and a .vscode task: diff lists them
// first, apply writes everything else and holds them back in the layer,
// and writes them only when named.
// TestApplyHoldsHostHooksPath: a change where the working directory's
// own repository runs hooks from (core.hooksPath, as husky sets it) is
// held back and listed first, though the layer holds no git directory.
func TestApplyHoldsHostHooksPath(t *testing.T) {
	l := project(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (apt-get install git)")
	}
	for _, args := range [][]string{{"init", "-q"}, {"config", "core.hooksPath", ".husky"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = l.Lower, []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent", "PATH=/usr/bin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %q: %v %s", args, err, out)
		}
	}
	inOverlay(t, l, `mkdir -p .husky && printf 'echo PWNED\n' > .husky/pre-commit && chmod +x .husky/pre-commit && echo n > notes.txt`)
	if out := diffOf(t, l, DiffOptions{}); !strings.Contains(out, "#   .husky/pre-commit: ") {
		t.Errorf("diff does not list the hook first:\n%s", out)
	}
	res, err := Apply(l, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Held) != 1 || res.Held[0].Path != ".husky/pre-commit" {
		t.Errorf("held %+v", res.Held)
	}
	if _, err := os.Lstat(filepath.Join(l.Lower, ".husky", "pre-commit")); err == nil {
		t.Error("the hook was applied")
	}
	if _, err := os.Lstat(filepath.Join(l.Lower, "notes.txt")); err != nil {
		t.Errorf("the rest was not applied: %v", err)
	}
}

// TestApplyHoldsProtectedPaths: the protected-path patterns of the
// setting protected_paths are held back and listed first like handback's
// own; nil means the default list; an empty list adds none (handback's
// rules still hold).
func TestApplyHoldsProtectedPaths(t *testing.T) {
	l := project(t)
	inOverlay(t, l, `mkdir -p deploy && echo k > deploy/prod.pem && echo n > notes.txt && echo 'echo PWNED' > .bashrc`)
	protected := []string{"deploy/*.pem"}
	if out := diffOf(t, l, DiffOptions{Protected: protected}); !strings.Contains(out, "#   deploy/prod.pem: ") {
		t.Errorf("diff does not list the protected path first:\n%s", out)
	}
	if out := diffOf(t, l, DiffOptions{}); strings.Contains(out, "#   deploy/prod.pem: ") {
		t.Errorf("diff lists a path only the setting names, without it:\n%s", out)
	}
	res, err := Apply(l, nil, ApplyOptions{Protected: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	_ = res
	if _, err := os.Lstat(filepath.Join(l.Lower, ".bashrc")); err == nil {
		t.Error("an empty protected list let .bashrc through")
	}
	if _, err := os.Lstat(filepath.Join(l.Lower, "deploy", "prod.pem")); err != nil {
		t.Errorf("an empty protected list held deploy/prod.pem: %v", err)
	}
	inOverlay(t, l, `echo k2 > deploy/prod.pem`)
	res, err = Apply(l, nil, ApplyOptions{Protected: protected})
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, r := range res.Held {
		held = append(held, r.Path)
	}
	if !slices.Equal(held, []string{".bashrc", "deploy/prod.pem"}) {
		t.Errorf("held %q", held)
	}
	if b, _ := os.ReadFile(filepath.Join(l.Lower, "deploy", "prod.pem")); string(b) != "k\n" {
		t.Errorf("the protected path was applied: %q", b)
	}
}

func TestApplyHoldsRisky(t *testing.T) {
	l := project(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (apt-get install git)")
	}
	inOverlay(t, l, `git init -q a/b/c
printf '#!/bin/sh\necho PWNED\n' > a/b/c/.git/hooks/pre-commit; chmod +x a/b/c/.git/hooks/pre-commit
printf '[core]\n\tfsmonitor = echo PWNED\n' >> a/b/c/.git/config
echo 'echo PWNED' > .bashrc
git init -q --bare r.git; echo 'exit 0' > r.git/hooks/update
mkdir .vscode; echo '{}' > .vscode/tasks.json
echo ok > a/b/c/file.txt`)
	out := diffOf(t, l, DiffOptions{})
	risky := []string{".bashrc", ".vscode/tasks.json", "a/b/c/.git/config", "a/b/c/.git/hooks/pre-commit", "r.git/config", "r.git/hooks/update"}
	for _, p := range risky {
		if !strings.Contains(out, "#   "+p+": ") {
			t.Errorf("diff does not list %s first:\n%s", p, out)
		}
	}
	res, err := Apply(l, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, r := range res.Held {
		held = append(held, r.Path)
	}
	if !slices.Equal(held, risky) {
		t.Errorf("held %q, want %q", held, risky)
	}
	for _, p := range risky {
		if _, err := os.Lstat(filepath.Join(l.Lower, p)); err == nil {
			t.Errorf("%s was applied", p)
		}
	}
	for _, p := range []string{"a/b/c/file.txt", "a/b/c/.git/HEAD", "a/b/c/.git/hooks/pre-commit.sample", "r.git/HEAD"} {
		if _, err := os.Lstat(filepath.Join(l.Lower, p)); err != nil {
			t.Errorf("%s was not applied: %v", p, err)
		}
	}
	// git in the applied repository runs nothing of the session's.
	cmd := exec.Command("git", "-C", filepath.Join(l.Lower, "a/b/c"), "status", "--short")
	if o, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(o), "PWNED") {
		t.Errorf("git status in the applied repository: %v %s", err, o)
	}
	// Still in the layer, and applied when named.
	res, err = Apply(l, nil, ApplyOptions{IncludeRisky: []string{"a/b/c/.git/hooks", ".bashrc"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Applied, "a/b/c/.git/hooks/pre-commit") || !slices.Contains(res.Applied, ".bashrc") || len(res.Held) != 4 {
		t.Errorf("named: applied %q, held %v", res.Applied, res.Held)
	}
	if b, _ := os.ReadFile(filepath.Join(l.Lower, ".bashrc")); string(b) != "echo PWNED\n" {
		t.Errorf(".bashrc %q", b)
	}
}

// TestApplyHoldsGitDeletions (hostile trial): a session that deletes a
// repository's own data (objects, refs, HEAD, index) has those deletions
// held, named first in the diff, while the rest is applied: the diff sums
// a repository's changes up in one line, and a plain apply took the
// host's history with it. Named, they are applied.
func TestApplyHoldsGitDeletions(t *testing.T) {
	requireOverlay(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (apt-get install git)")
	}
	root := testRoot(t)
	lower := filepath.Join(root, "lower")
	write(t, filepath.Join(lower, "keep.txt"), "same\n", 0o644)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", lower, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q")
	git("add", "keep.txt")
	git("commit", "-q", "-m", "one")
	// The repository is there before the session, as a project's is.
	l := New(filepath.Join(root, "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	inOverlay(t, l, `rm -rf .git/objects .git/refs .git/HEAD .git/index; echo hi > new.txt`)
	out := diffOf(t, l, DiffOptions{})
	if !strings.Contains(out, "#   .git/HEAD: "+handback.WhyGitDelete) {
		t.Errorf("diff does not name the deletion of .git/HEAD first:\n%s", out)
	}
	res, err := Apply(l, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Applied, "new.txt") || res.HeldTotal == 0 {
		t.Fatalf("applied %q, held %v", res.Applied, res.Held)
	}
	for _, r := range res.Held {
		if !strings.HasPrefix(r.Path, ".git") || r.Why != handback.WhyGitDelete {
			t.Errorf("held %+v, want only .git's deletions", r)
		}
	}
	if log := git("log", "--oneline"); !strings.Contains(log, "one") {
		t.Errorf("the host's history after apply: %q", log)
	}
	res, err = Apply(l, nil, ApplyOptions{IncludeRisky: []string{".git"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.HeldTotal != 0 {
		t.Errorf("named: held %v", res.Held)
	}
	if _, err := os.Lstat(filepath.Join(l.Lower, ".git/HEAD")); err == nil {
		t.Errorf(".git/HEAD is still there once the deletion was named")
	}
}

// TestApplyHoldsLinksOut: a symlink the session made that leads out of
// the working directory (build.log to ~/.bashrc, node_modules to
// ~/.config/autostart) is listed first and held: a host tool that writes
// through it writes outside the project (hostile trial). One inside the
// tree, and a virtual environment's link to /usr/bin, are applied.
func TestApplyHoldsLinksOut(t *testing.T) {
	l := project(t)
	inOverlay(t, l, `ln -s ../../../../../../root/.bashrc build.log
ln -s /root/.config/autostart node_modules
mkdir -p dist venv/bin; ln -s /root/.ssh/authorized_keys dist/keys.txt
mkdir sub; ln -s ../README sub/inner; ln -s /usr/bin/python3 venv/bin/python`)
	out := diffOf(t, l, DiffOptions{})
	held := []string{"build.log", "dist/keys.txt", "node_modules"}
	for _, p := range held {
		if !strings.Contains(out, "#   "+p+": ") {
			t.Errorf("diff does not list %s first:\n%s", p, out)
		}
	}
	res, err := Apply(l, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.Held {
		got = append(got, r.Path)
		if r.Why != handback.WhyLinkOut {
			t.Errorf("%s held for %q", r.Path, r.Why)
		}
	}
	if !slices.Equal(got, held) {
		t.Errorf("held %q, want %q", got, held)
	}
	for _, p := range []string{"sub/inner", "venv/bin/python"} {
		if _, err := os.Lstat(filepath.Join(l.Lower, p)); err != nil {
			t.Errorf("%s was not applied: %v", p, err)
		}
	}
}

// TestDiffQuotesNames: names with a newline, a tab, quotes, backslashes,
// bytes of no encoding and a leading dash print as git prints them, so
// none forges a line of the diff.
func TestDiffQuotesNames(t *testing.T) {
	l := project(t)
	inOverlay(t, l, `mkdir "$(printf 'dir\n+++ b')"; echo x > "$(printf 'dir\n+++ b')/evil"
echo x > "$(printf 'tab\there')"; echo x > 'quo"te'; echo x > 'back\slash'; echo x > "$(printf 'bad\377')"; echo x > ./-dash`)
	cs, err := Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Diff(&b, cs, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, w := range []string{
		`diff --git "a/dir\n+++ b/evil" "b/dir\n+++ b/evil"`, `+++ "b/dir\n+++ b/evil"`,
		`diff --git "a/tab\there" "b/tab\there"`, `diff --git "a/quo\"te" "b/quo\"te"`,
		`diff --git "a/back\\slash" "b/back\\slash"`, `diff --git "a/bad\377" "b/bad\377"`, "diff --git a/-dash b/-dash",
	} {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("diff lacks %s:\n%s", w, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "+++ b/evil") || strings.HasPrefix(l, "+++ b\"") {
			t.Errorf("a forged line: %q", l)
		}
	}
	b.Reset()
	if err := Diff(&b, cs, DiffOptions{Stat: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), ` "dir\n+++ b/evil" |`) {
		t.Errorf("stat:\n%s", b.String())
	}
}

// TestApplyHoldsGitDirShapes: a session's git directory whose HEAD is a
// symlink has its configuration held; a change that makes a directory of
// the project a git directory whose configuration is already there (an
// earlier apply's) is held itself.
func TestApplyHoldsGitDirShapes(t *testing.T) {
	l := project(t)
	write(t, filepath.Join(l.Lower, "p/q/r/config"), "[core]\n\tfsmonitor = echo PWNED\n", 0o644)
	write(t, filepath.Join(l.Lower, "p/q/r/objects/.keep"), "", 0o644)
	write(t, filepath.Join(l.Lower, "p/q/r/refs/.keep"), "", 0o644)
	if err := os.Remove(l.BasePath()); err != nil {
		t.Fatal(err)
	}
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	inOverlay(t, l, `echo 'ref: refs/heads/main' > p/q/r/HEAD
mkdir -p s/objects s/refs/heads && ln -s refs/heads/main s/HEAD && echo x > s/refs/heads/main && printf '[core]\n\tfsmonitor = echo PWNED\n' > s/config`)
	res, err := Apply(l, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, r := range res.Held {
		held[r.Path] = r.Why
	}
	if held["p/q/r/HEAD"] != handback.WhyMakesGit || held["s/config"] != handback.WhyGitConfig || len(held) != 2 {
		t.Errorf("held %v", held)
	}
	if _, err := os.Lstat(filepath.Join(l.Lower, "p/q/r/HEAD")); err == nil {
		t.Error("p/q/r/HEAD was applied: git would run p/q/r/config")
	}
	if _, err := os.Lstat(filepath.Join(l.Lower, "s/HEAD")); err != nil {
		t.Errorf("s/HEAD: %v", err)
	}
}

// TestDiffShowsControls: a file's escape sequences, carriage returns, C1
// and bidi controls print visibly (termsafe.Text) and cannot erase the
// risky list above them, with colour (a terminal) or without (a pipe to
// a pager, which may pass them on: less -R); with Exact (the MCP server)
// the bytes are kept.
func TestDiffShowsControls(t *testing.T) {
	l := project(t)
	inOverlay(t, l, `printf 'a\033[1A\033[2Kb\r\302\233\342\200\256c\n' > esc.txt; echo x > .envrc`)
	cs, err := Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, color := range []bool{true, false} {
		var b bytes.Buffer
		if err := Diff(&b, cs, DiffOptions{Color: color}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "\x1b[1A") || strings.Contains(b.String(), "\r") || strings.Contains(b.String(), "\u202e") ||
			!strings.Contains(b.String(), "a^[[1A^[[2Kb^M<U+009B><U+202E>c") {
			t.Errorf("diff (colour %v):\n%q", color, b.String())
		}
	}
	var b bytes.Buffer
	if err := Diff(&b, cs, DiffOptions{Exact: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "+a\x1b[1A\x1b[2Kb\r\u009b\u202ec\n") {
		t.Errorf("an exact diff changed the bytes:\n%q", b.String())
	}
}

// diffOf returns Diff's output for all of l's changes, which DiffLayer's
// must equal.
func diffOf(t *testing.T, l *Layer, opts DiffOptions) string {
	t.Helper()
	cs, err := Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b, streamed bytes.Buffer
	if err := Diff(&b, cs, opts); err != nil {
		t.Fatal(err)
	}
	if n, err := DiffLayer(&streamed, l, nil, opts); err != nil || n != len(cs) || streamed.String() != b.String() {
		t.Errorf("DiffLayer: %d changes, %v, output:\n%s\nDiff's (%d changes):\n%s", n, err, streamed.String(), len(cs), b.String())
	}
	return b.String()
}
