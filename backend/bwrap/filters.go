package bwrap

import (
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/seccomp"
)

// filterCache keeps one sealed memfd per seccomp.Options (package seccomp
// already caches the program's bytes; creating, writing and sealing a
// memfd for every command is what this saves). Each command gets its own
// open of the memfd, through /proc/self/fd: a new open file description,
// so its offset is its own (bwrap reads the filter from the offset) and
// closing it leaves the cached one open. The seals (F_SEAL_WRITE, GROW,
// SHRINK, SEAL: memfd_create(2), fcntl(2) "File Sealing") are on the
// inode, so no open of it can change the bytes.
type filterCache struct {
	mu    sync.Mutex
	files map[seccomp.Options]*os.File
}

// open returns a fresh read-only open of the sealed filter for opts,
// positioned at 0; the caller closes it. Errors wrap seccomp.File's (the
// filter cannot be built) or name the reopen that failed.
func (c *filterCache) open(opts seccomp.Options) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.files[opts]
	if f == nil {
		nf, err := seccomp.File(opts)
		if err != nil {
			return nil, err
		}
		if c.files == nil {
			c.files = map[seccomp.Options]*os.File{}
		}
		c.files[opts], f = nf, nf
	}
	p := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		// No /proc to reopen through: a memfd of its own, as before the
		// cache.
		nf, ferr := seccomp.File(opts)
		if ferr != nil {
			return nil, fmt.Errorf("reopening the sealed seccomp memfd (%s: %v): %w", p, err, ferr)
		}
		return nf, nil
	}
	return os.NewFile(uintptr(fd), "corral-seccomp"), nil
}

// close closes the cached memfds; a later open makes new ones.
func (c *filterCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for k, f := range c.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.files, k)
	}
	return first
}
