package netproxy

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
)

// serveRawUpgrade answers an Upgrade request the way a WebSocket server
// that reflects the credential does: 101, then one unmasked text frame
// holding tok (RFC 6455 section 5.2). On /ws-ext the 101 switches on an
// extension the client did not get to offer.
func serveRawUpgrade(w http.ResponseWriter, r *http.Request, tok string) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	ext := ""
	if r.URL.Path == "/ws-ext" {
		ext = "Sec-WebSocket-Extensions: permessage-deflate\r\n"
	}
	payload := "token=" + tok
	switch r.URL.Path {
	case "/ws-frag":
		// The value in the reason phrase, and cut across the fragments
		// of messages, with control frames between them (RFC 6455
		// section 5.4), in a ping and in the close reason; each frame
		// flushed on its own.
		fmt.Fprintf(brw, "HTTP/1.1 101 %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", tok)
		for _, f := range [][]byte{
			wsFrame(false, wsText, "token="+tok[:7], false),
			wsFrame(true, 0, tok[7:]+" end", false),
			wsFrame(false, wsText, "a="+tok[:3], false),
			wsFrame(true, wsPing, tok, false),
			wsFrame(false, 0, tok[3:11], false),
			wsFrame(true, wsPong, "", false),
			wsFrame(true, 0, tok[11:]+" b", false),
			wsFrame(false, wsBinary, "\x00"+tok[:1], false),
			wsFrame(true, 0, tok[1:], false),
			wsFrame(true, wsClose, "\x03\xe8bye "+tok, false),
		} {
			brw.Write(f)
			_ = brw.Flush()
		}
		return
	case "/ws-masked":
		// A masked frame of the server (RFC 6455 section 5.1) with a
		// zero key: the value in it as it is.
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Write(wsFrame(true, wsText, "ok", false))
		brw.Write(append([]byte{0x81, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...))
		_ = brw.Flush()
		return
	}
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n%s\r\n", ext)
	brw.Write([]byte{0x81, byte(len(payload))})
	brw.WriteString(payload)
	_ = brw.Flush()
}

// answerText is an answer as the client got it: its 1xx header fields,
// header fields, body and trailers, one "Name: value" per line.
func answerText(t *testing.T, c *http.Client, method, u string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var early strings.Builder
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		fmt.Fprintf(&early, "%d\n%s", code, headerLines(http.Header(h)))
		return nil
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), method, u, nil)
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
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, u, err)
	}
	return resp, early.String() + headerLines(resp.Header) + "\n" + string(body) + "\n" + headerLines(resp.Trailer)
}

func headerLines(h http.Header) string {
	var lines []string
	for k, vs := range h {
		for _, v := range vs {
			lines = append(lines, k+": "+v)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// TestScrubReflection: a secret's host that reflects the real token it
// got (headers, body in every encoding, compressed although identity was
// asked for, cut across writes, in a 103 and in trailers, cut short at
// the end) reaches the client with the stand-in in its place, over
// HTTP/1.1 and HTTP/2, with bearer and Basic credentials.
func TestScrubReflection(t *testing.T) {
	w := newSecretWorld(t)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+w.gh.StandIn))
	for _, h2 := range []bool{false, true} {
		c := w.client(w.caPool, h2)
		for _, q := range []string{"", "?enc=gzip", "?enc=deflate", "?enc=deflate-raw", "?enc=br", "?enc=gzip&split=1", "?split=1", "?early=1&trailer=1", "?cut=20"} {
			for _, auth := range []string{"Bearer " + w.gh.StandIn, basic} {
				t.Run(fmt.Sprintf("h2=%v%s %s", h2, q, strings.Fields(auth)[0]), func(t *testing.T) {
					mark := len(w.seen())
					// The client accepts gzip itself: the proxy asks for
					// identity all the same.
					resp, text := answerText(t, c, "GET", "https://api.allowed.test/reflect"+q, map[string]string{"Authorization": auth, "Accept-Encoding": "gzip, br"})
					if resp.StatusCode != 200 {
						t.Fatalf("status %d:\n%s", resp.StatusCode, text)
					}
					if leaks := testkit.ReflectLeaks(text, w.gh.Value, w.gh.StandIn); len(leaks) > 0 {
						t.Errorf("the answer shows the real value:\n%s\n--- answer:\n%s", strings.Join(leaks, "\n"), text)
					}
					if !strings.Contains(text, "Set-Cookie: session="+w.gh.StandIn) || !strings.Contains(text, "the token "+w.gh.StandIn+" expired") ||
						!strings.Contains(text, "callback?token="+w.gh.StandIn) {
						t.Errorf("the header fields do not hold the stand-in:\n%s", text)
					}
					if resp.Header.Get("Content-Encoding") != "" {
						t.Errorf("Content-Encoding %q reached the client: the body was decoded", resp.Header.Get("Content-Encoding"))
					}
					switch {
					case strings.Contains(q, "early"):
						if !strings.Contains(text, "103\n") || !strings.Contains(text, "style.css?t="+w.gh.StandIn) || !strings.Contains(text, "X-Echo-Trailer: "+w.gh.StandIn) {
							t.Errorf("the 103 or the trailer is missing or not scrubbed:\n%s", text)
						}
					case strings.Contains(q, "cut"):
						if !strings.HasSuffix(strings.TrimRight(text, "\n"), "cut="+w.gh.StandIn[:20]) {
							t.Errorf("the token cut short at the end is not replaced:\n%s", text)
						}
					}
					arr := w.seen()[mark:]
					if len(arr) != 1 || !strings.Contains(arr[0], `ae="identity"`) {
						t.Errorf("upstream saw %q, want one request asking for identity", arr)
					}
				})
			}
		}
	}
	a := w.rec.waitFor(t, "secret.scrubbed", "api.allowed.test")
	if a["names"] != "[GH_TOKEN]" || a["level"] != "INFO" {
		t.Errorf("secret.scrubbed record %v, want names [GH_TOKEN] at INFO", a)
	}
	w.rec.mu.Lock()
	defer w.rec.mu.Unlock()
	for _, r := range w.rec.records {
		var all strings.Builder
		r.Attrs(func(at slog.Attr) bool { all.WriteString(at.Value.String()); return true })
		if strings.Contains(all.String(), w.gh.Value) {
			t.Errorf("log record %s shows the real value", r.Message)
		}
	}
}

// TestScrubNoRanges: a request to a secret's host goes without Range and
// If-Range, so a stored value cannot be fetched a piece at a time, each
// piece too short to be known and scrubbed, and put together in the
// sandbox (a hostile trial did it a byte at a time).
func TestScrubNoRanges(t *testing.T) {
	w := newSecretWorld(t)
	c := w.client(w.caPool, false)
	for _, tc := range []struct {
		host, want string
	}{
		{"api.allowed.test", `range="" if-range=""`},
	} {
		mark := len(w.seen())
		resp, text := answerText(t, c, "GET", "https://"+tc.host+"/reflect", map[string]string{"Authorization": "Bearer " + w.gh.StandIn, "Range": "bytes=5-9", "If-Range": `"v1"`})
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d:\n%s", tc.host, resp.StatusCode, text)
		}
		if arr := w.seen()[mark:]; len(arr) != 1 || !strings.Contains(arr[0], tc.want) {
			t.Errorf("%s: upstream saw %q, want %s", tc.host, arr, tc.want)
		}
	}
}

// TestScrubOnlyBoundSecrets: a host's answers are scrubbed of its own
// secrets' values only: another secret's value that the host holds by
// other means passes (see secrets.ScrubPairs), and an undeclared host's
// tunnel is not looked into.
func TestScrubOnlyBoundSecrets(t *testing.T) {
	w := newSecretWorld(t)
	c := w.client(w.caPool, false)
	resp, body := do(t, c, "GET", "https://api.allowed.test/holds-ai", "", nil)
	if resp.StatusCode != 200 || body != "ai="+w.ai.Value {
		t.Errorf("got %d %q, want AI_KEY's value unchanged from GH_TOKEN's host", resp.StatusCode, body)
	}
}

// TestScrubPlainHTTP: a secret's host's answer over plain HTTP (where no
// real value is ever sent, but the host may hold one) is scrubbed too.
func TestScrubPlainHTTP(t *testing.T) {
	w := newSecretWorld(t)
	c := w.client(w.caPool, false)
	resp, body := do(t, c, "GET", "http://api.allowed.test/holds", "", nil)
	if resp.StatusCode != 200 || body != "token="+w.gh.StandIn || resp.Header.Get("X-Token") != w.gh.StandIn {
		t.Errorf("got %d %q %q, want the stand-in", resp.StatusCode, body, resp.Header.Get("X-Token"))
	}
}

// TestScrubRawHeaders: through the proxy, an answer whose header field
// has a name in an odd case (x-API-key), or whose value the server folded
// over lines (obs-fold, RFC 9112 section 5.2, which Go's client unfolds
// into one SP), and a body with the value escaped a character at a time,
// reach the client scrubbed.
func TestScrubRawHeaders(t *testing.T) {
	w := newSecretWorld(t)
	c := w.client(w.caPool, false)
	resp, text := answerText(t, c, "GET", "http://api.allowed.test/raw", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d:\n%s", resp.StatusCode, text)
	}
	v, si := w.gh.Value, w.gh.StandIn
	for _, leak := range []string{v, v[:8], v[8:], v[:12], v[12:], v[1:], v[1 : len(v)-1]} {
		if strings.Contains(text, leak) {
			t.Errorf("the answer shows %q of the real value:\n%s", leak, text)
		}
	}
	for _, want := range []string{
		"X-Api-Key: " + si,
		"X-Folded: token " + si[:8] + " " + si[8:],
		"X-Folded-Tab: " + si[:12] + " " + si[12:],
		fmt.Sprintf("json=\\u%04x%s&pct=%%%02x%s&html=&#%d;%s&#x%x;", si[0], si[1:], si[0], si[1:], si[0], si[1:len(si)-1], si[len(si)-1]),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the answer lacks %q:\n%s", want, text)
		}
	}
}

// TestScrubRefusals: TRACE and CONNECT to a secret's host, an upgrade to
// anything but WebSocket, a body in a coding corral cannot decode and a
// WebSocket answer that switched on an extension are refused; what a
// WebSocket server sends is scrubbed, and its client's extensions are not
// offered upstream.
func TestScrubRefusals(t *testing.T) {
	w := newSecretWorld(t)
	c := w.client(w.caPool, false)
	auth := map[string]string{"Authorization": "Bearer " + w.gh.StandIn}
	for _, m := range []string{"TRACE", "TRACK"} {
		mark := len(w.seen())
		resp, body := do(t, c, m, "https://api.allowed.test/reflect", "", auth)
		if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(body, "echoes the request") || strings.Contains(body, w.gh.Value) {
			t.Errorf("%s: got %d %q", m, resp.StatusCode, body)
		}
		if arr := w.seen()[mark:]; len(arr) != 0 {
			t.Errorf("%s reached the server: %q", m, arr)
		}
		w.rec.waitFor(t, "secret.request_refused", "api.allowed.test")
	}
	// Over plain HTTP too.
	if resp, body := do(t, c, "TRACE", "http://api.allowed.test/x", "", nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("plain TRACE: got %d %q", resp.StatusCode, body)
	}
	resp, body := do(t, c, "GET", "https://api.allowed.test/reflect?enc=zstd", "", auth)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"zstd"`) || strings.Contains(body, w.gh.Value) {
		t.Errorf("zstd body: got %d %q", resp.StatusCode, body)
	}
	w.rec.waitFor(t, "secret.response_refused", "api.allowed.test")

	upgrade := func(t *testing.T, path, proto string) (*http.Response, string) {
		t.Helper()
		_, conn, br := connectRaw(t, w.srv.HTTPSocket(), "api.allowed.test:443")
		tc := tls.Client(&bufConn{Conn: conn, r: br}, &tls.Config{ServerName: "api.allowed.test", RootCAs: w.caPool, NextProtos: []string{"http/1.1"}})
		defer tc.Close()
		req, _ := http.NewRequest("GET", "https://api.allowed.test"+path, nil)
		req.Header.Set("Authorization", "Bearer "+w.gh.StandIn)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", proto)
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		req.Header.Set("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")
		if err := req.Write(tc); err != nil {
			t.Fatal(err)
		}
		rbr := bufioReader(tc)
		resp, err := http.ReadResponse(rbr, req)
		if err != nil {
			t.Fatal(err)
		}
		var rest []byte
		if resp.StatusCode == http.StatusSwitchingProtocols {
			rest, _ = io.ReadAll(rbr)
		} else {
			rest, _ = io.ReadAll(resp.Body)
		}
		return resp, string(rest)
	}
	t.Run("websocket", func(t *testing.T) {
		mark := len(w.seen())
		resp, rest := upgrade(t, "/ws", "websocket")
		if resp.StatusCode != http.StatusSwitchingProtocols || !strings.Contains(rest, "token="+w.gh.StandIn) || strings.Contains(rest, w.gh.Value) {
			t.Errorf("got %d, frames %q: want the stand-in", resp.StatusCode, rest)
		}
		if arr := w.seen()[mark:]; len(arr) != 1 || !strings.Contains(arr[0], `ext=""`) || !strings.Contains(arr[0], "auth=Bearer "+w.gh.Value) {
			t.Errorf("upstream saw %q, want the real token and no extension offered", arr)
		}
	})
	t.Run("websocket fragmented", func(t *testing.T) {
		resp, rest := upgrade(t, "/ws-frag", "websocket")
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Status != "101 Switching Protocols" {
			t.Errorf("status line %q, want the standard 101", resp.Status)
		}
		if strings.Contains(rest, w.gh.Value) || strings.Contains(resp.Status, w.gh.Value) {
			t.Errorf("the real value reached the client: %q %q", resp.Status, rest)
		}
		got, err := parseWS([]byte(rest))
		s := w.gh.StandIn
		want := []wsMsg{{1, "token=" + s + " end"}, {9, s}, {0xA, ""}, {1, "a=" + s + " b"}, {2, "\x00" + s}, {8, "\x03\xe8bye " + s}}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("the client got %v (%v), want %v\n%q", got, err, want, rest)
		}
		w.rec.waitForAttr(t, "secret.scrubbed", "where", "status line")
		w.rec.waitForAttr(t, "secret.scrubbed", "where", "websocket messages")
	})
	t.Run("websocket masked frame", func(t *testing.T) {
		resp, rest := upgrade(t, "/ws-masked", "websocket")
		if resp.StatusCode != http.StatusSwitchingProtocols || strings.Contains(rest, w.gh.Value) || strings.Contains(rest, w.gh.StandIn) {
			t.Errorf("got %d %q", resp.StatusCode, rest)
		}
		if got, err := parseWS([]byte(rest)); err != nil || fmt.Sprint(got) != fmt.Sprint([]wsMsg{{1, "ok"}}) {
			t.Errorf("the client got %v (%v), want the frame before the masked one only", got, err)
		}
		if a := w.rec.waitFor(t, "secret.websocket_refused", "api.allowed.test"); !strings.Contains(a["why"], "masked") {
			t.Errorf("logged %v", a)
		}
	})
	t.Run("websocket extension switched on", func(t *testing.T) {
		resp, rest := upgrade(t, "/ws-ext", "websocket")
		if resp.StatusCode != http.StatusBadGateway || strings.Contains(rest, w.gh.Value) {
			t.Errorf("got %d %q, want 502", resp.StatusCode, rest)
		}
	})
	t.Run("h2c", func(t *testing.T) {
		mark := len(w.seen())
		resp, rest := upgrade(t, "/ws", "h2c")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(rest, "only websocket") {
			t.Errorf("got %d %q, want 403", resp.StatusCode, rest)
		}
		if arr := w.seen()[mark:]; len(arr) != 0 {
			t.Errorf("the h2c upgrade reached the server: %q", arr)
		}
	})
}

// TestScrubSOCKSRefused: a secret's host is not reached through SOCKS5,
// whose blind tunnel no scrubber sees into; another allowed host is.
func TestScrubSOCKSRefused(t *testing.T) {
	w := newSecretWorld(t)
	host := "api.allowed.test"
	got := socksExchange(t, w.srv.SOCKSSocket(), append(append([]byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}, host...), 1, 187))
	if want := string([]byte{5, 0, 5, 2, 0, 1, 0, 0, 0, 0, 0, 0}); string(got) != want {
		t.Errorf("SOCKS5 CONNECT to a secret's host: reply %q, want %q (not allowed)", got, want)
	}
	w.rec.waitFor(t, "secret.socks_refused", host)
}

// TestContentCodings is ContentCodings' table.
func TestContentCodings(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    string
		unknown bool
	}{
		{nil, "", false},
		{[]string{"identity"}, "", false},
		{[]string{"gzip"}, "gzip", false},
		{[]string{"GZip, br"}, "gzip br", false},
		{[]string{"deflate", "x-gzip"}, "deflate x-gzip", false},
		{[]string{"gzip, zstd"}, "", true},
		{[]string{"compress"}, "", true},
	} {
		got, err := ContentCodings(tc.in)
		if tc.unknown != (err != nil) || strings.Join(got, " ") != tc.want {
			t.Errorf("ContentCodings(%q) = %q, %v", tc.in, got, err)
		}
	}
}

// TestDecodeBody: each coding and a chain of two come back as the
// original bytes.
func TestDecodeBody(t *testing.T) {
	data := bytes.Repeat([]byte("corral decodes what a secret's host compressed. "), 200)
	for _, tc := range []struct {
		name    string
		codings []string
		build   func([]byte) []byte
	}{
		{"gzip", []string{"gzip"}, func(b []byte) []byte { return compressed(t, "gzip", b) }},
		{"zlib", []string{"deflate"}, func(b []byte) []byte { return compressed(t, "deflate", b) }},
		{"raw deflate", []string{"deflate"}, func(b []byte) []byte { return compressed(t, "deflate-raw", b) }},
		{"br", []string{"br"}, func(b []byte) []byte { return compressed(t, "br", b) }},
		{"gzip then br", []string{"gzip", "br"}, func(b []byte) []byte { return compressed(t, "br", compressed(t, "gzip", b)) }},
	} {
		got, err := io.ReadAll(decodeBody(tc.codings, bytes.NewReader(tc.build(data))))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes, %v", tc.name, len(got), err)
		}
	}
}

// compressed is data as testkit.Reflect compresses it with enc.
func compressed(t *testing.T, enc string, data []byte) []byte {
	t.Helper()
	out := testkit.Compress(enc, data)
	if bytes.Equal(out, data) {
		t.Fatalf("testkit.Compress does not know %s", enc)
	}
	return out
}

// bigBody is 16 MiB of random bytes, made once.
var bigBody = sync.OnceValue(func() []byte {
	b := make([]byte, 16<<20)
	rng := rand.New(rand.NewPCG(26, 16))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
})

// BenchmarkSecretHostDownload is a 16 MiB download from a secret's host
// through the terminating proxy, in turns with its answer scrubbed and
// with scrubbing turned off (Server.noScrub), so that both see the same
// load: it reports each one's milliseconds per download and their ratio
// (what scrubbing adds to a terminated download; bench/scrubbench
// compares a whole download with a blind tunnel).
func BenchmarkSecretHostDownload(b *testing.B) {
	w := newSecretWorld(b)
	c := w.clientKA(w.caPool, false, true)
	b.SetBytes(2 * int64(len(bigBody()))) // made before the clock starts
	download := func(scrub bool) time.Duration {
		w.srv.noScrub.Store(!scrub)
		t0 := time.Now()
		req, _ := http.NewRequest("GET", "https://api.allowed.test/big", nil)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != int64(len(bigBody())) {
			b.Fatalf("%d bytes", n)
		}
		return time.Since(t0)
	}
	var on, off []time.Duration
	for b.Loop() {
		on = append(on, download(true))
		off = append(off, download(false))
	}
	med := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2]) / float64(time.Millisecond)
	}
	m1, m0 := med(on), med(off)
	b.ReportMetric(m1, "scrubbed-ms")
	b.ReportMetric(m0, "unscrubbed-ms")
	b.ReportMetric(m1/m0, "ratio")
}
