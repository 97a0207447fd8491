// Package startdir keeps the directory corral was started in after corral
// has left it (issue 26). corral's working directory is usually the
// project, which its sandboxes can write: a crash of a process with a
// relative kernel.core_pattern ("core") writes the core there, and a
// core of corral holds the real values of secrets. So corral's CLI leaves
// it at once ([Leave], to "/"), and everything that took a path relative
// to where corral was started resolves it here ([Abs], [Get]) instead of
// against the process's working directory.
//
// A program that embeds corral and never calls Leave keeps the usual
// meaning: Get is os.Getwd and Abs is filepath.Abs.
package startdir

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

var (
	mu     sync.Mutex
	dir    string
	dirErr error
	left   bool
)

// Leave records the current directory (as os.Getwd gives it, so a
// symlinked path the shell was in is kept) and changes the process's
// working directory to safe, which must be absolute. Called again, it
// keeps the first record. A current directory that cannot be found (it
// was removed) is no error here: Get returns that error later, to what
// needs it. Errors: safe is relative or cannot be entered.
func Leave(safe string) error {
	mu.Lock()
	defer mu.Unlock()
	if !filepath.IsAbs(safe) {
		return fmt.Errorf("startdir: %q is not an absolute path", safe)
	}
	if !left {
		dir, dirErr = os.Getwd()
		left = true
	}
	return os.Chdir(safe)
}

// Get returns the directory the process was started in: the one Leave
// recorded, else the current directory (os.Getwd). Errors are
// os.Getwd's.
func Get() (string, error) {
	mu.Lock()
	d, err, ok := dir, dirErr, left
	mu.Unlock()
	if ok {
		return d, err
	}
	return os.Getwd()
}

// Abs returns p made absolute against Get (cleaned, as filepath.Abs
// does); an absolute p is only cleaned.
func Abs(p string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	d, err := Get()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, p), nil
}
