package netproxy

import "errors"

// Sentinel errors of the package, returned wrapped; match them with
// errors.Is.
var (
	// ErrInvalidPattern means a [Policy] entry is malformed. The wrapping
	// error quotes the entry and says what is wrong with it.
	ErrInvalidPattern = errors.New("invalid network allowlist entry")

	// ErrLocalTarget means the default dialer refused a connection because
	// an allowed host name resolved to a loopback, link-local, unspecified
	// or multicast address (see [Options.Dial]). The proxies treat it as a
	// policy refusal.
	ErrLocalTarget = errors.New("host resolves to a loopback or link-local address")

	// ErrNotLoopback means a forwarder was asked to listen on an address
	// that is not a loopback address.
	ErrNotLoopback = errors.New("forwarder listen address is not loopback")
)
