package transfer

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

func TestRoundTrip(t *testing.T) {
	d := t.TempDir()
	testkit.MakeTree(t, d, 50<<20)
	var buf bytes.Buffer
	ps, err := Pack(&buf, d, "src", "src")
	if err != nil {
		t.Fatal(err)
	}
	if ps.Files != 5 || ps.Symlinks != 3 || ps.Dirs != 3 {
		t.Errorf("packed %+v", ps)
	}
	sum := sha256.Sum256(buf.Bytes())
	dst := t.TempDir()
	us, err := Unpack(bytes.NewReader(buf.Bytes()), dst, Options{Dir: "in", RenameFrom: "src", RenameTo: "copy", WantSHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatal(err)
	}
	if us.Files != 5 || us.Bytes != ps.Bytes || us.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("unpacked %+v, packed %+v", us, ps)
	}
	if a, b := testkit.TreeHash(t, filepath.Join(d, "src")), testkit.TreeHash(t, filepath.Join(dst, "in/copy")); a != b {
		t.Errorf("trees differ:\n%s\n%s", a, b)
	}
	fi, err := os.Lstat(filepath.Join(dst, "in/copy/sub/deeper"))
	if err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o750 {
		t.Errorf("sticky dir: %v %v", fi.Mode(), err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "in/copy/sub/link-out")); l != "/etc/passwd" {
		t.Errorf("link-out %q", l)
	}
}

// tarOf builds an archive of the given headers (regular files get body).
func tarOf(t *testing.T, hs ...*tar.Header) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 4
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("evil"))
		}
	}
	tw.Close()
	return b.Bytes()
}

func TestHostileEntries(t *testing.T) {
	reg := func(n string) *tar.Header { return &tar.Header{Name: n, Typeflag: tar.TypeReg} }
	for _, tc := range []struct {
		name string
		prep func(dir string)
		hs   []*tar.Header
		want string
	}{
		{"dotdot", nil, []*tar.Header{reg("../escape")}, `a ".." component`},
		{"dotdot inside", nil, []*tar.Header{reg("a/../../escape")}, `a ".." component`},
		{"absolute", nil, []*tar.Header{reg("/tmp/escape")}, "an absolute path"},
		{"through symlink in archive", nil, []*tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, reg("l/escape")}, "below the symlink l"},
		{"bad entry after good ones", nil, []*tar.Header{reg("first"), {Name: "sub", Typeflag: tar.TypeDir}, reg("sub/second"), reg("../escape")}, `a ".." component`},
		{"through symlink inside", nil, []*tar.Header{{Name: "d", Typeflag: tar.TypeDir}, {Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d"}, reg("l/x")}, "below the symlink l"},
		{"through existing symlink", func(d string) { os.Symlink("/tmp", filepath.Join(d, "ex")) }, []*tar.Header{reg("ex/escape")}, "below the symlink ex"},
		{"hard link", nil, []*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}}, "a hard link"},
		{"device", nil, []*tar.Header{{Name: "dev", Typeflag: tar.TypeChar}}, "only files, directories and symlinks"},
		{"protected hook", func(d string) { os.MkdirAll(filepath.Join(d, ".git/hooks"), 0o755) }, []*tar.Header{reg(".git/hooks/pre-commit")}, "protected path"},
		{"dir in the way", func(d string) { os.Mkdir(filepath.Join(d, "dd"), 0o755) }, []*tar.Header{reg("dd")}, "a directory is in the way"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			dir := filepath.Join(top, "ws")
			os.Mkdir(dir, 0o755)
			if tc.prep != nil {
				tc.prep(dir)
			}
			before := listing(t, dir)
			// A spooled archive (a seeker) is refused before any entry is
			// written; a plain stream at its bad entry.
			_, err := Unpack(bytes.NewReader(tarOf(t, tc.hs...)), dir, Options{Protected: sandbox.DefaultProtected})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
			if after := listing(t, dir); !slices.Equal(before, after) {
				t.Errorf("a refused spooled archive wrote %q (before %q)", after, before)
			}
			_, err = Unpack(io.MultiReader(bytes.NewReader(tarOf(t, tc.hs...))), dir, Options{Protected: sandbox.DefaultProtected})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("stream: err %v, want %q", err, tc.want)
			}
			for _, p := range []string{filepath.Join(top, "escape"), "/tmp/escape", filepath.Join(dir, "d/x")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
		})
	}
}

// listing returns every path below dir, sorted.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil && p != dir {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestSymlinkBecomesDir: an archive that replaces the destination's
// symlink with a directory and writes below it is fine (precheck follows
// the archive, not the disk, for paths the archive names); the symlink's
// target is untouched.
func TestSymlinkBecomesDir(t *testing.T) {
	top := t.TempDir()
	victim := filepath.Join(top, "victim")
	os.Mkdir(victim, 0o755)
	ws := filepath.Join(top, "ws")
	os.Mkdir(ws, 0o755)
	os.Symlink(victim, filepath.Join(ws, "trap"))
	ar := tarOf(t, &tar.Header{Name: "trap", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "trap/x", Typeflag: tar.TypeReg})
	if _, err := Unpack(bytes.NewReader(ar), ws, Options{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "trap")); err != nil || !fi.IsDir() {
		t.Errorf("trap: %v %v", fi, err)
	}
	if got := listing(t, victim); len(got) != 0 {
		t.Errorf("written through the symlink: %q", got)
	}
}

// TestReplaceSymlink: a file entry where a symlink is replaces the
// symlink; the file it pointed to is untouched.
func TestReplaceSymlink(t *testing.T) {
	top := t.TempDir()
	os.WriteFile(filepath.Join(top, "victim"), []byte("safe"), 0o644)
	ws := filepath.Join(top, "ws")
	os.Mkdir(ws, 0o755)
	os.Symlink("../victim", filepath.Join(ws, "f"))
	if _, err := Unpack(bytes.NewReader(tarOf(t, &tar.Header{Name: "f", Typeflag: tar.TypeReg})), ws, Options{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(top, "victim")); string(b) != "safe" {
		t.Errorf("victim %q", b)
	}
	if fi, _ := os.Lstat(filepath.Join(ws, "f")); !fi.Mode().IsRegular() {
		t.Errorf("f is %v", fi.Mode())
	}
}

// TestDelete: Delete removes what the archive lacks (never a protected
// path), and only when the hash matches: a cut-short stream deletes
// nothing.
func TestDelete(t *testing.T) {
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "old"), []byte("o"), 0o644)
	os.MkdirAll(filepath.Join(ws, ".git/hooks"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git/HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.MkdirAll(filepath.Join(ws, ".git/objects"), 0o755)
	os.MkdirAll(filepath.Join(ws, ".git/refs"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git/config"), []byte("[core]\n"), 0o644)
	ar := tarOf(t, &tar.Header{Name: "new", Typeflag: tar.TypeReg})
	if _, err := Unpack(bytes.NewReader(ar), ws, Options{Delete: true}); err == nil {
		t.Error("Delete without a hash accepted")
	}
	if _, err := Unpack(bytes.NewReader(ar[:512]), ws, Options{Delete: true, WantSHA256: hashOf(ar)}); err == nil {
		t.Error("a cut-short stream accepted")
	}
	if _, err := os.Stat(filepath.Join(ws, "old")); err != nil {
		t.Errorf("a cut-short stream deleted: %v", err)
	}
	st, err := Unpack(bytes.NewReader(ar), ws, Options{Delete: true, WantSHA256: hashOf(ar), Protected: sandbox.DefaultProtected})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "old")); err == nil || len(st.Deleted) == 0 {
		t.Errorf("old kept; deleted %q", st.Deleted)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/config")); err != nil {
		t.Errorf("a protected path was deleted: %v (deleted %q)", err, st.Deleted)
	}
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestUnpackFromPipe: an *os.File that is a pipe (the pod side's stdin)
// is an io.ReadSeeker whose Seek fails: Unpack reads it as a stream.
func TestUnpackFromPipe(t *testing.T) {
	ws := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ar := tarOf(t, &tar.Header{Name: "d", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644})
	go func() {
		w.Write(ar)
		w.Close()
	}()
	st, err := Unpack(r, ws, Options{WantSHA256: hashOf(ar)})
	r.Close()
	if err != nil || st.Files != 1 {
		t.Fatalf("Unpack from a pipe: %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "d/f")); err != nil {
		t.Error(err)
	}
}
