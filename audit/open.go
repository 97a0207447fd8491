package audit

import (
	"fmt"
	"os"
	"syscall"
)

// ErrNotRegular is wrapped by every open of an audit file (the log, its
// rotated copies, the rotation lock) that finds something other than a
// regular file there: a FIFO would block the open, or every write, for
// good, and a device such as /dev/zero never ends a read. A constant: no
// allocation at init (cmd/corral's TestInitAllocations).
const ErrNotRegular = constError("not a regular file")

// constError is an error that can be a constant.
type constError string

func (e constError) Error() string { return string(e) }

// openRegular opens path with flag, adding O_NONBLOCK (an open of a FIFO
// returns at once instead of waiting for its other end; fifo(7)) and
// O_CLOEXEC, and refuses, closing it, anything fstat(2) does not call a
// regular file, symbolic links followed (a link to /dev/zero is a
// device). O_NONBLOCK changes nothing for a regular file's reads and
// writes.
func openRegular(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		// A FIFO without a reader refuses a write-only open (ENXIO):
		// say what is there.
		if fi, serr := os.Stat(path); serr == nil && !fi.Mode().IsRegular() {
			return nil, notRegular(path, fi.Mode())
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, notRegular(path, fi.Mode())
	}
	return f, nil
}

func notRegular(path string, mode os.FileMode) error {
	return fmt.Errorf("%s: %w (%s): corral reads and writes its audit log only in regular files; remove it", path, ErrNotRegular, mode.Type())
}
