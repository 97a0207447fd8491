package netproxy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/corralhq/corral/secrets"
)

// This file is the proxy's side of issue 26: every answer of a secret's
// host, terminated or plain HTTP, is scrubbed of the real values of the
// secrets that belong to that host (secrets.ScrubPairs) before the
// sandbox sees it: the header fields of the response, of its 1xx
// answers and its trailers, names and values, and the body as a stream
// (decoded first where the server compressed it), and what comes from
// the server through an upgraded connection: WebSocket messages, each
// as a stream across its frames (wsscrub.go), and the bytes of any
// other protocol as one stream. The policy
// (what is replaced, by what) is package secrets'; here is where it is
// applied.

// maxScrubbers bounds the kept scrubbers (one per set of secrets that a
// host gets; a wildcard host's names share one).
const maxScrubbers = 64

// scrubberFor returns the scrubber of host's answers, nil when no secret
// belongs to host. It is built once per set of secrets.
func (s *Server) scrubberFor(host string) (*secrets.Scrubber, error) {
	if s.noScrub.Load() {
		return nil, nil
	}
	var key strings.Builder
	for i, sec := range s.secrets {
		if sec.Belongs(host) {
			key.WriteString(strconv.Itoa(i))
			key.WriteByte(',')
		}
	}
	if key.Len() == 0 {
		return nil, nil
	}
	s.scrubMu.Lock()
	defer s.scrubMu.Unlock()
	if sc := s.scrubbers[key.String()]; sc != nil {
		return sc, nil
	}
	sc, err := secrets.NewScrubber(secrets.ScrubPairs(s.secrets, host))
	if err != nil {
		return nil, err
	}
	if s.scrubbers == nil {
		s.scrubbers = map[string]*secrets.Scrubber{}
	}
	if len(s.scrubbers) < maxScrubbers {
		s.scrubbers[key.String()] = sc
	}
	return sc, nil
}

// unscrubbableError is a response of a secret's host that the proxy
// cannot scrub and so refuses (answered 502).
type unscrubbableError struct {
	host, why string
}

func (e *unscrubbableError) Error() string {
	return fmt.Sprintf("corral proxy: refused the answer of %s, a secret's host: %s, so corral cannot make sure it holds no real value", e.host, e.why)
}

// prepareSecretHostRequest changes a request on its way to a secret's
// host so that the answer can be scrubbed: the identity content coding
// is asked for (RFC 9110 section 12.5.3) whatever the client accepts,
// a WebSocket client's extensions (permessage-deflate would compress
// the frames) are not offered, and a range is not asked for (RFC 9110
// section 14.2): the whole representation comes back, since ranges that
// cut a stored value into pieces (a byte at a time) would each pass the
// scrubber, and the sandbox would put the value together.
func prepareSecretHostRequest(h http.Header) {
	h.Set("Accept-Encoding", "identity")
	h.Del("Sec-WebSocket-Extensions")
	h.Del("Range")
	h.Del("If-Range")
}

// refusedMethod returns why a request of method to a secret's host is
// refused, or "": TRACE (and IIS's TRACK) echo the request, real values
// included; CONNECT inside a terminated connection (HTTP/2's extended
// CONNECT) would open a stream the scrubber does not follow.
func refusedMethod(method string) string {
	switch strings.ToUpper(method) {
	case "TRACE", "TRACK":
		return "it echoes the request, which holds the real value of a secret"
	case http.MethodConnect:
		return "a tunnel inside a secret's host's connection is not followed"
	}
	return ""
}

// refusedUpgrade returns why a request that asks to switch to upgrade
// (its Upgrade field) is refused, or "": only WebSocket, whose server
// frames are scrubbed as a stream, is let through to a secret's host.
func refusedUpgrade(upgrade string) string {
	if upgrade == "" || strings.EqualFold(strings.TrimSpace(upgrade), "websocket") {
		return ""
	}
	return "switching to " + upgrade + " is not supported to a secret's host (only websocket)"
}

// scrubHeader scrubs the names and values of h in place.
func scrubHeader(sc *secrets.Scrubber, h http.Header) secrets.Hits {
	var hits secrets.Hits
	merge := func(more secrets.Hits) {
		for k, n := range more {
			if hits == nil {
				hits = secrets.Hits{}
			}
			hits[k] += n
		}
	}
	for k, vals := range h {
		for i, v := range vals {
			nv, more := sc.String(v)
			vals[i] = nv
			merge(more)
		}
		if nk, more := sc.String(k); nk != k {
			merge(more)
			delete(h, k)
			h[nk] = append(h[nk], vals...)
		}
	}
	return hits
}

// logScrubbed logs what was replaced in an answer of host ("headers",
// "1xx headers", "body", "trailers", "upgraded stream"): names and
// counts, never values.
func (s *Server) logScrubbed(host, where string, hits secrets.Hits) {
	if len(hits) == 0 {
		return
	}
	s.log.LogAttrs(s.ctx, slog.LevelInfo, "secret.scrubbed",
		slog.String("session", s.session), slog.String("host", host),
		slog.String("where", where), slog.Any("names", hits.Names()),
		slog.Int("count", hits.Total()))
}

// scrubTransport scrubs the header fields of the 1xx answers (103 Early
// Hints and the like) of a secret's host, which httputil.ReverseProxy
// relays as they come: its trace hook, added after ReverseProxy's, runs
// first, on the same header map (net/http/httptrace composes hooks
// newest first).
type scrubTransport struct {
	s  *Server
	rt http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *scrubTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	host := req.URL.Hostname()
	sc, err := t.s.scrubberFor(host)
	if err != nil {
		return nil, err
	}
	if sc != nil {
		trace := &httptrace.ClientTrace{Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
			t.s.logScrubbed(host, "1xx headers", scrubHeader(sc, http.Header(h)))
			return nil
		}}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	}
	return t.rt.RoundTrip(req)
}

// scrubResponse is the reverse proxies' ModifyResponse: an answer of a
// secret's host is scrubbed (see the top of this file). A body in a
// content coding corral cannot decode, or a WebSocket answer that
// switched on an extension, is refused with an *unscrubbableError.
func (s *Server) scrubResponse(res *http.Response) error {
	host := res.Request.URL.Hostname()
	sc, err := s.scrubberFor(host)
	if err != nil {
		return &unscrubbableError{host: host, why: err.Error()}
	}
	if sc == nil {
		return nil
	}
	s.logScrubbed(host, "headers", scrubHeader(sc, res.Header))
	if res.Trailer != nil {
		s.logScrubbed(host, "trailers", scrubHeader(sc, res.Trailer))
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		if ext := res.Header.Get("Sec-WebSocket-Extensions"); ext != "" {
			return &unscrubbableError{host: host, why: "it switched on the WebSocket extension " + strconv.Quote(ext) + " that was not offered"}
		}
		rwc, ok := res.Body.(io.ReadWriteCloser)
		if !ok {
			return &unscrubbableError{host: host, why: "its upgraded connection cannot be read"}
		}
		// The reason phrase is the server's text too: it is replaced by
		// the standard one, as net/http does for every other status
		// (ResponseWriter.WriteHeader writes only the code's text), so
		// nothing of it reaches the client; what it held is logged.
		if _, hits := sc.String(res.Status); len(hits) > 0 {
			s.logScrubbed(host, "status line", hits)
		}
		res.Status = strconv.Itoa(http.StatusSwitchingProtocols) + " " + http.StatusText(http.StatusSwitchingProtocols)
		if !strings.EqualFold(strings.TrimSpace(res.Header.Get("Upgrade")), "websocket") {
			res.Body = &scrubbedConn{Reader: sc.Reader(rwc, func(h secrets.Hits, _ error) { s.logScrubbed(host, "upgraded stream", h) }), rwc: rwc}
			return nil
		}
		// WebSocket (RFC 6455): scrubbed a message at a time, across the
		// frames it is cut into (wsscrub.go); a frame that breaks the
		// protocol ends the connection.
		res.Body = &scrubbedConn{Reader: newWSScrubReader(rwc, sc, func(h secrets.Hits, err error) {
			s.logScrubbed(host, "websocket messages", h)
			var fe *wsFrameError
			if errors.As(err, &fe) {
				s.log.LogAttrs(s.ctx, slog.LevelWarn, "secret.websocket_refused",
					slog.String("session", s.session), slog.String("host", host), slog.String("why", fe.why))
				_ = rwc.Close()
			}
		}), rwc: rwc}
		return nil
	}
	if res.Body == nil || res.Body == http.NoBody {
		return nil
	}
	codings, err := ContentCodings(res.Header.Values("Content-Encoding"))
	if err != nil {
		if res.Request.Method == http.MethodHead || res.StatusCode == http.StatusNoContent || res.StatusCode == http.StatusNotModified {
			return nil
		}
		return &unscrubbableError{host: host, why: "its body is in a " + err.Error()}
	}
	var body io.Reader = res.Body
	if len(codings) > 0 {
		// The server compressed although identity was asked for: the
		// client gets the body decoded.
		body = decodeBody(codings, res.Body)
		dropRepresentation(res.Header)
		res.ContentLength = -1
		res.Uncompressed = true
	}
	res.Body = &scrubbedBody{Reader: sc.Reader(body, func(h secrets.Hits, _ error) {
		s.logScrubbed(host, "body", h)
		// The trailers arrived with the end of the body.
		if res.Trailer != nil {
			s.logScrubbed(host, "trailers", scrubHeader(sc, res.Trailer))
		}
	}), c: res.Body}
	return nil
}

// scrubbedBody is a response body read through a scrubber.
type scrubbedBody struct {
	io.Reader
	c io.Closer
}

// Close implements io.Closer.
func (b *scrubbedBody) Close() error { return b.c.Close() }

// scrubbedConn is an upgraded connection whose server side is read
// through a scrubber; what the client sends goes to the server as it is.
type scrubbedConn struct {
	io.Reader
	rwc io.ReadWriteCloser
}

// Write implements io.Writer.
func (c *scrubbedConn) Write(p []byte) (int, error) { return c.rwc.Write(p) }

// Close implements io.Closer.
func (c *scrubbedConn) Close() error { return c.rwc.Close() }

// refuseUnscrubbable answers a refused answer of a secret's host (502),
// and logs it as secret.response_refused; false when err is not one.
func (s *Server) refuseUnscrubbable(w http.ResponseWriter, r *http.Request, err error) bool {
	var ue *unscrubbableError
	if !errors.As(err, &ue) {
		return false
	}
	s.log.LogAttrs(r.Context(), slog.LevelWarn, "secret.response_refused",
		slog.String("session", s.session), slog.String("host", ue.host), slog.String("why", ue.why))
	w.Header().Set("X-Corral-Refused", "secret")
	http.Error(w, ue.Error(), http.StatusBadGateway)
	return true
}

// refuseMethod answers a request to a secret's host that is refused by
// refusedMethod or refusedUpgrade, and logs it as
// secret.request_refused; false when r may go on.
func (s *Server) refuseMethod(w http.ResponseWriter, r *http.Request, host string) bool {
	why := refusedMethod(r.Method)
	code := http.StatusMethodNotAllowed
	if why == "" {
		why, code = refusedUpgrade(r.Header.Get("Upgrade")), http.StatusForbidden
	}
	if why == "" {
		return false
	}
	s.log.LogAttrs(r.Context(), slog.LevelWarn, "secret.request_refused",
		slog.String("session", s.session), slog.String("host", host),
		slog.String("method", r.Method), slog.String("why", why))
	w.Header().Set("X-Corral-Refused", "secret")
	http.Error(w, fmt.Sprintf("corral proxy: refused %s to %s: %s", r.Method, host, why), code)
	return true
}
