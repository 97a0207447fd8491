//go:build !linux

package seccomp

import (
	"fmt"
	"os"
	"runtime"
)

// File returns an error wrapping [ErrUnsupported]: the memfd for bwrap
// exists only on Linux.
func File(opts Options) (*os.File, error) { return nil, unsupportedOS() }

// Install returns an error wrapping [ErrUnsupported]: seccomp(2) exists
// only on Linux.
func Install(opts Options) error { return unsupportedOS() }

// Probe returns an error wrapping [ErrUnsupported]: seccomp(2) exists only
// on Linux.
func Probe() error { return unsupportedOS() }

func unsupportedOS() error {
	return fmt.Errorf("%w: seccomp is a Linux feature, not available on %s", ErrUnsupported, runtime.GOOS)
}
