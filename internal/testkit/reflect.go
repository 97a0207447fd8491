package testkit

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
)

// The hostile server of the secrets tests (issue 26): a secret's host
// that hands the credential it received back, as real servers do (a
// debugging endpoint, an API that returns the headers it got, a 401 whose
// WWW-Authenticate quotes the token, a cookie built from it), in every
// encoding the proxy's scrubber covers, compressed or not.

// ReflectedToken is the credential of r: the token of "Authorization:
// SCHEME TOKEN", the password (else the user) of Basic, or X-Api-Key.
func ReflectedToken(r *http.Request) string {
	if u, p, ok := r.BasicAuth(); ok {
		if p != "" {
			return p
		}
		return u
	}
	if _, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok {
		return strings.TrimSpace(tok)
	}
	return r.Header.Get("X-Api-Key")
}

// reflectForms are the body lines of Reflect, each "NAME=" and the token
// in one form; ReflectLeaks decodes them again.
var reflectForms = []struct {
	name   string
	encode func(tok string) string
}{
	{"raw", func(t string) string { return t }},
	{"url", url.QueryEscape},
	{"json", func(t string) string { b, _ := json.Marshal(map[string]string{"token": t}); return string(b) }},
	{"b64", func(t string) string { return base64.StdEncoding.EncodeToString([]byte(t)) }},
	{"b64raw", func(t string) string { return base64.RawStdEncoding.EncodeToString([]byte(t)) }},
	{"b64url", func(t string) string { return base64.URLEncoding.EncodeToString([]byte(t)) }},
	{"b64urlraw", func(t string) string { return base64.RawURLEncoding.EncodeToString([]byte(t)) }},
	{"basic", func(t string) string { return base64.StdEncoding.EncodeToString([]byte("x-access-token:" + t)) }},
	{"basic1", func(t string) string { return base64.StdEncoding.EncodeToString([]byte("u:" + t)) }},
	{"basic2", func(t string) string { return base64.StdEncoding.EncodeToString([]byte("us:" + t)) }},
	{"in0", func(t string) string { return base64.StdEncoding.EncodeToString([]byte("abc" + t + "\xffz")) }},
	{"in1", func(t string) string { return base64.StdEncoding.EncodeToString([]byte("a" + t + "\xff")) }},
	{"in2", func(t string) string { return base64.RawURLEncoding.EncodeToString([]byte("\xfb\xff" + t + "??")) }},
}

// Reflect answers r with its credential (ReflectedToken) in its header
// fields (Set-Cookie, WWW-Authenticate, Location, X-Echo-Authorization)
// and its body, one "NAME=FORM" line per form of reflectForms. The query
// changes the answer:
//
//   - enc=gzip, deflate, deflate-raw, br, or any other name: the body is
//     compressed so, whatever the request accepts (another name is sent
//     as it is, in a Content-Encoding of that name);
//   - early=1: a 103 Early Hints answer first, whose Link holds the token;
//   - trailer=1: a trailer X-Echo-Trailer holding the token;
//   - split=1: the body is written and flushed in pieces that cut the
//     token;
//   - cut=N: the body ends with "cut=" and the token's first N bytes.
func Reflect(w http.ResponseWriter, r *http.Request) {
	tok := ReflectedToken(r)
	q := r.URL.Query()
	if q.Get("early") == "1" {
		w.Header().Set("Link", "</style.css?t="+tok+">; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain")
	h.Add("Set-Cookie", "session="+tok+"; Path=/; Secure")
	h.Set("WWW-Authenticate", `Bearer realm="reflect", error="invalid_token", error_description="the token `+tok+` expired"`)
	h.Set("Location", "https://"+r.Host+"/callback?token="+url.QueryEscape(tok))
	h.Set("X-Echo-Authorization", r.Header.Get("Authorization"))
	if q.Get("trailer") == "1" {
		h.Set("Trailer", "X-Echo-Trailer")
	}
	var body bytes.Buffer
	for _, f := range reflectForms {
		fmt.Fprintf(&body, "%s=%s\n", f.name, f.encode(tok))
	}
	if n, err := strconv.Atoi(q.Get("cut")); err == nil && n <= len(tok) {
		body.WriteString("cut=" + tok[:n])
	}
	data := body.Bytes()
	if enc := q.Get("enc"); enc != "" {
		data = Compress(enc, data)
		if enc == "deflate-raw" {
			enc = "deflate"
		}
		h.Set("Content-Encoding", enc)
	}
	if q.Get("split") == "1" && len(tok) > 2 {
		// Cut inside the first form of the token, and flush each piece.
		i := bytes.Index(data, []byte(tok))
		var pieces [][]byte
		if i < 0 {
			pieces = [][]byte{data}
		} else {
			k := i + len(tok)/2
			pieces = [][]byte{data[:i+1], data[i+1 : k], data[k:]}
		}
		for _, p := range pieces {
			_, _ = w.Write(p)
			http.NewResponseController(w).Flush()
		}
	} else {
		if q.Get("trailer") != "1" {
			h.Set("Content-Length", strconv.Itoa(len(data)))
		}
		_, _ = w.Write(data)
		if q.Get("trailer") == "1" {
			// Sent before the handler ends, so that HTTP/2 does not
			// count a Content-Length (with which an HTTP/1.1 client
			// could get no trailer).
			http.NewResponseController(w).Flush()
		}
	}
	if q.Get("trailer") == "1" {
		w.Header().Set("X-Echo-Trailer", tok)
	}
}

// Compress returns data in the content coding enc (gzip, deflate: zlib,
// deflate-raw: raw DEFLATE, br); an unknown name gives data unchanged (a
// coding the proxy must refuse).
func Compress(enc string, data []byte) []byte {
	var b bytes.Buffer
	var w io.WriteCloser
	switch enc {
	case "gzip":
		w = gzip.NewWriter(&b)
	case "deflate":
		w = zlib.NewWriter(&b)
	case "deflate-raw":
		w, _ = flate.NewWriter(&b, flate.DefaultCompression)
	case "br":
		w = brotli.NewWriter(&b)
	default:
		return data
	}
	_, _ = w.Write(data)
	_ = w.Close()
	return b.Bytes()
}

// ReflectLeaks returns what of the real value real shows in text, an
// answer of Reflect as a client got it (its header lines and body), and
// what is missing: every body line must decode to standIn (the lines of
// the token inside longer data to standIn but for its first and last
// byte, whose bits are shared with their neighbours), and neither real
// nor its common encodings may appear anywhere. An empty result means
// the answer was scrubbed; at least the raw line must be there (else the
// server reflected nothing, and the test would prove nothing).
func ReflectLeaks(text, real, standIn string) []string {
	var out []string
	for _, f := range reflectForms {
		if enc := f.encode(real); strings.Contains(text, enc) {
			out = append(out, fmt.Sprintf("the %s form of the real value shows: %s", f.name, enc))
		}
	}
	for _, enc := range []string{real, url.QueryEscape(real), base64.RawStdEncoding.EncodeToString([]byte(real)), base64.RawURLEncoding.EncodeToString([]byte(real))} {
		if strings.Contains(text, enc) {
			out = append(out, "the real value shows, as "+enc)
		}
	}
	lines := map[string]string{}
	for l := range strings.SplitSeq(text, "\n") {
		l = strings.TrimRight(l, "\r")
		if k, v, ok := strings.Cut(l, "="); ok {
			lines[k] = v
		}
	}
	if _, ok := lines["raw"]; !ok {
		return append(out, "no raw= line: the server reflected nothing")
	}
	for _, f := range reflectForms {
		v, ok := lines[f.name]
		if !ok {
			out = append(out, "no "+f.name+"= line")
			continue
		}
		got := ""
		switch f.name {
		case "raw":
			got = v
		case "url":
			got, _ = url.QueryUnescape(v)
		case "json":
			var m map[string]string
			_ = json.Unmarshal([]byte(v), &m)
			got = m["token"]
		default:
			for _, e := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
				if b, err := e.DecodeString(v); err == nil {
					got = string(b)
					break
				}
			}
		}
		if strings.Contains(got, real) {
			out = append(out, fmt.Sprintf("the %s line decodes to the real value", f.name))
			continue
		}
		want := standIn
		if strings.HasPrefix(f.name, "in") || strings.HasPrefix(f.name, "basic") {
			want = standIn[1 : len(standIn)-1]
		}
		if !strings.Contains(got, want) {
			out = append(out, fmt.Sprintf("the %s line decodes to %q, which does not hold the stand-in %q", f.name, got, want))
		}
	}
	return out
}

// ReflectQueries are the answers of Reflect that the backends' end-to-end
// tests fetch through a sandbox's curl: plain, compressed in each coding
// (whatever curl accepts), cut across writes, and cut short at the end.
var ReflectQueries = []string{"", "?enc=gzip", "?enc=deflate", "?enc=deflate-raw", "?enc=br", "?split=1", "?cut=20"}

// ReflectScript is a shell script for a sandbox whose secret variable is
// named variable and belongs to host: curl fetches https://HOST/reflect
// with each of ReflectQueries and a bearer credential, then once with a
// Basic one, then sends TRACE; each answer (header and body, curl -i)
// follows a line "=== WHAT". CheckReflect reads its output.
func ReflectScript(host, variable string) string {
	var b strings.Builder
	curl := `curl -q -sS -i --max-time 60 `
	for _, q := range ReflectQueries {
		fmt.Fprintf(&b, "echo '=== bearer %s'; %s--compressed -H \"Authorization: Bearer $%s\" 'https://%s/reflect%s'; echo\n", q, curl, variable, host, q)
	}
	fmt.Fprintf(&b, "echo '=== basic'; %s-u \"x-access-token:$%s\" 'https://%s/reflect'; echo\n", curl, variable, host)
	fmt.Fprintf(&b, "echo '=== trace'; %s-X TRACE -H \"Authorization: Bearer $%s\" 'https://%s/reflect'; echo\n", curl, variable, host)
	b.WriteString("echo '=== end'\n")
	return b.String()
}

// CheckReflect returns what is wrong with out, the output of
// ReflectScript in a sandbox whose secret's real value is real and
// stand-in standIn: an answer that shows the real value in any form or
// lacks the stand-in (ReflectLeaks), a decoded answer that still says
// Content-Encoding, a value cut short that shows its start, a TRACE that
// was not refused, a missing answer. Empty means all was scrubbed.
func CheckReflect(out, real, standIn string) []string {
	var probs []string
	if strings.Contains(out, real) {
		probs = append(probs, "the output holds the real value")
	}
	sections := map[string]string{}
	for _, s := range strings.Split(out, "=== ")[1:] {
		name, body, _ := strings.Cut(s, "\n")
		sections[strings.TrimSpace(name)] = body
	}
	for _, q := range ReflectQueries {
		name := "bearer " + q
		s, ok := sections[strings.TrimSpace(name)]
		if !ok {
			probs = append(probs, "no answer for "+name)
			continue
		}
		for _, l := range ReflectLeaks(s, real, standIn) {
			probs = append(probs, name+": "+l)
		}
		if strings.Contains(strings.ToLower(s), "content-encoding:") {
			probs = append(probs, name+": the answer still says Content-Encoding")
		}
		if strings.HasPrefix(q, "?cut=") && !strings.Contains(s, "cut="+standIn[:20]) {
			probs = append(probs, name+": the value cut short at the end does not show the stand-in's start")
		}
	}
	for _, l := range ReflectLeaks(sections["basic"], real, standIn) {
		probs = append(probs, "basic: "+l)
	}
	if t := sections["trace"]; !strings.Contains(t, " 405") || !strings.Contains(t, "echoes the request") {
		probs = append(probs, "TRACE was not refused: "+t)
	}
	if _, ok := sections["end"]; !ok {
		probs = append(probs, "the script did not end")
	}
	return probs
}
