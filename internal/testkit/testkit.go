// Package testkit holds small helpers that tests of several packages
// share: a hash of a directory tree (to prove a host tree unchanged) and a
// buffer that collects log records written from many goroutines.
package testkit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TreeHash returns a hex SHA-256 over every entry below dir, in
// filepath.WalkDir's (lexical) order: its relative path, mode, and a
// regular file's content or a symlink's target. Ownership and times are
// left out (a read changes atime). A walk error fails the test.
func TreeHash(t testing.TB, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Write([]byte(rel + "\x00" + fi.Mode().String() + "\x00"))
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			tg, _ := os.Readlink(p)
			h.Write([]byte(tg))
		}
		h.Write([]byte{0})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// LogBuf is an io.Writer for a slog handler that collects what is logged,
// safe for concurrent writes; String returns all of it.
type LogBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (l *LogBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *LogBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
