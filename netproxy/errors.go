package netproxy

import (
	"errors"

	"github.com/corralhq/corral/netproxy/forward"
)

// Sentinel errors of the package, returned wrapped; match them with
// errors.Is.
var (
	// ErrInvalidPattern means a [Policy] entry is malformed. The wrapping
	// error quotes the entry and says what is wrong with it.
	ErrInvalidPattern = errors.New("invalid network allowlist entry")

	// ErrLocalTarget means the default dialer refused a connection because
	// an allowed host name resolved to a loopback, link-local, unspecified
	// or multicast address, or to an address assigned to one of this
	// machine's interfaces (see [Options.Dial]); the wrapping error names
	// the address and its kind. The proxies treat it as a policy refusal
	// (403 or SOCKS5 reply 0x02, logged as network.denied) and tell the
	// client only that the host resolves to a local address.
	ErrLocalTarget = errors.New("host name resolves to a local address of this machine")

	// ErrNotLoopback means a forwarder was asked to listen on an address
	// that is not a loopback address (the same value as
	// forward.ErrNotLoopback).
	ErrNotLoopback = forward.ErrNotLoopback
)
