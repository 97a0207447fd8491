package netproxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitGoroutines waits until the number of goroutines is back to at most
// base+slack, and fails listing them if it never is (a minute: only a
// goroutine that never ends waits that long).
func waitGoroutines(t *testing.T, base, slack int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+slack {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines left, started with %d:\n%s", n, base, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// closedWithin reads from c until it is closed, failing if that takes
// longer than limit; it returns what was read.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(limit))
	got, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open after %v", limit)
	}
	return got
}

func TestHostileClients(t *testing.T) {
	u := newUpstreams(t)
	base := runtime.NumGoroutine()
	// Two servers, so that no verdict rests on how fast a loaded machine
	// is: s never times a header out within the test (whatever it answers
	// is the answer to what was sent, and stalled clients on it stay open
	// for as long as the test runs), short does, and only its closing is
	// checked (never before the timeout, and at all).
	const headerTimeout = 300 * time.Millisecond
	s, rec := startTestServer(t, u, func(o *Options) { o.HeaderTimeout = time.Hour })
	short, _ := startTestServer(t, u, func(o *Options) { o.HeaderTimeout = headerTimeout })
	dial := func(sock string) net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	// Stalled clients on both sockets: a header that never ends, a SOCKS
	// greeting cut short. They hold a connection each and must not keep
	// anyone else waiting: a request next to them is answered while they
	// are all still open (a server that served clients one at a time would
	// never answer it).
	stall := func(srv *Server) []net.Conn {
		var stalled []net.Conn
		for range 20 {
			c := dial(srv.HTTPSocket())
			_, _ = io.WriteString(c, "GET http://api.allowed.test/ HTTP/1.1\r\nHost: api.allowed.test\r\nX-Slow: ")
			stalled = append(stalled, c)
			c = dial(srv.SOCKSSocket())
			_, _ = c.Write([]byte{5})
			stalled = append(stalled, c)
		}
		return stalled
	}
	stalled := stall(s)
	client := proxyClient(s.HTTPSocket(), u.ca.pool)
	if code, _, _ := get(t, client, "http://api.allowed.test/meanwhile"); code != http.StatusOK {
		t.Fatalf("request next to stalled clients: %d", code)
	}
	for i, c := range stalled {
		_ = c.SetReadDeadline(time.Now())
		if _, err := c.Read(make([]byte, 1)); err == nil || !os.IsTimeout(err) {
			t.Fatalf("stalled client %d was answered or closed (%v) by a server with no header timeout", i, err)
		}
	}
	// On the server with a header timeout, each stalled client is closed,
	// and none before its time.
	start := time.Now()
	for _, c := range stall(short) {
		closedWithin(t, c, time.Minute)
	}
	if d := time.Since(start); d < headerTimeout/2 {
		t.Errorf("stalled clients closed after %v, before the header timeout", d)
	}

	t.Run("1 MB header line", func(t *testing.T) {
		c := dial(s.HTTPSocket())
		var wg sync.WaitGroup
		wg.Go(func() {
			line := "GET http://api.allowed.test/ HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\n\r\n"
			_, _ = io.WriteString(c, line) // fails once the server gives up
		})
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Errorf("no answer to a 1 MB header: %v", err)
		} else if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("status %s, want 431", resp.Status)
		}
		_ = c.Close()
		wg.Wait()
	})

	t.Run("1 MB SOCKS garbage", func(t *testing.T) {
		c := dial(s.SOCKSSocket())
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = c.Write(bytes.Repeat([]byte{5, 255}, 1<<19)) })
		closedWithin(t, c, time.Minute)
		_ = c.Close()
		wg.Wait()
	})

	t.Run("header never finished", func(t *testing.T) {
		c := dial(short.HTTPSocket())
		_, _ = io.WriteString(c, "CONNECT api.allowed.test:443 HTTP/1.1\r\n")
		start := time.Now()
		closedWithin(t, c, time.Minute)
		if d := time.Since(start); d < headerTimeout/2 {
			t.Errorf("closed after %v, before the header timeout", d)
		}
	})

	t.Run("CONNECT to a denied host", func(t *testing.T) {
		resp, _, _ := connectRaw(t, s.HTTPSocket(), "denied.example:443")
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("status %s, want 403", resp.Status)
		}
		rec.waitFor(t, "network.denied", "denied.example")
	})

	t.Run("SOCKS bad version", func(t *testing.T) {
		c := dial(s.SOCKSSocket())
		_, _ = c.Write([]byte{4, 1, 0, 80, 10, 0, 0, 1, 'u', 0})
		if got := closedWithin(t, c, time.Minute); len(got) != 0 {
			t.Errorf("answer % x to a SOCKS4 request, want none", got)
		}
	})

	// Open tunnels through both proxies, then close the server under them.
	resp, tunnel, _ := connectRaw(t, s.HTTPSocket(), "echo.allowed.test:7")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	socks := dial(s.SOCKSSocket())
	_, _ = socks.Write(append([]byte{5, 1, 0, 5, 1, 0, 3, 17}, "echo.allowed.test\x00\x07"...))
	reply := make([]byte, 12)
	_ = socks.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(socks, reply); err != nil || reply[3] != 0 {
		t.Fatalf("SOCKS CONNECT: reply % x, %v", reply, err)
	}
	for _, c := range []net.Conn{tunnel, socks} {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "ping"); err != nil {
			t.Fatal(err)
		}
		if b := make([]byte, 4); func() error { _, err := io.ReadFull(c, b); return err }() != nil || string(b) != "ping" {
			t.Fatalf("tunnel does not echo: %q", b)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return with open tunnels")
	}
	for _, c := range []net.Conn{tunnel, socks} {
		closedWithin(t, c, time.Minute)
	}
	if err := short.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	client.CloseIdleConnections()
	waitGoroutines(t, base, 3)
}

// BenchmarkConnectRoundTrip measures one sandbox-side connection through
// Forward and the HTTP proxy: TCP connect to the forwarder, CONNECT, the
// 200 answer, then one byte echoed by the upstream. Everything is on this
// machine; the dial to the upstream is a loopback TCP connect.
func BenchmarkConnectRoundTrip(b *testing.B) {
	u := newUpstreams(b)
	s, _ := startTestServer(b, u, nil)
	httpAddr, _ := startForwarders(b, s)
	req := []byte("CONNECT echo.allowed.test:7 HTTP/1.1\r\nHost: echo.allowed.test:7\r\n\r\n")
	const answer = "HTTP/1.1 200 Connection established\r\n\r\n"
	buf := make([]byte, len(answer))
	b.ResetTimer()
	for b.Loop() {
		c, err := net.Dial("tcp", httpAddr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != answer {
			b.Fatalf("answer %q, %v", buf, err)
		}
		if _, err := c.Write([]byte{'x'}); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:1]); err != nil || buf[0] != 'x' {
			b.Fatalf("echo %q, %v", buf[:1], err)
		}
		_ = c.Close()
	}
}

// BenchmarkSOCKSRoundTrip is BenchmarkConnectRoundTrip through the SOCKS5
// proxy.
func BenchmarkSOCKSRoundTrip(b *testing.B) {
	u := newUpstreams(b)
	s, _ := startTestServer(b, u, nil)
	_, socksAddr := startForwarders(b, s)
	req := append([]byte{5, 1, 0, 5, 1, 0, 3, 17}, "echo.allowed.test\x00\x07"...)
	buf := make([]byte, 12)
	b.ResetTimer()
	for b.Loop() {
		c, err := net.Dial("tcp", socksAddr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil || buf[3] != 0 {
			b.Fatalf("reply % x, %v", buf, err)
		}
		if _, err := c.Write([]byte{'x'}); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:1]); err != nil || buf[0] != 'x' {
			b.Fatalf("echo %q, %v", buf[:1], err)
		}
		_ = c.Close()
	}
}
