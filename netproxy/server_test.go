package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

func TestHTTPProxyPlainAllowed(t *testing.T) {
	u := newUpstreams(t)
	s, rec := startTestServer(t, u, nil)
	c := proxyClient(s.HTTPSocket(), u.ca.pool)
	code, body, _ := get(t, c, "http://api.allowed.test/x?y=1")
	if code != http.StatusOK || body != "hello host=api.allowed.test path=/x tls=false" {
		t.Fatalf("got %d %q", code, body)
	}
	a := rec.waitFor(t, "network.allowed", "api.allowed.test")
	if a["level"] != "DEBUG" || a["proto"] != "http" || a["session"] != "sess-1" || a["port"] != "80" {
		t.Errorf("network.allowed record = %v", a)
	}
}

func TestHTTPProxyConnectTLS(t *testing.T) {
	u := newUpstreams(t)
	s, rec := startTestServer(t, u, nil)
	c := proxyClient(s.HTTPSocket(), u.ca.pool)
	for _, host := range []string{"allowed.test", "api.allowed.test", "API.Allowed.TEST"} {
		code, body, _ := get(t, c, "https://"+host+"/tls")
		if code != http.StatusOK || !strings.Contains(body, "path=/tls tls=true") {
			t.Fatalf("%s: got %d %q", host, code, body)
		}
	}
	if a := rec.waitFor(t, "network.allowed", "api.allowed.test"); a["proto"] != "connect" || a["port"] != "443" {
		t.Errorf("network.allowed record = %v", a)
	}
}

func TestHTTPProxyDenied(t *testing.T) {
	u := newUpstreams(t)
	s, rec := startTestServer(t, u, nil)
	c := proxyClient(s.HTTPSocket(), u.ca.pool)
	for _, tc := range []struct{ url, host string }{
		{"http://evil.test/", "evil.test"},
		{"http://allowed.test.evil/", "allowed.test.evil"},
		{"http://blocked.allowed.test/", "blocked.allowed.test"},
		{"http://127.0.0.1:1/", "127.0.0.1"},
		{"http://[::1]:1/", "::1"},
	} {
		code, body, hdr := get(t, c, tc.url)
		want := "blocked by corral network allowlist: " + tc.host
		if code != http.StatusForbidden || strings.TrimSpace(body) != want {
			t.Errorf("%s: got %d %q, want 403 %q", tc.url, code, body, want)
		}
		if hdr.Get("X-Corral-Blocked") != tc.host {
			t.Errorf("%s: X-Corral-Blocked = %q", tc.url, hdr.Get("X-Corral-Blocked"))
		}
		a := rec.waitFor(t, "network.denied", tc.host)
		if a["session"] != "sess-1" || a["proto"] != "http" || a["level"] != "INFO" || a["reason"] == "" {
			t.Errorf("%s: network.denied record = %v", tc.url, a)
		}
	}
}

// connectRaw sends a CONNECT over a fresh connection to the socket and
// returns the response and the connection.
func connectRaw(t *testing.T, sock, target string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return resp, c, br
}

func TestHTTPProxyConnectDenied(t *testing.T) {
	u := newUpstreams(t)
	s, rec := startTestServer(t, u, nil)
	for _, target := range []string{"evil.test:443", "blocked.allowed.test:443", "127.0.0.1:443", "[::1]:443"} {
		resp, _, _ := connectRaw(t, s.HTTPSocket(), target)
		body, _ := io.ReadAll(resp.Body)
		host, _, _ := net.SplitHostPort(target)
		want := "blocked by corral network allowlist: " + host
		if resp.StatusCode != http.StatusForbidden || strings.TrimSpace(string(body)) != want {
			t.Errorf("CONNECT %s: got %d %q, want 403 %q", target, resp.StatusCode, body, want)
		}
		if a := rec.waitFor(t, "network.denied", host); a["proto"] != "connect" {
			t.Errorf("network.denied record = %v", a)
		}
	}
	// The Go client reports the refusal as an error.
	c := proxyClient(s.HTTPSocket(), u.ca.pool)
	if _, err := c.Get("https://evil.test/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("GET https://evil.test/ through the proxy: err = %v, want Forbidden", err)
	}
}

func TestHTTPProxyConnectRelaysHalfClose(t *testing.T) {
	u := newUpstreams(t)
	s, _ := startTestServer(t, u, nil)
	resp, c, br := connectRaw(t, s.HTTPSocket(), "echo.allowed.test:7")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	msg := strings.Repeat("echo through the tunnel\n", 5000)
	go func() {
		_, _ = io.WriteString(c, msg)
		_ = c.(*net.UnixConn).CloseWrite()
	}()
	got, err := io.ReadAll(br)
	if err != nil || string(got) != msg {
		t.Fatalf("read %d bytes (err %v), want the %d sent back", len(got), err, len(msg))
	}
}

func TestHTTPProxyConnectBadTarget(t *testing.T) {
	u := newUpstreams(t)
	s, _ := startTestServer(t, u, nil)
	for _, target := range []string{"allowed.test", "allowed.test:0", "allowed.test:https", "allowed.test:70000", ":443"} {
		resp, _, _ := connectRaw(t, s.HTTPSocket(), target)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("CONNECT %s: %s, want 400", target, resp.Status)
		}
	}
}

func TestHTTPProxyRejectsOriginForm(t *testing.T) {
	u := newUpstreams(t)
	s, _ := startTestServer(t, u, nil)
	c, err := net.Dial("unix", s.HTTPSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /secret HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("origin-form request: %s, want 400", resp.Status)
	}
}

func TestHTTPProxyHostHeaderIgnored(t *testing.T) {
	// RFC 9112 section 3.2.2: the Host header of an absolute-form request
	// is replaced by the URI's authority, so it cannot name another site.
	u := newUpstreams(t)
	s, _ := startTestServer(t, u, nil)
	c, err := net.Dial("unix", s.HTTPSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET http://api.allowed.test/h HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "host=api.allowed.test ") {
		t.Errorf("upstream saw %q, want host=api.allowed.test", body)
	}
}

func TestSOCKS5WithXNetProxy(t *testing.T) {
	u := newUpstreams(t)
	s, rec := startTestServer(t, u, nil)
	d, err := proxy.SOCKS5("unix", s.SOCKSSocket(), nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	cd := d.(proxy.ContextDialer)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:       cd.DialContext,
		DisableKeepAlives: true,
	}}
	code, body, _ := get(t, client, "http://api.allowed.test/socks")
	if code != http.StatusOK || !strings.Contains(body, "host=api.allowed.test path=/socks") {
		t.Fatalf("got %d %q", code, body)
	}
	if a := rec.waitFor(t, "network.allowed", "api.allowed.test"); a["proto"] != "socks5" {
		t.Errorf("network.allowed record = %v", a)
	}

	for _, target := range []string{"evil.test:80", "blocked.allowed.test:80", "127.0.0.1:80", "[::1]:80", "allowed.test.evil:80"} {
		_, err := cd.DialContext(context.Background(), "tcp", target)
		if err == nil || !strings.Contains(err.Error(), "connection not allowed by ruleset") {
			t.Errorf("SOCKS5 CONNECT %s: err = %v, want connection not allowed by ruleset", target, err)
		}
		host, _, _ := net.SplitHostPort(target)
		if a := rec.waitFor(t, "network.denied", host); a["proto"] != "socks5" || a["session"] != "sess-1" {
			t.Errorf("network.denied record = %v", a)
		}
	}
}

// socksExchange writes raw bytes to the SOCKS socket and returns what the
// server answers before closing the connection.
func socksExchange(t *testing.T, sock string, send []byte) []byte {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(send); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading (the server must answer and close): %v", err)
	}
	return got
}

func TestSOCKS5Protocol(t *testing.T) {
	u := newUpstreams(t)
	s, _ := startTestServer(t, u, func(o *Options) { o.HeaderTimeout = 300 * time.Millisecond })
	reply := func(rep byte) string {
		return string([]byte{5, 0, 5, rep, 0, 1, 0, 0, 0, 0, 0, 0})
	}
	for _, tc := range []struct {
		name string
		send []byte
		want string
	}{
		{"bad version", []byte{4, 1, 0, 80, 127, 0, 0, 1, 0}, ""},
		{"http on socks", []byte("GET / HTTP/1.1\r\n\r\n"), ""},
		{"no acceptable method", []byte{5, 1, 2}, "\x05\xff"},
		{"zero methods", []byte{5, 0}, "\x05\xff"},
		{"bind command", []byte{5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 80}, reply(0x07)},
		{"udp associate", []byte{5, 1, 0, 5, 3, 0, 1, 127, 0, 0, 1, 0, 80}, reply(0x07)},
		{"bad address type", []byte{5, 1, 0, 5, 1, 0, 9, 1, 2, 3, 4, 0, 80}, reply(0x08)},
		{"bad request version", []byte{5, 1, 0, 4, 1, 0, 1, 127, 0, 0, 1, 0, 80}, reply(0x01)},
		{"ipv4 refused", []byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80}, reply(0x02)},
		{"empty domain refused", []byte{5, 1, 0, 5, 1, 0, 3, 0, 0, 80}, reply(0x02)},
		{"domain refused", append([]byte{5, 1, 0, 5, 1, 0, 3, 9}, "evil.test\x00\x50"...), reply(0x02)},
		{"ip in domain refused", append([]byte{5, 1, 0, 5, 1, 0, 3, 9}, "127.0.0.1\x00\x50"...), reply(0x02)},
		{"nul in domain refused", append([]byte{5, 1, 0, 5, 1, 0, 3, 13}, "allowed.test\x00\x00\x50"...), reply(0x02)},
		{"truncated request", []byte{5, 1, 0, 5, 1, 0, 3, 20, 'a'}, "\x05\x00"}, // times out after the method reply
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(socksExchange(t, s.SOCKSSocket(), tc.send)); got != tc.want {
				t.Errorf("got % x, want % x", got, tc.want)
			}
		})
	}
}

func TestSOCKS5DialFailureReply(t *testing.T) {
	u := newUpstreams(t)
	s, _ := startTestServer(t, u, func(o *Options) {
		o.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, "127.0.0.1:1") // nothing listens there
		}
	})
	send := append([]byte{5, 1, 0, 5, 1, 0, 3, 12}, "allowed.test\x00\x50"...)
	got := socksExchange(t, s.SOCKSSocket(), send)
	if want := string([]byte{5, 0, 5, 0x05, 0, 1, 0, 0, 0, 0, 0, 0}); string(got) != want {
		t.Errorf("got % x, want connection refused reply % x", got, want)
	}
}

func TestDefaultDialRefusesLocalAddresses(t *testing.T) {
	u := newUpstreams(t)
	_, port, _ := net.SplitHostPort(u.plain.Listener.Addr().String())
	s, rec := startTestServer(t, u, func(o *Options) {
		o.Dial = nil
		o.Policy = Policy{Allow: []string{"localhost", "127.0.0.1"}}
	})
	c := proxyClient(s.HTTPSocket(), nil)
	// An allowed name that resolves to loopback is refused ...
	code, body, _ := get(t, c, "http://localhost:"+port+"/")
	if code != http.StatusForbidden || !strings.Contains(body, "blocked by corral network allowlist: localhost") {
		t.Errorf("localhost: got %d %q, want 403", code, body)
	}
	if a := rec.waitFor(t, "network.denied", "localhost"); !strings.Contains(a["reason"], "loopback") {
		t.Errorf("network.denied record = %v", a)
	}
	resp, _, _ := connectRaw(t, s.HTTPSocket(), "localhost:"+port)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT localhost: %s, want 403", resp.Status)
	}
	d, _ := proxy.SOCKS5("unix", s.SOCKSSocket(), nil, proxy.Direct)
	if _, err := d.Dial("tcp", "localhost:"+port); err == nil || !strings.Contains(err.Error(), "not allowed by ruleset") {
		t.Errorf("SOCKS5 localhost: err = %v, want not allowed by ruleset", err)
	}
	// ... while an IP address the policy names exactly is dialled.
	code, body, _ = get(t, c, "http://127.0.0.1:"+port+"/ip")
	if code != http.StatusOK || !strings.Contains(body, "path=/ip") {
		t.Errorf("127.0.0.1: got %d %q, want 200", code, body)
	}
}

func TestRefuseLocal(t *testing.T) {
	own := ownAddrs(t)
	for _, tc := range []struct {
		addr    string
		refused bool
	}{
		{"127.0.0.1:80", true},
		{"127.8.9.10:80", true},
		{"[::1]:80", true},
		{"[::ffff:127.0.0.1]:80", true},
		{"169.254.169.254:80", true},
		{"[fe80::1]:80", true},
		{"0.0.0.0:80", true},
		{"[::]:80", true},
		{"224.0.0.1:80", true},
		{"10.1.2.3:80", false},
		{"192.0.2.1:443", false},
		{"[2001:db8::1]:443", false},
	} {
		if ap := netip.MustParseAddrPort(tc.addr); !tc.refused && slices.Contains(own, ap.Addr()) {
			continue // this machine happens to have the address
		}
		err := refuseLocal(context.Background(), "tcp", tc.addr, nil)
		if got := errors.Is(err, ErrLocalTarget); got != tc.refused {
			t.Errorf("refuseLocal(%s) = %v, want refused=%v", tc.addr, err, tc.refused)
		}
	}
	// Every address of this machine's interfaces (its LAN address, a
	// docker0 bridge, ...) is refused too.
	for _, a := range own {
		addr := netip.AddrPortFrom(a, 80).String()
		err := refuseLocal(context.Background(), "tcp", addr, nil)
		if !errors.Is(err, ErrLocalTarget) || !strings.Contains(err.Error(), "interface of this machine") {
			t.Errorf("refuseLocal(%s), an address of this machine: %v, want refused", addr, err)
		}
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(Options{Policy: Policy{Allow: []string{"*"}}, Dir: testDir(t)}); !errors.Is(err, ErrInvalidPattern) {
		t.Errorf("invalid policy: err = %v", err)
	}
	if _, err := Start(Options{}); err == nil {
		t.Error("empty Dir: no error")
	}
	long := testDir(t) + "/" + strings.Repeat("d", 100)
	if _, err := Start(Options{Dir: long}); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("long path: err = %v", err)
	}
	dir := testDir(t)
	if err := os.WriteFile(dir+"/"+HTTPSocketName, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file in the way: err = %v", err)
	}
}

func TestStartSocketModesAndStaleSockets(t *testing.T) {
	dir := testDir(t) + "/sub"
	s, err := Start(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{s.HTTPSocket(), s.SOCKSSocket()} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want socket 0600", p, fi.Mode())
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("created directory has mode %v, want 0700", fi.Mode().Perm())
	}
	// A second server over the same directory replaces the sockets (as
	// after a crash) ...
	s2, err := Start(Options{Dir: dir, SocketMode: 0o666})
	if err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if fi, _ := os.Lstat(s2.HTTPSocket()); fi.Mode().Perm() != 0o666 {
		t.Errorf("SocketMode 0666: got %v", fi.Mode().Perm())
	}
	_ = s.Close()
	if err := s2.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s2.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// ... and Close removes them.
	if _, err := os.Lstat(s2.SOCKSSocket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Close: %v", err)
	}
}

// TestMaxConns: past MaxConns open clients a proxy serves nobody new until
// one of them ends (the newcomer waits in the backlog, holding no
// descriptor of the server's); then it is served. For both proxies.
func TestMaxConns(t *testing.T) {
	u := newUpstreams(t)
	s, _ := startTestServer(t, u, func(o *Options) { o.MaxConns = 2 })
	for _, tc := range []struct {
		name  string
		sock  string
		greet []byte // what makes the server answer at once
		want  []byte
	}{
		{"http", s.HTTPSocket(), []byte("GET http://api.allowed.test/ HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"), []byte("HTTP/1.1 200")},
		{"socks", s.SOCKSSocket(), []byte{5, 1, 0}, []byte{5, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var held []net.Conn
			for range 2 {
				c, err := net.Dial("unix", tc.sock)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				// Served: it gets its answer.
				if _, err := c.Write(tc.greet); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, len(tc.want))
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(c, buf); err != nil || !bytes.Equal(buf, tc.want) {
					t.Fatalf("held client: %q, %v", buf, err)
				}
				held = append(held, c)
			}
			extra, err := net.Dial("unix", tc.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer extra.Close()
			if _, err := extra.Write(tc.greet); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, len(tc.want))
			_ = extra.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if n, err := extra.Read(buf); err == nil || n > 0 {
				t.Fatalf("a third client was served past MaxConns 2: %q", buf[:n])
			}
			held[0].Close()
			_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(extra, buf); err != nil || !bytes.Equal(buf, tc.want) {
				t.Fatalf("the waiting client after one ended: %q, %v", buf, err)
			}
		})
	}
}
