package netproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/netproxy/internal/relay"
	"github.com/corralhq/corral/secrets"
)

// Names of the sockets [Start] creates in [Options.Dir].
const (
	HTTPSocketName  = "http.sock"
	SOCKSSocketName = "socks.sock"
)

// Defaults applied by [Start] to zero [Options] fields.
const (
	DefaultHeaderTimeout = 10 * time.Second
	DefaultDialTimeout   = 30 * time.Second
	DefaultSocketMode    = fs.FileMode(0o600)
)

// MaxHeaderBytes bounds the request line plus header fields of one HTTP
// request, in bytes. A larger request is answered 431 (RFC 6585 section 5)
// by net/http and the connection is closed.
const MaxHeaderBytes = 64 << 10

// maxSocketPath is the longest path a Unix socket can be bound at on Linux
// (sun_path is 108 bytes including the terminating NUL).
const maxSocketPath = 107

// Options configures [Start].
type Options struct {
	// Policy decides which hosts may be reached. It must pass
	// [Policy.Validate].
	Policy Policy

	// Dir is the directory in which the sockets HTTPSocketName and
	// SOCKSSocketName are created. It is created with mode 0700 if it does
	// not exist; an existing socket at either path (left by a crashed run)
	// is replaced, any other existing file is an error. Socket paths must
	// fit in 107 bytes.
	Dir string

	// SocketMode is the permission of both sockets; zero means
	// DefaultSocketMode (0600), right when the sandboxed command runs as the
	// same user as the server (bubblewrap maps the user to itself). Use 0666
	// when it runs as another uid (a Docker container started with --user)
	// and keep Dir itself 0700: the socket files are bind-mounted into the
	// sandbox one by one, so the sandbox does not need to traverse Dir, while
	// other users of the host cannot.
	SocketMode fs.FileMode

	// Logger receives network.denied (Info), network.allowed (Debug) and
	// network.upstream_failed records, plus Debug records about malformed
	// requests. network.upstream_failed (Info; Debug when the client or
	// the server went away first) is written when an allowed host could
	// not be reached or its connection failed, with the full error: the
	// client is told only the host and a short reason. Nil discards.
	Logger *slog.Logger

	// Session is added as the "session" attribute of every record.
	Session string

	// Dial opens the upstream connection for an allowed request; network is
	// "tcp" and addr is "host:port" as the client asked (host is a name or
	// an IP address; IPv6 in brackets). Nil means a net.Dialer that refuses
	// (with [ErrLocalTarget]) to connect an allowed host *name* to a
	// loopback, link-local (such as the 169.254.169.254 metadata service),
	// unspecified or multicast address, or to any address assigned to one
	// of this machine's interfaces (its LAN address, the 172.17.0.1 of
	// docker0, ...), so that a name under an allowed wildcard, whose DNS
	// corral does not control, cannot be pointed at the host's own
	// services. The check runs on each resolved address just before it is
	// connected to, so a changing DNS answer cannot slip past it; the
	// interface list is read again every few seconds, and when it cannot
	// be read the dial fails. An allowed IP address is dialled as given.
	// Private ranges (10/8, 192.168/16, ...) are not refused, since
	// internal registries live there. Tests set Dial to reach loopback
	// servers.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// resolver, when set, resolves names for the default dialer (Dial
	// nil) instead of net.DefaultResolver: tests point allowed names at
	// chosen addresses with it while the default dialer's checks run.
	resolver *net.Resolver

	// HeaderTimeout bounds the time a client may take to send one request
	// header (HTTP) or the whole handshake (SOCKS5); zero means
	// DefaultHeaderTimeout. A slower client is disconnected.
	HeaderTimeout time.Duration

	// DialTimeout bounds each upstream connection attempt; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration

	// MaxConns caps the client connections each of the two proxies serves
	// at once (each may hold one upstream connection too); zero means
	// DefaultMaxConns. Further clients wait in the socket's listen backlog
	// until one ends (limitListener), so a
	// sandbox that floods its proxy cannot take all of corral's file
	// descriptors from the other sessions.
	MaxConns int

	// Secrets are the credentials of the sandbox (issue 14): a CONNECT
	// to a host one of them names (secrets.Secret.Belongs) is terminated
	// with a certificate from CA, whose name must equal the CONNECT host
	// (SNI; a mismatch fails the handshake), and each request inside
	// (HTTP/1.1 or HTTP/2) is forwarded over TLS to that host with
	// secrets.Substitute applied; a request whose Host differs from the
	// CONNECT host is refused (403, secret.host_mismatch). A stand-in on
	// its way to a host it does not belong to, in a terminated
	// connection or a plain-HTTP request, is refused (403,
	// secret.misdirected); each use is logged as secret.used. Names and
	// hosts are logged, never values. Every other CONNECT stays a blind
	// tunnel; SOCKS5 is never terminated. The secrets' hosts must also
	// be allowed by Policy (the caller adds them). Non-empty Secrets
	// need CA.
	Secrets []secrets.Secret
	// CA mints the certificates of terminated connections.
	CA *secrets.CA
	// UpstreamRoots verifies the upstream servers of terminated
	// connections; nil means the system roots. Tests set it.
	UpstreamRoots *x509.CertPool
}

// DefaultMaxConns is Options.MaxConns when zero: far above what package
// managers open (npm's default is 15 sockets per host, pip and git use a
// few), far below a process's descriptor limit.
const DefaultMaxConns = 256

// Server is a running pair of filtering proxies, each on its own Unix
// socket: an HTTP/1.1 proxy (CONNECT tunnels, RFC 9110 section 9.3.6, and
// absolute-form requests, RFC 9112 section 3.2.2) and a SOCKS5 proxy (RFC
// 1928, CONNECT only, no authentication). Every request's host is put to
// the [Policy]; refusals are answered 403 (HTTP) or reply 0x02 (SOCKS5)
// and logged as network.denied, and so are allowed names the default
// dialer refuses with [ErrLocalTarget]. An allowed host that cannot be
// reached is answered 502 naming the host and a short reason (SOCKS5: the
// nearest reply code) and logged as network.upstream_failed. Create it
// with [Start]; its methods are safe for concurrent use.
type Server struct {
	policy        Policy
	log           *slog.Logger
	session       string
	dialFn        func(ctx context.Context, network, addr string) (net.Conn, error)
	headerTimeout time.Duration
	dialTimeout   time.Duration
	secrets       []secrets.Secret
	ca            *secrets.CA

	// Terminated CONNECTs (terminate.go); nil without secrets.
	termLn        *chanListener
	termSrv       *http.Server
	termTLSMu     sync.Mutex
	termTLS       map[string]*tls.Config // see tlsConfig
	termTransport *http.Transport
	termForward   *httputil.ReverseProxy

	// The scrubbers of secrets' hosts' answers (scrub.go).
	scrubMu   sync.Mutex
	scrubbers map[string]*secrets.Scrubber
	// noScrub turns scrubbing off: for the benchmark that measures what
	// it costs, never set otherwise.
	noScrub atomic.Bool

	httpPath, socksPath string
	httpLn, socksLn     *unixListener
	httpServe           net.Listener // httpLn, limited to MaxConns
	socksServe          net.Listener // socksLn, limited to MaxConns
	httpSrv             *http.Server
	transport           *http.Transport
	forward             *httputil.ReverseProxy

	ctx    context.Context // canceled by Close; base of every request
	cancel context.CancelFunc
	track  relay.Tracker
	served sync.WaitGroup // the two serve loops

	closeOnce sync.Once
	closeErr  error
}

// Start creates the sockets in opts.Dir and serves both proxies until
// [Server.Close]. It fails if the policy does not validate (wrapping
// [ErrInvalidPattern]), if Dir is empty or cannot be made, or if a socket
// cannot be bound.
func Start(opts Options) (*Server, error) {
	if err := opts.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("netproxy: %w", err)
	}
	if opts.Dir == "" {
		return nil, errors.New("netproxy: Options.Dir is empty")
	}
	if len(opts.Secrets) > 0 && opts.CA == nil {
		return nil, errors.New("netproxy: Options.Secrets needs Options.CA")
	}
	s := &Server{
		policy:        opts.Policy,
		log:           opts.Logger,
		session:       opts.Session,
		dialFn:        opts.Dial,
		headerTimeout: opts.HeaderTimeout,
		dialTimeout:   opts.DialTimeout,
		secrets:       opts.Secrets,
		ca:            opts.CA,
		httpPath:      filepath.Join(opts.Dir, HTTPSocketName),
		socksPath:     filepath.Join(opts.Dir, SOCKSSocketName),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.dialFn == nil {
		s.dialFn = guardedDialer(opts.resolver)
	}
	if s.headerTimeout <= 0 {
		s.headerTimeout = DefaultHeaderTimeout
	}
	if s.dialTimeout <= 0 {
		s.dialTimeout = DefaultDialTimeout
	}
	mode := opts.SocketMode
	if mode == 0 {
		mode = DefaultSocketMode
	}

	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("netproxy: creating socket directory: %w", err)
	}
	if fi, err := os.Lstat(opts.Dir); err != nil {
		return nil, fmt.Errorf("netproxy: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("netproxy: %s is not a directory", opts.Dir)
	}
	var err error
	if s.httpLn, err = listenUnix(s.httpPath, mode); err != nil {
		return nil, err
	}
	if s.socksLn, err = listenUnix(s.socksPath, mode); err != nil {
		_ = s.httpLn.Close()
		return nil, err
	}

	s.ctx, s.cancel = context.WithCancel(context.Background())
	// Plain requests are forwarded with net/http's own reverse proxy rather
	// than a proxy library such as github.com/elazarl/goproxy: it already
	// strips hop-by-hop fields (RFC 9110 section 7.6.1), streams bodies both
	// ways, relays 1xx answers and protocol upgrades, and in Rewrite mode
	// adds no X-Forwarded-For that would tell the host's address. What is left to us is the policy check and the
	// CONNECT tunnel (hijack, dial, "200", relay), about as many lines as
	// configuring goproxy would take, with no dependency and with every
	// timeout and size limit on the http.Server we own.
	s.transport = &http.Transport{
		Proxy:                 nil, // never chain to the host's own proxy
		DialContext:           s.dialChecked,
		DisableCompression:    true, // pass Accept-Encoding through untouched
		MaxIdleConns:          32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   s.headerTimeout,
		ExpectContinueTimeout: time.Second,
	}
	s.forward = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// RFC 9112 section 3.2.2: a proxy replaces the received Host
			// with the authority of the absolute request-target, so the
			// Host header cannot name another site than the one checked.
			pr.Out.Host = ""
			if len(s.secrets) > 0 && secrets.Declares(s.secrets, pr.Out.URL.Hostname()) {
				prepareSecretHostRequest(pr.Out.Header)
			}
		},
		Transport:     s.transport,
		FlushInterval: -1,
		ErrorHandler:  s.forwardError,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	if len(s.secrets) > 0 {
		// A secret's host's answers over plain HTTP are scrubbed too: the
		// host may hold a value it got over HTTPS.
		s.forward.Transport = &scrubTransport{s: s, rt: s.transport}
		s.forward.ModifyResponse = s.scrubResponse
	}
	s.httpSrv = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: s.headerTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	maxConns := opts.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	if len(s.secrets) > 0 {
		s.startTerminator(opts)
	}
	s.httpServe = newLimitListener(s.httpLn, maxConns)
	s.socksServe = newLimitListener(s.socksLn, maxConns)
	s.served.Add(2)
	go func() {
		defer s.served.Done()
		_ = s.httpSrv.Serve(s.httpServe)
	}()
	go func() {
		defer s.served.Done()
		relay.AcceptLoop(s.socksServe, &s.track, s.serveSOCKS)
	}()
	return s, nil
}

// HTTPSocket returns the path of the HTTP proxy's Unix socket,
// Dir/http.sock.
func (s *Server) HTTPSocket() string { return s.httpPath }

// SOCKSSocket returns the path of the SOCKS5 proxy's Unix socket,
// Dir/socks.sock.
func (s *Server) SOCKSSocket() string { return s.socksPath }

// Close stops both listeners (removing the socket files), closes every
// client and upstream connection, including established tunnels, and
// returns once every goroutine of the server has ended. Later calls return
// the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		errHTTP := s.httpSrv.Close()
		if s.termSrv != nil {
			_ = s.termSrv.Close()
			s.termTransport.CloseIdleConnections()
		}
		errSOCKS := s.socksServe.Close()
		if errors.Is(errSOCKS, net.ErrClosed) {
			errSOCKS = nil
		}
		s.track.Shutdown()
		s.served.Wait()
		s.transport.CloseIdleConnections()
		s.closeErr = errors.Join(errHTTP, errSOCKS)
	})
	return s.closeErr
}

// limitListener serves at most n connections of a Unix listener at once:
// Accept waits for a free slot, and a connection's Close frees it. It does
// what golang.org/x/net/netutil.LimitListener does, but hands out
// connections that are still *net.UnixConn underneath (embedded), so the
// relay's half-close (CloseWrite) and the SOCKS server's orderly shutdown
// keep working; netutil's wrapper hides every method but net.Conn's.
type limitListener struct {
	*unixListener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(l *unixListener, n int) *limitListener {
	return &limitListener{unixListener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept implements net.Listener; after Close it returns net.ErrClosed.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.AcceptUnix()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedConn{UnixConn: c, release: func() { <-l.sem }}, nil
}

// Close implements net.Listener: it closes the socket (removing its file)
// and wakes an Accept waiting for a slot.
func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.unixListener.Close()
}

// limitedConn gives its limitListener slot back when it is closed, once.
type limitedConn struct {
	*net.UnixConn
	release func()
	once    sync.Once
}

// Close implements net.Conn.
func (c *limitedConn) Close() error {
	err := c.UnixConn.Close()
	c.once.Do(c.release)
	return err
}

// unixListener is a Unix socket listener that, when closed, removes its
// socket file only if that is still the file it created: a newer server
// may have replaced it.
type unixListener struct {
	*net.UnixListener
	path string
	fi   fs.FileInfo
}

// Close implements net.Listener: it closes the socket and removes its file
// when that is still the one this listener made.
func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	if cur, e := os.Lstat(l.path); e == nil && os.SameFile(cur, l.fi) {
		_ = os.Remove(l.path)
	}
	return err
}

// listenUnix binds a Unix stream socket at path with the given mode,
// replacing a stale socket left there.
func listenUnix(path string, mode fs.FileMode) (*unixListener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("netproxy: socket path %s is %d bytes, longer than the %d Unix sockets allow", path, len(path), maxSocketPath)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("netproxy: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("netproxy: removing stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("netproxy: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	// The socket is created with the umask's mode (0755 under the usual
	// 022, which lets no one else connect) and then set to mode.
	fi, err := os.Lstat(path)
	if err == nil {
		err = os.Chmod(path, mode)
	}
	if err != nil {
		_ = ln.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("netproxy: %w", err)
	}
	return &unixListener{UnixListener: ln, path: path, fi: fi}, nil
}

// check puts host to the policy and logs the outcome. proto is "http",
// "connect" or "socks5"; port is only logged.
func (s *Server) check(ctx context.Context, proto, host, port string) bool {
	ok, reason := s.policy.Decide(host)
	if ok {
		s.logAllowed(ctx, proto, host, port, reason)
	} else {
		s.logDenied(ctx, proto, host, port, reason)
	}
	return ok
}

func (s *Server) logAllowed(ctx context.Context, proto, host, port, reason string) {
	s.log.LogAttrs(ctx, slog.LevelDebug, "network.allowed",
		slog.String("session", s.session), slog.String("host", host),
		slog.String("port", port), slog.String("proto", proto),
		slog.String("reason", reason))
}

func (s *Server) logDenied(ctx context.Context, proto, host, port, reason string) {
	s.log.LogAttrs(ctx, slog.LevelInfo, "network.denied",
		slog.String("session", s.session), slog.String("host", host),
		slog.String("port", port), slog.String("proto", proto),
		slog.String("reason", reason))
}

// logUpstreamFailed records an allowed request whose upstream could not be
// reached or failed, with the full error the client is not shown. It is
// Info, or Debug when ctx ended first (the client left or the server is
// closing), which is then the likely cause.
func (s *Server) logUpstreamFailed(ctx context.Context, proto, host, port string, err error) {
	level := slog.LevelInfo
	if ctx.Err() != nil {
		level = slog.LevelDebug
	}
	s.log.LogAttrs(ctx, level, "network.upstream_failed",
		slog.String("session", s.session), slog.String("host", host),
		slog.String("port", port), slog.String("proto", proto),
		slog.String("reason", failureReason(err)),
		slog.String("error", err.Error()))
}

// dial opens an upstream connection to host:port within DialTimeout.
func (s *Server) dial(ctx context.Context, host, port string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.dialTimeout)
	defer cancel()
	if ip, ok := parseIP(host); ok {
		host = ip.String()
	}
	return s.dialFn(ctx, "tcp", net.JoinHostPort(host, port))
}

// dialChecked is the forwarding transport's dialer. The host was checked
// before the request reached the transport; checking again here keeps the
// transport from ever dialling anything else.
func (s *Server) dialChecked(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ok, reason := s.policy.Decide(host); !ok {
		return nil, fmt.Errorf("%w: %s", errDenied, reason)
	}
	return s.dial(ctx, host, port)
}

// errDenied marks a refusal found after the request was accepted.
var errDenied = errors.New("blocked by corral network allowlist")

// serveHTTP handles one request of the HTTP proxy.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.track.Enter() {
		http.Error(w, "corral proxy: shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.track.Leave()
	if r.Method == http.MethodConnect {
		s.serveConnect(w, r)
		return
	}
	s.serveForward(w, r)
}

// blocked answers a refused HTTP request; why, when not empty, is added
// in parentheses.
func blocked(w http.ResponseWriter, host, why string) {
	w.Header().Set("X-Corral-Blocked", host)
	w.Header().Set("Connection", "close")
	msg := "blocked by corral network allowlist: " + host
	if why != "" {
		msg += " (" + why + ")"
	}
	http.Error(w, msg, http.StatusForbidden)
}

// unreachable answers 502 to a request whose allowed upstream could not be
// reached or failed. The body names the host and the reason's category
// only: the error itself can name the host's resolver and addresses.
func unreachable(w http.ResponseWriter, host, port string, err error) {
	w.Header().Set("Connection", "close")
	http.Error(w, "corral proxy: cannot reach "+net.JoinHostPort(host, port)+": "+failureReason(err), http.StatusBadGateway)
}

// serveConnect opens a tunnel (RFC 9110 section 9.3.6): the request-target
// is host:port; on success the answer is 200 and from then on bytes are
// relayed unchanged both ways.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	host, port, err := net.SplitHostPort(r.Host)
	if err == nil {
		if n, perr := strconv.ParseUint(port, 10, 16); perr != nil || n == 0 {
			err = errors.New("bad port")
		}
	}
	if err != nil || host == "" {
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "network.bad_request",
			slog.String("session", s.session), slog.String("proto", "connect"),
			slog.String("target", r.Host))
		http.Error(w, "corral proxy: CONNECT needs host:port with a port from 1 to 65535", http.StatusBadRequest)
		return
	}
	if !s.check(r.Context(), "connect", host, port) {
		blocked(w, host, "")
		return
	}
	if s.termLn != nil && secrets.Declares(s.secrets, host) {
		s.serveTerminated(w, host, port)
		return
	}
	target, err := s.dial(r.Context(), host, port)
	if err != nil {
		if errors.Is(err, ErrLocalTarget) {
			s.logDenied(r.Context(), "connect", host, port, err.Error())
			blocked(w, host, reasonLocalTarget)
			return
		}
		s.logUpstreamFailed(r.Context(), "connect", host, port, err)
		unreachable(w, host, port, err)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = target.Close()
		http.Error(w, "corral proxy: cannot open tunnel", http.StatusInternalServerError)
		return
	}
	if !s.track.Add(conn, target) {
		_ = conn.Close()
		_ = target.Close()
		return
	}
	defer s.track.Remove(conn, target)
	// The server left its header deadline on the connection.
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = conn.Close()
		_ = target.Close()
		return
	}
	// A client may send its first bytes (a TLS ClientHello) right after
	// the CONNECT header; net/http may have buffered some of them.
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		if _, err := target.Write(early); err != nil {
			_ = conn.Close()
			_ = target.Close()
			return
		}
	}
	relay.Pipe(conn, target)
}

// serveForward forwards an absolute-form request (RFC 9112 section
// 3.2.2), "GET http://host/path HTTP/1.1".
func (s *Server) serveForward(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		http.Error(w, "corral proxy: this is a proxy; the request-target must be an absolute http:// URI", http.StatusBadRequest)
		return
	}
	if r.URL.Scheme != "http" {
		http.Error(w, "corral proxy: only http:// URIs are forwarded; use CONNECT for https", http.StatusBadRequest)
		return
	}
	host, port := r.URL.Hostname(), r.URL.Port()
	if port == "" {
		port = "80"
	}
	if !s.check(r.Context(), "http", host, port) {
		blocked(w, host, "")
		return
	}
	if len(s.secrets) > 0 && secrets.Declares(s.secrets, host) && s.refuseMethod(w, r, host) {
		return
	}
	// Secrets go over HTTPS only: a stand-in here is refused, nothing is
	// put in.
	if _, ok := s.substitute(w, r, host, false); !ok {
		return
	}
	s.forward.ServeHTTP(w, r)
}

// forwardError answers a forwarded request whose upstream failed.
func (s *Server) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	if s.refuseUnscrubbable(w, r, err) {
		return
	}
	host, port := r.URL.Hostname(), r.URL.Port()
	if port == "" {
		port = "80"
	}
	s.upstreamError(w, r, "http", host, port, err)
}

// upstreamError answers a request (proto "http" or "connect", as logged)
// to host:port whose upstream failed: a policy refusal (ErrLocalTarget,
// errDenied) is logged as network.denied and answered 403, any other
// failure logged as network.upstream_failed and answered 502 unless the
// client is gone.
func (s *Server) upstreamError(w http.ResponseWriter, r *http.Request, proto, host, port string, err error) {
	switch {
	case errors.Is(err, ErrLocalTarget):
		s.logDenied(r.Context(), proto, host, port, err.Error())
		blocked(w, host, reasonLocalTarget)
		return
	case errors.Is(err, errDenied):
		s.logDenied(r.Context(), proto, host, port, err.Error())
		blocked(w, host, "")
		return
	}
	s.logUpstreamFailed(r.Context(), proto, host, port, err)
	if r.Context().Err() != nil {
		// The client went away or the server is closing: nothing to tell.
		return
	}
	unreachable(w, host, port, err)
}
