//go:build linux && !amd64

package bwrap

// injection is not implemented on this architecture: the allowlist
// profile starts bwrap through nsenter(1).
type injection struct{}

func startInjection(int) (*injection, error)   { return nil, errJoinUnsupported }
func (*injection) scratch() uintptr            { return 0 }
func (*injection) write(uintptr, []byte) error { return errJoinUnsupported }
func (*injection) finish() error               { return nil }
func (*injection) batch(...[]uintptr) ([]uintptr, []error, error) {
	return nil, nil, errJoinUnsupported
}

// canJoinByInjection reports whether joinNamespaces is implemented here.
const canJoinByInjection = false
