package seccomp

import (
	"fmt"

	"github.com/corralhq/corral/sandbox"
)

// ErrUnsupported is wrapped by every error that means corral's filter cannot
// be had on this machine: an architecture other than amd64 and arm64, an
// operating system other than Linux, or a kernel without seccomp filters or
// memfd_create. It also matches [sandbox.ErrUnavailable], so front ends map
// it like any other missing sandbox. A command must not be run unfiltered
// when it is returned.
var ErrUnsupported = fmt.Errorf("seccomp filter unsupported: %w", sandbox.ErrUnavailable)
