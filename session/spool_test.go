package session

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stream is output with characters of every UTF-8 width, so that chunk
// boundaries and drops fall inside characters.
func stream(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %d: aé€😀\n", i)
	}
	return b.Bytes()
}

// follow reads sp the way an agent does, from 0 and then from each Next,
// until it has read up to total; it fails the test when a read does not
// progress, when data disagrees with what was written at its offset, or
// when a drop has no reason. It returns the bytes read and skipped.
func follow(t *testing.T, sp *spool, want []byte, limit int, running bool) (read, skipped int64) {
	t.Helper()
	var off int64
	for i := 0; off < int64(len(want)); i++ {
		if i > 4*len(want) {
			t.Fatalf("no end after %d reads at offset %d", i, off)
		}
		r := sp.chunk(off, limit, running)
		if r.skipped > 0 {
			if r.reason == "" {
				t.Fatalf("at %d: %d bytes skipped without a reason", off, r.skipped)
			}
			if r.start != off+r.skipped {
				t.Fatalf("at %d: skipped %d but data starts at %d", off, r.skipped, r.start)
			}
		} else if r.start != off {
			t.Fatalf("at %d: data starts at %d with nothing skipped", off, r.start)
		}
		if r.next <= off && r.skipped == 0 {
			if running && r.next == off && len(want)-int(off) < 4 {
				break // a split character at the very end waits for more
			}
			t.Fatalf("at %d: no progress (next %d, %d bytes)", off, r.next, len(r.data))
		}
		if !bytes.Equal(r.data, want[r.start:r.start+int64(len(r.data))]) {
			t.Fatalf("at %d: data differs from what was written", r.start)
		}
		if r.next != r.start+int64(len(r.data)) {
			t.Fatalf("at %d: next %d after %d bytes", r.start, r.next, len(r.data))
		}
		read += int64(len(r.data))
		skipped += r.skipped
		off = r.next
	}
	return read, skipped
}

func writeAll(t *testing.T, sp *spool, b []byte) {
	t.Helper()
	for len(b) > 0 {
		n := min(len(b), 32<<10-7) // pipe-sized writes, not aligned to characters
		if w, err := sp.Write(b[:n]); w != n || err != nil {
			t.Fatalf("write: %d %v", w, err)
		}
		b = b[n:]
	}
}

// A spill that meets a full disk, a disk nearing its reserve, or a spill
// file that loses bytes keeps what it can, says why it dropped the rest,
// and a reader that follows next always gets to the end.
func TestSpoolFaults(t *testing.T) {
	const size = 3 << 20
	want := stream(size)
	plenty := func(string) (uint64, uint64, error) { return 1 << 40, 1 << 41, nil }
	cases := []struct {
		name string
		// open and free fault the spool; after runs once all is written.
		open       func(t *testing.T, path string) (spillFile, error)
		free       func(written func() int64) func(string) (uint64, uint64, error)
		after      func(t *testing.T, path string)
		reason     string
		minKept    int64 // bytes readable at least
		noFileOver int64 // the spill file stays at most this big
	}{
		{
			name: "disk full (ENOSPC from the kernel: /dev/full)",
			open: func(*testing.T, string) (spillFile, error) {
				return os.OpenFile("/dev/full", os.O_RDWR, 0)
			},
			reason:  "is full",
			minKept: bgMemory,
		},
		{
			name: "spill file cannot be created",
			open: func(_ *testing.T, path string) (spillFile, error) {
				return nil, &os.PathError{Op: "open", Path: path, Err: os.ErrPermission}
			},
			reason:  "could not be used",
			minKept: bgMemory,
		},
		{
			name: "reserve reached after about 1.5 MiB",
			free: func(written func() int64) func(string) (uint64, uint64, error) {
				return func(string) (uint64, uint64, error) {
					return uint64(bgReserveMin + 3<<19 - written()), 100 << 20, nil
				}
			},
			reason:     "nearly full",
			minKept:    1<<20 + bgMemory,
			noFileOver: 3 << 19,
		},
		{
			name: "no room at the first spill",
			free: func(func() int64) func(string) (uint64, uint64, error) {
				return func(string) (uint64, uint64, error) { return bgReserveMin, 1 << 30, nil }
			},
			reason:     "nearly full",
			minKept:    bgMemory,
			noFileOver: 0,
		},
		{
			name: "reserve is a share of a big filesystem",
			free: func(written func() int64) func(string) (uint64, uint64, error) {
				return func(string) (uint64, uint64, error) { return 1 << 30, 1 << 40, nil } // reserve 5% of 1 TiB > 1 GiB free
			},
			reason:     "nearly full",
			minKept:    bgMemory,
			noFileOver: 0,
		},
		{
			name: "spill file truncated behind corral's back",
			after: func(t *testing.T, path string) {
				if err := os.Truncate(path, 1<<20+5); err != nil {
					t.Fatal(err)
				}
			},
			reason:  "could not be read",
			minKept: 1<<20 + bgMemory,
		},
	}
	for _, tc := range cases {
		for _, running := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/running=%v", tc.name, running), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "bg-1.log")
				sp := newSpool(path)
				sp.free = plenty
				if tc.open != nil {
					sp.open = func(p string) (spillFile, error) { return tc.open(t, p) }
				}
				if tc.free != nil {
					sp.free = tc.free(func() int64 { return sp.fileLen })
				}
				writeAll(t, sp, want)
				if tc.after != nil {
					tc.after(t, path)
				}
				for _, limit := range []int{bgChunk, 1000, 7} {
					read, skipped := follow(t, sp, want, limit, running)
					if read+skipped < int64(len(want))-3 {
						t.Errorf("limit %d: read %d + skipped %d of %d", limit, read, skipped, len(want))
					}
					if read < tc.minKept-3 {
						t.Errorf("limit %d: kept %d bytes, want at least %d", limit, read, tc.minKept)
					}
					if skipped == 0 {
						t.Errorf("limit %d: nothing skipped", limit)
					}
				}
				// The newest output is always there, whole.
				if r := sp.chunk(int64(len(want)-100), 100, false); !bytes.Equal(r.data, want[len(want)-100:]) {
					t.Errorf("tail: %q", r.data)
				}
				if !strings.Contains(sp.reason, tc.reason) {
					t.Errorf("reason %q, want it to say %q", sp.reason, tc.reason)
				}
				if tc.noFileOver >= 0 && tc.free != nil {
					if st, err := os.Stat(path); err == nil && st.Size() > tc.noFileOver+bgCheckEvery {
						t.Errorf("spill file %d bytes, want at most %d", st.Size(), tc.noFileOver+bgCheckEvery)
					}
				}
				sp.remove()
			})
		}
	}
}

// Without faults nothing is skipped, and a character split by a chunk's
// end, by the move from memory to file or from file to ring, is read whole.
func TestSpoolWhole(t *testing.T) {
	want := stream(bgMemory*3 + 11)
	sp := newSpool(filepath.Join(t.TempDir(), "bg-1.log"))
	writeAll(t, sp, want)
	for _, limit := range []int{bgChunk, 4093, 5} {
		read, skipped := follow(t, sp, want, limit, false)
		if skipped != 0 || read != int64(len(want)) {
			t.Errorf("limit %d: read %d skipped %d of %d", limit, read, skipped, len(want))
		}
	}
	sp.remove()
}
