package layer

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// gitProject is a layer over a git work tree whose files are committed:
// notes.txt (20 lines), other.txt, and an untracked file.
func gitProject(t *testing.T) *Layer {
	t.Helper()
	requireOverlay(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed (apt-get install git); CI installs it")
	}
	root := testRoot(t)
	lower := filepath.Join(root, "lower")
	var notes strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&notes, "line %d\n", i)
	}
	write(t, filepath.Join(lower, "notes.txt"), notes.String(), 0o644)
	write(t, filepath.Join(lower, "other.txt"), notes.String(), 0o644)
	write(t, filepath.Join(lower, "untracked.txt"), notes.String(), 0o644)
	runGit(t, lower, "init", "-q")
	runGit(t, lower, "add", "notes.txt", "other.txt")
	runGit(t, lower, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "one")
	l := New(filepath.Join(root, "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	return l
}

func runGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// edit replaces line n of the host's file (a new mtime, as an editor's).
func edit(t *testing.T, p string, n int, text string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines[n-1] = text + "\n"
	write(t, p, strings.Join(lines, ""), 0o644)
}

// TestApplyMerge: a file the host and the session both changed, in
// different places, is merged by Apply with Merge (git merge-file over the
// base git's index still holds) and applied; overlapping changes, a file
// git does not track and one committed again since stay conflicts, with
// their reasons, and then nothing is written.
func TestApplyMerge(t *testing.T) {
	l := gitProject(t)
	inOverlay(t, l, `sed -i 's/^line 3$/session 3/' notes.txt; sed -i 's/^line 3$/session 3/' other.txt; sed -i 's/^line 3$/session 3/' untracked.txt`)
	edit(t, filepath.Join(l.Lower, "notes.txt"), 17, "host 17")

	// Without Merge: a conflict, as before.
	if _, err := Apply(l, []string{"notes.txt"}, ApplyOptions{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("apply without merge: %v, want ErrConflict", err)
	}
	res, err := Apply(l, []string{"notes.txt"}, ApplyOptions{Merge: true})
	if err != nil {
		t.Fatalf("apply --merge: %v (%+v)", err, res)
	}
	if !reflect.DeepEqual(res.Merged, []string{"notes.txt"}) || !reflect.DeepEqual(res.Applied, []string{"notes.txt"}) {
		t.Errorf("merged %q, applied %q", res.Merged, res.Applied)
	}
	got := read(t, filepath.Join(l.Lower, "notes.txt"))
	if !strings.Contains(got, "\nsession 3\n") || !strings.Contains(got, "\nhost 17\n") || strings.Contains(got, "<<<<") {
		t.Errorf("merged notes.txt:\n%s", got)
	}
	if fi, err := os.Stat(filepath.Join(l.Lower, "notes.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("merged file's mode: %v %v", fi.Mode(), err)
	}
	// The session now sees the merged file; nothing of it is pending.
	if ps := paths(t, l, "notes.txt"); len(ps) != 0 {
		t.Errorf("still in the layer after the merge: %q", ps)
	}

	// Overlapping: both change line 3 of other.txt. Untracked: no base.
	// Committed again since: the index no longer has the base.
	edit(t, filepath.Join(l.Lower, "other.txt"), 3, "host 3")
	edit(t, filepath.Join(l.Lower, "untracked.txt"), 17, "host 17")
	before := hostView(t, l.Lower)
	res, err = Apply(l, nil, ApplyOptions{Merge: true})
	if !errors.Is(err, ErrConflict) || len(res.Applied) != 0 {
		t.Fatalf("apply --merge with overlapping changes: %v, applied %q", err, res.Applied)
	}
	if !reflect.DeepEqual(res.Conflicts, []string{"other.txt", "untracked.txt"}) {
		t.Errorf("conflicts %q", res.Conflicts)
	}
	if r := res.Unmerged["other.txt"]; !strings.Contains(r, ErrMergeConflict.Error()) {
		t.Errorf("other.txt's reason: %q", r)
	}
	if r := res.Unmerged["untracked.txt"]; !strings.Contains(r, "not tracked") {
		t.Errorf("untracked.txt's reason: %q", r)
	}
	if after := hostView(t, l.Lower); after != before {
		t.Errorf("a stopped apply changed the host:\n%s\n----\n%s", before, after)
	}

	inOverlay(t, l, `sed -i 's/^line 1$/session 1/' notes.txt`)
	edit(t, filepath.Join(l.Lower, "notes.txt"), 19, "host 19")
	runGit(t, l.Lower, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-am", "two")
	res, err = Apply(l, []string{"notes.txt"}, ApplyOptions{Merge: true})
	if !errors.Is(err, ErrConflict) || !strings.Contains(res.Unmerged["notes.txt"], "another version") {
		t.Errorf("merge after the host committed the file again: %v, %q", err, res.Unmerged)
	}
}

func TestParseIndexEntry(t *testing.T) {
	entry := "100644 422c2b7ab3b3c668038da977e4e93a5fc623169c 0\tf\x00  ctime: 1796161008:566975892\n  mtime: 1796161008:566975893\n  dev: 65024\tino: 9984131\n  uid: 0\tgid: 0\n  size: 4\tflags: 0\n"
	for _, tc := range []struct {
		name  string
		in    string
		ok    bool
		blob  string
		size  uint32
		mtime int64
	}{
		{"entry", entry, true, "422c2b7ab3b3c668038da977e4e93a5fc623169c", 4, 1796161008566975893},
		{"unmerged", strings.Replace(entry, " 0\tf", " 2\tf", 1), false, "", 0, 0},
		{"two", entry + entry, false, "", 0, 0},
		{"no stat", "100644 422c 0\tf\x00", false, "", 0, 0},
		{"empty", "", false, "", 0, 0},
		{"bad mtime", strings.Replace(entry, "1796161008:566975893", "x:y", 1), false, "", 0, 0},
	} {
		blob, size, mtime, ok := parseIndexEntry([]byte(tc.in))
		if ok != tc.ok || ok && (blob != tc.blob || size != tc.size || mtime != tc.mtime) {
			t.Errorf("%s: %q %d %d %v", tc.name, blob, size, mtime, ok)
		}
	}
}

// TestApplyMergeAsRootInAnotherUsersTree: corral as root merges in a work
// tree another user owns (git would refuse it to root: "dubious
// ownership"), running git as that user.
func TestApplyMergeAsRootInAnotherUsersTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a tree of another owner); CI runs it as root")
	}
	l := gitProject(t)
	// The owner must reach its tree (MkdirTemp makes the test root 0700).
	if err := os.Chmod(filepath.Dir(l.Lower), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", "65534:65534", l.Lower).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	// The layer's base must see the new owner's tree as it is (chown
	// changes no mtime, so the index entries still match).
	inOverlay(t, l, `sed -i 's/^line 3$/session 3/' notes.txt`)
	edit(t, filepath.Join(l.Lower, "notes.txt"), 17, "host 17")
	res, err := Apply(l, nil, ApplyOptions{Merge: true})
	if err != nil {
		t.Fatalf("apply --merge as root: %v (%+v)", err, res.Unmerged)
	}
	got := read(t, filepath.Join(l.Lower, "notes.txt"))
	if !strings.Contains(got, "\nsession 3\n") || !strings.Contains(got, "\nhost 17\n") {
		t.Errorf("merged notes.txt:\n%s", got)
	}
}

// TestApplyMergeGitIndex: the session's commits come with its index; the
// host's git rewrote its own index meanwhile (git status refreshing stat
// data): with nothing staged on the host, --merge takes the session's
// index and the host's work tree ends at the session's commit, clean; with
// something staged there, the index stays a conflict, saying why.
func TestApplyMergeGitIndex(t *testing.T) {
	l := gitProject(t)
	inOverlay(t, l, `sed -i 's/^line 3$/session 3/' notes.txt && git -c user.email=a@b -c user.name=a commit -q -am session`)
	// A later mtime, so the host's git status rewrites its index.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(l.Lower, "other.txt"), future, future); err != nil {
		t.Fatal(err)
	}
	runGit(t, l.Lower, "status", "--short")
	if _, err := Apply(l, nil, ApplyOptions{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("apply of the commit after the host's git status: %v, want a conflict on .git/index", err)
	}
	res, err := Apply(l, nil, ApplyOptions{Merge: true})
	if err != nil {
		t.Fatalf("apply --merge: %v (%v)", err, res.Unmerged)
	}
	if !slices.Contains(res.Merged, ".git/index") {
		t.Errorf("merged %q, want .git/index", res.Merged)
	}
	out, err := exec.Command("git", "-C", l.Lower, "log", "--format=%s", "-1").Output()
	if err != nil || strings.TrimSpace(string(out)) != "session" {
		t.Errorf("host HEAD after apply: %q %v", out, err)
	}
	if out, err := exec.Command("git", "-C", l.Lower, "status", "--porcelain", "--untracked-files=no").Output(); err != nil || len(out) != 0 {
		t.Errorf("host status after apply: %q %v", out, err)
	}

	// Staged on the host: the session's index would drop it.
	inOverlay(t, l, `sed -i 's/^line 5$/session 5/' notes.txt && git -c user.email=a@b -c user.name=a commit -q -am two`)
	edit(t, filepath.Join(l.Lower, "other.txt"), 9, "host 9")
	runGit(t, l.Lower, "add", "other.txt")
	res, err = Apply(l, nil, ApplyOptions{Merge: true})
	if !errors.Is(err, ErrConflict) || !strings.Contains(res.Unmerged[".git/index"], "staged") {
		t.Errorf("apply --merge with changes staged on the host: %v, %q", err, res.Unmerged)
	}
}
