package netproxy

// A minimal SOCKS5 server (RFC 1928): the "no authentication required"
// method and the CONNECT command only, which is all a proxy-aware client
// needs for TCP egress. It is written here because no maintained SOCKS5
// server library is served by the module proxy this project can use:
// github.com/things-go/go-socks5, github.com/wzshiming/socks5 and
// github.com/txthinking/socks5 are refused, and github.com/armon/go-socks5
// is served only as an untagged 2016 snapshot that resolves the name before
// applying its rules (a DNS query for every refused host), sets no
// deadline on the handshake and cannot be shut down with its connections.
// golang.org/x/net has only a client.
//
// Every read is of an exact, bounded length (at most 255 bytes for a
// domain name), the whole handshake runs under Options.HeaderTimeout, and
// nothing is buffered, so the connection is relayed as is once the reply
// has been sent.

import (
	"context"
	"encoding/binary"
	"errors"
	"github.com/corralhq/corral/netproxy/internal/relay"
	"github.com/corralhq/corral/secrets"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// Protocol constants of RFC 1928.
const (
	socksVersion5 = 0x05 // section 3, VER

	socksMethodNoAuth       = 0x00 // section 3, NO AUTHENTICATION REQUIRED
	socksMethodNoAcceptable = 0xff // section 3, NO ACCEPTABLE METHODS

	socksCmdConnect = 0x01 // section 4, CMD

	socksAtypIPv4   = 0x01 // section 5, ATYP
	socksAtypDomain = 0x03
	socksAtypIPv6   = 0x04

	// Section 6, REP.
	socksRepSucceeded          = 0x00
	socksRepGeneralFailure     = 0x01
	socksRepNotAllowed         = 0x02 // connection not allowed by ruleset
	socksRepNetUnreachable     = 0x03
	socksRepHostUnreachable    = 0x04
	socksRepConnRefused        = 0x05
	socksRepCmdNotSupported    = 0x07
	socksRepAddrTypeNotSupport = 0x08
)

// errSOCKSHandshake marks a malformed handshake; the connection is closed
// without a reply when no reply format applies.
var errSOCKSHandshake = errors.New("malformed SOCKS5 handshake")

// socksRequest is a parsed CONNECT request (RFC 1928 section 4).
type socksRequest struct {
	host string // domain name as sent, or the address in text form
	port string
}

// serveSOCKS handles one SOCKS5 client connection.
func (s *Server) serveSOCKS(c net.Conn) {
	if !s.track.Add(c) {
		_ = c.Close()
		return
	}
	defer s.track.Remove(c)
	handedOver := false
	defer func() {
		if !handedOver {
			lingerClose(c)
		}
	}()

	_ = c.SetDeadline(time.Now().Add(s.headerTimeout))
	req, rep, err := readSOCKSHandshake(c)
	if err != nil {
		s.log.LogAttrs(s.ctx, slog.LevelDebug, "network.bad_request",
			slog.String("session", s.session), slog.String("proto", "socks5"),
			slog.String("error", err.Error()))
		if rep != 0 {
			_ = writeSOCKSReply(c, rep)
		}
		return
	}
	if !s.check(s.ctx, "socks5", req.host, req.port) {
		_ = writeSOCKSReply(c, socksRepNotAllowed)
		return
	}
	if len(s.secrets) > 0 && secrets.Declares(s.secrets, req.host) {
		// A secret's host is reached through the HTTP proxy only, where
		// its answers are scrubbed: a blind tunnel to it could bring back
		// a real value the host keeps (issue 26).
		s.log.LogAttrs(s.ctx, slog.LevelWarn, "secret.socks_refused",
			slog.String("session", s.session), slog.String("host", req.host), slog.String("port", req.port))
		_ = writeSOCKSReply(c, socksRepNotAllowed)
		return
	}
	// The dial has its own timeout; the client must not be cut off while
	// it runs.
	_ = c.SetDeadline(time.Time{})
	target, err := s.dial(s.ctx, req.host, req.port)
	_ = c.SetWriteDeadline(time.Now().Add(s.headerTimeout))
	if err != nil {
		if errors.Is(err, ErrLocalTarget) {
			s.logDenied(s.ctx, "socks5", req.host, req.port, err.Error())
		} else {
			s.logUpstreamFailed(s.ctx, "socks5", req.host, req.port, err)
		}
		// The reply is a code only: nothing of the error's text (the
		// resolver's address, the host's addresses) reaches the client.
		_ = writeSOCKSReply(c, socksDialReply(err))
		return
	}
	if !s.track.Add(target) {
		_ = target.Close()
		return
	}
	defer s.track.Remove(target)
	if err := writeSOCKSReply(c, socksRepSucceeded); err != nil {
		_ = target.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	handedOver = true
	relay.Pipe(c, target)
}

// readSOCKSHandshake reads the method negotiation (RFC 1928 section 3),
// answers it, and reads the request (section 4). On failure rep is the
// reply code to send, or 0 when the client gets no reply (a wrong version
// byte, a read error, or after a refused method negotiation, which has
// been answered already).
func readSOCKSHandshake(c net.Conn) (req socksRequest, rep byte, err error) {
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return req, 0, err
	}
	if hdr[0] != socksVersion5 {
		return req, 0, errors.Join(errSOCKSHandshake, errors.New("version byte "+strconv.Itoa(int(hdr[0]))))
	}
	methods := make([]byte, hdr[1]) // NMETHODS is one byte: at most 255
	if _, err := io.ReadFull(c, methods); err != nil {
		return req, 0, err
	}
	method := byte(socksMethodNoAcceptable)
	for _, m := range methods {
		if m == socksMethodNoAuth {
			method = socksMethodNoAuth
		}
	}
	if _, err := c.Write([]byte{socksVersion5, method}); err != nil {
		return req, 0, err
	}
	if method != socksMethodNoAuth {
		return req, 0, errors.Join(errSOCKSHandshake, errors.New("client offers no method without authentication"))
	}

	// VER CMD RSV ATYP
	var rh [4]byte
	if _, err := io.ReadFull(c, rh[:]); err != nil {
		return req, 0, err
	}
	if rh[0] != socksVersion5 {
		return req, socksRepGeneralFailure, errors.Join(errSOCKSHandshake, errors.New("request version byte "+strconv.Itoa(int(rh[0]))))
	}
	if rh[1] != socksCmdConnect {
		return req, socksRepCmdNotSupported, errors.Join(errSOCKSHandshake, errors.New("command "+strconv.Itoa(int(rh[1]))+" not supported"))
	}
	switch rh[3] {
	case socksAtypIPv4:
		var a [4]byte
		if _, err := io.ReadFull(c, a[:]); err != nil {
			return req, 0, err
		}
		req.host = netip.AddrFrom4(a).String()
	case socksAtypIPv6:
		var a [16]byte
		if _, err := io.ReadFull(c, a[:]); err != nil {
			return req, 0, err
		}
		req.host = netip.AddrFrom16(a).String()
	case socksAtypDomain:
		var n [1]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return req, 0, err
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(c, name); err != nil {
			return req, 0, err
		}
		req.host = string(name)
	default:
		return req, socksRepAddrTypeNotSupport, errors.Join(errSOCKSHandshake, errors.New("address type "+strconv.Itoa(int(rh[3]))+" not supported"))
	}
	var p [2]byte
	if _, err := io.ReadFull(c, p[:]); err != nil {
		return req, 0, err
	}
	req.port = strconv.Itoa(int(binary.BigEndian.Uint16(p[:])))
	return req, 0, nil
}

// lingerClose closes a connection the server gives up on, after shutting
// its write side and reading (and dropping) what the client still sends,
// for at most lingerTime and lingerBytes. Closing a socket with unread
// input makes the kernel reset the connection, and the client would then
// lose the reply it was sent.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.Copy(io.Discard, io.LimitReader(c, lingerBytes))
	}
	_ = c.Close()
}

const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 4 << 10
)

// writeSOCKSReply sends a reply (RFC 1928 section 6). BND.ADDR and
// BND.PORT are sent as 0.0.0.0:0: the address the server connected from
// is a host detail the sandbox has no use for.
func writeSOCKSReply(c net.Conn, rep byte) error {
	_, err := c.Write([]byte{socksVersion5, rep, 0x00, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// socksDialReply maps a dial error to the nearest reply code of RFC 1928
// section 6.
func socksDialReply(err error) byte {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, ErrLocalTarget):
		return socksRepNotAllowed
	case errors.Is(err, syscall.ECONNREFUSED):
		return socksRepConnRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return socksRepNetUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH), errors.As(err, &dnsErr),
		errors.Is(err, context.DeadlineExceeded):
		return socksRepHostUnreachable
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return socksRepHostUnreachable
		}
		return socksRepGeneralFailure
	}
}
