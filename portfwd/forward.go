package portfwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/forkfds"
)

// Options configure a Forward.
type Options struct {
	// HostPort is the port to listen on at 127.0.0.1 on the host; 0 picks
	// a free one.
	HostPort int
	// Exe is corral's executable, re-executed as the relay helper; empty
	// means os.Executable(). It must run reexec.Init first thing.
	Exe string
	// Log receives the forward's events; nil means slog.Default().
	Log *slog.Logger
}

// helperExitGrace is how long Close waits for the relay to exit on its own
// after its socket was closed before it kills it.
const helperExitGrace = 5 * time.Second

// Forward relays connections to a host loopback port into a sandbox's
// network namespace. It ends by Close, when the process whose namespace it
// entered exits, or when its relay helper dies; Done is closed then, and
// no listener or process of it is left.
type Forward struct {
	ln     *net.TCPListener
	target netip.AddrPort
	nsPID  int
	netNS  string
	cmd    *exec.Cmd
	log    *slog.Logger

	mu   sync.Mutex // guards sock against a send racing Close
	sock int        // corral's end of the descriptor-passing socket, -1 once closed

	pidfd     int
	stopWatch *os.File // closed by end to stop the watcher

	// dial, set by StartDial, makes each connection instead of a relay
	// (cmd is nil then); conns are the open ones, closed by end.
	dial       Dialer
	connsMu    sync.Mutex
	conns      map[io.Closer]struct{}
	helperDone chan struct{}
	done       chan struct{}
	once       sync.Once
	reason     string
}

// Start forwards 127.0.0.1:o.HostPort on the host to target inside the
// network namespace of process nsPID (a process of the sandbox; see
// NamespacePID). The relay helper enters that namespace through
// nsenter(1): a Go program is multi-threaded and may not setns(2) into a
// user namespace (setns(2): EINVAL for CLONE_NEWUSER in a multithreaded
// process), which a caller that is not root needs, because entering a
// network namespace takes CAP_SYS_ADMIN in the user namespace that owns
// it. nsenter is single-threaded and joins first the owning user
// namespace (found with the NS_GET_USERNS ioctl, ioctl_ns(2)), keeping
// corral's uid (--preserve-credentials), then the network namespace, and
// executes the helper. The ptrace gate's injection would do the same
// without nsenter but needs a process stopped at its exec and an
// architecture with injection; nsenter is simpler and the allowlist
// profile already relies on it. As root only the network namespace is
// entered (root holds CAP_SYS_ADMIN over every user namespace).
//
// Errors: the host port is taken, nsenter is missing, or the process is
// gone or cannot be entered; nothing is left behind then.
func Start(nsPID int, target netip.AddrPort, o Options) (_ *Forward, err error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	if o.HostPort < 0 || o.HostPort > 65535 {
		return nil, fmt.Errorf("host port %d is out of range 0-65535", o.HostPort)
	}
	exe := o.Exe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding corral's executable for the relay: %w", err)
		}
	}
	nsenter, err := locateNsenter()
	if err != nil {
		return nil, err
	}
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	// The pidfd pins the process's identity: the namespace opened below is
	// its own if it is still alive afterwards (pid reuse cannot fool it).
	pidfd, err := unix.PidfdOpen(nsPID, 0)
	if err != nil {
		return nil, fmt.Errorf("process %d of the sandbox: %w", nsPID, err)
	}
	closers = append(closers, func() { unix.Close(pidfd) })
	netns, err := os.Open("/proc/" + strconv.Itoa(nsPID) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("opening the network namespace of process %d: %w", nsPID, err)
	}
	closers = append(closers, func() { netns.Close() })
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return nil, fmt.Errorf("process %d of the sandbox ended: %w", nsPID, err)
	}
	files := []*os.File{nil} // descriptor 3: the helper's socket
	var args []string
	if os.Geteuid() != 0 {
		ufd, err := unix.IoctlRetInt(int(netns.Fd()), unix.NS_GET_USERNS)
		if err != nil {
			return nil, fmt.Errorf("finding the user namespace that owns process %d's network namespace: %w", nsPID, err)
		}
		userns := os.NewFile(uintptr(ufd), "userns")
		closers = append(closers, func() { userns.Close() })
		files = append(files, userns)
		args = append(args, "--preserve-credentials", "--user=/proc/self/fd/"+strconv.Itoa(2+len(files)))
	}
	files = append(files, netns)
	args = append(args, "--net=/proc/self/fd/"+strconv.Itoa(2+len(files)))

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating the relay's socket: %w", err)
	}
	closers = append(closers, func() { unix.Close(pair[0]) })
	child := os.NewFile(uintptr(pair[1]), "relay")
	defer child.Close()
	files[0] = child

	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: o.HostPort})
	if err != nil {
		return nil, fmt.Errorf("listening on 127.0.0.1:%d on the host: %w", o.HostPort, err)
	}
	closers = append(closers, func() { ln.Close() })

	argv := append([]string{nsenter}, args...)
	argv = append(argv, "--", exe, RelayArg, target.String())
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.ExtraFiles = files
	cmd.Stderr = &logWriter{log: log, event: "portfwd.relay.message"}
	if err := forkfds.Start(cmd); err != nil {
		return nil, fmt.Errorf("starting the relay (%s): %w", nsenter, err)
	}
	stopR, stopW, err := os.Pipe()
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("creating a pipe: %w", err)
	}
	child.Close()
	for _, f := range files[1:] {
		f.Close()
	}
	f := &Forward{ln: ln, target: target, nsPID: nsPID, netNS: NetNS(nsPID), cmd: cmd, log: log, sock: pair[0], pidfd: pidfd,
		stopWatch: stopW, helperDone: make(chan struct{}), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		close(f.helperDone)
		f.end(fmt.Sprintf("the relay exited (%v)", err))
	}()
	go f.watch(stopR)
	go f.accept()
	log.Info("portfwd.forward.started", "host", f.Addr().String(), "target", target.String(), "ns_pid", nsPID, "relay_pid", cmd.Process.Pid)
	return f, nil
}

// Addr is the host address the forward listens on (127.0.0.1:PORT).
func (f *Forward) Addr() netip.AddrPort {
	return f.ln.Addr().(*net.TCPAddr).AddrPort()
}

// URL is "http://127.0.0.1:PORT/", what a person opens in a browser.
func (f *Forward) URL() string { return "http://" + f.Addr().String() + "/" }

// Target is the address the relay connects to inside the sandbox.
func (f *Forward) Target() netip.AddrPort { return f.target }

// NSPID is the process whose network namespace the forward entered.
func (f *Forward) NSPID() int { return f.nsPID }

// NetNS names the network namespace the forward goes into, as NetNS does.
func (f *Forward) NetNS() string { return f.netNS }

// NetNS names the network namespace of process pid ("net:[4026532281]",
// the link /proc/PID/ns/net, namespaces(7)); two processes are in the
// same namespace when their names are equal. It returns "" when the link
// cannot be read (the process ended).
func NetNS(pid int) string {
	s, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
	return s
}

// RelayPID is the host process id of the relay helper, or 0 for a
// forward made by StartDial.
func (f *Forward) RelayPID() int {
	if f.cmd == nil {
		return 0
	}
	return f.cmd.Process.Pid
}

// Done is closed once the forward has ended and its listener and relay
// are gone.
func (f *Forward) Done() <-chan struct{} { return f.done }

// Reason says why the forward ended ("" while it runs).
func (f *Forward) Reason() string {
	select {
	case <-f.done:
		return f.reason
	default:
		return ""
	}
}

// Close ends the forward and returns once its listener is closed and its
// relay has exited. Safe to call more than once and concurrently.
func (f *Forward) Close() error {
	f.end("closed")
	<-f.done
	return nil
}

// end tears the forward down once, saying why.
func (f *Forward) end(reason string) {
	f.once.Do(func() {
		go func() {
			f.reason = reason
			f.ln.Close()
			f.mu.Lock()
			if f.sock >= 0 {
				unix.Close(f.sock) // the relay reads end of file and exits
			}
			f.sock = -1
			f.mu.Unlock()
			if f.cmd != nil {
				select {
				case <-f.helperDone:
				case <-time.After(helperExitGrace):
					_ = f.cmd.Process.Kill()
					<-f.helperDone
				}
			}
			f.connsMu.Lock()
			for c := range f.conns {
				c.Close()
			}
			f.conns = nil
			f.connsMu.Unlock()
			f.stopWatch.Close()
			f.log.Info("portfwd.forward.ended", "host", f.Addr().String(), "target", f.target.String(), "reason", reason)
			close(f.done)
		}()
	})
}

// watch ends the forward when the sandbox process exits (its pidfd turns
// readable, pidfd_open(2)) or the forward ends (end closes the write
// end of stop).
func (f *Forward) watch(stop *os.File) {
	defer stop.Close()
	defer unix.Close(f.pidfd)
	fds := []unix.PollFd{{Fd: int32(f.pidfd), Events: unix.POLLIN}, {Fd: int32(stop.Fd()), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if fds[0].Revents != 0 {
			f.end("the sandbox's process exited")
		}
		return
	}
}

// accept hands each connection to the relay until the listener closes.
func (f *Forward) accept() {
	var delay time.Duration
	for {
		c, err := f.ln.AcceptTCP()
		if err != nil {
			next, retry := acceptBackoff(err, delay)
			if !retry {
				f.end(fmt.Sprintf("accepting: %v", err))
				return
			}
			if delay == 0 {
				f.log.Warn("portfwd.accept.retry", "host", f.Addr().String(), "error", err)
			}
			delay = next
			time.Sleep(delay)
			continue
		}
		delay = 0
		if f.dial != nil {
			go f.serveDial(c)
			continue
		}
		if err := f.send(c); err != nil {
			f.log.Warn("portfwd.conn.failed", "host", f.Addr().String(), "error", err)
		}
		c.Close()
	}
}

// send passes c's descriptor to the relay.
func (f *Forward) send(c *net.TCPConn) error {
	file, err := c.File()
	if err != nil {
		return err
	}
	defer file.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sock < 0 {
		return errors.New("the forward is closed")
	}
	for {
		err = unix.Sendmsg(f.sock, []byte{0}, unix.UnixRights(int(file.Fd())), nil, 0)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// locateNsenter finds nsenter(1) in the system's directories (not PATH,
// which a caller's environment could point elsewhere).
func locateNsenter() (string, error) {
	for _, d := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		p := filepath.Join(d, "nsenter")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("forwarding a port into a sandbox needs nsenter(1), which is missing (install util-linux)")
}

// logWriter logs each write of the relay's stderr as one event.
type logWriter struct {
	log   *slog.Logger
	event string
}

// Write implements io.Writer.
func (w *logWriter) Write(p []byte) (int, error) {
	w.log.Warn(w.event, "message", string(p))
	return len(p), nil
}

// Dialer makes one connection to the target inside a sandbox, for
// StartDial (sandbox.PortBackend.DialPort).
type Dialer func(ctx context.Context) (io.ReadWriteCloser, error)

// dialTimeout bounds one Dialer call (an exec in a container).
const dialTimeout = time.Minute

// StartDial forwards 127.0.0.1:o.HostPort on the host to the connections
// dial makes, one per accepted connection: the way into a sandbox that a
// backend gives itself (docker's exec), where corral cannot enter the
// sandbox's namespaces. target is what dial connects to, for Target and the
// logs; ns names the sandbox for NetNS. The forward ends by Close, or when alive (called every
// pollAlive; nil means never) reports false: the server stopped
// listening or its sandbox is gone. Errors: the host port is taken.
func StartDial(dial Dialer, target netip.AddrPort, alive func() bool, ns string, o Options) (*Forward, error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	if o.HostPort < 0 || o.HostPort > 65535 {
		return nil, fmt.Errorf("host port %d is out of range 0-65535", o.HostPort)
	}
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: o.HostPort})
	if err != nil {
		return nil, fmt.Errorf("listening on 127.0.0.1:%d on the host: %w", o.HostPort, err)
	}
	stopR, stopW, err := os.Pipe()
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("creating a pipe: %w", err)
	}
	f := &Forward{ln: ln, target: target, netNS: ns, log: log, sock: -1, pidfd: -1, stopWatch: stopW,
		helperDone: make(chan struct{}), done: make(chan struct{}), dial: dial, conns: map[io.Closer]struct{}{}}
	close(f.helperDone)
	go f.pollAlive(alive, stopR)
	go f.accept()
	log.Info("portfwd.forward.started", "host", f.Addr().String(), "target", target.String(), "via", "backend")
	return f, nil
}

// pollAliveEvery is how often StartDial's forward asks whether its target
// is still there.
const pollAliveEvery = time.Second

// pollAlive ends the forward once alive reports false, until stop closes.
func (f *Forward) pollAlive(alive func() bool, stop *os.File) {
	defer stop.Close()
	gone := make(chan struct{})
	go func() {
		var b [1]byte
		_, _ = stop.Read(b[:]) // end of file once end closes the write end
		close(gone)
	}()
	t := time.NewTicker(pollAliveEvery)
	defer t.Stop()
	for {
		select {
		case <-gone:
			return
		case <-t.C:
			if alive != nil && !alive() {
				f.end("the server stopped listening, or its sandbox is gone")
				return
			}
		}
	}
}

// serveDial relays c to a connection dial makes.
func (f *Forward) serveDial(c *net.TCPConn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	d, err := f.dial(ctx)
	cancel()
	if err != nil {
		f.log.Warn("portfwd.conn.failed", "host", f.Addr().String(), "error", err)
		return
	}
	f.connsMu.Lock()
	if f.conns == nil { // the forward ended meanwhile
		f.connsMu.Unlock()
		d.Close()
		return
	}
	f.conns[d] = struct{}{}
	f.conns[c] = struct{}{}
	f.connsMu.Unlock()
	defer func() {
		f.connsMu.Lock()
		delete(f.conns, d)
		delete(f.conns, c)
		f.connsMu.Unlock()
		d.Close()
	}()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(d, c)
		if cw, ok := d.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(c, d)
		_ = c.CloseWrite()
		done <- struct{}{}
	}()
	<-done
	<-done
}

// acceptBackoff decides what an accept error does to a forward: errors that
// pass (a full descriptor table, EMFILE or ENFILE; no memory or buffers; a
// connection aborted or reset before it was accepted: accept(2), ERRORS)
// are retried after delay doubled from 5 ms up to 1 s, as net/http's
// Server.Serve does, so the forward outlives a moment of fd exhaustion;
// any other (the listener closed) ends it.
func acceptBackoff(err error, delay time.Duration) (next time.Duration, retry bool) {
	if errors.Is(err, net.ErrClosed) {
		return 0, false
	}
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM, unix.ECONNABORTED, unix.ECONNRESET, unix.EINTR, unix.EAGAIN} {
		if errors.Is(err, e) {
			if delay == 0 {
				return 5 * time.Millisecond, true
			}
			return min(2*delay, time.Second), true
		}
	}
	return 0, false
}
