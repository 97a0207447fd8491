package sparse

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"

	"golang.org/x/sys/unix"
)

// TestWriterKeepsBytes: what a Writer writes reads back byte for byte,
// however the stream is cut into writes, and its aligned zero Blocks take
// no disk.
func TestWriterKeepsBytes(t *testing.T) {
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rand.IntN(255) + 1)
		}
		return b
	}
	z := func(n int) []byte { return make([]byte, n) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name    string
		stream  []byte
		maxData int64 // at most this many bytes of disk (st_blocks*512)
	}{
		{"empty", nil, 0},
		{"short data", data(10), Block},
		{"all zeros", z(1 << 20), 0},
		{"zeros then data", cat(z(1<<20), data(100)), Block},
		{"data then zeros", cat(data(100), z(1<<20)), Block},
		{"a tar's shape: header, data, zeros off the block grid, trailer", cat(data(512), data(3000), z(Block*8+100), data(512), z(1024)), 3 * Block},
		{"zeros shorter than a block", cat(data(5), z(Block-1), data(5)), 3 * Block},
		{"interleaved", cat(data(Block), z(Block), data(1), z(3*Block), data(Block)), 4 * Block},
	} {
		for _, chunk := range []int{1, 511, Block, 3*Block + 7, 1 << 20} {
			f, err := os.Create(filepath.Join(t.TempDir(), "f"))
			if err != nil {
				t.Fatal(err)
			}
			w := NewWriter(f)
			for b := tc.stream; len(b) > 0; {
				n := min(chunk, len(b))
				if m, err := w.Write(b[:n]); err != nil || m != n {
					t.Fatalf("%s, writes of %d: wrote %d of %d: %v", tc.name, chunk, m, n, err)
				}
				b = b[n:]
			}
			if err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.stream) || w.Size() != int64(len(tc.stream)) {
				t.Errorf("%s, writes of %d: read back %d bytes (Size %d), want the %d written", tc.name, chunk, len(got), w.Size(), len(tc.stream))
			}
			var st unix.Stat_t
			unix.Fstat(int(f.Fd()), &st)
			// File systems may allocate a little more (xfs preallocates);
			// a hole-less file of a MiB of zeros would show 2,048 blocks.
			if st.Blocks*512 > tc.maxData+16*Block {
				t.Errorf("%s, writes of %d: %d bytes on disk, want at most about %d", tc.name, chunk, st.Blocks*512, tc.maxData)
			}
			f.Close()
		}
	}
}

// TestCopy: Copy of a reader whose reads are cut short.
func TestCopy(t *testing.T) {
	want := append(bytes.Repeat([]byte{0}, 1<<20), "end"...)
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := Copy(f, iotest.HalfReader(bytes.NewReader(want)))
	got, _ := os.ReadFile(f.Name())
	if err != nil || n != int64(len(want)) || !bytes.Equal(got, want) {
		t.Errorf("Copy: %d, %v; read back %d bytes", n, err, len(got))
	}
}
