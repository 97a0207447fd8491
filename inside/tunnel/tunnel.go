// Package tunnel carries a pod's proxied connections to corral over one
// long-lived exec stream of the kubernetes backend, multiplexed with yamux
// (github.com/hashicorp/yamux, its spec.md), so the allowlist profile's
// proxy is reached without any route from the pod to corral's machine.
//
//	pod:   corral __corral-tunnel --dir /.corral-net
//	           --http 127.0.0.1:3128 --socks 127.0.0.1:1080
//	       listens on DIR/http.sock and DIR/socks.sock (where the docker
//	       container's forwarder finds corral's proxy sockets) and runs the
//	       forwarder of package forward in-process from the two TCP
//	       addresses to them; each accepted connection is a yamux stream
//	       whose first byte names the proxy (KindHTTP, KindSOCKS)
//	exec:  the stream's stdin and stdout carry the yamux session
//	corral: Host accepts the streams and connects each to its own egress
//	       proxy's socket (netproxy.Server), which applies the policy
//
// When the session breaks (the exec ends, either side closes it, a
// keepalive goes unanswered) the pod side exits and its listeners close:
// every proxied connection then fails (refused), and no other path is
// opened. containerd's CRI exec closes stdin as soon as stdout ends, so
// the pod side keeps stdout open for the whole session.
package tunnel

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Mode is the argument of corral's executable that runs the pod side
// (Main); registered with reexec by this package's init.
const Mode = "__corral-tunnel"

// Kind is a stream's first byte: what it carries.
type Kind byte

// Stream kinds.
const (
	// KindHTTP is a connection to the HTTP proxy (CONNECT, plain http://).
	KindHTTP Kind = 'h'
	// KindSOCKS is a connection to the SOCKS5 proxy.
	KindSOCKS Kind = 's'
	// KindReady is the pod side's announcement that both listeners are
	// up; the stream carries nothing else.
	KindReady Kind = 'r'
)

// Socket names in the pod side's directory: the same names as the
// host-side proxy's (netproxy.HTTPSocketName, netproxy.SOCKSSocketName),
// not imported to keep net/http out of the helper.
const (
	HTTPSocketName  = "http.sock"
	SOCKSSocketName = "socks.sock"
)

// Keepalive is the interval of yamux pings on both sides: a session
// whose peer does not answer within ConnectionWriteTimeout of one is
// closed, so a silently dead exec stream fails closed within about
// Keepalive + 10 s.
const Keepalive = 5 * time.Second

// config is the yamux configuration of both sides.
func config() *yamux.Config {
	c := yamux.DefaultConfig()
	c.KeepAliveInterval = Keepalive
	c.LogOutput = io.Discard
	return c
}

// Argv returns the pod side's argv: exe Mode --dir DIR --http HTTPADDR
// --socks SOCKSADDR (loopback TCP "host:port" each).
func Argv(exe, dir, httpAddr, socksAddr string) []string {
	return []string{exe, Mode, "--dir", dir, "--http", httpAddr, "--socks", socksAddr}
}

// Dialer connects a stream of kind k (KindHTTP or KindSOCKS) to the
// matching proxy.
type Dialer func(k Kind) (net.Conn, error)

// Host is corral's side of one tunnel. Safe for concurrent use.
type Host struct {
	sess  *yamux.Session
	dial  Dialer
	log   *slog.Logger
	ready chan struct{}
	once  sync.Once
}

// NewHost starts corral's side over conn (reading the exec's stdout,
// writing its stdin): every stream the pod opens is connected to
// dial(kind) and relayed until both directions end. log gets
// tunnel.stream_failed events (Debug). Errors are yamux's configuration
// errors.
func NewHost(conn io.ReadWriteCloser, dial Dialer, log *slog.Logger) (*Host, error) {
	sess, err := yamux.Server(conn, config())
	if err != nil {
		return nil, err
	}
	h := &Host{sess: sess, dial: dial, log: log, ready: make(chan struct{})}
	go h.accept()
	return h, nil
}

// Ready is closed once the pod side announced that it listens.
func (h *Host) Ready() <-chan struct{} { return h.ready }

// Done is closed when the session has ended.
func (h *Host) Done() <-chan struct{} { return h.sess.CloseChan() }

// Alive reports whether the session is still open.
func (h *Host) Alive() bool { return !h.sess.IsClosed() }

// Streams is the number of streams open now.
func (h *Host) Streams() int { return h.sess.NumStreams() }

// Close ends the session and every stream of it.
func (h *Host) Close() error { return h.sess.Close() }

func (h *Host) accept() {
	for {
		st, err := h.sess.Accept()
		if err != nil {
			return
		}
		go h.serve(st)
	}
}

// serve reads st's kind and relays it to its proxy.
func (h *Host) serve(st net.Conn) {
	var b [1]byte
	_ = st.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(st, b[:]); err != nil {
		st.Close()
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	k := Kind(b[0])
	if k == KindReady {
		h.once.Do(func() { close(h.ready) })
		st.Close()
		return
	}
	if k != KindHTTP && k != KindSOCKS {
		h.log.Debug("tunnel.stream_failed", "error", "unknown stream kind", "kind", int(k))
		st.Close()
		return
	}
	c, err := h.dial(k)
	if err != nil {
		h.log.Debug("tunnel.stream_failed", "kind", string(rune(k)), "error", err)
		st.Close()
		return
	}
	Relay(st, c)
}

// Relay copies a to b and b to a until both directions have ended,
// passing each end on as a half-close where the connection has one
// (CloseWrite; a yamux stream's Close is a half-close), then closes both.
func Relay(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
			return
		}
		if _, ok := dst.(*yamux.Stream); ok && err == nil {
			_ = dst.Close()
			return
		}
		// A failed direction ends both: nothing half-open is left.
		_ = a.Close()
		_ = b.Close()
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}
