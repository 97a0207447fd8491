package wscopy

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/backend/kubernetes"
)

func TestParsePair(t *testing.T) {
	for _, tc := range []struct {
		src, dst, sess string
		want           string // "s|p -> s|p" or an error substring
	}{
		{"./src", "demo:work", "", "|./src -> demo|work"},
		{"demo:out", ".", "", "demo|out -> |."},
		{":out", "/tmp/x", "demo", "demo|out -> |/tmp/x"},
		{"/abs", "demo:", "", "|/abs -> demo|."},
		{"./a:b", "demo:/work/x", "", "|./a:b -> demo|/work/x"},
		{":out", "x", "", "names no session"},
		{":out", "x", "dir:/work/p", "dir:/work/p|out -> |x"},
		{"a", "b", "", "one of SRC and DST must be"},
		{"s1:a", "s2:b", "", "one of SRC and DST must be"},
		{"", "s:b", "", "an empty path"},
	} {
		s, d, err := ParsePair(tc.src, tc.dst, tc.sess)
		got := s.Session + "|" + s.Path + " -> " + d.Session + "|" + d.Path
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%q %q --session %q: %q, want %q", tc.src, tc.dst, tc.sess, got, tc.want)
		}
	}
}

func TestRel(t *testing.T) {
	w := &Workspace{Session: "s", Root: "/work/p"}
	for in, want := range map[string]string{
		".": ".", "a/b": "a/b", "/work/p": ".", "/work/p/a/../b": "b", "a/../..": "outside", "/etc/passwd": "outside", "/work/pp": "outside",
	} {
		got, err := w.Rel(in)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, want) {
			t.Errorf("Rel(%q) = %q, want %q", in, got, want)
		}
	}
	// From the session's current directory, as the file tools go; one
	// outside the workspace counts for nothing.
	w.Cwd = "/work/p/up"
	for in, want := range map[string]string{"r.txt": "up/r.txt", "../x": "x", ".": "up", "/work/p/a": "a", "../../..": "outside"} {
		if got, err := w.Rel(in); got != want && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Rel(%q) from %s = %q, %v; want %q", in, w.Cwd, got, err, want)
		}
	}
	w.Cwd = "/elsewhere"
	if got, _ := w.Rel("r.txt"); got != "r.txt" {
		t.Errorf("Rel from a cwd outside = %q", got)
	}
}

func TestIEC(t *testing.T) {
	for n, want := range map[int64]string{0: "0 bytes", 1023: "1023 bytes", 1024: "1.0 KiB", 64 << 20: "64.0 MiB", 3<<30 + 512<<20: "3.5 GiB"} {
		if got := iec(n); got != want {
			t.Errorf("iec(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestReceiveBound: the bound is the destination's free space less its
// margin, halved when the spool shares its file system, measured at the
// nearest directory that exists.
func TestReceiveBound(t *testing.T) {
	dir := t.TempDir()
	f, err := os.CreateTemp(dir, "spool")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	avail := int64(fs.Bavail) * int64(fs.Bsize)
	b, err := receiveBound(filepath.Join(dir, "not/yet/there"), f)
	if err != nil {
		t.Fatal(err)
	}
	// Other processes change the free space meanwhile: a bound, not an
	// equality.
	if b.max <= 0 || b.max > avail/2 || !strings.Contains(b.why, "half of what "+dir+"'s file system has free (") {
		t.Errorf("bound %d (free %d): %s", b.max, avail, b.why)
	}
}

// TestNested: a sync whose host directory and the session's workspace
// hold one another is refused before anything is copied: a pull into the
// workspace or below it, a push of the workspace's parent or of the
// workspace itself. Beside it, both go; a pod's workspace is never on
// this host.
func TestNested(t *testing.T) {
	top := t.TempDir()
	ws := filepath.Join(top, "proj")
	w := &Workspace{Session: "s", Root: ws}
	for _, tc := range []struct {
		dir  string
		pull bool
		bad  bool
	}{
		{filepath.Join(ws, "out"), true, true},
		{ws, true, true},
		{filepath.Join(top, "out"), true, false},
		{top, false, true},
		{ws, false, true},
		{filepath.Join(ws, "sub"), false, false},
		{filepath.Join(top, "projector"), true, false},
		{filepath.Join(top, "other"), false, false},
	} {
		err := nested(w, tc.dir, tc.pull)
		if (err != nil) != tc.bad {
			t.Errorf("nested(%s, pull %v) = %v, want refused %v", tc.dir, tc.pull, err, tc.bad)
		}
	}
	if err := nested(&Workspace{Session: "s", Root: ws, Remote: (&kubernetes.Engine{}).Workspace(&kubernetes.PodTarget{})}, filepath.Join(ws, "out"), true); err != nil {
		t.Errorf("a pod's workspace: %v", err)
	}
}

// TestSparseOut: a sparse file copied out of a workspace (a disk image,
// `truncate -s`) takes, in the spool and at the destination, the disk its
// data needs, not its length (issue 24: a sparse file's archive filled
// the spool's file system up to the bound before the copy was refused).
func TestSparseOut(t *testing.T) {
	top := t.TempDir()
	ws := filepath.Join(top, "proj")
	os.MkdirAll(ws, 0o755)
	const size = 64 << 20
	img := filepath.Join(ws, "img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("head")
	f.WriteAt([]byte("tail"), size-4)
	f.Close()
	var spooled *os.File
	t.Cleanup(func() {
		spool = makeSpool
		if spooled != nil {
			spooled.Close()
		}
	})
	spool = func() (*os.File, error) {
		f, err := makeSpool()
		if err == nil {
			spooled, err = os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), os.O_RDONLY, 0)
		}
		return f, err
	}
	dest := filepath.Join(top, "out")
	if _, err := CopyOut(context.Background(), &Workspace{Session: "s", Root: ws}, "img", dest, Out{}); err != nil {
		t.Fatal(err)
	}
	disk := func(name string, f *os.File) int64 {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes long, %d on disk", name, st.Size, st.Blocks*512)
		return st.Blocks * 512
	}
	if spooled == nil {
		t.Fatal("no spool was made")
	}
	if d := disk("the spool", spooled); d > 1<<20 {
		t.Errorf("the spool took %d bytes of disk for an archive of %d bytes of data", d, 8)
	}
	out, err := os.Open(dest)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if d := disk("the copy", out); d > 1<<20 {
		t.Errorf("the copy took %d bytes of disk for 8 bytes of data", d)
	}
	head, tail := make([]byte, 4), make([]byte, 4)
	out.ReadAt(head, 0)
	out.ReadAt(tail, size-4)
	if st, _ := out.Stat(); st.Size() != size || string(head) != "head" || string(tail) != "tail" {
		t.Errorf("the copy: %d bytes, %q...%q", st.Size(), head, tail)
	}
}
