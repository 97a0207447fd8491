package layer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/dirlist"
)

// spillAll makes every listing spill, in runs of at most batch names,
// for the rest of the test.
func spillAll(t *testing.T, batch int) { t.Cleanup(dirlist.SetLimits(1, batch)) }

// TestSpilledListingsAgree: diff, apply and discard of the same changes
// give the same result whether every directory's listing is held in
// memory or spilled and merged (issue 24: one flat directory's names no
// longer held whole). The changes include a directory of many new
// files, an opaque directory that hides some of Lower's names, deleted
// directories and every kind of entry.
func TestSpilledListingsAgree(t *testing.T) {
	type outcome struct {
		changes []got
		diff    string
		applied int
		host    string
	}
	run := func(t *testing.T) outcome {
		p := project(t)
		for i := 0; i < 60; i++ {
			write(t, filepath.Join(p.Lower, "big", fmt.Sprintf("f%03d", i)), "old\n", 0o644)
		}
		l := New(p.Dir+"-big", p.Lower) // its base takes in big/
		if err := l.Ensure(); err != nil {
			t.Fatal(err)
		}
		inOverlay(t, l, session+`
mkdir many; i=0; while [ $i -lt 300 ]; do : > many/n$i; i=$((i+1)); done
rm -rf big; mkdir big; i=0; while [ $i -lt 60 ]; do [ $((i % 3)) = 0 ] && echo new > big/f$(printf %03d $i); i=$((i+1)); done
`)
		cs, err := Changes(l, nil)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := DiffLayer(&b, l, nil, DiffOptions{Stat: true}); err != nil {
			t.Fatal(err)
		}
		res, err := Apply(l, nil, ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if left := paths(t, l); !reflect.DeepEqual(left, []string{"esc"}) { // a link out of the project: held
			t.Errorf("left in the layer after apply: %q", left)
		}
		return outcome{summary(cs), b.String(), res.AppliedTotal, hostView(t, l.Lower)}
	}
	inMemory := run(t)
	spillAll(t, 7)
	spilled := run(t)
	if len(inMemory.changes) < 300+60 {
		t.Fatalf("only %d changes", len(inMemory.changes))
	}
	if !reflect.DeepEqual(spilled.changes, inMemory.changes) {
		t.Errorf("changes differ when listings spill:\n%v\nheld in memory:\n%v", spilled.changes, inMemory.changes)
	}
	if spilled.diff != inMemory.diff || spilled.applied != inMemory.applied || spilled.host != inMemory.host {
		t.Errorf("spilled: %d applied, diff --stat\n%s\nhost\n%s\nheld in memory: %d applied, diff --stat\n%s\nhost\n%s",
			spilled.applied, spilled.diff, spilled.host, inMemory.applied, inMemory.diff, inMemory.host)
	}

	// discard of a layer whose directories spill.
	l := project(t)
	inOverlay(t, l, `mkdir many; i=0; while [ $i -lt 100 ]; do : > many/n$i; i=$((i+1)); done`)
	if err := Discard(l, nil); err != nil {
		t.Fatal(err)
	}
	if left := paths(t, l); left != nil {
		t.Errorf("left after discard: %q", left)
	}
}

// TestScanAsWalkDir: Scan (what Ensure records of Lower) gives what
// filepath.WalkDir gives, in the same order, whether its listings are held
// in memory or spilled: every kind of entry, names that sort apart in byte
// and path order ("a-b" before "a/b"), an unreadable directory (recorded,
// what it holds not), and symlinks (not followed).
func TestScanAsWalkDir(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/b", "a-b", "a.b/c/d", "z", "dir/\nodd", "dir/x y", "deep/1/2/3/4/f"} {
		write(t, filepath.Join(dir, p), "x", 0o644)
	}
	for i := 0; i < 50; i++ {
		write(t, filepath.Join(dir, "many", fmt.Sprintf("m%02d", 49-i)), "", 0o600)
	}
	os.Symlink("/etc", filepath.Join(dir, "link"))
	os.Symlink("a", filepath.Join(dir, "many", "rel"))
	unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644)
	write(t, filepath.Join(dir, "shut", "in"), "x", 0o644)
	if os.Getuid() != 0 { // root reads it anyway
		os.Chmod(filepath.Join(dir, "shut"), 0)
		t.Cleanup(func() { os.Chmod(filepath.Join(dir, "shut"), 0o755) })
	}
	var want []Entry
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		e := Entry{Path: rel, Mode: uint32(fi.Mode().Perm()), MTime: fi.ModTime().UnixNano()}
		switch {
		case fi.Mode().IsRegular():
			e.Type, e.Size = "file", fi.Size()
		case fi.IsDir():
			e.Type = "dir"
		case fi.Mode()&os.ModeSymlink != 0:
			e.Type = "symlink"
			e.Target, _ = os.Readlink(p)
		default:
			e.Type = "other"
		}
		want = append(want, e)
		return nil
	})
	got, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Scan:\n%v\nWalkDir:\n%v", got, want)
	}
	spillAll(t, 3)
	if got, err = Scan(dir); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Scan with spilled listings (%v):\n%v\nWalkDir:\n%v", err, got, want)
	}
}
