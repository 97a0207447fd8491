package layer

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/dirlist"
)

// base.json is a JSON array of Entry, one per path of Lower, in path
// order (cmpPath). It is read one entry at a time (baseReader) and
// written one at a time (baseWriter): a working directory of a million
// files costs apply what one entry costs, not a million.

// errBaseOrder means base.json's entries are not in cmpPath's order: an
// older corral wrote it sorted as plain strings ("a-b" before "a/b").
var errBaseOrder = errors.New("base.json is not in path order")

// baseReader reads base.json's entries in order.
type baseReader struct {
	name string
	f    *os.File
	dec  *json.Decoder
	head *Entry // the next entry, nil at the end
	last string // the path of the entry before head
	any  bool   // an entry was read
}

// openBase opens base.json at its first entry.
func (l *Layer) openBase() (*baseReader, error) {
	f, err := os.Open(l.BasePath())
	if err != nil {
		return nil, fmt.Errorf("reading the layer's base: %w", err)
	}
	r := &baseReader{name: l.BasePath(), f: f, dec: json.NewDecoder(bufio.NewReaderSize(f, 64<<10))}
	if t, err := r.dec.Token(); err != nil || t != json.Delim('[') {
		f.Close()
		return nil, fmt.Errorf("reading %s: not a JSON array (%v)", r.name, err)
	}
	if err := r.next(); err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

func (r *baseReader) close() { r.f.Close() }

// next moves head to the following entry (nil at the end). It fails with
// errBaseOrder when that entry does not come after the one before.
func (r *baseReader) next() error {
	if r.head != nil {
		r.last, r.any = r.head.Path, true
	}
	r.head = nil
	if !r.dec.More() {
		return nil
	}
	var e Entry
	if err := r.dec.Decode(&e); err != nil {
		return fmt.Errorf("reading %s: %w", r.name, err)
	}
	if r.any && cmpPath(e.Path, r.last) <= 0 {
		return fmt.Errorf("%w (%q after %q)", errBaseOrder, e.Path, r.last)
	}
	r.head = &e
	return nil
}

// find moves past the entries before p and returns p's (nil when base
// has none); the entry stays head. Calls come in path order.
func (r *baseReader) find(p string) (*Entry, error) {
	for r.head != nil && cmpPath(r.head.Path, p) < 0 {
		if err := r.next(); err != nil {
			return nil, err
		}
	}
	if r.head != nil && r.head.Path == p {
		return r.head, nil
	}
	return nil, nil
}

// baseWriter writes a new base.json, replacing the old one at commit.
type baseWriter struct {
	w    *atomicWriter
	enc  *json.Encoder
	n    int
	last string
}

func (l *Layer) newBaseWriter() (*baseWriter, error) {
	w, err := newAtomicWriter(l.BasePath())
	if err != nil {
		return nil, err
	}
	io.WriteString(w, "[")
	return &baseWriter{w: w, enc: json.NewEncoder(w)}, nil
}

// put appends e, which must come after the entry put before.
func (b *baseWriter) put(e Entry) error {
	if b.n > 0 && cmpPath(e.Path, b.last) <= 0 {
		return fmt.Errorf("the new base is out of order: %q after %q", e.Path, b.last)
	}
	if b.n > 0 {
		io.WriteString(b.w, ",")
	}
	b.n++
	b.last = e.Path
	return b.enc.Encode(e) // a newline after each: whitespace to JSON
}

func (b *baseWriter) commit() error {
	io.WriteString(b.w, "]\n")
	return b.w.commit()
}

func (b *baseWriter) abort() { b.w.abort() }

// sortBase rewrites a base.json an older corral wrote in plain string
// order into path order. It reads it whole: once per such layer.
func (l *Layer) sortBase() error {
	data, err := os.ReadFile(l.BasePath())
	if err != nil {
		return err
	}
	var list []Entry
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("reading %s: %w", l.BasePath(), err)
	}
	data = nil
	slices.SortFunc(list, func(a, b Entry) int { return cmpPath(a.Path, b.Path) })
	list = slices.CompactFunc(list, func(a, b Entry) bool { return a.Path == b.Path })
	w, err := l.newBaseWriter()
	if err != nil {
		return err
	}
	for _, e := range list {
		if err := w.put(e); err != nil {
			w.abort()
			return err
		}
	}
	return w.commit()
}

// withBase runs fn over base.json from its start; a base out of order
// (errBaseOrder) is sorted and fn run again, once. fn must start afresh
// each time.
func (l *Layer) withBase(fn func(*baseReader) error) error {
	for try := 0; ; try++ {
		r, err := l.openBase()
		if err == nil {
			err = fn(r)
			r.close()
		}
		if try > 0 || !errors.Is(err, errBaseOrder) {
			return err
		}
		if err := l.sortBase(); err != nil {
			return err
		}
	}
}

// entryOf is base.json's record of Lower's node n at rel.
func entryOf(rel string, n *node) Entry {
	e := Entry{Path: rel, Type: n.Type, Mode: n.Mode & 0o777, MTime: n.MTime, Target: n.Target}
	if n.Type == "file" {
		e.Size = n.Size
	}
	if e.Type == "whiteout" {
		e.Type = "other"
	}
	return e
}

// scanTo calls put with what dir holds, every path below it (not
// following symlinks), in path order (each directory's names sorted, and
// what a directory holds right after it), its directories listed in
// bounded memory with spill (listDir).
func scanTo(dir, spill string, put func(Entry) error) error {
	t, err := openTree(dir)
	if err != nil {
		return err
	}
	defer t.close()
	t.spill = spill
	buf := make([]byte, unix.PathMax)
	var walk func(rel string) error
	walk = func(rel string) error {
		fd, err := t.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			if rel == "" {
				return err
			}
			return nil // unreadable: what it holds is not recorded, so apply treats it as new
		}
		defer unix.Close(fd)
		names, err := dirlist.List(fd, t.abs(rel), t.spill)
		if err != nil {
			if rel == "" {
				return err
			}
			return nil
		}
		return names.Each(func(name string) error {
			p := path.Join(rel, name)
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				return nil // gone since it was listed
			}
			e := Entry{Path: p, Mode: st.Mode & 0o777, MTime: st.Mtim.Nano()}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				e.Type, e.Size = "file", st.Size
			case unix.S_IFDIR:
				e.Type = "dir"
			case unix.S_IFLNK:
				e.Type = "symlink"
				if k, err := unix.Readlinkat(fd, name, buf); err == nil {
					e.Target = string(buf[:k])
				}
			default:
				e.Type = "other"
			}
			if err := put(e); err != nil {
				return err
			}
			if e.Type == "dir" {
				return walk(p)
			}
			return nil
		})
	}
	return walk("")
}
