package kubernetes

import (
	"archive/tar"
	"os"
	"strings"
	"testing"
)

// TestCheckCarried: an archive out of a session's old pod is refused at
// its first entry that no copy out of a sandbox may hold (transfer's
// CheckEntry), and counted through otherwise.
func TestCheckCarried(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		n       int
		why     string // "" when accepted, else a part of the reason
	}{
		{"plain", []tar.Header{{Name: "d/", Typeflag: tar.TypeDir}, {Name: "d/f", Typeflag: tar.TypeReg}, {Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}}, 3, ""},
		{"empty", nil, 0, ""},
		{"absolute", []tar.Header{{Name: "f", Typeflag: tar.TypeReg}, {Name: "/etc/x", Typeflag: tar.TypeReg}}, 2, "an absolute path"},
		{"dotdot", []tar.Header{{Name: "a/../../x", Typeflag: tar.TypeReg}}, 1, `".." component`},
		{"hard link", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "f"}}, 1, "hard link"},
		{"device", []tar.Header{{Name: "dev", Typeflag: tar.TypeChar}}, 1, "an entry of type"},
		{"fifo", []tar.Header{{Name: "p", Typeflag: tar.TypeFifo}}, 1, "an entry of type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.CreateTemp(t.TempDir(), "a.tar")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tw := tar.NewWriter(f)
			for _, h := range tc.entries {
				h.Mode = 0o644
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			n, why, err := checkCarried(f)
			if err != nil || n != tc.n || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Errorf("checkCarried = %d, %q, %v; want %d, %q", n, why, err, tc.n, tc.why)
			}
		})
	}
	// Not a tar archive at all.
	f, err := os.CreateTemp(t.TempDir(), "junk")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(strings.Repeat("junk", 200)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := checkCarried(f); err == nil {
		t.Errorf("checkCarried of junk: no error")
	}
}

// TestCarryNote: the note names the old pod, says the workspace was
// reset and why, and what carries over.
func TestCarryNote(t *testing.T) {
	n := carryNote("corral-abc", "could not be read (gone)")
	for _, want := range []string{"corral-abc", "the workspace was reset", "could not be read (gone)", "working directory and exported variables carry over"} {
		if !strings.Contains(n, want) {
			t.Errorf("carryNote: %q lacks %q", n, want)
		}
	}
}
