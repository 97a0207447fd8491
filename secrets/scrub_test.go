package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// A value with bytes that every encoding escapes differently, and its
// stand-in as StandIn makes it.
const (
	scrubValue = `ghp_Ab3/dE+f9<h&"Ij\Kl0=mNoPq`
)

func scrubStandIn(t testing.TB) string {
	t.Helper()
	si, ok := StandIn([]byte("0123456789abcdef0123456789abcdef"), "GH", scrubValue)
	if !ok || len(si) != len(scrubValue) {
		t.Fatalf("StandIn = %q, %v", si, ok)
	}
	return si
}

func mustScrubber(t testing.TB, pairs []Pair) *Scrubber {
	t.Helper()
	s, err := NewScrubber(pairs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestScrubEncodings puts the value into a response in every form
// EncodedForms covers, scrubs it, decodes each form again and checks
// that the real value is gone and the stand-in is there instead (all of
// it where the value is alone or ends the data, all but the bits shared
// with a neighbour where it sits inside longer base64 data).
func TestScrubEncodings(t *testing.T) {
	v, si := scrubValue, scrubStandIn(t)
	s := mustScrubber(t, EncodedForms("GH", v, si))
	jsonGo, _ := json.Marshal(v) // Go escapes <, > and & as \u003c...
	b64 := func(enc *base64.Encoding, x string) string { return enc.EncodeToString([]byte(x)) }
	type form struct {
		name   string
		encode func(string) string
		decode func(string) (string, error)
	}
	unb64 := func(enc *base64.Encoding) func(string) (string, error) {
		return func(x string) (string, error) { b, err := enc.DecodeString(x); return string(b), err }
	}
	forms := []form{
		{"raw", func(x string) string { return x }, func(x string) (string, error) { return x, nil }},
		{"query escape", url.QueryEscape, url.QueryUnescape},
		{"path escape", url.PathEscape, url.PathUnescape},
		{"query escape, lower-case hex", func(x string) string { return lowerPercent(url.QueryEscape(x)) }, url.QueryUnescape},
		{"json (Go)", func(x string) string { b, _ := json.Marshal(x); return string(b) }, func(x string) (string, error) {
			var out string
			err := json.Unmarshal([]byte(x), &out)
			return out, err
		}},
		{"json with \\/", func(x string) string { return `"` + jsonString(x, false, true) + `"` }, func(x string) (string, error) {
			var out string
			err := json.Unmarshal([]byte(x), &out)
			return out, err
		}},
	}
	for _, enc := range []struct {
		name string
		e    *base64.Encoding
	}{{"std", base64.StdEncoding}, {"std raw", base64.RawStdEncoding}, {"url", base64.URLEncoding}, {"url raw", base64.RawURLEncoding}} {
		forms = append(forms, form{"base64 " + enc.name + " alone", func(x string) string { return b64(enc.e, x) }, unb64(enc.e)})
		for _, user := range []string{"", "u", "us", "x-access-token", "ab"} {
			forms = append(forms, form{"base64 " + enc.name + " basic " + user + ":token", func(x string) string { return b64(enc.e, user+":"+x) },
				func(x string) (string, error) { d, err := unb64(enc.e)(x); return strings.TrimPrefix(d, user+":"), err }})
		}
	}
	if !strings.Contains(string(jsonGo), `\u003c`) {
		t.Fatalf("json.Marshal did not escape <: %s", jsonGo)
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			enc := f.encode(v)
			body := []byte("before [" + enc + "] after")
			h := s.Bytes(body)
			got := string(body)
			if h.Total() == 0 || h["GH"] == 0 {
				t.Fatalf("no replacement in %q", got)
			}
			inner := got[len("before [") : len(got)-len("] after")]
			dec, err := f.decode(inner)
			if err != nil {
				t.Fatalf("the scrubbed form %q no longer decodes: %v", inner, err)
			}
			// Inside a Basic credential the value's first character
			// shares bits with the ':' before it: those may stay.
			if len(dec) != len(si) || dec[1:] != si[1:] || strings.Contains(dec, v) {
				t.Errorf("decoded %q, want the stand-in %q", dec, si)
			}
			if len(got) != len(body) {
				t.Errorf("length changed")
			}
		})
	}
	// Inside longer base64 data, at each offset within a group, followed
	// by more data: what decodes from the scrubbed text holds the
	// stand-in but for the bits the value's first and last characters
	// share with their neighbours, and never the real value.
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
		for pre := range 6 {
			for post := range 4 {
				data := strings.Repeat("\xfb", pre) + v + strings.Repeat("\xff", post)
				text := []byte(enc.EncodeToString([]byte(data)))
				if s.Bytes(text).Total() == 0 {
					t.Errorf("pre %d post %d: not found in %s", pre, post, text)
					continue
				}
				dec, err := enc.DecodeString(string(text))
				if err != nil {
					t.Fatalf("pre %d post %d: %v", pre, post, err)
				}
				mid := string(dec[pre : pre+len(v)])
				if strings.Contains(string(dec), v) || !strings.Contains(mid, si[1:len(si)-1]) {
					t.Errorf("pre %d post %d: decodes to %q, want the stand-in %q (its ends may keep a few bits)", pre, post, mid, si)
				}
			}
		}
	}
}

// TestScrubPairsOnlyBound: a host's answers are scrubbed of the values of
// the secrets it was given, not of the others'.
func TestScrubPairsOnlyBound(t *testing.T) {
	gh := Secret{Name: "GH", Value: "ghp_RealRealRealReal01", StandIn: "ghp_StndStndStndStnd98", Hosts: []string{"api.github.com", "*.github.com"}}
	ai := Secret{Name: "AI", Value: "sk-ant-RealRealReal01", StandIn: "sk-ant-StndStndStnd98", Hosts: []string{"ai.example"}}
	aws := Secret{Name: "AK", Kind: KindAWS, Value: "AKIAREALREALREALREAL", StandIn: "AKIASTNDSTNDSTNDSTND", SecretName: "SK", SecretValue: "realSecretAccessKey/0123456789abcdefghij", SecretStandIn: "stndSecretAccessKey/9876543210zyxwvutsrq", Hosts: []string{"s3.example"}}
	all := []Secret{gh, ai, aws}
	names := func(ps []Pair) []string {
		var out []string
		for _, p := range ps {
			if !slices.Contains(out, p.Name) {
				out = append(out, p.Name)
			}
		}
		return out
	}
	for _, tc := range []struct {
		host string
		want []string
	}{
		{"api.github.com", []string{"GH"}},
		{"x.y.github.com", []string{"GH"}},
		{"ai.example", []string{"AI"}},
		{"s3.example", []string{"AK", "SK"}},
		{"other.example", nil},
	} {
		if got := names(ScrubPairs(all, tc.host)); !slices.Equal(got, tc.want) {
			t.Errorf("ScrubPairs(%s) names %v, want %v", tc.host, got, tc.want)
		}
	}
	s := mustScrubber(t, ScrubPairs(all, "api.github.com"))
	body := []byte("gh=" + gh.Value + " ai=" + ai.Value)
	s.Bytes(body)
	if want := "gh=" + gh.StandIn + " ai=" + ai.Value; string(body) != want {
		t.Errorf("scrubbed %q, want %q (another host's value is not looked for)", body, want)
	}
	for _, p := range ScrubPairs(all, "s3.example") {
		if len(p.Old) != len(p.New) || p.Old == p.New {
			t.Errorf("pair %s %s: lengths %d, %d", p.Name, p.Form, len(p.Old), len(p.New))
		}
	}
}

// naiveScrub is the reference: leftmost, then longest, no overlaps, and
// a start of MinPartialTail bytes or more at the very end.
func naiveScrub(b []byte, pairs []Pair) []byte {
	out := bytes.Clone(b)
	for pos := 0; pos < len(out); {
		best := -1
		for j, p := range pairs {
			if bytes.HasPrefix(out[pos:], []byte(p.Old)) && (best < 0 || len(p.Old) > len(pairs[best].Old)) {
				best = j
			}
		}
		if best >= 0 {
			copy(out[pos:], pairs[best].New)
			pos += len(pairs[best].Old)
			continue
		}
		if rest := out[pos:]; len(rest) >= MinPartialTail {
			for _, p := range pairs {
				if len(p.Old) > len(rest) && strings.HasPrefix(p.Old, string(rest)) {
					copy(out[pos:], p.New[:len(rest)])
					return out
				}
			}
		}
		pos++
	}
	return out
}

// TestScrubberAgainstNaive compares Bytes, and Reader over every way of
// cutting the input into reads, with the naive reference on random
// patterns from a small alphabet (so that they overlap and nest) and
// random texts full of them.
func TestScrubberAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 1))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abcd"[rng.IntN(4)]
		}
		return string(b)
	}
	for round := range 300 {
		var pairs []Pair
		seen := map[string]bool{}
		for range 1 + rng.IntN(6) {
			o := word(2 + rng.IntN(9))
			if seen[o] {
				continue
			}
			seen[o] = true
			pairs = append(pairs, Pair{Old: o, New: strings.ToUpper(o), Name: "P"})
		}
		s := mustScrubber(t, pairs)
		var text strings.Builder
		for range rng.IntN(12) {
			if rng.IntN(2) == 0 {
				text.WriteString(pairs[rng.IntN(len(pairs))].Old)
			} else {
				text.WriteString(word(rng.IntN(6)))
			}
		}
		in := []byte(text.String())
		want := naiveScrub(in, pairs)
		got := bytes.Clone(in)
		s.Bytes(got)
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: Bytes(%q) = %q, want %q (pairs %v)", round, in, got, want, pairs)
		}
		for chunk := 1; chunk <= len(in)+1; chunk++ {
			var hits Hits
			r := s.Reader(&chunkReader{data: in, n: chunk}, func(h Hits, err error) { hits = h })
			out, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(out, want) {
				t.Fatalf("round %d: Reader in reads of %d = %q, %v; want %q (pairs %v)", round, chunk, out, err, want, pairs)
			}
			if hits.Total() != s.Bytes(bytes.Clone(in)).Total() {
				t.Fatalf("round %d: Reader counted %d, Bytes %d", round, hits.Total(), s.Bytes(bytes.Clone(in)).Total())
			}
		}
	}
}

// chunkReader gives data n bytes at a time.
type chunkReader struct {
	data []byte
	n    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := min(c.n, len(p), len(c.data))
	copy(p, c.data[:k])
	c.data = c.data[k:]
	return k, nil
}

// stepReader gives its steps one Read each; reading past the steps the
// test allowed so far is an error the test sees.
type stepReader struct {
	steps   []string
	allowed int
	reads   int
}

var errTooFar = errors.New("read past what the test allowed")

func (s *stepReader) Read(p []byte) (int, error) {
	if s.reads >= s.allowed {
		return 0, errTooFar
	}
	if s.reads >= len(s.steps) {
		return 0, io.EOF
	}
	n := copy(p, s.steps[s.reads])
	s.reads++
	return n, nil
}

// TestScrubReaderStreams: bytes that cannot begin a value are passed on
// from the read that brought them, without waiting for more; the start of
// a value is held until the read that completes it, and is then replaced.
func TestScrubReaderStreams(t *testing.T) {
	v, si := scrubValue, scrubStandIn(t)
	s := mustScrubber(t, EncodedForms("GH", v, si))
	src := &stepReader{steps: []string{"data: {\"n\":1}\n\n", "data: x " + v[:9], v[9:] + " y\n\n"}, allowed: 1}
	r := s.Reader(src, nil)
	buf := make([]byte, 1024)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "data: {\"n\":1}\n\n" {
		t.Fatalf("first Read = %q, %v; want the first event whole, without reading further", buf[:n], err)
	}
	src.allowed = 2
	n, err = r.Read(buf)
	if err != nil || string(buf[:n]) != "data: x " {
		t.Fatalf("second Read = %q, %v; want what precedes the start of the value, and the start held back", buf[:n], err)
	}
	src.allowed = 4
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != si+" y\n\n" {
		t.Fatalf("the rest = %q, %v; want the stand-in whole", rest, err)
	}
}

// TestScrubTruncatedEnd: a value cut short at the end of the data is
// replaced as far as it goes, from MinPartialTail bytes on.
func TestScrubTruncatedEnd(t *testing.T) {
	v, si := scrubValue, scrubStandIn(t)
	s := mustScrubber(t, EncodedForms("GH", v, si))
	for _, k := range []int{MinPartialTail, 10, len(v) - 1} {
		got, _ := s.String("token: " + v[:k])
		if got != "token: "+si[:k] {
			t.Errorf("cut at %d: %q, want %q", k, got, "token: "+si[:k])
		}
		out, _ := io.ReadAll(s.Reader(iotest.OneByteReader(strings.NewReader("token: "+v[:k])), nil))
		if string(out) != "token: "+si[:k] {
			t.Errorf("cut at %d, streamed: %q", k, out)
		}
	}
	if got, h := s.String("token: " + v[:MinPartialTail-1]); got != "token: "+v[:MinPartialTail-1] || h != nil {
		t.Errorf("a start shorter than MinPartialTail changed: %q", got)
	}
}

func TestScrubberLeftmostLongest(t *testing.T) {
	s := mustScrubber(t, []Pair{{Old: "abcdef", New: "ABCDEF"}, {Old: "abcdefgh", New: "12345678"}, {Old: "cdefghij", New: "CDEFGHIJ"}, {Old: "ghij", New: "GHIJ"}})
	for in, want := range map[string]string{
		"abcdefghij":   "12345678ij",
		"xxabcdefxx":   "xxABCDEFxx",
		"xcdefghijabc": "xCDEFGHIJabc",
		"abcdefghij!!": "12345678ij!!",
	} {
		if got, _ := s.String(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

func TestNewScrubberRefuses(t *testing.T) {
	for _, pairs := range [][]Pair{nil, {{Old: "abcdef", New: "abc"}}, {{Old: "a", New: "b"}}} {
		if _, err := NewScrubber(pairs); !errors.Is(err, ErrScrubPair) {
			t.Errorf("NewScrubber(%v) = %v, want ErrScrubPair", pairs, err)
		}
	}
}

// BenchmarkScrubReader is the scrubber's own cost on 16 MiB of random
// bytes with one secret's forms (bench/scrubbench measures a download
// through the proxy).
func BenchmarkScrubReader(b *testing.B) {
	s := mustScrubber(b, EncodedForms("GH", "ghp_"+strings.Repeat("aZ09", 9), "ghp_"+strings.Repeat("qW51", 9)))
	data := make([]byte, 16<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := io.Copy(io.Discard, s.Reader(bytes.NewReader(data), nil)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestScrubReaderKeepsPieces: where nothing is held back, each Read
// gives what one read of the source gave, whole, not more than fits in
// the caller's buffer: a reverse proxy writes each piece, and a piece
// cut in two is one more write (and TLS record) each time.
func TestScrubReaderKeepsPieces(t *testing.T) {
	s := mustScrubber(t, EncodedForms("GH", scrubValue, scrubStandIn(t)))
	data := bytes.Repeat([]byte("\n"), 8*32768)
	r := s.Reader(&chunkReader{data: data, n: 1 << 20}, nil) // gives all it is asked for
	buf := make([]byte, 32768)
	var sizes []int
	for {
		n, err := r.Read(buf)
		if n > 0 {
			sizes = append(sizes, n)
		}
		if err != nil {
			break
		}
	}
	if len(sizes) != 8 || slices.ContainsFunc(sizes, func(n int) bool { return n != 32768 }) {
		t.Errorf("Read sizes %v, want 8 of 32768", sizes)
	}
}

// escapeMixed writes v with every other character (from the first, or
// the second with odd) escaped by esc and the others as they are, but
// for the ones that must be escaped (lit, when not nil).
func escapeMixed(v string, odd bool, esc func(c byte) string, lit ...func(c byte) string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch {
		case (i%2 == 0) != odd:
			b.WriteString(esc(v[i]))
		case len(lit) > 0:
			b.WriteString(lit[0](v[i]))
		default:
			b.WriteByte(v[i])
		}
	}
	return b.String()
}

// jsonLit and htmlLit write c as it must be at the least in a JSON
// string and in HTML text.
func jsonLit(c byte) string { return jsonString(string(c), false, false) }
func htmlLit(c byte) string {
	switch c {
	case '&':
		return "&amp;"
	case '<':
		return "&lt;"
	case '"':
		return "&quot;"
	}
	return string(c)
}

// wrapLines breaks s every n characters with eol.
func wrapLines(s string, n int, eol string) string {
	var b strings.Builder
	for i := 0; i < len(s); i += n {
		if i > 0 {
			b.WriteString(eol)
		}
		b.WriteString(s[i:min(i+n, len(s))])
	}
	return b.String()
}

// htmlUnescape decodes the character references escapeMixed's HTML
// escapers write.
func htmlUnescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '&' {
			b.WriteByte(s[i])
			continue
		}
		c, n, _ := decodeUnit([]byte(s[i:]), true)
		if n == 1 {
			return "", errors.New("bad reference at " + s[i:])
		}
		b.WriteByte(c)
		i += n - 1
	}
	return b.String(), nil
}

// TestScrubEscapedPerCharacter: the value with its characters escaped
// one at a time (JSON \u00XX, percent-encoding of every byte, HTML
// character references; upper- and lower-case hex, mixed with literal
// characters), and base64 of it wrapped at 76 (MIME) and 64 (PEM)
// columns with CRLF or LF, inside longer text: scrubbed whole, in one
// buffer and streamed in small reads of random sizes, into something
// that decodes to the stand-in (or, where a character could not be
// written in the same escape, never to the real value), of the same
// length.
func TestScrubEscapedPerCharacter(t *testing.T) {
	v, si := scrubValue, scrubStandIn(t)
	s := mustScrubber(t, EncodedForms("GH", v, si))
	jsonUnq := func(x string) (string, error) {
		var out string
		err := json.Unmarshal([]byte(`"`+x+`"`), &out)
		return out, err
	}
	type tc struct {
		name   string
		enc    string
		decode func(string) (string, error)
		exact  bool // decodes to the stand-in exactly
	}
	var cases []tc
	for _, odd := range []bool{false, true} {
		sfx := map[bool]string{false: " (from the first)", true: " (from the second)"}[odd]
		cases = append(cases,
			tc{"json \\u00XX lower" + sfx, escapeMixed(v, odd, func(c byte) string { return fmt.Sprintf(`\u%04x`, c) }, jsonLit), jsonUnq, true},
			tc{"json \\u00XX upper" + sfx, escapeMixed(v, odd, func(c byte) string { return fmt.Sprintf(`\u%04X`, c) }, jsonLit), jsonUnq, true},
			tc{"percent every byte upper" + sfx, escapeMixed(v, odd, func(c byte) string { return fmt.Sprintf("%%%02X", c) }), url.PathUnescape, true},
			tc{"percent every byte lower" + sfx, escapeMixed(v, odd, func(c byte) string { return fmt.Sprintf("%%%02x", c) }), url.PathUnescape, true},
			tc{"html decimal" + sfx, escapeMixed(v, odd, func(c byte) string { return fmt.Sprintf("&#%d;", c) }, htmlLit), htmlUnescape, false},
			tc{"html decimal zero-padded" + sfx, escapeMixed(v, odd, func(c byte) string { return fmt.Sprintf("&#%03d;", c) }, htmlLit), htmlUnescape, true},
			tc{"html hex" + sfx, escapeMixed(v, odd, func(c byte) string { return fmt.Sprintf("&#x%X;", c) }, htmlLit), htmlUnescape, true},
			tc{"html hex lower X" + sfx, escapeMixed(v, odd, func(c byte) string { return fmt.Sprintf("&#X%x;", c) }, htmlLit), htmlUnescape, true},
		)
	}
	cases = append(cases,
		tc{"percent every byte", escapeMixed(v, false, func(c byte) string { return fmt.Sprintf("%%%02X", c) }) + "", url.PathUnescape, true},
		tc{"every byte, escapes mixed", func() string {
			var b strings.Builder
			for i := 0; i < len(v); i++ {
				switch i % 4 {
				case 0:
					fmt.Fprintf(&b, "%%%02x", v[i])
				case 1:
					fmt.Fprintf(&b, `\u%04X`, v[i])
				case 2:
					fmt.Fprintf(&b, "&#x%x;", v[i])
				default:
					fmt.Fprintf(&b, "&#%d;", v[i])
				}
			}
			return b.String()
		}(), nil, false},
	)
	// Base64 of longer data, wrapped.
	data := "user:" + v + "\x00and some more data after it, to wrap over lines\x00" + v + strings.Repeat("z", 100)
	for _, w := range []struct {
		name string
		n    int
		eol  string
	}{{"MIME CRLF", 76, "\r\n"}, {"MIME LF", 76, "\n"}, {"PEM LF", 64, "\n"}, {"PEM CRLF", 64, "\r\n"}, {"every 7 LF", 7, "\n"}} {
		for pre := range 3 {
			d := strings.Repeat("p", pre*25) + data
			cases = append(cases, tc{"base64 " + w.name + fmt.Sprint(" pre ", pre), wrapLines(base64.StdEncoding.EncodeToString([]byte(d)), w.n, w.eol), func(x string) (string, error) {
				b, err := base64.StdEncoding.DecodeString(strings.NewReplacer("\r", "", "\n", "").Replace(x))
				return string(b), err
			}, false})
		}
	}
	// Base64 URL-encoded (%2B, %2F, %3D), as in a query or a form.
	for _, user := range []string{"", "u:", "ab:"} {
		cases = append(cases, tc{"base64 url-encoded " + user, url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(user + v))), func(x string) (string, error) {
			q, err := url.QueryUnescape(x)
			if err != nil {
				return "", err
			}
			b, err := base64.StdEncoding.DecodeString(q)
			return string(b), err
		}, false})
	}
	rng := rand.New(rand.NewPCG(9, 26))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := "before [" + c.enc + "] after"
			check := func(how, got string) {
				t.Helper()
				if len(got) != len(in) {
					t.Fatalf("%s: length %d, want %d", how, len(got), len(in))
				}
				if got == in {
					t.Fatalf("%s: nothing replaced in %q", how, in)
				}
				inner := got[len("before [") : len(got)-len("] after")]
				if c.decode == nil {
					if strings.Contains(inner, v) {
						t.Fatalf("%s: the value is in %q", how, inner)
					}
					return
				}
				dec, err := c.decode(inner)
				if err != nil {
					t.Fatalf("%s: %q no longer decodes: %v", how, inner, err)
				}
				if strings.Contains(dec, v) || strings.Contains(dec, v[1:len(v)-1]) {
					t.Fatalf("%s: decodes to %q, which holds the value", how, dec)
				}
				if c.exact && dec != si {
					t.Fatalf("%s: decodes to %q, want the stand-in %q", how, dec, si)
				}
			}
			got, _ := s.String(in)
			check("Bytes", got)
			for range 20 {
				out, err := io.ReadAll(s.Reader(&randomChunks{data: []byte(in), rng: rng, max: 7}, nil))
				if err != nil {
					t.Fatal(err)
				}
				if string(out) != got {
					t.Fatalf("streamed %q, Bytes %q", out, got)
				}
			}
		})
	}
}

// randomChunks gives data in reads of 1 to max bytes.
type randomChunks struct {
	data []byte
	rng  *rand.Rand
	max  int
}

func (c *randomChunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := min(1+c.rng.IntN(c.max), len(p), len(c.data))
	copy(p, c.data[:k])
	c.data = c.data[k:]
	return k, nil
}

// TestScrubFoldedHeaderValue: a header value that the server folded
// (obs-fold), as Go's client hands it over (each fold one SP), or with
// the fold's bytes kept, is scrubbed.
func TestScrubFoldedHeaderValue(t *testing.T) {
	v, si := scrubValue, scrubStandIn(t)
	s := mustScrubber(t, EncodedForms("GH", v, si))
	for _, in := range []string{
		"token " + v[:10] + " " + v[10:],
		"token " + v[:10] + "\t" + v[10:20] + " " + v[20:],
		"token " + v[:10] + "\r\n " + v[10:],
	} {
		got, h := s.String(in)
		want := strings.Replace(in, v[:10], si[:10], 1)
		want = strings.Replace(want, v[10:20], si[10:20], 1)
		want = strings.Replace(want, v[20:], si[20:], 1)
		if got != want || h["GH"] == 0 {
			t.Errorf("%q: scrubbed %q, want %q", in, got, want)
		}
	}
}

// TestScrubDecodingLeavesText: escapes, references and white space that
// do not make up a value are left as they are, and a value broken by
// more white space than a line break is not looked for.
func TestScrubDecodingLeavesText(t *testing.T) {
	v := scrubValue
	s := mustScrubber(t, EncodedForms("GH", v, scrubStandIn(t)))
	for _, in := range []string{
		"a%20b%2Fc &amp; &#65;&#x42; \\u0041\\n &#1234567; &#x; %zz \\u12 gh p_ ghp\r\n_A end",
		v[:10] + "\r\n\r\n" + v[10:] + " end",
		v[:10] + "    " + v[10:] + " end",
	} {
		if got, h := s.String(in); got != in {
			t.Errorf("%q changed to %q (%v)", in, got, h)
		}
	}
}

// TestScrubStreamHoldBound: what a stream holds back stays within
// MaxHold, however the value is escaped: at every read of the source,
// all but MaxHold bytes of what it gave have been passed on.
func TestScrubStreamHoldBound(t *testing.T) {
	v := scrubValue
	s := mustScrubber(t, EncodedForms("GH", v, scrubStandIn(t)))
	if s.MaxHold() > 13*s.MaxLen() {
		t.Fatalf("MaxHold %d for MaxLen %d", s.MaxHold(), s.MaxLen())
	}
	// Starts of the value that never complete, each escaped as long as
	// an escape can be, with white space between characters.
	var in strings.Builder
	for range 20 {
		for i := range len(v) - 1 {
			fmt.Fprintf(&in, "&#x%06X;\r\n ", v[i])
		}
		in.WriteString("!")
	}
	data := []byte(in.String())
	src := &chunkReader{data: data, n: 1}
	r := s.Reader(src, nil)
	out, most := 0, 0
	buf := make([]byte, 1)
	for {
		n, err := r.Read(buf)
		out += n
		given := len(data) - len(src.data)
		if given-out > s.MaxHold() {
			t.Fatalf("holding %d bytes, MaxHold %d", given-out, s.MaxHold())
		}
		most = max(most, given-out)
		if err != nil {
			break
		}
	}
	if out != len(data) || most <= s.MaxLen() {
		t.Fatalf("passed on %d of %d bytes, holding %d at the most (MaxLen %d)", out, len(data), most, s.MaxLen())
	}
}

// TestScrubDecodingStreamsLikeBytes: on random texts made of the value's
// characters escaped at random, pieces of escapes, white space and noise,
// Reader, over every size of reads, gives what Bytes gives, and neither
// leaves a whole escaped value that it built in.
func TestScrubDecodingStreamsLikeBytes(t *testing.T) {
	v, si := scrubValue, scrubStandIn(t)
	s := mustScrubber(t, EncodedForms("GH", v, si))
	rng := rand.New(rand.NewPCG(26, 2))
	esc := func(c byte) string {
		k := rng.IntN(7)
		if c == '\\' && k >= 4 {
			k = 0 // a literal backslash would escape what follows
		}
		switch k {
		case 0:
			return fmt.Sprintf("%%%02X", c)
		case 1:
			return fmt.Sprintf(`\u%04x`, c)
		case 2:
			return fmt.Sprintf("&#%d;", c)
		case 3:
			return fmt.Sprintf("&#x%02X;", c)
		case 4:
			return []string{"\r\n", "\n", " "}[rng.IntN(3)] + string(c)
		}
		return string(c)
	}
	noise := []string{"%", "%4", "\\", "\\u", "\\u00", "&", "&#", "&#x", "&#12", "&amp;", " ", "\r\n", "g", "gh", "x"}
	for round := range 200 {
		var b strings.Builder
		var whole int
		for range 1 + rng.IntN(4) {
			if rng.IntN(2) == 0 {
				b.WriteString(noise[rng.IntN(len(noise))])
				continue
			}
			// The value, or a start of it, escaped at random.
			n := len(v)
			if rng.IntN(3) == 0 {
				n = 1 + rng.IntN(len(v))
			} else {
				whole++
			}
			for i := range n {
				if i == 0 {
					b.WriteString(fmt.Sprintf("%%%02X", v[0]))
					continue
				}
				b.WriteString(esc(v[i]))
			}
		}
		in := []byte(b.String())
		want := bytes.Clone(in)
		h := s.Bytes(want)
		if h.Total() < whole {
			t.Fatalf("round %d: %d replacements in %q, want %d at the least", round, h.Total(), in, whole)
		}
		for chunk := 1; chunk <= len(in)+1; chunk += 1 + chunk/8 {
			out, err := io.ReadAll(s.Reader(&chunkReader{data: bytes.Clone(in), n: chunk}, nil))
			if err != nil || !bytes.Equal(out, want) {
				t.Fatalf("round %d, reads of %d: %q, want %q (in %q)", round, chunk, out, want, in)
			}
		}
	}
}

// TestScrubStreamLikeBytes: a Stream, pushed the same random texts as
// TestScrubDecodingStreamsLikeBytes in pieces of every size, gives what
// Bytes gives, holds no more than MaxHold bytes after each piece, and
// starts again empty after End.
func TestScrubStreamLikeBytes(t *testing.T) {
	v, si := scrubValue, scrubStandIn(t)
	s := mustScrubber(t, EncodedForms("GH", v, si))
	rng := rand.New(rand.NewPCG(6455, 5))
	parts := []string{v, v[:5], v[5:], "%" + fmt.Sprintf("%02X", v[0]) + v[1:], fmt.Sprintf(`\u%04x`, v[0]) + v[1:], "&#x", " ", "\r\n", "x", "%4", v[:len(v)-1]}
	st := s.Stream()
	for round := range 200 {
		var b strings.Builder
		for range 1 + rng.IntN(6) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		in := []byte(b.String())
		want := bytes.Clone(in)
		s.Bytes(want)
		for chunk := 1; chunk <= len(in)+1; chunk += 1 + chunk/8 {
			var out []byte
			for rest := bytes.Clone(in); len(rest) > 0; {
				n := min(chunk, len(rest))
				out = append(out, st.Scrub(rest[:n])...)
				rest = rest[n:]
				if st.Held() > s.MaxHold() {
					t.Fatalf("round %d: holding %d bytes, MaxHold %d", round, st.Held(), s.MaxHold())
				}
			}
			out = append(out, st.End()...)
			if st.Held() != 0 {
				t.Fatalf("round %d: %d bytes held after End", round, st.Held())
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("round %d, pieces of %d: %q, want %q", round, chunk, out, want)
			}
		}
	}
	if st.Hits()["GH"] == 0 {
		t.Errorf("no hits counted")
	}
}
