package dirlist

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// spillAll makes every listing spill, in runs of at most batch names,
// for the rest of the test.
func spillAll(t *testing.T, batch int) { t.Cleanup(SetLimits(1, batch)) }

func listAll(t *testing.T, dir, spill string) []string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	l, err := List(fd, dir, spill)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := l.Each(func(n string) error { got = append(got, n); return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestListingOrder: a listing gives a directory's names in sort.Strings
// order, held in memory or spilled in runs and merged, with names of
// every shape.
func TestListingOrder(t *testing.T) {
	odd := []string{"-n", "--", "a\nb", "tab\there", `q"uote`, `back\slash`, "\xff\xfe", "é", " lead", "trail ", strings.Repeat("l", 255), "Z", "a", "aa", "a-", "a.", "a0"}
	var many []string
	for i := 0; i < 700; i++ {
		many = append(many, fmt.Sprintf("f%d-%s", i*7919%700, strings.Repeat("x", i%40)))
	}
	for _, tc := range []struct {
		name  string
		names []string
		batch int // 0: held in memory
		buf   int // the runs' read buffer, 0: as it is
	}{
		{"empty", nil, 0, 0},
		{"empty, spilled", nil, 3, 0},
		{"one", []string{"x"}, 0, 0},
		{"one, spilled", []string{"x"}, 1, 0},
		{"odd names", odd, 0, 0},
		{"odd names, runs of 1", odd, 1, 0},
		{"odd names, runs of 4", odd, 4, 0},
		{"names past the read buffer", odd, 3, 16},
		{"many", many, 0, 0},
		{"many, runs of 64", many, 64, 0},
		{"many, runs of 1000", many, 1000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, n := range tc.names {
				if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.batch > 0 {
				spillAll(t, tc.batch)
			}
			if tc.buf > 0 {
				b := runBufSize
				runBufSize = tc.buf
				t.Cleanup(func() { runBufSize = b })
			}
			spill := t.TempDir()
			got := listAll(t, dir, spill)
			want := slices.Clone(tc.names)
			slices.Sort(want)
			if !reflect.DeepEqual(got, want) && len(got)+len(want) > 0 {
				t.Errorf("listing:\n got %q\nwant %q", got, want)
			}
			if left, _ := os.ReadDir(spill); len(left) != 0 {
				t.Errorf("left in the spill directory: %v", left)
			}
		})
	}
}

// TestListingSpillPlace: spill files go to the directory named, else
// os.TempDir; with neither usable the listing fails and says why.
func TestListingSpillPlace(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 10; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o644)
	}
	spillAll(t, 2)
	if got := listAll(t, dir, "/nonexistent/corral"); len(got) != 10 {
		t.Errorf("with the spill directory missing, fell back to os.TempDir: %q", got)
	}
	t.Setenv("TMPDIR", "/nonexistent/corral-tmp")
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	_, err = List(fd, dir, "/nonexistent/corral")
	if err == nil || !strings.Contains(err.Error(), "too many names to keep in memory") || !strings.Contains(err.Error(), "/nonexistent/corral") {
		t.Errorf("with nowhere to spill: %v", err)
	}
}

// TestListingMemory: a listing of a directory whose names come to many
// times the memory bound holds, once made and while read, about the bound
// and the runs' buffers, not the names (a directory of 40,000 names of
// 240 bytes is 9.6 MB of names; listed whole it held all of them).
func TestListingMemory(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("n", 232)
	const n = 40_000
	for i := 0; i < n; i++ {
		if err := unix.Mknodat(fd, fmt.Sprintf("%s%08d", pad, (i*7919)%n), unix.S_IFREG|0o600, 0); err != nil {
			t.Fatal(err)
		}
	}
	unix.Close(fd)
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	rd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rd)
	before := heap()
	l, err := List(rd, dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	held := heap() - before
	count, last, most := 0, "", held
	err = l.Each(func(name string) error {
		if name <= last {
			return fmt.Errorf("%q after %q", name, last)
		}
		if count++; count%5000 == 0 {
			most = max(most, heap()-before)
		}
		last = name
		return nil
	})
	if err != nil || count != n {
		t.Fatalf("read %d names of %d: %v", count, n, err)
	}
	t.Logf("held %d KiB once listed, at most %d KiB while read (names: %d KiB)", held>>10, most>>10, n*240>>10)
	if bound := int64(5 << 20); most > bound { // the default listMemBytes, 1 MiB, and room
		t.Errorf("the listing held %d KiB, want at most %d KiB: the names are held in memory", most>>10, bound>>10)
	}
}

// tinyTmpfs mounts a tmpfs of one page at a new directory for the rest of
// the test (root only: mount(2) needs CAP_SYS_ADMIN in the mount
// namespace's owner; the unprivileged pass's skip is covered by the root
// pass, as CI requires).
func tinyTmpfs(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	d := t.TempDir()
	if err := unix.Mount("corral-test-full", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=4k,mode=0700"); err != nil {
		t.Fatalf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(d, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", d, err)
		}
	})
	return d
}

// TestListingSpillFull: a spill directory whose file system is full
// (ENOSPC while a run is written: the layer's disk filled by the sandbox)
// is passed over for os.TempDir, and the listing is whole and in order;
// with both full, the error says so and names the cause; either way the
// full file systems are left as empty as they were (the runs are unnamed
// files, gone with their descriptors).
func TestListingSpillFull(t *testing.T) {
	full := tinyTmpfs(t)
	dir := t.TempDir()
	var want []string
	for i := 0; i < 300; i++ {
		n := fmt.Sprintf("%03d-%s", 299-i, strings.Repeat("n", 200))
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want = append(want, n)
	}
	slices.Sort(want)
	spillAll(t, 100) // runs of 100 names of 204 bytes: 20 KB, past the 4 KB tmpfs
	t.Setenv("TMPDIR", t.TempDir())
	if got := listAll(t, dir, full); !slices.Equal(got, want) {
		t.Errorf("with the spill directory's file system full: %d names, want %d in order", len(got), len(want))
	}
	assertEmptyFS(t, full)

	t.Setenv("TMPDIR", tinyTmpfs(t))
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	l, err := List(fd, dir, full)
	if err == nil {
		l.Close()
		t.Fatal("with every spill directory full: listed, want an error")
	}
	if !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), full) {
		t.Errorf("with every spill directory full: %v; want ENOSPC and the directory named", err)
	}
	assertEmptyFS(t, full)
	assertEmptyFS(t, os.Getenv("TMPDIR"))
}

// assertEmptyFS fails the test unless d's file system has no block in use.
func assertEmptyFS(t *testing.T, d string) {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs(d, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Bfree != fs.Blocks {
		t.Errorf("%s: %d of %d blocks still in use after the listing", d, fs.Blocks-fs.Bfree, fs.Blocks)
	}
	if ents, _ := os.ReadDir(d); len(ents) > 0 {
		t.Errorf("%s: left %d entries", d, len(ents))
	}
}
