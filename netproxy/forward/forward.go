package forward

import (
	"context"
	"errors"
	"fmt"
	"github.com/corralhq/corral/netproxy/internal/relay"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Forwarder relays connections accepted on a loopback TCP address to a
// Unix socket, byte for byte. Inside a sandbox whose network namespace
// holds only loopback, it makes a proxy socket bound into the sandbox
// reachable at an address ordinary proxy settings can name
// ("http://127.0.0.1:3128"). Create it with [ListenForward]; its methods
// are safe for concurrent use.
type Forwarder struct {
	ln     net.Listener
	socket string
	track  relay.Tracker
	ctx    context.Context // canceled by Close; bounds socket dials
	cancel context.CancelFunc

	closeOnce sync.Once
	closeErr  error
}

// unixDialTimeout bounds the connection to the proxy socket. The socket is
// local, so this only matters if the proxy has stopped accepting.
const unixDialTimeout = 10 * time.Second

// ListenForward listens on listen, a TCP "host:port" whose host is a
// loopback IP address or "localhost" (port 0 picks a free port; see
// [Forwarder.Addr]), and returns a Forwarder that will relay to the Unix
// socket at path socket once [Forwarder.Serve] runs. A non-loopback
// address is refused with [ErrNotLoopback], so that the proxy is never
// exposed beyond the machine by mistake. The socket need not exist yet: it
// is dialled once per accepted connection.
func ListenForward(listen, socket string) (*Forwarder, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("netproxy: forward address %q: %w", listen, err)
	}
	if a, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !a.IsLoopback()) {
		return nil, fmt.Errorf("netproxy: forward address %q: %w", listen, ErrNotLoopback)
	}
	if socket == "" {
		return nil, errors.New("netproxy: forward socket path is empty")
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("netproxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Forwarder{ln: ln, socket: socket, ctx: ctx, cancel: cancel}, nil
}

// Addr returns the TCP address the forwarder listens on, with the port
// chosen when listen asked for port 0.
func (f *Forwarder) Addr() net.Addr { return f.ln.Addr() }

// Serve accepts and relays connections until ctx is done or
// [Forwarder.Close] is called, then closes every relayed connection and
// returns nil once all of them have ended. A client whose connection to
// the socket fails is disconnected; other clients are not affected.
func (f *Forwarder) Serve(ctx context.Context) error {
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
			_ = f.Close()
		case <-stop:
		}
	}()
	relay.AcceptLoop(f.ln, &f.track, f.handle)
	_ = f.Close()
	return nil
}

// Close stops the listener and ends every relayed connection. It returns
// once the connection goroutines have ended; later calls return the first
// call's result.
func (f *Forwarder) Close() error {
	f.closeOnce.Do(func() {
		f.cancel()
		err := f.ln.Close()
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		f.track.Shutdown()
		f.closeErr = err
	})
	return f.closeErr
}

func (f *Forwarder) handle(c net.Conn) {
	d := net.Dialer{Timeout: unixDialTimeout}
	u, err := d.DialContext(f.ctx, "unix", f.socket)
	if err != nil {
		_ = c.Close()
		return
	}
	if !f.track.Add(c, u) {
		_ = c.Close()
		_ = u.Close()
		return
	}
	defer f.track.Remove(c, u)
	relay.Pipe(c, u)
}

// Forward listens on listen and relays each connection to the Unix socket
// socket until ctx is done: [ListenForward] followed by [Forwarder.Serve].
// It returns an error only when it cannot listen.
func Forward(ctx context.Context, listen, socket string) error {
	f, err := ListenForward(listen, socket)
	if err != nil {
		return err
	}
	return f.Serve(ctx)
}
