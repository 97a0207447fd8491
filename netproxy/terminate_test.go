package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testcert"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/secrets"
)

// secretWorld is an upstream HTTPS server (HTTP/1.1 and HTTP/2) for
// *.allowed.test that records what arrived, and a proxy with two secrets:
// GH on api.allowed.test, AI on ai.allowed.test.
type secretWorld struct {
	up       *httptest.Server
	upPool   *x509.CertPool
	upCert   tls.Certificate
	srv      *Server
	rec      *recorder
	ca       *secrets.CA
	caPool   *x509.CertPool
	gh, ai   secrets.Secret
	mu       sync.Mutex
	arrivals []string // "host auth=... key=... body=..."
}

func (w *secretWorld) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.arrivals)
}

func newSecretWorld(t testing.TB) *secretWorld {
	t.Helper()
	w := &secretWorld{
		gh: secrets.Secret{Name: "GH_TOKEN", Value: "ghp_RealRealRealReal0123", StandIn: "ghp_StndStndStndStnd9876", Hosts: []string{"api.allowed.test"}},
		ai: secrets.Secret{Name: "AI_KEY", Value: "sk-ant-RealRealReal01", StandIn: "sk-ant-StndStndStnd98", Hosts: []string{"ai.allowed.test"}},
	}
	cert, _ := testcert.New(t, "allowed.test", "*.allowed.test")
	w.upCert = cert
	w.upPool = x509.NewCertPool()
	w.upPool.AddCert(cert.Leaf)
	w.up = httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		w.arrivals = append(w.arrivals, fmt.Sprintf("%s %s auth=%s key=%s body=%s ae=%q ext=%q range=%q if-range=%q", r.Host, r.Proto, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), body, r.Header.Get("Accept-Encoding"), r.Header.Get("Sec-WebSocket-Extensions"), r.Header.Get("Range"), r.Header.Get("If-Range")))
		w.mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/reflect"):
			testkit.Reflect(rw, r)
			return
		case r.URL.Path == "/big":
			rw.Header().Set("Content-Length", strconv.Itoa(len(bigBody())))
			_, _ = rw.Write(bigBody())
			return
		case r.URL.Path == "/holds-ai":
			// A host that holds another host's secret.
			fmt.Fprintf(rw, "ai=%s", w.ai.Value)
			return
		case strings.HasPrefix(r.URL.Path, "/ws"):
			serveRawUpgrade(rw, r, testkit.ReflectedToken(r))
			return
		}
		fmt.Fprintf(rw, "up host=%s proto=%s", r.Host, r.Proto)
	}))
	w.up.EnableHTTP2 = true
	w.up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	w.up.StartTLS()
	t.Cleanup(w.up.Close)
	plain := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		w.arrivals = append(w.arrivals, "plain "+r.Host)
		w.mu.Unlock()
		if r.URL.Path == "/raw" {
			// Header fields as a hostile server may write them: a
			// name in an odd case, a value folded over lines
			// (obs-fold), and the value escaped a character at a time.
			conn, brw, err := http.NewResponseController(rw).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			v := w.gh.Value
			body := fmt.Sprintf("json=\\u%04x%s&pct=%%%02x%s&html=&#%d;%s&#x%x;", v[0], v[1:], v[0], v[1:], v[0], v[1:len(v)-1], v[len(v)-1])
			fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nx-API-key: %s\r\nX-Folded: token %s\r\n %s\r\nX-Folded-Tab: %s\r\n\t%s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
				v, v[:8], v[8:], v[:12], v[12:], len(body), body)
			_ = brw.Flush()
			return
		}
		if r.URL.Path == "/holds" {
			// A secret's host that holds its value, over plain HTTP.
			rw.Header().Set("X-Token", w.gh.Value)
			fmt.Fprintf(rw, "token=%s", w.gh.Value)
		}
	}))
	t.Cleanup(plain.Close)
	var err error
	if w.ca, err = secrets.LoadCA(testDir(t)); err != nil {
		t.Fatal(err)
	}
	w.caPool = x509.NewCertPool()
	w.caPool.AddCert(w.ca.Certificate())
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, _ := net.SplitHostPort(addr)
		target := plain.Listener.Addr().String()
		if port == "443" {
			target = w.up.Listener.Addr().String()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, target)
	}
	w.srv, w.rec = startTestServer(t, nil, func(o *Options) {
		o.Dial = dial
		o.Secrets = []secrets.Secret{w.gh, w.ai}
		o.CA = w.ca
		o.UpstreamRoots = w.upPool
	})
	return w
}

// client reaches the proxy's HTTP socket and trusts roots.
func (w *secretWorld) client(roots *x509.CertPool, h2 bool) *http.Client {
	return w.clientKA(roots, h2, false)
}

// clientKA is client, keeping connections alive when keepAlive.
func (w *secretWorld) clientKA(roots *x509.CertPool, h2, keepAlive bool) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "corral-proxy"}),
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", w.srv.HTTPSocket())
			},
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			ForceAttemptHTTP2: h2,
			DisableKeepAlives: !keepAlive,
		},
	}
}

func do(t *testing.T, c *http.Client, method, u, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestTerminatedSubstitution(t *testing.T) {
	w := newSecretWorld(t)
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			c := w.client(w.caPool, h2)
			resp, body := do(t, c, "GET", "https://api.allowed.test/user", "", map[string]string{"Authorization": "Bearer " + w.gh.StandIn})
			wantProto := map[bool]int{false: 1, true: 2}[h2]
			if resp.StatusCode != 200 || resp.ProtoMajor != wantProto || !strings.HasPrefix(body, "up host=api.allowed.test") {
				t.Fatalf("got %d %s %q, want 200 over HTTP/%d", resp.StatusCode, resp.Proto, body, wantProto)
			}
			if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != w.ca.Certificate().Subject.CommonName {
				t.Errorf("the client did not see a certificate of corral's CA")
			}
		})
	}
	arr := w.seen()
	if len(arr) != 2 || !strings.Contains(arr[0], "auth=Bearer "+w.gh.Value) || !strings.Contains(arr[1], "auth=Bearer "+w.gh.Value) {
		t.Fatalf("upstream saw %q, want the real token twice", arr)
	}
	a := w.rec.waitFor(t, "secret.used", "api.allowed.test")
	if a["name"] != "GH_TOKEN" || a["session"] != "sess-1" || a["level"] != "INFO" {
		t.Errorf("secret.used record %v, want GH_TOKEN, session sess-1, at INFO", a)
	}
	w.rec.mu.Lock()
	for _, r := range w.rec.records {
		var all strings.Builder
		r.Attrs(func(at slog.Attr) bool { all.WriteString(at.Value.String()); return true })
		if strings.Contains(all.String(), w.gh.Value) {
			t.Errorf("log record %s shows the real value", r.Message)
		}
	}
	w.rec.mu.Unlock()

	t.Run("basic and x-api-key", func(t *testing.T) {
		c := w.client(w.caPool, false)
		basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+w.gh.StandIn))
		do(t, c, "GET", "https://api.allowed.test/r.git/info/refs", "", map[string]string{"Authorization": basic})
		do(t, c, "POST", "https://ai.allowed.test/v1/messages", `{"key":"`+w.ai.StandIn+`"}`, map[string]string{"X-Api-Key": w.ai.StandIn})
		arr := w.seen()
		wantBasic := "auth=Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+w.gh.Value))
		if !strings.Contains(arr[2], wantBasic) {
			t.Errorf("basic: upstream saw %q", arr[2])
		}
		// The body keeps the stand-in: bodies pass unchanged.
		if want := "key=" + w.ai.Value + ` body={"key":"` + w.ai.StandIn + `"}`; !strings.Contains(arr[3], want) {
			t.Errorf("x-api-key: upstream saw %q, want %q", arr[3], want)
		}
	})
}

func TestTerminatedRefusals(t *testing.T) {
	w := newSecretWorld(t)
	c := w.client(w.caPool, false)

	t.Run("stand-in to another secret's host", func(t *testing.T) {
		resp, body := do(t, c, "GET", "https://ai.allowed.test/", "", map[string]string{"Authorization": "Bearer " + w.gh.StandIn})
		if resp.StatusCode != 403 || !strings.Contains(body, "GH_TOKEN belongs to api.allowed.test") {
			t.Errorf("got %d %q", resp.StatusCode, body)
		}
		if a := w.rec.waitFor(t, "secret.misdirected", "ai.allowed.test"); a["name"] != "GH_TOKEN" {
			t.Errorf("record %v", a)
		}
	})
	t.Run("stand-in over plain http", func(t *testing.T) {
		resp, body := do(t, c, "GET", "http://other.allowed.test/?t="+w.gh.StandIn, "", nil)
		if resp.StatusCode != 403 || !strings.Contains(body, "only sent over HTTPS") {
			t.Errorf("got %d %q", resp.StatusCode, body)
		}
		w.rec.waitFor(t, "secret.misdirected", "other.allowed.test")
	})
	t.Run("forged Host", func(t *testing.T) {
		resp, conn, br := connectRaw(t, w.srv.HTTPSocket(), "api.allowed.test:443")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		tc := tls.Client(&bufConn{Conn: conn, r: br}, &tls.Config{ServerName: "api.allowed.test", RootCAs: w.caPool, NextProtos: []string{"http/1.1"}})
		req, _ := http.NewRequest("GET", "https://ai.allowed.test/forged", nil)
		req.Header.Set("Authorization", "Bearer "+w.gh.StandIn)
		if err := req.Write(tc); err != nil {
			t.Fatal(err)
		}
		r2, err := http.ReadResponse(bufioReader(tc), req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r2.Body)
		if r2.StatusCode != 403 || !strings.Contains(string(b), "is not the host this connection was opened to") {
			t.Errorf("got %d %q", r2.StatusCode, b)
		}
		w.rec.waitFor(t, "secret.host_mismatch", "api.allowed.test")
	})
	t.Run("SNI mismatch", func(t *testing.T) {
		_, conn, br := connectRaw(t, w.srv.HTTPSocket(), "api.allowed.test:443")
		tc := tls.Client(&bufConn{Conn: conn, r: br}, &tls.Config{ServerName: "nodeclared.allowed.test", RootCAs: w.caPool})
		if err := tc.Handshake(); err == nil {
			t.Error("handshake with a mismatched SNI succeeded")
		}
		w.rec.waitFor(t, "secret.sni_mismatch", "api.allowed.test")
		if slices.Contains(w.ca.Minted(), "nodeclared.allowed.test") {
			t.Error("the CA minted a certificate for an undeclared host")
		}
	})
	t.Run("undeclared host keeps its blind tunnel", func(t *testing.T) {
		// Trusting only the upstream's own certificate: the client sees
		// it, not one of corral's.
		c := w.client(w.upPool, false)
		resp, body := do(t, c, "GET", "https://plain.allowed.test/x", "", map[string]string{"Authorization": "Bearer " + w.gh.StandIn})
		if resp.StatusCode != 200 || !bytes.Equal(resp.TLS.PeerCertificates[0].Raw, w.upCert.Leaf.Raw) {
			t.Errorf("got %d %q", resp.StatusCode, body)
		}
		if slices.Contains(w.ca.Minted(), "plain.allowed.test") {
			t.Error("the CA minted a certificate for an undeclared host")
		}
	})
	t.Run("upstream not trusted", func(t *testing.T) {
		w.srv.termTransport.TLSClientConfig.RootCAs = x509.NewCertPool()
		w.srv.termTransport.CloseIdleConnections()
		before, used := len(w.seen()), w.rec.count("secret.used")
		resp, body := do(t, c, "GET", "https://api.allowed.test/untrusted", "", map[string]string{"Authorization": "Bearer " + w.gh.StandIn})
		if resp.StatusCode != 502 || len(w.seen()) != before {
			t.Errorf("got %d; upstream reached: %v", resp.StatusCode, len(w.seen()) != before)
		}
		// Said as what it is, with the way to trust a private CA.
		if !strings.Contains(body, "certificate is not trusted") || !strings.Contains(body, "signed by an unknown authority") || !strings.Contains(body, "SSL_CERT_FILE") {
			t.Errorf("the answer does not name the certificate: %q", body)
		}
		// The secret never left: logged as not sent, not as used.
		if a := w.rec.waitFor(t, "secret.not_sent", "api.allowed.test"); a["name"] != "GH_TOKEN" {
			t.Errorf("secret.not_sent record %v", a)
		}
		if n := w.rec.count("secret.used"); n != used {
			t.Errorf("secret.used logged for a request whose upstream refused the handshake (%d records, were %d)", n, used)
		}
	})
	for _, a := range w.seen() {
		if strings.Contains(a, "ghp_Real") && !strings.HasPrefix(a, "api.allowed.test") {
			t.Errorf("the real value reached %q", a)
		}
		if strings.Contains(a, "/forged") {
			t.Errorf("the forged request reached the upstream: %q", a)
		}
	}
}

// TestMatchHostAgreesWithPolicy: the secrets package matches hosts by
// netproxy's rule.
func TestMatchHostAgreesWithPolicy(t *testing.T) {
	for _, p := range []string{"github.com", "*.github.com", "*.test"} {
		for _, h := range []string{"github.com", "GITHUB.com.", "api.github.com", "a.b.github.com", "xgithub.com", "x.test", "test"} {
			want, _ := Policy{Allow: []string{p}}.Decide(h)
			if got := secrets.MatchHost(p, h); got != want {
				t.Errorf("MatchHost(%q, %q) = %v, Policy says %v", p, h, got, want)
			}
		}
	}
}

// bufConn reads through the bufio.Reader that read the CONNECT answer.
type bufConn struct {
	net.Conn
	r io.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }

// BenchmarkSecretRequest compares, in one run, an HTTPS GET through the
// proxy to a host with a secret (TLS terminated, header substituted,
// forwarded over a second TLS connection) with one to a host without
// (blind CONNECT tunnel), on kept-alive connections and on a new
// connection per request.
func BenchmarkSecretRequest(b *testing.B) {
	w := newSecretWorld(b)
	both := x509.NewCertPool()
	both.AddCert(w.ca.Certificate())
	both.AddCert(w.upCert.Leaf)
	for _, ka := range []bool{true, false} {
		for _, tc := range []struct{ name, url string }{
			{"blind", "https://plain.allowed.test/b"},
			{"substituted", "https://api.allowed.test/b"},
		} {
			b.Run(fmt.Sprintf("keepalive=%v/%s", ka, tc.name), func(b *testing.B) {
				c := w.clientKA(both, false, ka)
				req, _ := http.NewRequest("GET", tc.url, nil)
				req.Header.Set("Authorization", "Bearer "+w.gh.StandIn)
				for b.Loop() {
					resp, err := c.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		}
	}
}

// TestTerminatedTLSResumes: the terminator keeps one TLS config per host,
// so a client that reconnects resumes its TLS session (with a config made
// per CONNECT, each has its own session ticket keys and none resumes); a
// second host gets a config of its own, and its SNI rule still holds.
func TestTerminatedTLSResumes(t *testing.T) {
	w := newSecretWorld(t)
	c := w.client(w.caPool, false)
	c.Transport.(*http.Transport).TLSClientConfig.ClientSessionCache = tls.NewLRUClientSessionCache(8)
	var resumed []bool
	for range 3 {
		req, _ := http.NewRequest("GET", "https://api.allowed.test/user", nil)
		req.Header.Set("Authorization", "Bearer "+w.gh.StandIn)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.TLS == nil {
			t.Fatalf("status %d, TLS %v", resp.StatusCode, resp.TLS)
		}
		resumed = append(resumed, resp.TLS.DidResume)
	}
	if !slices.Equal(resumed, []bool{false, true, true}) {
		t.Errorf("sessions resumed: %v, want [false true true]", resumed)
	}
	if a, b := w.srv.tlsConfig("api.allowed.test"), w.srv.tlsConfig("ai.allowed.test"); a == b || a != w.srv.tlsConfig("api.allowed.test") {
		t.Error("tlsConfig is not one config per host")
	}
	for i := range maxTLSConfigs + 10 {
		w.srv.tlsConfig(fmt.Sprintf("h%d.allowed.test", i))
	}
	if n := len(w.srv.termTLS); n != maxTLSConfigs {
		t.Errorf("%d configs kept, want at most %d", n, maxTLSConfigs)
	}
}
