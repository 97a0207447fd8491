package layer

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func paths(t *testing.T, l *Layer, sel ...string) []string {
	t.Helper()
	cs, err := Changes(l, sel)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return out
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestApplySubsetConflictAndRest(t *testing.T) {
	l := project(t)
	inOverlay(t, l, session)
	lower := l.Lower
	g0, _ := l.Generation()

	res, err := Apply(l, []string{"mod.txt", "dir2/a", "tc/in"}, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The directories the files need come with them.
	if want := []string{"dir2", "dir2/a", "mod.txt", "tc", "tc/in"}; !reflect.DeepEqual(res.Applied, want) {
		t.Errorf("applied %q, want %q", res.Applied, want)
	}
	if s := read(t, filepath.Join(lower, "mod.txt")); !strings.Contains(s, "\nthree\n") {
		t.Errorf("mod.txt in Lower: %q", s)
	}
	if read(t, filepath.Join(lower, "dir2", "a")) != "a\n" || read(t, filepath.Join(lower, "tc", "in")) != "in\n" {
		t.Error("dir2/a or tc/in not applied")
	}
	if _, err := os.Lstat(filepath.Join(lower, "dir2", "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir2/b applied unasked: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(lower, "del.txt")); err != nil {
		t.Errorf("del.txt deleted unasked: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(l.Upper(), "mod.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mod.txt still in upper: %v", err)
	}
	if g, _ := l.Generation(); g != g0+1 {
		t.Errorf("generation %d after apply, want %d", g, g0+1)
	}
	if got := paths(t, l, "mod.txt", "dir2", "tc"); !reflect.DeepEqual(got, []string{"dir2/b"}) {
		t.Errorf("left after the subset: %q", got)
	}
	// What the session sees is unchanged by the apply.
	inOverlay(t, l, `grep -qx three mod.txt; test -f dir2/b; test ! -e del.txt; test "$(cat tc/in)" = in`)

	// The host changes a file the layer changes too, and makes one the
	// layer adds: nothing is applied, both are named.
	write(t, filepath.Join(lower, "exec.sh"), "#!/bin/sh\necho host\n", 0o644)
	write(t, filepath.Join(lower, "added.txt"), "host's\n", 0o644)
	before := hostView(t, lower)
	res, err = Apply(l, nil, ApplyOptions{})
	if !errors.Is(err, ErrConflict) || !reflect.DeepEqual(res.Conflicts, []string{"added.txt", "exec.sh"}) || res.Applied != nil {
		t.Fatalf("conflict: %v %+v", err, res)
	}
	if hostView(t, lower) != before {
		t.Error("a conflicting apply wrote into Lower")
	}

	// Resolved by discarding them; the rest applies.
	if err := Discard(l, []string{"exec.sh", "added.txt"}); err != nil {
		t.Fatal(err)
	}
	// esc leads out of Lower (to /etc): held unless named.
	if _, err := Apply(l, nil, ApplyOptions{IncludeRisky: []string{"esc"}}); err != nil {
		t.Fatal(err)
	}
	if got := paths(t, l); got != nil {
		t.Errorf("changes left after apply: %q", got)
	}
	for p, want := range map[string]string{"opq/x": "new\n", "moved.txt": "move\n", "bin.dat": "a\x00c", "exec.sh": "#!/bin/sh\necho host\n", "added.txt": "host's\n"} {
		if got := read(t, filepath.Join(lower, p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{"opq/y", "del.txt", "mv.txt", "dir"} {
		if _, err := os.Lstat(filepath.Join(lower, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not deleted: %v", p, err)
		}
	}
	if tg, err := os.Readlink(filepath.Join(lower, "esc")); err != nil || tg != "/etc" {
		t.Errorf("esc: %q %v", tg, err)
	}
	if tg, err := os.Readlink(filepath.Join(lower, "link")); err != nil || tg != "mod.txt" {
		t.Errorf("link: %q %v", tg, err)
	}
	// The session now sees exactly Lower, and upper keeps only the
	// touched file (identical, no change).
	if a, b := inOverlay(t, l, view), hostView(t, lower); a != b {
		t.Errorf("session view after apply:\n%s\nLower:\n%s", a, b)
	}
	left := hostView(t, l.Upper())
	if strings.Count(left, "\n") > 4 || !strings.Contains(left, "./touch.txt f") {
		t.Errorf("upper after apply:\n%s", left)
	}
	// base.json follows Lower: a later change of an applied file applies.
	inOverlay(t, l, `echo again >> mod.txt; echo more >> opq/x`)
	if _, err := Apply(l, nil, ApplyOptions{}); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if !strings.HasSuffix(read(t, filepath.Join(lower, "opq/x")), "new\nmore\n") {
		t.Error("opq/x second apply")
	}
}

func TestDiscard(t *testing.T) {
	l := project(t)
	orig := hostView(t, l.Lower)
	inOverlay(t, l, session)
	if err := Discard(l, []string{"opq/y"}); err != nil {
		t.Fatal(err)
	}
	if got := paths(t, l, "opq"); !reflect.DeepEqual(got, []string{"opq/x"}) {
		t.Errorf("opq after discarding opq/y: %q", got)
	}
	inOverlay(t, l, `test "$(cat opq/y)" = y; test "$(cat opq/x)" = new`)
	if err := Discard(l, []string{"dir", "link", "tc"}); err != nil {
		t.Fatal(err)
	}
	inOverlay(t, l, `test "$(cat dir/a)" = a; test "$(readlink link)" = keep.txt; test "$(cat tc)" = "was a file"; test -d dir2`)
	if err := Discard(l, nil); err != nil {
		t.Fatal(err)
	}
	if got := paths(t, l); got != nil {
		t.Errorf("changes left after discard: %q", got)
	}
	if a := inOverlay(t, l, view); a != orig {
		t.Errorf("session view after discard:\n%s\nwant\n%s", a, orig)
	}
	if hostView(t, l.Lower) != orig {
		t.Error("discard touched Lower")
	}
	if g, _ := l.Generation(); g != 3 {
		t.Errorf("generation %d after three discards", g)
	}
}

// A symlink that Lower or upper holds is never written through.
func TestApplyNeverFollowsSymlinks(t *testing.T) {
	l := project(t)
	outside := testRoot(t)
	os.Mkdir(filepath.Join(l.Lower, "sub"), 0o755)
	l2 := New(filepath.Join(testRoot(t), "layer"), l.Lower) // base with sub/
	if err := l2.Ensure(); err != nil {
		t.Fatal(err)
	}
	inOverlay(t, l2, `echo planted > sub/f; ln -s `+outside+` out; ln -sfn /etc link`)
	// The host swaps sub/ for a symlink out of Lower after the session
	// began: a conflict on sub, nothing written.
	os.Remove(filepath.Join(l.Lower, "sub"))
	os.Symlink(outside, filepath.Join(l.Lower, "sub"))
	res, err := Apply(l2, []string{"sub"}, ApplyOptions{})
	if !errors.Is(err, ErrConflict) || !reflect.DeepEqual(res.Conflicts, []string{"sub"}) {
		t.Fatalf("swapped directory: %v %+v", err, res)
	}
	// Below the check, the write itself refuses the symlink.
	s, err := l2.open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if err := s.write(Change{Path: "sub/f", Kind: Added, New: &Side{Type: "file", Mode: 0o644}}); err == nil {
		t.Error("a write through a symlinked directory succeeded")
	}
	if _, err := s.lo.open("sub/f", unix.O_WRONLY|unix.O_CREAT, 0o644); !errors.Is(err, unix.ELOOP) {
		t.Errorf("openat2 through a symlinked directory: %v, want ELOOP", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("written outside Lower: %v", ents)
	}
	// Symlinks of the layer are applied as symlinks (these lead out of
	// Lower: named, as a person lets them through).
	if _, err := Apply(l2, []string{"out", "link"}, ApplyOptions{IncludeRisky: []string{"out", "link"}}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"out": outside, "link": "/etc"} {
		if tg, err := os.Readlink(filepath.Join(l.Lower, p)); err != nil || tg != want {
			t.Errorf("%s -> %q %v, want %q", p, tg, err, want)
		}
	}
	if fi, err := os.Lstat("/etc"); err != nil || !fi.IsDir() {
		t.Fatalf("/etc: %v", err)
	}
}

// An apply interrupted between writing Lower and cleaning the layer
// loses nothing, and the next apply finishes it.
func TestInterruptedApply(t *testing.T) {
	l := project(t)
	inOverlay(t, l, session)
	testHookAfterWrite = func() error { return errors.New("interrupted") }
	_, err := Apply(l, []string{"mod.txt", "del.txt", "dir2"}, ApplyOptions{})
	testHookAfterWrite = nil
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("hook: %v", err)
	}
	if !strings.Contains(read(t, filepath.Join(l.Lower, "mod.txt")), "three") {
		t.Fatal("Lower not written before the interruption")
	}
	if _, err := os.Stat(filepath.Join(l.Upper(), "mod.txt")); err != nil {
		t.Fatalf("the layer lost mod.txt: %v", err)
	}
	inOverlay(t, l, `grep -qx three mod.txt; test ! -e del.txt; test -f dir2/a`)
	// A file of the host's named like apply's temporary files is the
	// host's: the rerun leaves it.
	write(t, filepath.Join(l.Lower, "dir2", tempPrefix+"0123-a"), "half", 0o600)
	if _, err := Apply(l, []string{"esc"}, ApplyOptions{}); err != nil {
		t.Fatalf("rerun: %v", err)
	}
	if ents, _ := filepath.Glob(filepath.Join(l.Lower, "dir2", tempPrefix+"*")); len(ents) != 1 || read(t, ents[0]) != "half" {
		t.Errorf("temporary-looking files after the rerun: %q", ents)
	}
	if _, err := os.Stat(filepath.Join(l.Upper(), "mod.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the rerun left mod.txt in upper: %v", err)
	}
	if _, err := os.Stat(l.pendingPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal left: %v", err)
	}
	// base.json now has what was written: a new change of mod.txt is no
	// conflict.
	inOverlay(t, l, `echo 11 >> mod.txt`)
	if _, err := Apply(l, []string{"mod.txt"}, ApplyOptions{}); err != nil {
		t.Fatalf("after the rerun: %v", err)
	}
}

func TestApplyRefusesSpecialFiles(t *testing.T) {
	l := project(t)
	inOverlay(t, l, `mkfifo pipe`)
	before := hostView(t, l.Lower)
	if _, err := Apply(l, nil, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "special file") {
		t.Fatalf("fifo: %v", err)
	}
	if hostView(t, l.Lower) != before {
		t.Error("Lower changed")
	}
	if err := Discard(l, []string{"pipe"}); err != nil {
		t.Fatal(err)
	}
	if got := paths(t, l); got != nil {
		t.Errorf("left: %q", got)
	}
}

// As root, a new file gets the owner of its directory in Lower; a
// replaced one keeps its own.
func TestApplyOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only root gives files to another user")
	}
	l := project(t)
	dir := filepath.Join(l.Lower, "owned")
	os.Mkdir(dir, 0o777)
	os.Chmod(dir, 0o777)
	os.Chown(dir, 1001, 1001)
	write(t, filepath.Join(l.Lower, "theirs.txt"), "x\n", 0o666)
	os.Chown(filepath.Join(l.Lower, "theirs.txt"), 1002, 1002)
	l2 := New(filepath.Join(testRoot(t), "layer"), l.Lower)
	if err := l2.Ensure(); err != nil {
		t.Fatal(err)
	}
	// A mount in a user namespace cannot copy up entries of unmapped
	// owners (EOVERFLOW): the upper entries are made as it would.
	write(t, filepath.Join(l2.Upper(), "owned", "new"), "new\n", 0o644)
	write(t, filepath.Join(l2.Upper(), "theirs.txt"), "x\ny\n", 0o644)
	os.Chmod(filepath.Join(l2.Upper(), "owned"), 0o777)
	if _, err := Apply(l2, nil, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	for p, uid := range map[string]uint32{"owned/new": 1001, "theirs.txt": 1002} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(l.Lower, p), &st); err != nil || st.Uid != uid || st.Gid != uid {
			t.Errorf("%s: uid %d gid %d %v, want %d", p, st.Uid, st.Gid, err, uid)
		}
	}
}

// Overwrite applies over a conflict (the person merged it by hand).
func TestApplyOverwrite(t *testing.T) {
	l := project(t)
	inOverlay(t, l, `chmod 755 exec.sh`)
	write(t, filepath.Join(l.Lower, "exec.sh"), "#!/bin/sh\necho host\n", 0o644)
	if _, err := Apply(l, []string{"exec.sh"}, ApplyOptions{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("no conflict: %v", err)
	}
	if _, err := Apply(l, []string{"exec.sh"}, ApplyOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(l.Lower, "exec.sh"))
	if err != nil || fi.Mode().Perm() != 0o755 || read(t, filepath.Join(l.Lower, "exec.sh")) != "#!/bin/sh\n" {
		t.Errorf("exec.sh after overwrite: %v %v", fi.Mode(), err)
	}
}

// TestApplySparse: a sparse file made in a session (`truncate -s`) is
// applied as a sparse file: the host's disk takes its data, not its
// length, and its bytes are the same.
func TestApplySparse(t *testing.T) {
	l := project(t)
	inOverlay(t, l, `truncate -s 64M img; printf head | dd of=img conv=notrunc status=none; printf tail | dd of=img bs=1 seek=67108860 conv=notrunc status=none`)
	if _, err := Apply(l, []string{"img"}, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(l.Lower, "img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	head, tail := make([]byte, 4), make([]byte, 4)
	f.ReadAt(head, 0)
	f.ReadAt(tail, 64<<20-4)
	if st.Size != 64<<20 || string(head) != "head" || string(tail) != "tail" {
		t.Errorf("applied img: %d bytes, %q...%q", st.Size, head, tail)
	}
	if st.Blocks*512 > 1<<20 {
		t.Errorf("applied img takes %d bytes of disk for 8 bytes of data", st.Blocks*512)
	}
}
