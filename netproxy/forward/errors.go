package forward

import "errors"

// ErrNotLoopback means a forwarder was asked to listen on an address that
// is not a loopback address. Match it with errors.Is.
var ErrNotLoopback = errors.New("forwarder listen address is not loopback")
