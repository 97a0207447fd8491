package netproxy

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/andybalholm/brotli"
)

// Content codings of a secret's host's answers (issue 26): the proxy
// asks those hosts for the identity coding, and where a server compresses
// all the same, it decodes the body so that the scrubber sees the bytes
// the client would.

// ErrUnknownCoding is returned by ContentCodings for a coding corral
// cannot decode (zstd, compress, ...): such a body cannot be scrubbed,
// and the proxy refuses it.
var ErrUnknownCoding = errors.New("content coding corral cannot decode")

// ContentCodings returns the codings of the Content-Encoding values vals
// (RFC 9110 section 8.4: comma-separated, in the order they were
// applied), lower case, without "identity". A coding other than gzip,
// x-gzip, deflate and br is an error wrapping ErrUnknownCoding that
// names it. Pure.
func ContentCodings(vals []string) ([]string, error) {
	var out []string
	for _, v := range vals {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			switch c {
			case "", "identity":
			case "gzip", "x-gzip", "deflate", "br":
				out = append(out, c)
			default:
				return nil, fmt.Errorf("%w: %q", ErrUnknownCoding, c)
			}
		}
	}
	return out, nil
}

// decodeBody returns body with codings (ContentCodings) undone, last
// applied first. Each decoder starts at the first Read, so the response's
// header goes on without waiting for the body. "deflate" is the zlib
// format (RFC 9110 section 8.4.1.2), or raw DEFLATE where a server sends
// that instead (told by the zlib header's check bits).
func decodeBody(codings []string, body io.Reader) io.Reader {
	r := body
	for _, c := range slices.Backward(codings) {
		r = &lazyReader{coding: c, src: r}
	}
	return r
}

// lazyReader decodes src as coding from its first Read on.
type lazyReader struct {
	coding string
	src    io.Reader
	r      io.Reader
	err    error
}

// Read implements io.Reader.
func (l *lazyReader) Read(p []byte) (int, error) {
	if l.r == nil && l.err == nil {
		l.r, l.err = newDecoder(l.coding, l.src)
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.r.Read(p)
}

func newDecoder(coding string, src io.Reader) (io.Reader, error) {
	switch coding {
	case "gzip", "x-gzip":
		z, err := gzip.NewReader(src)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		return z, nil
	case "deflate":
		br := bufio.NewReader(src)
		if h, err := br.Peek(2); err == nil && h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
			z, err := zlib.NewReader(br)
			if err != nil {
				return nil, fmt.Errorf("deflate body: %w", err)
			}
			return z, nil
		}
		return flate.NewReader(br), nil
	case "br":
		return brotli.NewReader(src), nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownCoding, coding)
}

// representationFields are the response fields that describe the bytes
// as the server encoded them: wrong once the body is decoded.
var representationFields = []string{"Content-Encoding", "Content-Length", "Content-MD5", "Digest", "Content-Digest", "Repr-Digest"}

// dropRepresentation removes representationFields from h: the body that
// follows is decoded.
func dropRepresentation(h http.Header) {
	for _, f := range representationFields {
		h.Del(f)
	}
}
