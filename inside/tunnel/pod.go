package tunnel

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/netproxy/forward"
	"github.com/corralhq/corral/reexec"
)

func init() { reexec.Register(Mode, Main) }

// stdio is the exec's standard input and output as one connection.
type stdio struct {
	io.Reader
	io.Writer
}

// Close closes standard input only: standard output stays open until the
// process exits (containerd's CRI exec closes stdin once stdout ends, so
// the session's last writes must not race its end).
func (stdio) Close() error { return os.Stdin.Close() }

// Main is the pod side (Mode): see the package documentation. It returns
// 0 when the session ended (corral closed it or the exec stream broke),
// 125 when it could not start (a flag, a socket that cannot listen). It
// makes itself non-dumpable (prctl PR_SET_DUMPABLE 0), so the commands,
// which share its uid, cannot ptrace it or write into its descriptors.
func Main(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "corral-tunnel: "+format+"\n", a...)
		return 125
	}
	fs := flag.NewFlagSet("corral-tunnel", flag.ContinueOnError)
	dir := fs.String("dir", "", "`DIR` for http.sock and socks.sock")
	httpAddr := fs.String("http", "", "loopback `ADDR` of the HTTP proxy")
	socksAddr := fs.String("socks", "", "loopback `ADDR` of the SOCKS5 proxy")
	if err := fs.Parse(args); err != nil {
		return 125
	}
	if *dir == "" || *httpAddr == "" || *socksAddr == "" || fs.NArg() > 0 {
		return fail("usage: --dir DIR --http ADDR --socks ADDR")
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return fail("%v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}()
	type listener struct {
		ln   net.Listener
		kind Kind
	}
	var lns []listener
	for _, l := range []struct {
		name, addr string
		kind       Kind
	}{{HTTPSocketName, *httpAddr, KindHTTP}, {SOCKSSocketName, *socksAddr, KindSOCKS}} {
		path := filepath.Join(*dir, l.name)
		_ = os.Remove(path) // a socket of a tunnel before this one
		ln, err := net.Listen("unix", path)
		if err != nil {
			return fail("%v", err)
		}
		closers = append(closers, ln)
		lns = append(lns, listener{ln, l.kind})
		f, err := listenForward(l.addr, path)
		if err != nil {
			return fail("%s: %v", l.addr, err)
		}
		closers = append(closers, f)
		go func() { _ = f.Serve(ctx) }()
	}
	sess, err := yamux.Client(stdio{os.Stdin, os.Stdout}, config())
	if err != nil {
		return fail("%v", err)
	}
	closers = append(closers, sess)
	for _, l := range lns {
		go func() {
			for {
				c, err := l.ln.Accept()
				if err != nil {
					return
				}
				go func() {
					st, err := sess.Open()
					if err != nil {
						c.Close() // fail closed: the session is gone
						return
					}
					if _, err := st.Write([]byte{byte(l.kind)}); err != nil {
						st.Close()
						c.Close()
						return
					}
					Relay(c, st)
				}()
			}
		}()
	}
	st, err := sess.Open()
	if err != nil {
		return fail("announcing readiness: %v", err)
	}
	if _, err := st.Write([]byte{byte(KindReady)}); err != nil {
		return fail("announcing readiness: %v", err)
	}
	_ = st.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	select {
	case <-sess.CloseChan():
	case <-sigs:
	}
	return 0
}

// listenForward is forward.ListenForward, tried again for up to 30 s
// while the address is in use: the pod side of a tunnel whose stream
// broke may not have seen it yet (it exits at its next keepalive).
func listenForward(addr, socket string) (*forward.Forwarder, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		f, err := forward.ListenForward(addr, socket)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return f, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
