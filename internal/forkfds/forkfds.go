// Package forkfds tells apart the two ways a process start fails with
// "fork/exec PATH: bad file descriptor" on Linux, so that corral reports
// each for what it is.
//
// Go's child places the descriptors it is given (exec.Cmd's Stdin, Stdout,
// Stderr and ExtraFiles) with dup3(2), first moving them above the highest
// of them (syscall/exec_linux.go, forkAndExecInChild1: nextfd is that
// highest number plus one). When one of them sits at the top of the
// descriptor table, at RLIMIT_NOFILE-1, that target lies beyond the limit
// and dup3 fails with EBADF, which os/exec reports as is. That is a full
// table (EMFILE), a passing failure, and not a descriptor closed twice
// (golang/go#61751 is the same shuffle; no Go release avoids it). The
// other way, a descriptor closed while it was being passed, is a bug, and
// must stay visible as EBADF.
package forkfds

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// Start starts cmd and returns cmd.Start's error as [Explain] words it.
func Start(cmd *exec.Cmd) error {
	return Explain(cmd, cmd.Start())
}

// Explain returns err, the error of cmd.Start, unchanged unless it is a
// fork/exec EBADF while every file cmd passes is still open: then the
// child ran out of descriptor numbers below the open-files limit while
// placing them, and the error returned wraps syscall.EMFILE instead (so
// sandbox.IsTransient takes it for the passing failure it is) and says so.
// A file that is closed keeps the EBADF: that is a real use after close.
func Explain(cmd *exec.Cmd, err error) error {
	var pe *fs.PathError
	if err == nil || !errors.As(err, &pe) || pe.Op != "fork/exec" || !errors.Is(pe.Err, syscall.EBADF) {
		return err
	}
	files := passed(cmd)
	for _, f := range files {
		if !isOpen(f) {
			return err
		}
	}
	var lim unix.Rlimit
	limit := "the open-files limit"
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		limit = fmt.Sprintf("the open-files limit (%d)", lim.Cur)
	}
	return &fs.PathError{Op: pe.Op, Path: pe.Path, Err: &tableFull{limit: limit}}
}

// tableFull is a start that failed for a full descriptor table: its
// message says what happened, and it matches syscall.EMFILE.
type tableFull struct {
	limit string // "the open-files limit (N)"
}

func (e *tableFull) Error() string {
	return fmt.Sprintf("too many open files: %s left no room to place the descriptors passed to the child (Go reports this as \"bad file descriptor\")", e.limit)
}

// Unwrap returns syscall.EMFILE.
func (e *tableFull) Unwrap() error { return syscall.EMFILE }

// passed returns the *os.File values cmd hands its child.
func passed(cmd *exec.Cmd) []*os.File {
	var out []*os.File
	for _, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		if f, ok := s.(*os.File); ok && f != nil {
			out = append(out, f)
		}
	}
	for _, f := range cmd.ExtraFiles {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}

// isOpen reports whether f is open, both as an *os.File and as a
// descriptor number the kernel knows (fcntl F_GETFD).
func isOpen(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		_, ferr = unix.FcntlInt(fd, unix.F_GETFD, 0)
	}); err != nil {
		return false
	}
	return ferr == nil
}
