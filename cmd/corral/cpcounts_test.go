package main

import "testing"

// TestCopyCounts: each noun of corral cp's and sync's summary agrees with
// its number.
func TestCopyCounts(t *testing.T) {
	for _, tc := range []struct {
		files, dirs, syms int
		bytes             int64
		want              string
	}{
		{1, 0, 0, 3, "1 file (3 bytes), 0 directories, 0 symlinks"},
		{2, 1, 1, 1, "2 files (1 byte), 1 directory, 1 symlink"},
		{0, 3, 2, 0, "0 files (0 bytes), 3 directories, 2 symlinks"},
	} {
		if got := copyCounts(tc.files, tc.bytes, tc.dirs, tc.syms); got != tc.want {
			t.Errorf("copyCounts(%d, %d, %d, %d) = %q, want %q", tc.files, tc.bytes, tc.dirs, tc.syms, got, tc.want)
		}
	}
}
