package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Bounds that keep a background process's spill file from filling the disk
// that holds the session's state (its cwd, variables and locks must still
// be writable after a flood of output).
const (
	// bgReserveMin is the least free space left on the state directory's
	// filesystem: a spill stops growing before free space falls below it.
	bgReserveMin = 16 << 20
	// bgReserveDiv sets the reserve to a share of the filesystem's size
	// when that is larger than bgReserveMin: 1/bgReserveDiv of it.
	bgReserveDiv = 20
	// bgCheckEvery is how many spilled bytes pass between two checks of
	// free space (statfs(2)); each writer can overshoot the reserve by at
	// most this much.
	bgCheckEvery = 1 << 20
)

// Reasons a spool gives for bytes it could not keep (Chunk.SkippedReason).
const (
	dropCap      = "output past 64 MiB keeps only its newest 256 KiB"
	dropLowSpace = "the disk holding corral's session state was nearly full, so only the newest 256 KiB were kept"
)

// spillFile is what a spool writes its spill to: an *os.File, or a fault
// in tests.
type spillFile interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
}

// spool holds a background process's output within bounded memory and
// disk: in memory up to bgMemory; past that in a spill file up to
// bgFileCap while the disk keeps its reserve, and always the newest
// bgMemory bytes in memory too (the tail), so the end of the output
// survives whatever befalls the file. Offsets are absolute bytes of the
// process's output; bytes neither in the file nor in the tail are reported
// as skipped with a reason, so a reader that follows next always
// progresses.
type spool struct {
	mu      sync.Mutex
	path    string
	mem     []byte // before spilling: bytes [0, total)
	spilled bool   // mem is done with; file and tail hold the output
	file    spillFile
	fileLen int64   // the file holds bytes [0, fileLen)
	tail    tailBuf // bytes [total-tail.len(), total)
	capped  bool    // the file takes no more bytes
	total   int64
	reason  string // why bytes past the file were dropped, once capped
	checked int64  // fileLen at the last check of free space

	// open and free are os.OpenFile and statfs(2) of the directory; tests
	// replace them to fault.
	open func(path string) (spillFile, error)
	free func(dir string) (avail, size uint64, err error)
}

func newSpool(path string) *spool {
	return &spool{path: path, open: openSpill, free: statfsFree}
}

// openSpill creates the spill file; O_NOFOLLOW because the bg directory is
// corral's own and a link there is not one it made.
func openSpill(path string) (spillFile, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
}

// statfsFree returns the bytes an unprivileged writer may still use on
// dir's filesystem (f_bavail, statfs(2)) and the filesystem's size.
func statfsFree(dir string) (avail, size uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// Write implements io.Writer within the spool's memory and disk bounds; it
// never fails, so the process is never stopped by its own output: what
// cannot be kept is counted and reported as skipped.
func (s *spool) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	s.total += int64(n)
	if !s.spilled {
		if len(s.mem)+len(p) <= bgMemory {
			s.mem = append(s.mem, p...)
			return n, nil
		}
		s.spilled = true
		p = append(s.mem, p...)
		s.mem = nil
		s.tail.write(p)
		if reason := s.room(int64(len(p))); reason != "" {
			s.capAt(0, reason)
			return n, nil
		}
		f, err := s.open(s.path)
		if err != nil {
			s.capAt(0, spillReason(err))
			return n, nil
		}
		s.file = f
	} else {
		s.tail.write(p)
	}
	if !s.capped {
		s.writeFile(p)
	}
	return n, nil
}

// writeFile appends p to the spill file, as far as the cap, the disk's
// reserve and the disk itself allow.
func (s *spool) writeFile(p []byte) {
	k := min(int64(len(p)), bgFileCap-s.fileLen)
	if k > 0 && s.fileLen+k-s.checked >= bgCheckEvery {
		if reason := s.room(k); reason != "" {
			s.capAt(s.fileLen, reason)
			return
		}
		s.checked = s.fileLen + k
	}
	if k > 0 {
		w, err := s.file.WriteAt(p[:k], s.fileLen)
		s.fileLen += int64(w)
		if err != nil {
			s.capAt(s.fileLen, spillReason(err))
			return
		}
	}
	if k < int64(len(p)) {
		s.capAt(s.fileLen, dropCap)
	}
}

// room says why n more bytes may not be spilled ("" when they may): the
// filesystem would keep less than its reserve.
func (s *spool) room(n int64) string {
	avail, size, err := s.free(filepath.Dir(s.path))
	if err != nil {
		return spillReason(err)
	}
	reserve := max(uint64(bgReserveMin), size/bgReserveDiv)
	if avail < reserve || avail-reserve < uint64(n) {
		return dropLowSpace
	}
	return ""
}

// capAt stops the file at length n: it holds bytes [0, n) and takes no
// more. reason joins the reasons already given.
func (s *spool) capAt(n int64, reason string) {
	switch {
	case s.reason == "":
		s.reason = reason
	case !strings.Contains(s.reason, reason):
		s.reason += "; " + reason
	}
	s.fileLen = n
	s.capped = true
}

// spillReason words a failure to spill.
func spillReason(err error) string {
	switch {
	case errors.Is(err, unix.ENOSPC):
		return "the disk holding corral's session state is full, so only the newest 256 KiB were kept"
	case errors.Is(err, unix.EDQUOT):
		return "the disk quota of corral's session state is used up, so only the newest 256 KiB were kept"
	}
	return fmt.Sprintf("the spill file could not be used (%v), so only the newest 256 KiB were kept", err)
}

func (s *spool) size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// read returns up to limit bytes from offset: the data, where it starts,
// where the next read starts, how many bytes before it were dropped and
// why, and whether the bytes from next on continue without a gap (a
// character split at next can then be completed by the next read). For
// any offset below the total, next > offset or skipped > 0: a reader that
// follows next always progresses.
func (s *spool) read(offset int64, limit int) spoolRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	offset = max(min(offset, s.total), 0)
	if !s.spilled {
		end := min(offset+int64(limit), s.total)
		return spoolRead{data: append([]byte(nil), s.mem[offset:end]...), start: offset, next: end, contiguous: true}
	}
	tailStart := s.total - s.tail.len()
	var data []byte
	if offset < s.fileLen && offset < tailStart {
		// Only the file has these bytes.
		end := min(offset+int64(limit), s.fileLen)
		buf := make([]byte, end-offset)
		n, err := s.file.ReadAt(buf, offset)
		if n < len(buf) {
			// The file lost bytes it held (an I/O error, or truncated
			// behind corral's back): what follows offset+n is gone.
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			s.capAt(offset+int64(n), fmt.Sprintf("the spill file could not be read (%v)", err))
		}
		data = buf[:n]
		if n == 0 {
			return s.fromTail(offset, limit)
		}
		next := offset + int64(n)
		if next == s.fileLen && next >= tailStart && len(data) < limit {
			// The tail goes on where the file ends: read on into it, so a
			// character split there is read whole.
			more := s.fromTail(next, limit-len(data))
			data = append(data, more.data...)
			next = more.next
		}
		return spoolRead{data: data, start: offset, next: next, contiguous: next < s.fileLen || next >= tailStart}
	}
	return s.fromTail(offset, limit)
}

// fromTail reads up to limit bytes from offset out of the tail, skipping
// to its start when offset lies before it (and the file does not hold
// offset). Call with s.mu held.
func (s *spool) fromTail(offset int64, limit int) spoolRead {
	r := spoolRead{contiguous: true}
	tailStart := s.total - s.tail.len()
	if offset < tailStart {
		r.skipped, r.reason = tailStart-offset, s.reason
		offset = tailStart
	}
	end := min(offset+int64(limit), s.total)
	r.data = s.tail.copy(offset-tailStart, end-tailStart)
	r.start, r.next = offset, end
	return r
}

// chunk is read that leaves a character split by the chunk's end for the
// next call, when that call can read on from there without a gap and the
// character may still be completed (more output may come while running).
func (s *spool) chunk(offset int64, limit int, running bool) spoolRead {
	r := s.read(offset, limit)
	if cut := trimPartialEnd(r.data); len(cut) < len(r.data) && r.contiguous && (running || r.next < s.size()) {
		r.next -= int64(len(r.data) - len(cut))
		r.data = cut
	}
	return r
}

// tailBuf is a circular buffer of the newest bgMemory bytes written to it.
type tailBuf struct {
	buf []byte // allocated on first write, bgMemory long
	end int    // where the next byte goes
	n   int64  // bytes held, at most bgMemory
}

// write keeps the newest bytes of p.
func (t *tailBuf) write(p []byte) {
	if t.buf == nil {
		t.buf = make([]byte, bgMemory)
	}
	if len(p) >= len(t.buf) {
		p = p[len(p)-len(t.buf):]
	}
	k := copy(t.buf[t.end:], p)
	copy(t.buf, p[k:])
	t.end = (t.end + len(p)) % len(t.buf)
	t.n = min(t.n+int64(len(p)), int64(len(t.buf)))
}

func (t *tailBuf) len() int64 { return t.n }

// copy returns bytes [from, to) of what the tail holds, oldest first.
func (t *tailBuf) copy(from, to int64) []byte {
	out := make([]byte, 0, to-from)
	if to <= from {
		return out
	}
	start := (t.end - int(t.n) + len(t.buf)) % len(t.buf)
	a := (start + int(from)) % len(t.buf)
	b := a + int(to-from)
	if b <= len(t.buf) {
		return append(out, t.buf[a:b]...)
	}
	return append(append(out, t.buf[a:]...), t.buf[:b-len(t.buf)]...)
}

// spoolRead is one read of a spool.
type spoolRead struct {
	data        []byte
	start, next int64
	skipped     int64
	reason      string
	contiguous  bool
}

// remove closes and deletes the spill file.
func (s *spool) remove() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file != nil {
		s.file.Close()
		s.file = nil
		_ = os.Remove(s.path)
	}
}
