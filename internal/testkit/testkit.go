// Package testkit holds small helpers that tests of several packages
// share: a hash of a directory tree (to prove a host tree unchanged), a
// buffer that collects log records written from many goroutines, and a
// JDK with a trust store of its own (the bwrap and docker Java tests),
// random letters and digits for the secrets tests' real values, a
// command whose stdout and stderr must arrive in the order written, and
// a server that reflects the credential it gets (Reflect) with the
// checks of what a sandbox then sees (CheckReflect).
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

// OwnCacertsJDK makes dir a JDK of home's whose lib/security/cacerts is
// a file of its own (a copy of cacerts, such as the host's Java trust
// store, which lacks corral's CA), as an unpacked JDK tarball has, and
// returns dir. Java
// takes java.home from where libjvm.so lies (symlinks resolved), so the
// launcher, libjli.so and libjvm.so are copied (about 30 MB); everything
// else is a symlink to home's.
func OwnCacertsJDK(t *testing.T, home, dir, cacerts string) string {
	t.Helper()
	copied := map[string]bool{"bin/java": true, "lib/libjli.so": true, "lib/server/libjvm.so": true}
	real := map[string]bool{"bin": true, "lib": true, "lib/server": true, "lib/security": true}
	var walk func(rel string)
	walk = func(rel string) {
		if err := os.MkdirAll(filepath.Join(dir, rel), 0o755); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(filepath.Join(home, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range ents {
			r := filepath.Join(rel, en.Name())
			src, dst := filepath.Join(home, r), filepath.Join(dir, r)
			switch {
			case real[r]:
				walk(r)
			case copied[r] || r == "lib/security/cacerts":
				if r == "lib/security/cacerts" {
					src = cacerts
				}
				data, err := os.ReadFile(src)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, data, 0o755); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.Symlink(src, dst); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	walk(".")
	return dir
}
