package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Position marks a place in the log of one directory: a file (which may
// have been rotated since) and a byte offset in it. [Read] returns the
// position after the last record it read, for [Follow] to go on from
// there. The zero Position means "the end of the log, when Follow
// starts".
type Position struct {
	set    bool
	file   os.FileInfo // nil: the log did not exist; start at the beginning
	offset int64
}

// FollowPoll is how often Follow looks for new records, rotation and
// cancellation.
const FollowPoll = 200 * time.Millisecond

// files returns the log's files, oldest first: audit.jsonl.3 ...
// audit.jsonl.1, audit.jsonl.
func files(dir string) []string {
	p := filepath.Join(dir, FileName)
	out := make([]string, 0, Keep+1)
	for i := Keep; i >= 1; i-- {
		out = append(out, fmt.Sprintf("%s.%d", p, i))
	}
	return append(out, p)
}

// Read calls fn for every record of the log in dir, oldest first (the
// rotated files, then audit.jsonl), and returns the position after the
// last one, for Follow. Missing files are skipped (a directory without a
// log has no records); lines that are not JSON objects are skipped, and so
// is a last line still without its newline. An error from fn stops Read
// and is returned; other errors are those of opening and reading the
// files.
func Read(dir string, fn func(Entry) error) (Position, error) {
	fs := files(dir)
	for _, p := range fs[:len(fs)-1] {
		f, err := openRegular(p, os.O_RDONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return Position{}, err
		}
		_, err = readLines(f, fn)
		f.Close()
		if err != nil {
			return Position{}, err
		}
	}
	f, err := openRegular(fs[len(fs)-1], os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return Position{set: true}, nil
	}
	if err != nil {
		return Position{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Position{}, err
	}
	off, err := readLines(f, fn)
	if err != nil {
		return Position{}, err
	}
	return Position{set: true, file: fi, offset: off}, nil
}

// readLines calls fn for each complete line of r (from its current
// offset) that decodes as an Entry and returns the number of bytes of
// complete lines read.
func readLines(r io.Reader, fn func(Entry) error) (int64, error) {
	var n int64
	var buf []byte
	chunk := make([]byte, 64<<10)
	for {
		k, err := r.Read(chunk)
		buf = append(buf, chunk[:k]...)
		for {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			line := buf[:i]
			buf = buf[i+1:]
			n += int64(i + 1)
			if e, ok := decode(line); ok {
				if err := fn(e); err != nil {
					return n, err
				}
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// decode parses one line; false for lines that are not an Entry.
func decode(line []byte) (Entry, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return Entry{}, false
	}
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var e Entry
	if err := d.Decode(&e); err != nil {
		return Entry{}, false
	}
	return e, true
}

// Follow calls fn for every record appended to the log in dir from the
// position from on, as it is written, until ctx ends; then it returns nil.
// from is a position returned by Read (records written after Read are
// not missed, even across a rotation), or the zero Position for the end
// of the log when Follow starts. Follow follows the log across rotation
// (it finishes the rotated file, then reads the new audit.jsonl from its
// start) and waits for audit.jsonl to appear when it does not exist. It
// looks for new records every FollowPoll. An error from fn stops Follow
// and is returned.
func Follow(ctx context.Context, dir string, from Position, fn func(Entry) error) error {
	path := filepath.Join(dir, FileName)
	t := &tail{fn: fn}
	defer t.close()

	switch {
	case !from.set:
		if f, err := openRegular(path, os.O_RDONLY, 0); errors.Is(err, ErrNotRegular) {
			return err
		} else if err == nil {
			off, err := f.Seek(0, io.SeekEnd)
			if err != nil {
				f.Close()
				return err
			}
			t.f, t.off = f, off
		}
	case from.file != nil:
		// Finish the file from was in, wherever rotation put it, and the
		// newer rotated files after it.
		fs := files(dir)
		for i, p := range fs {
			fi, err := os.Stat(p)
			if err != nil || !os.SameFile(fi, from.file) {
				continue
			}
			if i == len(fs)-1 {
				f, err := openRegular(p, os.O_RDONLY, 0)
				if err != nil {
					break
				}
				if _, err := f.Seek(from.offset, io.SeekStart); err != nil {
					f.Close()
					return err
				}
				t.f, t.off = f, from.offset
				break
			}
			if err := readFrom(p, from.offset, fn); err != nil {
				return err
			}
			for _, q := range fs[i+1 : len(fs)-1] {
				if err := readFrom(q, 0, fn); err != nil {
					return err
				}
			}
			break
		}
	}

	for {
		if t.f == nil {
			if f, err := openRegular(path, os.O_RDONLY, 0); errors.Is(err, ErrNotRegular) {
				return err
			} else if err == nil {
				t.f, t.off, t.buf = f, 0, nil
			}
		}
		if t.f != nil {
			if err := t.drain(); err != nil {
				return err
			}
			// Rotated or replaced: finish the old file, go on with the
			// new one from its start.
			if pi, err := os.Stat(path); err == nil {
				fi, ferr := t.f.Stat()
				if ferr == nil && !os.SameFile(fi, pi) {
					if err := t.drain(); err != nil {
						return err
					}
					t.close()
					if err := newerRotated(dir, fi, fn); err != nil {
						return err
					}
					continue
				}
				if ferr == nil && fi.Size() < t.off {
					// Truncated in place: start over.
					if _, err := t.f.Seek(0, io.SeekStart); err != nil {
						return err
					}
					t.off, t.buf = 0, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(FollowPoll):
		}
	}
}

// newerRotated calls fn for the records of the rotated files newer than
// old (when several rotations happened between two polls).
func newerRotated(dir string, old os.FileInfo, fn func(Entry) error) error {
	fs := files(dir)
	for i, p := range fs[:len(fs)-1] {
		if fi, err := os.Stat(p); err == nil && os.SameFile(fi, old) {
			for _, q := range fs[i+1 : len(fs)-1] {
				if err := readFrom(q, 0, fn); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return nil
}

// readFrom calls fn for the records of the file p from offset off on.
func readFrom(p string, off int64, fn func(Entry) error) error {
	f, err := openRegular(p, os.O_RDONLY, 0)
	if err != nil {
		return nil // rotated out of reach meanwhile
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	_, err = readLines(f, fn)
	return err
}

// tail is the file Follow reads and the part of a line read so far.
type tail struct {
	f   *os.File
	off int64
	buf []byte
	fn  func(Entry) error
}

// drain reads what has been appended to t.f and calls fn for each
// complete line.
func (t *tail) drain() error {
	chunk := make([]byte, 64<<10)
	for {
		k, err := t.f.Read(chunk)
		t.off += int64(k)
		t.buf = append(t.buf, chunk[:k]...)
		for {
			i := bytes.IndexByte(t.buf, '\n')
			if i < 0 {
				break
			}
			line := t.buf[:i]
			t.buf = t.buf[i+1:]
			if e, ok := decode(line); ok {
				if err := t.fn(e); err != nil {
					return err
				}
			}
		}
		if err == io.EOF || k == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (t *tail) close() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
	t.buf = nil
}
