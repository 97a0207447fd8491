// Package sparse writes files whose blocks of zeros become holes, so that
// a stream that is mostly zeros (an archive of a sparse file: a disk
// image, a core, `truncate -s 100G`) takes the disk its data needs, not
// its length.
package sparse

import (
	"bytes"
	"io"
)

// Block is the unit a hole is made of, in bytes: a whole Block of zeros
// at an offset that is a multiple of Block is skipped rather than
// written. 4096 is the block size of ext4, xfs, btrfs and tmpfs on
// x86-64 (statfs(2) f_bsize); a hole smaller than a file system's block
// would be stored as data anyway.
const Block = 4096

var zeros [Block]byte

// Writer writes to a file from offset 0 on, leaving each aligned Block of
// zeros as a hole (lseek(2): reading a hole gives zeros). It holds back
// the part of a Block that writes have not yet completed (at most one
// Block), so the stream may come in writes of any size. Finish it: it
// writes what it holds back and gives the file its length. Not safe for
// concurrent use.
type Writer struct {
	f       File
	off     int64  // the offset of the first byte not yet written or skipped
	dataEnd int64  // where the last data written ends
	pend    []byte // bytes of the Block at off, fewer than Block
}

// File is what a Writer writes to: an *os.File, or a raw descriptor
// behind pwrite(2) and ftruncate(2).
type File interface {
	io.WriterAt
	Truncate(size int64) error
}

// NewWriter returns a Writer of f from offset 0; f must be empty (what
// it holds would be left where holes are, and its length kept).
func NewWriter(f File) *Writer { return &Writer{f: f, pend: make([]byte, 0, Block)} }

// Write implements io.Writer with pwrite(2) (the file's own offset does
// not move).
func (w *Writer) Write(b []byte) (int, error) {
	total := len(b)
	if len(w.pend) > 0 {
		n := min(Block-len(w.pend), len(b))
		w.pend = append(w.pend, b[:n]...)
		b = b[n:]
		if len(w.pend) < Block {
			return total, nil
		}
		if err := w.blocks(w.pend); err != nil {
			return 0, err
		}
		w.pend = w.pend[:0]
	}
	whole := len(b) - len(b)%Block
	if err := w.blocks(b[:whole]); err != nil {
		return total - len(b), err
	}
	w.pend = append(w.pend, b[whole:]...)
	return total, nil
}

// blocks writes b, whole Blocks at w.off, skipping those of zeros and
// writing each run of the others in one pwrite.
func (w *Writer) blocks(b []byte) error {
	for len(b) > 0 {
		if bytes.Equal(b[:Block], zeros[:]) {
			w.off += Block
			b = b[Block:]
			continue
		}
		end := Block
		for end < len(b) && !bytes.Equal(b[end:end+Block], zeros[:]) {
			end += Block
		}
		m, err := w.f.WriteAt(b[:end], w.off)
		w.off += int64(m)
		w.dataEnd = w.off
		if err != nil {
			return err
		}
		b = b[end:]
	}
	return nil
}

// Size is how many bytes have been written, holes included.
func (w *Writer) Size() int64 { return w.off + int64(len(w.pend)) }

// Finish writes what the Writer holds back and gives the file its length
// (ftruncate(2)) when it ends in a hole. Its error, with Write's, says
// whether the file holds what was written.
func (w *Writer) Finish() error {
	if len(w.pend) > 0 {
		m, err := w.f.WriteAt(w.pend, w.off)
		w.off += int64(m)
		w.dataEnd = w.off
		w.pend = w.pend[:0]
		if err != nil {
			return err
		}
	}
	if w.dataEnd < w.off {
		return w.f.Truncate(w.off)
	}
	return nil
}

// Copy copies r into a new Writer of f and finishes it, returning the
// bytes copied (holes included), as io.Copy does.
func Copy(f File, r io.Reader) (int64, error) {
	w := NewWriter(f)
	n, err := io.Copy(w, r)
	if err != nil {
		return n, err
	}
	return n, w.Finish()
}
