package netproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// hostAddrsTTL is how long the list of this machine's own addresses is
// reused before it is read again: interfaces come and go (a container
// network, a VPN), so the list is kept for a few seconds only.
const hostAddrsTTL = 2 * time.Second

// errHostAddrs means the default dialer could not list this machine's
// interface addresses, so it could not tell whether a resolved address is
// one of them, and refused the connection (it fails closed).
var errHostAddrs = errors.New("cannot list this machine's interface addresses to check the target against them")

// guardedDialer returns the default [Options.Dial]: see there. r resolves
// names; nil means net.DefaultResolver.
func guardedDialer(r *net.Resolver) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{KeepAlive: 30 * time.Second, Resolver: r}
		host, _, err := net.SplitHostPort(addr)
		if _, isIP := parseIP(host); err != nil || !isIP {
			// The check runs on each address the name resolved to, just
			// before connecting to it, so a second answer (DNS
			// rebinding) cannot get past it.
			d.ControlContext = refuseLocal
		}
		return d.DialContext(ctx, network, addr)
	}
}

// refuseLocal is a net.Dialer control function that refuses resolved
// addresses on which only this machine itself (or its link) listens:
// loopback, link-local, unspecified and multicast addresses, and every
// address assigned to one of this machine's interfaces (its LAN address,
// a docker0 bridge address, ...), where services bound to 0.0.0.0 listen.
// The refusal wraps [ErrLocalTarget]; when the interfaces cannot be
// listed, the error wraps errHostAddrs instead and the dial fails too.
func refuseLocal(_ context.Context, _, address string, _ syscall.RawConn) error {
	return hostAddrs.refuse(address)
}

// refuse is refuseLocal with c as the list of this machine's addresses.
func (c *addrCache) refuse(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return err
	}
	a := ap.Addr().Unmap().WithZone("")
	if kind := localKind(a); kind != "" {
		return fmt.Errorf("%w: %s is %s", ErrLocalTarget, a, kind)
	}
	own, err := c.has(a)
	if err != nil {
		return err
	}
	if own {
		return fmt.Errorf("%w: %s is assigned to an interface of this machine", ErrLocalTarget, a)
	}
	return nil
}

// localKind names the class of special-purpose address a is in, or
// returns "" when it is none of those refuseLocal refuses by class.
func localKind(a netip.Addr) string {
	switch {
	case a.IsLoopback():
		return "a loopback address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a.IsUnspecified():
		return "the unspecified address"
	case a.IsMulticast():
		return "a multicast address"
	}
	return ""
}

// hostAddrs is the cache of this machine's interface addresses that
// refuseLocal consults; it is shared by every server of the process.
var hostAddrs = &addrCache{list: net.InterfaceAddrs, ttl: hostAddrsTTL}

// addrCache holds the set of addresses list returns, read again when it is
// older than ttl. It is safe for concurrent use.
type addrCache struct {
	list func() ([]net.Addr, error)
	ttl  time.Duration

	mu    sync.Mutex
	read  time.Time // when addrs was listed
	addrs map[netip.Addr]struct{}
}

// has reports whether a (unmapped, without zone) is one of the listed
// addresses. A failure to list them is returned, wrapping errHostAddrs,
// and is not cached: the next call tries again.
func (c *addrCache) has(a netip.Addr) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.addrs == nil || time.Since(c.read) >= c.ttl {
		list, err := c.list()
		if err != nil {
			c.addrs = nil
			return false, fmt.Errorf("%w: %w", errHostAddrs, err)
		}
		m := make(map[netip.Addr]struct{}, len(list))
		for _, x := range list {
			var ip net.IP
			switch x := x.(type) {
			case *net.IPNet:
				ip = x.IP
			case *net.IPAddr:
				ip = x.IP
			}
			if b, ok := netip.AddrFromSlice(ip); ok {
				m[b.Unmap()] = struct{}{}
			}
		}
		c.addrs, c.read = m, time.Now()
	}
	_, ok := c.addrs[a]
	return ok, nil
}

// reasonLocalTarget is what a client is told when the default dialer
// refused its allowed host name with [ErrLocalTarget].
const reasonLocalTarget = "resolves to a local address of this machine"

// failureReason is the short reason told to the client for an upstream
// failure: the category of err, never its text, which can name the
// host's resolver and addresses (that goes to the log).
func failureReason(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.Is(err, ErrLocalTarget):
		return reasonLocalTarget
	case errors.Is(err, errHostAddrs):
		return "the proxy cannot check the address (see its log)"
	case errors.As(err, &dnsErr):
		switch {
		case dnsErr.IsNotFound:
			return "no such host"
		case dnsErr.IsTimeout:
			return "name lookup timed out"
		}
		return "name lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "unreachable"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the host"
	case errors.As(err, new(*tls.CertificateVerificationError)), errors.As(err, new(x509.UnknownAuthorityError)),
		errors.As(err, new(x509.HostnameError)), errors.As(err, new(x509.CertificateInvalidError)):
		// A host of a secret, whose TLS corral's proxy ends and opens
		// again: it checks the host's certificate against the host
		// machine's CAs (Go's crypto/x509 on Linux: SSL_CERT_FILE,
		// SSL_CERT_DIR, else /etc/ssl/certs).
		return "its certificate is not trusted by corral's proxy (" + certReason(err) + "); for a private CA, add it to the host's CAs (update-ca-certificates) or give corral SSL_CERT_FILE"
	}
	return "connection failed"
}

// certReason names what is wrong with a certificate, shortly.
func certReason(err error) string {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(err, &ua):
		return "signed by an unknown authority"
	case errors.As(err, &he):
		return "issued for another name"
	case errors.As(err, &ci) && ci.Reason == x509.Expired:
		return "expired or not yet valid"
	}
	return "it does not verify"
}
