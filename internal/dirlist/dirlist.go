// Package dirlist lists a directory in sorted order in bounded memory: a
// directory whose names come to more than MemBytes is listed as an
// external merge sort, its names read in batches, each batch sorted and
// written to an unnamed spill file as a run, the runs merged as the
// listing is read. Everything that walks a tree a sandbox made (review
// mode's diff and apply, cp out, sync --pull) lists through it, so that
// one directory of a million long names costs what a few thousand do
// (issue 24: 300,000 names of 250 bytes in one directory held 146 MiB
// in a diff when listed whole).
package dirlist

import (
	"bufio"
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	_ "github.com/corralhq/corral/internal/linuxonly" // Linux alone: say so elsewhere
)

// listMemBytes is how many bytes of names (with their string headers) a
// listing holds in memory before it spills them. A variable so that
// tests can make small directories spill (SetLimits).
var listMemBytes = 1 << 20

// listBatch is how many names one read of a directory asks for (os.File's
// Readdirnames with n > 0). A variable for tests, as listMemBytes.
var listBatch = 1024

// runBufSize is each spilled run's read buffer: the merge holds one per
// run (a directory of 10 million 250-byte names is about 2,400 runs of
// listMemBytes, 10 MiB of buffers). A variable for tests, as listMemBytes.
var runBufSize = 4 << 10

// SetLimits makes listings spill past memBytes bytes of names and read
// batch names at a time (> 0), as tests need to make small directories
// spill; it returns a function that restores the limits. Not safe while
// listings are being made.
func SetLimits(memBytes, batch int) (restore func()) {
	m, b := listMemBytes, listBatch
	listMemBytes, listBatch = memBytes, batch
	return func() { listMemBytes, listBatch = m, b }
}

// Listing is the entries of one directory in sort.Strings order (byte
// order), read with Next, without "." and "..". Close it.
type Listing struct {
	mem  []string // the names, when they fit in listMemBytes; else nil
	i    int
	runs runHeap // spilled runs, by each one's next name
}

// List lists directory fd (not closed; its file offset is shared with
// the listing's reads, which start at the beginning), reading it whole
// before it returns: the caller may change the directory while it reads
// the Listing. abs names the directory in errors. Names past the memory
// bound are spilled to unnamed files (O_TMPFILE) made in spill (a
// directory of corral's own), else in os.TempDir; the error of a
// listing that cannot spill says so.
func List(fd int, abs, spill string) (*Listing, error) {
	d, err := unix.Dup(fd)
	if err != nil {
		return nil, &os.PathError{Op: "dup", Path: abs, Err: err}
	}
	f := os.NewFile(uintptr(d), abs)
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	l := &Listing{}
	var batch []string
	size := 0
	for {
		names, err := f.Readdirnames(listBatch)
		for _, n := range names {
			batch = append(batch, n)
			size += len(n) + 16 // the string header
		}
		if size > listMemBytes {
			if err := l.spill(batch, spill, abs); err != nil {
				l.Close()
				return nil, err
			}
			clear(batch)
			batch, size = batch[:0], 0
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			l.Close()
			return nil, err
		}
	}
	if len(l.runs) == 0 {
		slices.Sort(batch)
		l.mem = batch
		return l, nil
	}
	if len(batch) > 0 {
		if err := l.spill(batch, spill, abs); err != nil {
			l.Close()
			return nil, err
		}
	}
	// Every run is written: read each from its start.
	for _, r := range l.runs {
		if _, err := r.f.Seek(0, io.SeekStart); err != nil {
			l.Close()
			return nil, err
		}
		r.r = bufio.NewReaderSize(r.f, runBufSize)
		if err := r.advance(); err != nil {
			l.Close()
			return nil, fmt.Errorf("listing %s: reading back its names: %w", abs, err)
		}
	}
	// A run that read back empty cannot be (each held a name); drop any
	// such all the same rather than merge from it.
	l.runs = slices.DeleteFunc(l.runs, func(r *run) bool {
		if r.done {
			r.f.Close()
		}
		return r.done
	})
	heap.Init(&l.runs)
	return l, nil
}

// spill sorts batch and writes it as a run: names, each ended by a NUL
// (a byte no name holds; path_resolution(7)). It tries dir, then
// os.TempDir: a file system with no room for the run (ENOSPC, EDQUOT) is
// passed over for the next.
func (l *Listing) spill(batch []string, dir, abs string) error {
	slices.Sort(batch)
	var first error
	for _, d := range []string{dir, os.TempDir()} {
		if d == "" {
			continue
		}
		f, err := spillFile(d)
		if err == nil {
			if err = writeRun(f, batch); err == nil {
				l.runs = append(l.runs, &run{f: f})
				return nil
			}
			f.Close()
			err = fmt.Errorf("writing its names to sort them in %s: %w", d, err)
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = errors.New("no directory to write in")
	}
	return fmt.Errorf("listing %s: it holds too many names to keep in memory, and no file could be made to sort them in: %w", abs, first)
}

// writeRun writes batch to f, NUL after each name.
func writeRun(f *os.File, batch []string) error {
	w := bufio.NewWriterSize(f, 64<<10)
	for _, n := range batch {
		w.WriteString(n)
		w.WriteByte(0)
	}
	return w.Flush()
}

// spillFile makes an unnamed file (open(2), O_TMPFILE: it leaves no name
// behind, even after a crash) in d; where O_TMPFILE is not supported, a
// named one removed at once.
func spillFile(d string) (*os.File, error) {
	fd, err := unix.Open(d, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), d+"/(names being sorted)"), nil
	}
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
		f, cerr := os.CreateTemp(d, ".corral-names-*")
		if cerr == nil {
			os.Remove(f.Name())
			return f, nil
		}
		err = cerr
	}
	return nil, &os.PathError{Op: "make a file in", Path: d, Err: err}
}

// Next returns the next name; ok is false at the end. An error reading a
// spilled run back ends the listing with it.
func (l *Listing) Next() (name string, ok bool, err error) {
	if l.runs == nil {
		if l.i == len(l.mem) {
			return "", false, nil
		}
		l.i++
		return l.mem[l.i-1], true, nil
	}
	if len(l.runs) == 0 {
		return "", false, nil
	}
	r := l.runs[0]
	name = r.head
	if err := r.advance(); err != nil {
		return "", false, err
	}
	if r.done {
		r.f.Close()
		heap.Pop(&l.runs)
	} else {
		heap.Fix(&l.runs, 0)
	}
	return name, true, nil
}

// Close releases the listing's spill files; it may be called twice.
func (l *Listing) Close() {
	for _, r := range l.runs {
		r.f.Close()
	}
	l.runs, l.mem = nil, nil
}

// Each calls fn with every name in order until fn fails, then closes the
// listing; its error is fn's or the listing's.
func (l *Listing) Each(fn func(string) error) error {
	defer l.Close()
	for {
		n, ok, err := l.Next()
		if err != nil || !ok {
			return err
		}
		if err := fn(n); err != nil {
			return err
		}
	}
}

// run is one sorted spill file being merged.
type run struct {
	f    *os.File
	r    *bufio.Reader
	head string // the next name
	done bool
}

// advance reads the run's next name into head, or sets done.
func (r *run) advance() error {
	b, err := r.r.ReadSlice(0)
	if err == bufio.ErrBufferFull {
		// A name longer than the buffer (NAME_MAX is 255 bytes on Linux's
		// filesystems, but a FUSE one may allow more).
		var long bytes.Buffer
		long.Write(b)
		for err == bufio.ErrBufferFull {
			b, err = r.r.ReadSlice(0)
			long.Write(b)
		}
		b = long.Bytes()
	}
	if err == io.EOF && len(b) == 0 {
		r.done = true
		return nil
	}
	if err == io.EOF {
		return io.ErrUnexpectedEOF // a name cut short: the file changed under us
	}
	if err != nil {
		return err
	}
	r.head = string(b[:len(b)-1])
	return nil
}

// runHeap orders runs by their next names (container/heap).
type runHeap []*run

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return h[i].head < h[j].head }
func (h runHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)        { *h = append(*h, x.(*run)) }
func (h *runHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}
