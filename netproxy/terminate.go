package netproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/secrets"
)

// This file is the proxy's side of issue 14 (credentials the sandbox uses
// but never sees): a CONNECT to a host that a declared secret names is not
// tunnelled blind but terminated with a certificate from corral's CA, and
// each request inside is forwarded upstream over a new, verified TLS
// connection with the secrets' stand-ins replaced by their real values
// (secrets.Substitute), and each answer is scrubbed of them (scrub.go).
// Every other CONNECT keeps its blind tunnel.

// terminatedConn is the client side of a terminated CONNECT: the hijacked
// connection, with the bytes net/http had already buffered (the start of
// the ClientHello) read first, and the CONNECT's host and port.
type terminatedConn struct {
	net.Conn
	r          io.Reader
	host, port string
}

func (c *terminatedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

type terminatedKey struct{}

// chanListener hands the terminated connections to the http.Server that
// serves them; Close ends Accept.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// push hands c to Accept; false when the listener is closed.
func (l *chanListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// Close implements net.Listener.
func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *chanListener) Addr() net.Addr { return &net.UnixAddr{Name: "terminated", Net: "unix"} }

// startTerminator sets up what terminated CONNECTs need; called by Start
// when secrets are declared.
func (s *Server) startTerminator(opts Options) {
	s.termLn = newChanListener()
	s.termTransport = &http.Transport{
		Proxy:                 nil,
		DialContext:           s.dialChecked,
		TLSClientConfig:       &tls.Config{RootCAs: opts.UpstreamRoots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true, // a custom DialContext turns it off otherwise
		DisableCompression:    true,
		MaxIdleConns:          32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   s.headerTimeout,
		ExpectContinueTimeout: time.Second,
	}
	s.termForward = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			tc := pr.In.Context().Value(terminatedKey{}).(*terminatedConn)
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = net.JoinHostPort(tc.host, tc.port)
			if tc.port == "443" {
				pr.Out.URL.Host = tc.host
			}
			pr.Out.Host = ""
			prepareSecretHostRequest(pr.Out.Header)
		},
		Transport:      &scrubTransport{s: s, rt: s.termTransport},
		ModifyResponse: s.scrubResponse,
		FlushInterval:  -1,
		ErrorHandler:   s.terminatedError,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.termSrv = &http.Server{
		Handler:           http.HandlerFunc(s.serveTerminatedRequest),
		ReadHeaderTimeout: s.headerTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if t, ok := c.(*tls.Conn); ok {
				if tc, ok := t.NetConn().(*terminatedConn); ok {
					return context.WithValue(ctx, terminatedKey{}, tc)
				}
			}
			return ctx
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.served.Add(1)
	go func() {
		defer s.served.Done()
		_ = s.termSrv.Serve(s.termLn)
	}()
}

// maxTLSConfigs bounds the kept TLS configs: a wildcard secret host
// ("*.example.com") lets a command CONNECT to any number of names.
const maxTLSConfigs = 256

// tlsConfig is the server side of a terminated connection to host: the
// leaf for host, only when the client's SNI names that host. One config
// per host is kept for the server's life, up to maxTLSConfigs (a config is
// safe for concurrent use; building one per CONNECT cost its closures and
// crypto/tls's per-config session ticket keys, so no session resumed).
func (s *Server) tlsConfig(host string) *tls.Config {
	s.termTLSMu.Lock()
	defer s.termTLSMu.Unlock()
	if c := s.termTLS[host]; c != nil {
		return c
	}
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			sni := strings.TrimSuffix(hello.ServerName, ".")
			if !strings.EqualFold(sni, host) {
				// A client that asks for another name than it CONNECTed to
				// must not get a certificate for either.
				s.log.LogAttrs(hello.Context(), slog.LevelWarn, "secret.sni_mismatch",
					slog.String("session", s.session), slog.String("host", host),
					slog.String("sni", hello.ServerName))
				return nil, fmt.Errorf("corral proxy: TLS server name %q is not the CONNECT host %q", hello.ServerName, host)
			}
			return s.ca.Leaf(host)
		},
	}
	if s.termTLS == nil {
		s.termTLS = map[string]*tls.Config{}
	}
	if len(s.termTLS) < maxTLSConfigs {
		s.termTLS[host] = c
	}
	return c
}

// serveTerminated answers a CONNECT to a host that a declared secret
// names: 200, then TLS with a certificate from corral's CA, and the
// requests inside are served by serveTerminatedRequest.
func (s *Server) serveTerminated(w http.ResponseWriter, host, port string) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "corral proxy: cannot open tunnel", http.StatusInternalServerError)
		return
	}
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = conn.Close()
		return
	}
	var r io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		r = io.MultiReader(bytes.NewReader(bytes.Clone(early)), conn)
	}
	tc := &terminatedConn{Conn: conn, r: r, host: strings.ToLower(strings.TrimSuffix(host, ".")), port: port}
	if !s.termLn.push(tls.Server(tc, s.tlsConfig(tc.host))) {
		_ = conn.Close()
	}
}

// serveTerminatedRequest handles one request inside a terminated
// connection.
func (s *Server) serveTerminatedRequest(w http.ResponseWriter, r *http.Request) {
	tc, ok := r.Context().Value(terminatedKey{}).(*terminatedConn)
	if !ok {
		http.Error(w, "corral proxy: internal error", http.StatusInternalServerError)
		return
	}
	if !s.track.Enter() {
		http.Error(w, "corral proxy: shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.track.Leave()
	if h := strings.TrimSuffix(hostOnly(r.Host), "."); !strings.EqualFold(h, tc.host) {
		// The request names another site than the tunnel was opened to
		// (and its certificate minted for): it gets no secret, and is not
		// forwarded anywhere.
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "secret.host_mismatch",
			slog.String("session", s.session), slog.String("host", tc.host),
			slog.String("request_host", r.Host))
		refuse(w, fmt.Sprintf("corral proxy: refused: the request's Host %q is not the host this connection was opened to (%s)", r.Host, tc.host))
		return
	}
	if s.refuseMethod(w, r, tc.host) {
		return
	}
	used, ok := s.substitute(w, r, tc.host, true)
	if !ok {
		return
	}
	if len(used) == 0 {
		s.termForward.ServeHTTP(w, r)
		return
	}
	// A secret is used once the request's headers, which carry it, were
	// written upstream (httptrace's WroteHeaders): not when the upstream
	// could not be reached or its certificate was refused.
	var wrote atomic.Bool
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }}))
	s.termForward.ServeHTTP(w, r)
	for _, name := range used {
		ev := "secret.used"
		if !wrote.Load() {
			ev = "secret.not_sent"
		}
		s.log.LogAttrs(r.Context(), slog.LevelInfo, ev,
			slog.String("session", s.session), slog.String("name", name),
			slog.String("host", tc.host))
	}
}

// substitute applies the declared secrets to r's headers for host
// (secrets.Substitute) and returns the names of those put in, for the
// caller to log once it knows whether they were sent (secret.used,
// secret.not_sent). A misdirected stand-in is answered 403 and logged; ok
// is false then.
func (s *Server) substitute(w http.ResponseWriter, r *http.Request, host string, overTLS bool) (used []string, ok bool) {
	if len(s.secrets) == 0 {
		return nil, true
	}
	res := secrets.Substitute(r.Header, r.RequestURI, host, overTLS, s.secrets)
	if len(res.Misdirected) > 0 {
		var why []string
		for _, name := range res.Misdirected {
			s.log.LogAttrs(r.Context(), slog.LevelWarn, "secret.misdirected",
				slog.String("session", s.session), slog.String("name", name),
				slog.String("host", host), slog.Bool("tls", overTLS))
			for _, sec := range s.secrets {
				if sec.Name == name {
					why = append(why, fmt.Sprintf("%s belongs to %s", name, strings.Join(sec.Hosts, ", ")))
				}
			}
		}
		msg := fmt.Sprintf("corral proxy: refused: the request to %s carries the stand-in of a secret that does not belong there (%s)", host, strings.Join(why, "; "))
		if !overTLS {
			msg += "; secrets are only sent over HTTPS"
		}
		refuse(w, msg)
		return nil, false
	}
	if name, err := secrets.ResignAWS(r, host, s.secrets); err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "secret.resign_failed",
			slog.String("session", s.session), slog.String("host", host), slog.String("error", err.Error()))
		refuse(w, "corral proxy: refused: "+err.Error())
		return nil, false
	} else if name != "" {
		res.Used = append(res.Used, name)
	}
	return res.Used, true
}

// refuse answers 403 with msg.
func refuse(w http.ResponseWriter, msg string) {
	w.Header().Set("X-Corral-Refused", "secret")
	http.Error(w, msg, http.StatusForbidden)
}

// terminatedError answers a terminated request whose upstream failed.
func (s *Server) terminatedError(w http.ResponseWriter, r *http.Request, err error) {
	if s.refuseUnscrubbable(w, r, err) {
		return
	}
	tc, _ := r.Context().Value(terminatedKey{}).(*terminatedConn)
	host, port := "", ""
	if tc != nil {
		host, port = tc.host, tc.port
	}
	s.upstreamError(w, r, "connect", host, port, err)
}

// hostOnly strips a port from a Host header value.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}
