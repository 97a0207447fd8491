// Package pathres resolves host paths for one sandbox plan, looking each
// lstat(2), readlink(2) and resolved path up once: a plan resolves the
// same prefixes (the home directory, /run, /var, the working directory)
// dozens of times, and filepath.EvalSymlinks lstat's every component of
// every path afresh.
//
// A Resolver is one instant of the host's state: it lives for one plan
// and is dropped with it, never kept between commands, so a symlink
// swapped between two commands is judged afresh by the next plan. Within
// a plan, a change made on the host after a path was first looked at is
// not seen (the plan reads the host once, as one snapshot).
//
// Its answers are filepath.EvalSymlinks's, errors included (its walk is
// the standard library's, path/filepath/symlink.go, over the memo):
// relative targets, "..", chains, loops and the 255-link limit, ENOTDIR
// for a path through a file, a dangling link's lstat error. Relative
// paths depend on the working directory, so they are not memoized.
package pathres

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Resolver memoizes the host's file-system answers for one plan. A nil
// *Resolver is valid and memoizes nothing (each call is the os or
// filepath function's), for callers outside a plan. It is safe for
// concurrent use.
type Resolver struct {
	mu    sync.Mutex
	lstat map[string]answer[fs.FileInfo]
	stat  map[string]answer[fs.FileInfo]
	link  map[string]answer[string]
	eval  map[string]answer[string]
	dirs  map[string]answer[[]fs.DirEntry]
}

// answer is one memoized call's result.
type answer[T any] struct {
	v   T
	err error
}

// once returns m's answer for key, or f(key)'s, kept in m: the one lookup
// every memo of a Resolver makes (the lock is not held while f runs, so
// two callers may both ask the host; both answers are the host's).
func once[T any](mu *sync.Mutex, m map[string]answer[T], key string, f func(string) (T, error)) (T, error) {
	mu.Lock()
	a, ok := m[key]
	mu.Unlock()
	if ok {
		return a.v, a.err
	}
	v, err := f(key)
	mu.Lock()
	m[key] = answer[T]{v, err}
	mu.Unlock()
	return v, err
}

// New returns an empty Resolver, to be used for one plan only.
func New() *Resolver {
	return &Resolver{
		lstat: map[string]answer[fs.FileInfo]{},
		stat:  map[string]answer[fs.FileInfo]{},
		link:  map[string]answer[string]{},
		eval:  map[string]answer[string]{},
		dirs:  map[string]answer[[]fs.DirEntry]{},
	}
}

// memo reports whether path's answers may be kept: r is not nil and
// path is absolute (a relative one depends on the working directory).
func (r *Resolver) memo(path string) bool { return r != nil && filepath.IsAbs(path) }

// Lstat is os.Lstat, looked up once per absolute path.
func (r *Resolver) Lstat(path string) (fs.FileInfo, error) {
	if !r.memo(path) {
		return os.Lstat(path)
	}
	return once(&r.mu, r.lstat, path, os.Lstat)
}

// Stat is os.Stat, looked up once per absolute path. It is Lstat's
// answer (shared with the walks of EvalSymlinks) where that is no symlink:
// stat(2) and lstat(2) of a path whose last component is not a symlink
// give the same answer, and where lstat(2) fails stat(2) fails alike (the
// error is given as os.Stat's). For a symlink it calls os.Stat, so magic
// links (/proc/self/fd/N) and the kernel's own errors (ELOOP) stay
// stat(2)'s.
func (r *Resolver) Stat(path string) (fs.FileInfo, error) {
	if !r.memo(path) {
		return os.Stat(path)
	}
	l, err := r.Lstat(path)
	if err == nil && l.Mode()&fs.ModeSymlink == 0 {
		return l, nil
	}
	if pe, ok := err.(*fs.PathError); ok {
		// lstat(2) failed on the way to the last component or on it, before
		// any symlink there is followed: stat(2) fails there alike.
		return nil, &fs.PathError{Op: "stat", Path: pe.Path, Err: pe.Err}
	}
	return once(&r.mu, r.stat, path, os.Stat)
}

// Glob is filepath.Glob; a pattern without meta characters (the only
// kind it memoizes) is Lstat's answer, as filepath.Glob's is.
func (r *Resolver) Glob(pattern string) ([]string, error) {
	if strings.ContainsAny(pattern, `*?[\`) {
		return filepath.Glob(pattern)
	}
	if _, err := r.Lstat(pattern); err != nil {
		return nil, nil
	}
	return []string{pattern}, nil
}

// ReadDir returns list(dir), called once per absolute dir: within a plan
// the home directory and the credential stores' parents are listed by
// more than one rule (list is dircache's ReadDir, which stats dir each
// call to see whether its kept listing still holds). The entries are
// shared between callers, which must not change them.
func (r *Resolver) ReadDir(dir string, list func(string) ([]fs.DirEntry, error)) ([]fs.DirEntry, error) {
	if !r.memo(dir) {
		return list(dir)
	}
	return once(&r.mu, r.dirs, dir, list)
}

// IsDir reports whether path is a directory, following symlinks (Stat).
func (r *Resolver) IsDir(path string) bool {
	st, err := r.Stat(path)
	return err == nil && st.IsDir()
}

// Readlink is os.Readlink, looked up once per absolute path.
func (r *Resolver) Readlink(path string) (string, error) {
	if !r.memo(path) {
		return os.Readlink(path)
	}
	return once(&r.mu, r.link, path, os.Readlink)
}

// EvalSymlinks is filepath.EvalSymlinks: path with every symlink
// resolved, cleaned; each absolute path's answer is looked up once, and
// the components it walks through are lstat'ed (and read, when links)
// once per Resolver.
func (r *Resolver) EvalSymlinks(path string) (string, error) {
	if r == nil {
		return filepath.EvalSymlinks(path)
	}
	if !r.memo(path) {
		return r.walk(path)
	}
	return once(&r.mu, r.eval, path, r.walk)
}

// errTooManyLinks is filepath.EvalSymlinks's error past 255 links (its
// text; the standard library makes a new one each time).
const errTooManyLinks = "EvalSymlinks: too many links"

// walk is path/filepath's walkSymlinks (Go 1.26, symlink.go) for Unix,
// with r's Lstat and Readlink for os.Lstat and os.Readlink. Keep it line
// for line with the original: TestEvalSymlinksAgrees holds them together.
func (r *Resolver) walk(path string) (string, error) {
	volLen := 0
	if volLen < len(path) && os.IsPathSeparator(path[volLen]) {
		volLen++
	}
	vol := path[:volLen]
	dest := vol
	linksWalked := 0
	for start, end := volLen, volLen; start < len(path); start = end {
		for start < len(path) && os.IsPathSeparator(path[start]) {
			start++
		}
		end = start
		for end < len(path) && !os.IsPathSeparator(path[end]) {
			end++
		}

		// The next path component is in path[start:end].
		if end == start {
			// No more path components.
			break
		} else if path[start:end] == "." {
			// Ignore path component ".".
			continue
		} else if path[start:end] == ".." {
			// Back up to previous component if possible.
			// Note that volLen includes any leading slash.

			// Set i to the index of the last slash in dest,
			// after the volume.
			var i int
			for i = len(dest) - 1; i >= volLen; i-- {
				if os.IsPathSeparator(dest[i]) {
					break
				}
			}
			if i < volLen || dest[i+1:] == ".." {
				// Either path has no slashes
				// or it ends in a ".." we had to keep.
				// Either way, keep this "..".
				if len(dest) > volLen {
					dest += string(os.PathSeparator)
				}
				dest += ".."
			} else {
				// Discard everything since the last slash.
				dest = dest[:i]
			}
			continue
		}

		// Ordinary path component. Add it to result.
		if len(dest) > 0 && !os.IsPathSeparator(dest[len(dest)-1]) {
			dest += string(os.PathSeparator)
		}
		dest += path[start:end]

		// Resolve symlink.
		fi, err := r.Lstat(dest)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if !fi.Mode().IsDir() && end < len(path) {
				return "", syscall.ENOTDIR
			}
			continue
		}

		// Found symlink.
		linksWalked++
		if linksWalked > 255 {
			return "", errors.New(errTooManyLinks)
		}
		link, err := r.Readlink(dest)
		if err != nil {
			return "", err
		}
		path = link + path[end:]

		if len(link) > 0 && os.IsPathSeparator(link[0]) {
			// Symlink to absolute path.
			dest = link[:1]
			end = 1
			vol = link[:1]
			volLen = 1
		} else {
			// Symlink to relative path; replace last
			// path component in dest.
			var i int
			for i = len(dest) - 1; i >= volLen; i-- {
				if os.IsPathSeparator(dest[i]) {
					break
				}
			}
			if i < volLen {
				dest = vol
			} else {
				dest = dest[:i]
			}
			end = 0
		}
	}
	return filepath.Clean(dest), nil
}
