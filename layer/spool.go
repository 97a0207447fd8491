package layer

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Streaming: diff, apply and discard hold what they must remember about
// every change on disk, not in memory (issue 24: memory bounded whatever
// the number of changed files), as lines of JSON in files of the layer's
// directory, written and read in path order.

// cmpPath orders slash paths as a depth-first walk that reads each
// directory's names sorted meets them (filepath.WalkDir's order, Scan's
// and Walk's): component by component, a directory right before what it
// holds, so that a directory's subtree is one run of the order. It is
// byte order with '/' taken as less than any byte of a name ("a", "a/b",
// "a-b", where plain byte order puts "a-b" before "a/b").
func cmpPath(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x == '/' {
			return -1
		}
		if y == '/' {
			return 1
		}
		if x < y {
			return -1
		}
		return 1
	}
	return len(a) - len(b)
}

// isUnder says whether p is dir or lies below it ("" is the top).
func isUnder(p, dir string) bool {
	return dir == "" || p == dir || strings.HasPrefix(p, dir) && p[len(dir)] == '/'
}

// ancestors returns the directories above slash path p, the top one
// first ("a", "a/b" for "a/b/c").
func ancestors(p string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// spoolDir is where an Apply or a Discard keeps its spools: made anew by
// each, removed when it ends (and by the next one, after a crash).
func (l *Layer) spoolDir() string { return filepath.Join(l.Dir, "apply.spool") }

// newSpoolDir empties and makes the spool directory.
func (l *Layer) newSpoolDir() error {
	if err := os.RemoveAll(l.spoolDir()); err != nil {
		return err
	}
	return os.Mkdir(l.spoolDir(), 0o700)
}

// spoolWriter writes values as lines of JSON to a file, buffered.
type spoolWriter struct {
	f   *os.File
	bw  *bufio.Writer
	enc *json.Encoder
	n   int // values written
}

// createSpool makes (truncating) file p for a spool.
func createSpool(p string) (*spoolWriter, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	return &spoolWriter{f: f, bw: bw, enc: json.NewEncoder(bw)}, nil
}

func (w *spoolWriter) put(v any) error {
	w.n++
	return w.enc.Encode(v)
}

// close flushes and closes the file; with sync, fsyncs it first.
func (w *spoolWriter) close(sync bool) error {
	err := w.bw.Flush()
	if err == nil && sync {
		err = w.f.Sync()
	}
	return errors.Join(err, w.f.Close())
}

// readSpool calls fn with each value of spool file p, decoded into a
// fresh T, in order. A last value cut short (a crash while it was
// written) ends the file when torn is allowed; otherwise it is an error.
func readSpool[T any](p string, torn bool, fn func(T) error) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return decodeAll(bufio.NewReaderSize(f, 64<<10), p, torn, fn)
}

func decodeAll[T any](r io.Reader, name string, torn bool, fn func(T) error) error {
	dec := json.NewDecoder(r)
	for {
		var v T
		err := dec.Decode(&v)
		if err == io.EOF || torn && errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", name, err)
		}
		if err := fn(v); err != nil {
			return err
		}
	}
}

// atomicWriter writes a file that replaces p whole when committed: a
// temporary file beside it, synced, then renamed over it.
type atomicWriter struct {
	p   string
	f   *os.File
	bw  *bufio.Writer
	err error
}

func newAtomicWriter(p string) (*atomicWriter, error) {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return nil, err
	}
	return &atomicWriter{p: p, f: f, bw: bufio.NewWriterSize(f, 64<<10)}, nil
}

func (w *atomicWriter) Write(b []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.bw.Write(b)
	w.err = err
	return n, err
}

// commit puts the file in place of p (mode 0600).
func (w *atomicWriter) commit() error {
	err := w.err
	if err == nil {
		err = w.bw.Flush()
	}
	if err == nil {
		err = w.f.Chmod(0o600)
	}
	if err == nil {
		err = w.f.Sync() // on disk before the rename (see atomicfile.Write)
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.f.Name(), w.p)
	}
	if err != nil {
		os.Remove(w.f.Name())
	}
	return err
}

// abort drops the temporary file.
func (w *atomicWriter) abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// capped is a list of at most listMax items, with a count of all that
// were added.
type capped[T any] struct {
	items []T
	total int
}

// ListMax is how many paths an ApplyResult list or a diff's list of risky
// paths holds at most; past it they are counted, not kept.
const ListMax = 1000

func (c *capped[T]) add(v T) {
	c.total++
	if len(c.items) < ListMax {
		c.items = append(c.items, v)
	}
}
