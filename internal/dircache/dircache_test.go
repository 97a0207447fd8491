package dircache

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func names(t *testing.T, c *Cache, dir string) []string {
	t.Helper()
	ents, err := c.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range ents {
		n = append(n, e.Name())
	}
	return n
}

// TestReadDirFollowsChanges: a settled listing is kept from its second
// read and not read again while unchanged; every kind
// of change to the directory (an entry made, renamed, removed, replaced
// by another type; the directory's mode; the directory replaced) is seen
// on the next call.
func TestReadDirFollowsChanges(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "a"), nil, 0o644)
	c := &Cache{now: func() time.Time { return time.Now().Add(time.Hour) }} // everything settled
	if got := names(t, c, dir); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first listing %q", got)
	}
	names(t, c, dir) // kept from its second listing
	names(t, c, dir)
	if c.reads != 2 {
		t.Fatalf("an unchanged directory was listed %d times in 3 calls", c.reads)
	}
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"entry made", func() error { return os.WriteFile(filepath.Join(dir, "b"), nil, 0o644) }, []string{"a", "b"}},
		{"entry renamed", func() error { return os.Rename(filepath.Join(dir, "b"), filepath.Join(dir, "c")) }, []string{"a", "c"}},
		{"entry removed", func() error { return os.Remove(filepath.Join(dir, "c")) }, []string{"a"}},
		{"entry replaced by a symlink", func() error {
			os.Remove(filepath.Join(dir, "a"))
			return os.Symlink("/etc", filepath.Join(dir, "a"))
		}, []string{"a"}},
		{"mode changed", func() error { return os.Chmod(dir, 0o700) }, []string{"a"}},
		{"directory replaced", func() error {
			os.Rename(dir, dir+".old")
			os.Mkdir(dir, 0o755)
			return os.WriteFile(filepath.Join(dir, "z"), nil, 0o644)
		}, []string{"z"}},
	}
	for _, s := range steps {
		reads := c.reads
		if err := s.do(); err != nil {
			t.Fatal(s.name, err)
		}
		ents, err := c.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if !slices.Equal(got, s.want) || c.reads != reads+1 {
			t.Errorf("%s: listing %q (want %q), %d reads", s.name, got, s.want, c.reads-reads)
		}
		if s.name == "entry replaced by a symlink" && ents[0].Type()&os.ModeSymlink == 0 {
			t.Errorf("%s: the entry's type is still %v", s.name, ents[0].Type())
		}
	}
}

// TestReadDirUnsettled: a directory changed less than SettleTime before it
// is listed is listed afresh every time (its stamp may not show a change
// made in the same clock tick).
func TestReadDirUnsettled(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), nil, 0o644)
	c := &Cache{}
	names(t, c, dir)
	names(t, c, dir)
	if c.reads != 2 {
		t.Errorf("a directory changed just now was listed %d times in 2 calls", c.reads)
	}
}

// TestReadDirNil: a nil Cache lists every time, and errors are
// os.ReadDir's.
func TestReadDirErrors(t *testing.T) {
	var c *Cache
	if _, err := c.ReadDir(t.TempDir()); err != nil {
		t.Error(err)
	}
	c = &Cache{now: func() time.Time { return time.Now().Add(time.Hour) }}
	if _, err := c.ReadDir(filepath.Join(t.TempDir(), "none")); !os.IsNotExist(err) {
		t.Errorf("missing directory: %v", err)
	}
	f := filepath.Join(t.TempDir(), "f")
	os.WriteFile(f, nil, 0o644)
	if _, err := c.ReadDir(f); err == nil {
		t.Error("a file was listed")
	}
}

func TestLocalTimes(t *testing.T) {
	for _, tt := range []struct {
		magic int64
		want  bool
	}{
		{unix.EXT4_SUPER_MAGIC, true}, {unix.TMPFS_MAGIC, true}, {unix.OVERLAYFS_SUPER_MAGIC, true},
		{unix.XFS_SUPER_MAGIC, true}, {unix.BTRFS_SUPER_MAGIC, true},
		{unix.NFS_SUPER_MAGIC, false}, {unix.FUSE_SUPER_MAGIC, false}, {unix.SMB2_SUPER_MAGIC, false},
		{unix.CIFS_SUPER_MAGIC, false}, {unix.V9FS_MAGIC, false}, {unix.PROC_SUPER_MAGIC, false},
	} {
		if got := LocalTimes(tt.magic); got != tt.want {
			t.Errorf("LocalTimes(%#x) = %v", tt.magic, got)
		}
	}
}

// TestReadDirFIFO: a FIFO where a directory was is refused at once, not
// opened (which would block until a writer came).
func TestReadDirFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := (&Cache{}).ReadDir(p); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO was listed")
		}
	case <-time.After(time.Minute):
		t.Fatal("ReadDir blocked on a FIFO")
	}
}

// TestReadDirWith: the stamp asked of the given stat is the one the kept
// listing is checked against: the stat of an earlier instant (a plan's
// resolver) gives the listing of that instant without a stat(2), the
// stat of now the listing of now, and a listing read afresh is kept
// under its own stamp, not the given one.
func TestReadDirWith(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "a"), nil, 0o644)
	c := &Cache{now: func() time.Time { return time.Now().Add(time.Hour) }}
	names(t, c, dir)
	names(t, c, dir) // kept
	then, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	stats := 0
	asOf := func(fi os.FileInfo) func(string) (os.FileInfo, error) {
		return func(string) (os.FileInfo, error) { stats++; return fi, nil }
	}
	list := func(stat func(string) (os.FileInfo, error)) []string {
		t.Helper()
		ents, err := c.ReadDirWith(dir, stat)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, e := range ents {
			n = append(n, e.Name())
		}
		return n
	}
	reads := c.reads
	if got := list(asOf(then)); !slices.Equal(got, []string{"a"}) || c.reads != reads || stats != 1 {
		t.Fatalf("as of the kept stamp: %q, %d reads, %d stats", got, c.reads-reads, stats)
	}
	os.WriteFile(filepath.Join(dir, "b"), nil, 0o644)
	if got := list(asOf(then)); !slices.Equal(got, []string{"a"}) || c.reads != reads {
		t.Errorf("as of the earlier stat, after a change: %q, %d reads (want the listing of that instant)", got, c.reads-reads)
	}
	now, _ := os.Stat(dir)
	if got := list(asOf(now)); !slices.Equal(got, []string{"a", "b"}) || c.reads != reads+1 {
		t.Errorf("as of now: %q, %d reads", got, c.reads-reads)
	}
	// Kept under its own fstat's stamp: the earlier stat no longer matches.
	if _, ok := c.LookupWith(dir, asOf(then)); ok {
		t.Error("the fresh listing is kept under the earlier stamp")
	}
	if got, ok := c.LookupWith(dir, nil); !ok || len(got) != 2 {
		t.Errorf("Lookup now: %v %v", got, ok)
	}
	if _, ok := c.LookupWith(dir, func(string) (os.FileInfo, error) { return nil, os.ErrNotExist }); ok {
		t.Error("a failed stat found a listing")
	}
}
