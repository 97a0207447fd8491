// Package rmtree removes directory trees that tools made read-only: Go's
// module cache writes its directories 0555, so os.RemoveAll cannot empty
// them, and a cache or scratch directory that holds one would stay behind.
package rmtree

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// RemoveAll removes path and everything below it, as os.RemoveAll does;
// where that fails, it gives the owner write and search permission on
// every directory below path (never following a symlink: a tree a sandbox
// wrote may hold symlinks to anywhere) and tries again. A missing path is
// not an error. The error is the second attempt's.
func RemoveAll(path string) error {
	if os.RemoveAll(path) == nil {
		return nil
	}
	MakeWritable(path)
	return os.RemoveAll(path)
}

// Empty removes every entry of dir (as RemoveAll) and keeps dir itself,
// returning the bytes of the regular files that were there. A missing dir
// is empty. Errors name the entry that could not be removed; the other
// entries are removed all the same.
func Empty(dir string) (freed int64, err error) {
	ents, rerr := os.ReadDir(dir)
	if rerr != nil {
		if errors.Is(rerr, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, rerr
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		size := Size(p)
		if rerr := RemoveAll(p); rerr != nil {
			err = errors.Join(err, rerr)
			continue
		}
		freed += size
	}
	return freed, err
}

// Size returns the bytes of the regular files at or below path, not
// following symlinks; what cannot be read counts as nothing.
func Size(path string) int64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// MakeWritable adds the owner's read, write and search bits to every
// directory at or below path (not following symlinks), so that its entries
// can be removed. Errors are ignored: RemoveAll reports what still fails.
func MakeWritable(path string) {
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if d == nil || !d.IsDir() {
			return nil
		}
		if err != nil {
			return nil // could not be listed even so: left to RemoveAll's report
		}
		// Before WalkDir lists it, so a 0555 or 0000 directory can be.
		if info, ierr := d.Info(); ierr == nil && info.Mode().Perm()&0o700 != 0o700 {
			_ = os.Chmod(p, info.Mode().Perm()|0o700)
		}
		return nil
	})
}
