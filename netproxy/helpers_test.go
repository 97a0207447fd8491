package netproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testcert"
)

// testDir returns a fresh directory under $CORRAL_TEST_DIR (or the system
// temporary directory when that is unset or too long to leave room for
// Unix socket names, which must fit in 107 bytes).
func testDir(t testing.TB) string {
	t.Helper()
	base := os.Getenv("CORRAL_TEST_DIR")
	if base == "" || len(base) > 64 {
		base = os.TempDir()
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(base, "np")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// find returns the attributes of the first record with message msg whose
// "host" attribute is host.
func (r *recorder) find(msg, host string) (map[string]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.records {
		if rec.Message != msg {
			continue
		}
		attrs := map[string]string{"level": rec.Level.String()}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		if attrs["host"] == host {
			return attrs, true
		}
	}
	return nil, false
}

// count returns how many records have message msg.
func (r *recorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if rec.Message == msg {
			n++
		}
	}
	return n
}

// waitFor polls r for a record, since a log line may be written just after
// the client has seen the answer. The bound is only for a record that
// never comes: a slow machine gets what it needs.
func (r *recorder) waitFor(t *testing.T, msg, host string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if a, ok := r.find(msg, host); ok {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s record for host %q", msg, host)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testCA is a self-signed certificate for allowed.test and *.allowed.test,
// serving as its own root.
type testCA struct {
	cert    tls.Certificate
	pool    *x509.CertPool
	pemPath string
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	cert, pemBytes := testcert.New(t, "allowed.test", "*.allowed.test")
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	pemPath := filepath.Join(testDir(t), "ca.pem")
	if err := os.WriteFile(pemPath, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, pool: pool, pemPath: pemPath}
}

// upstreams are loopback servers standing in for the outside world:
// plain HTTP on port 80 names, HTTPS on 443, and a TCP echo server on
// port 7.
type upstreams struct {
	plain, tls *httptest.Server
	echo       net.Listener
	ca         *testCA
}

func hello(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "hello host=%s path=%s tls=%v", r.Host, r.URL.Path, r.TLS != nil)
}

func newUpstreams(t testing.TB) *upstreams {
	t.Helper()
	u := &upstreams{ca: newTestCA(t)}
	u.plain = httptest.NewServer(http.HandlerFunc(hello))
	u.tls = httptest.NewUnstartedServer(http.HandlerFunc(hello))
	u.tls.TLS = &tls.Config{Certificates: []tls.Certificate{u.ca.cert}}
	u.tls.StartTLS()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.echo = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		u.plain.Close()
		u.tls.Close()
		_ = u.echo.Close()
	})
	return u
}

// dial maps the names allowed.test and *.allowed.test (and anything.test)
// to the loopback upstreams by port; IP addresses are dialled as given.
func (u *upstreams) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	host = strings.ToLower(host)
	var d net.Dialer
	if _, isIP := parseIP(host); isIP {
		return d.DialContext(ctx, network, addr)
	}
	if !strings.HasSuffix(host, ".test") {
		return nil, fmt.Errorf("test dialer: unknown host %q", host)
	}
	switch port {
	case "443":
		return d.DialContext(ctx, network, u.tls.Listener.Addr().String())
	case "7":
		return d.DialContext(ctx, network, u.echo.Addr().String())
	default:
		return d.DialContext(ctx, network, u.plain.Listener.Addr().String())
	}
}

// testPolicy allows allowed.test and its subdomains except
// blocked.allowed.test.
var testPolicy = Policy{
	Allow: []string{"allowed.test", "*.allowed.test"},
	Deny:  []string{"blocked.allowed.test"},
}

// startTestServer starts a Server for testPolicy over u, logging into the
// returned recorder.
func startTestServer(t testing.TB, u *upstreams, edit func(*Options)) (*Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	opts := Options{
		Policy:        testPolicy,
		Dir:           testDir(t),
		Logger:        slog.New(rec),
		Session:       "sess-1",
		Dial:          u.dial,
		HeaderTimeout: 2 * time.Second,
		DialTimeout:   2 * time.Second,
	}
	if edit != nil {
		edit(&opts)
	}
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, rec
}

// proxyClient is an HTTP client that reaches the HTTP proxy through its
// Unix socket and trusts the test CA.
func proxyClient(sock string, pool *x509.CertPool) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "corral-proxy"}),
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			DisableKeepAlives: true,
		},
	}
}

func get(t *testing.T, c *http.Client, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", u, err)
	}
	return resp.StatusCode, string(b), resp.Header
}
