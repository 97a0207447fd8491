package secrets

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
)

// This file is the response side of the secrets (issue 26): what a
// secret's host sends back must not carry the real value into the
// sandbox, whichever of the common encodings it arrives in. The proxy
// (netproxy) streams every response header and body of a declared host
// through a [Scrubber] built from [ScrubPairs].

// Pair is one replacement of a [Scrubber]: Old, one encoding of a real
// value, becomes New, the same encoding of its stand-in. Old and New have
// the same length, so a scrubbed body keeps its length (and its
// Content-Length) and offsets.
type Pair struct {
	Old, New string
	// Name is the secret's variable name (for logs).
	Name string
	// Form names the encoding: "raw", "url", "json", "base64",
	// "base64url", each with a qualifier (see [EncodedForms]).
	Form string
}

// MinPartialTail is the shortest start of an encoded value that a
// Scrubber replaces at the very end of what it scrubs (a body, a header
// value): a server that cuts a reflected value short at the end of its
// answer must not hand back all of the value but its last byte. A
// shorter piece is left as it is (a few characters tell nothing, and
// replacing them would change unrelated text that happens to end so).
const MinPartialTail = 4

// ScrubPairs returns the replacements for a response from host: every
// form of [EncodedForms] of the real values of the secrets of secs that
// belong to host (for kind aws, of both halves of the pair), and of no
// other secret's: a value another host was never given is not looked
// for there, so that an unrelated short string in that host's answers
// is never changed. Pure.
func ScrubPairs(secs []Secret, host string) []Pair {
	var out []Pair
	for _, s := range secs {
		if !s.Belongs(host) {
			continue
		}
		if s.Value != "" && s.StandIn != "" {
			out = append(out, EncodedForms(s.Name, s.Value, s.StandIn)...)
		}
		if s.Kind == KindAWS && s.SecretValue != "" && s.SecretStandIn != "" {
			out = append(out, EncodedForms(s.SecretName, s.SecretValue, s.SecretStandIn)...)
		}
	}
	return out
}

// EncodedForms returns the pairs that replace the real value with its
// stand-in (of the same length, and the same bytes wherever value has no
// letter or digit, as [StandIn] makes it) in these forms:
//
//   - raw: the value as it is;
//   - url: percent-encoded as a query component and as a path segment
//     (RFC 3986), with upper- and lower-case hex digits, where that
//     differs from raw;
//   - json: the contents of a JSON string (RFC 8259): the minimal
//     escapes, "\/" for "/", and Go's and others' \u003c, \u003e,
//     \u0026 for <, > and &, where that differs from raw;
//   - base64 and base64url (RFC 4648 sections 4 and 5), of the value
//     alone, padded and unpadded, and of the value inside longer data
//     (such as "user:token" in a Basic credential) at each of the three
//     offsets it can have within a 3-byte group: the characters that
//     depend on the value's bytes only ("core"), and the core followed
//     by the value's last character for every value of the bits that
//     follow it, and padded where the value ends the data ("tail"). The
//     first character of an embedded value shares bits with what
//     precedes it and is left alone unless the value starts a group:
//     at most 4 bits of the value stay visible there.
//
// A [Scrubber] also finds each of these forms with any of its
// characters escaped one at a time (JSON \u00XX, %XX, HTML character
// references, in either case of hex, mixed with literal characters) and
// broken by up to 3 bytes of white space between two characters
// (base64 wrapped at 76 or 64 columns, a folded header value); see
// scrubdecode.go.
//
// Not covered: other encodings (hex, base32, quoted-printable, a JSON
// \u escape of a UTF-16 surrogate or of a character above U+007F), an
// encoding of a whole encoded form (base64 of a JSON string, base64 of
// base64), case changes, a form broken by more than 3 bytes of white
// space or by anything else, and anything the server computes from the
// value (a hash, an encryption, a part of it in the middle of other
// text). Duplicates are left out. Pure.
func EncodedForms(name, value, standIn string) []Pair {
	var out []Pair
	seen := map[string]bool{}
	add := func(form, o, n string) {
		if o == n || len(o) != len(n) || seen[o] || o == "" {
			return
		}
		seen[o] = true
		out = append(out, Pair{Old: o, New: n, Name: name, Form: form})
	}
	add("raw", value, standIn)
	add("url query", url.QueryEscape(value), url.QueryEscape(standIn))
	add("url query lower-case", lowerPercent(url.QueryEscape(value)), lowerPercent(url.QueryEscape(standIn)))
	add("url path", url.PathEscape(value), url.PathEscape(standIn))
	add("url path lower-case", lowerPercent(url.PathEscape(value)), lowerPercent(url.PathEscape(standIn)))
	for _, j := range []struct {
		form        string
		html, slash bool
	}{{"json", false, false}, {"json html-safe", true, false}, {"json slash", false, true}, {"json html-safe slash", true, true}} {
		add(j.form, jsonString(value, j.html, j.slash), jsonString(standIn, j.html, j.slash))
	}
	for _, alph := range []struct {
		form string
		enc  *base64.Encoding
	}{{"base64", base64.StdEncoding}, {"base64url", base64.URLEncoding}} {
		add(alph.form+" alone padded", alph.enc.EncodeToString([]byte(value)), alph.enc.EncodeToString([]byte(standIn)))
		raw := alph.enc.WithPadding(base64.NoPadding)
		add(alph.form+" alone unpadded", raw.EncodeToString([]byte(value)), raw.EncodeToString([]byte(standIn)))
		for off := range 3 {
			vc, vTails := base64Embedded(alph.enc, value, off)
			sc, sTails := base64Embedded(alph.enc, standIn, off)
			for i := range vTails {
				add(fmt.Sprintf("%s at offset %d tail", alph.form, off), vTails[i], sTails[i])
			}
			add(fmt.Sprintf("%s at offset %d core", alph.form, off), vc, sc)
		}
	}
	return out
}

// lowerPercent returns s with the hex digits of its %XX escapes in lower
// case.
func lowerPercent(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = lowerHex(b[i+1])
			b[i+2] = lowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerHex(c byte) byte {
	if c >= 'A' && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// jsonString returns v as the contents of a JSON string: '"' and '\\'
// escaped, control bytes as \u00XX, and with html '<', '>', '&' as
// \u003c, \u003e, \u0026, with slash '/' as "\/".
func jsonString(v string, html, slash bool) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '/' && slash:
			b.WriteString(`\/`)
		case c < 0x20 || html && (c == '<' || c == '>' || c == '&'):
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// base64Embedded returns the forms of v inside longer data encoded with
// enc (padded), v starting at offset off (0, 1 or 2) of a 3-byte group:
// core, the characters whose 6 bits all come from v; and tails, core
// followed by the character that holds v's last bits, once for each value
// of the bits of the data that follows v in it (none when v ends a
// group), then also once with v ending the data and the padding after it.
func base64Embedded(enc *base64.Encoding, v string, off int) (core string, tails []string) {
	n := off + len(v)
	data := make([]byte, n, n+1)
	copy(data[off:], v)
	full := enc.EncodeToString(data)
	first := (8*off + 5) / 6 // the first character that starts at or after v's first bit
	end := 8 * n / 6         // the characters before end end at or before v's last bit
	core = full[first:end]
	fill := (6 - 8*n%6) % 6 // bits of the last character that follow v
	if fill == 0 {
		return core, nil
	}
	// The last character holds 6-fill bits of v and fill bits of what
	// follows (zero in full, where the data ends).
	last := strings.IndexByte(alphabetOf(enc), full[end])
	for f := range 1 << fill {
		tails = append(tails, core+string(alphabetOf(enc)[last|f]))
	}
	tails = append(tails, full[first:])
	return core, tails
}

// alphabetOf returns the 64 characters of enc, in order.
func alphabetOf(enc *base64.Encoding) string {
	if enc == base64.URLEncoding || enc == base64.RawURLEncoding {
		return "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	}
	return "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
}

// Scrubber replaces a fixed set of byte strings by others of the same
// length, in whole buffers ([Scrubber.Bytes]) or in a stream
// ([Scrubber.Reader]) that it never holds whole. Where two of them match
// at the same place the longest wins; matches do not overlap, and the
// leftmost is taken first. It is immutable after [NewScrubber] and safe
// for concurrent use.
//
// It finds its strings with the Wu-Manber algorithm (S. Wu and U. Manber,
// "A fast algorithm for multi-pattern searching", 1994): a table indexed
// by two bytes tells how far the next match can be at the least, so most
// bytes of a body are skipped over rather than looked at. A second pass
// (scrubdecode.go) then finds the strings with some of their bytes
// escaped one at a time (%XX, JSON \u00XX and \", HTML &#N; and &#xH;)
// or with up to 3 bytes of white space between two of them, and
// rewrites each escape as the same escape of the replacement's byte.
type Scrubber struct {
	old, new [][]byte
	names    []string
	min, max int
	// shift[b] is how far the window may move when its last two bytes
	// are b (Wu-Manber's SHIFT); 0 means some pattern's first min bytes
	// end with b, listed in bucket[b].
	shift  []uint8
	bucket map[uint16][]int32
	// byFirst lists the patterns by their first byte, for the last
	// bytes of a buffer, looked at one position at a time.
	byFirst [256][]int32
	// pair2 marks the first two bytes of the patterns (for the second
	// pass, scrubdecode.go).
	pair2 *[1 << 16 / 64]uint64
	// start marks the bytes a match of the second pass may start with:
	// the patterns' first bytes and the first bytes of escapes.
	start [256]bool
}

// ErrScrubPair is returned by NewScrubber for a pair it cannot use.
var ErrScrubPair = errors.New("secrets: scrubber pair")

// NewScrubber compiles pairs (at least one; Old and New of the same
// length, at least 2 bytes). The first of two pairs with the same Old
// wins. Errors wrap [ErrScrubPair] and never quote a value.
func NewScrubber(pairs []Pair) (*Scrubber, error) {
	s := &Scrubber{}
	seen := map[string]bool{}
	for i, p := range pairs {
		if len(p.Old) != len(p.New) || len(p.Old) < 2 {
			return nil, fmt.Errorf("%w %d (%s %s): Old and New must have the same length, at least 2", ErrScrubPair, i, p.Name, p.Form)
		}
		if seen[p.Old] {
			continue
		}
		seen[p.Old] = true
		s.old = append(s.old, []byte(p.Old))
		s.new = append(s.new, []byte(p.New))
		s.names = append(s.names, p.Name)
	}
	if len(s.old) == 0 {
		return nil, fmt.Errorf("%w: no pairs", ErrScrubPair)
	}
	s.min, s.max = len(s.old[0]), 0
	for _, o := range s.old {
		s.min = min(s.min, len(o))
		s.max = max(s.max, len(o))
	}
	s.pair2 = new([1 << 16 / 64]uint64)
	for i, o := range s.old {
		s.byFirst[o[0]] = append(s.byFirst[o[0]], int32(i))
		k := uint(o[0])<<8 | uint(o[1])
		s.pair2[k/64] |= 1 << (k % 64)
		s.start[o[0]] = true
	}
	for c := range 256 {
		if special[c] == 1 {
			s.start[c] = true
		}
	}
	// Wu-Manber with blocks of two bytes over each pattern's first min
	// bytes.
	top := min(s.min-1, 255)
	s.shift = make([]uint8, 1<<16)
	for i := range s.shift {
		s.shift[i] = uint8(top)
	}
	s.bucket = map[uint16][]int32{}
	for i, o := range s.old {
		for j := 1; j < s.min; j++ {
			b := uint16(o[j-1])<<8 | uint16(o[j])
			if d := s.min - 1 - j; d < int(s.shift[b]) {
				s.shift[b] = uint8(d)
			}
		}
		b := uint16(o[s.min-2])<<8 | uint16(o[s.min-1])
		s.bucket[b] = append(s.bucket[b], int32(i))
	}
	return s, nil
}

// MaxLen is the length of the longest string the scrubber replaces, in
// bytes, as it is; escaped a character at a time and broken across
// lines, it may take up to MaxHold bytes.
func (s *Scrubber) MaxLen() int { return s.max }

// MaxHold is what a stream ([Scrubber.Reader]) may hold back at the
// most, in bytes: MaxLen units of up to 10 bytes each (&#x000041;) with
// up to 3 bytes of white space between two of them.
func (s *Scrubber) MaxHold() int { return s.max*(maxUnit+maxGap) - maxGap }

// Hits counts replacements by secret name (Pair.Name).
type Hits map[string]int

func (h *Hits) add(name string) {
	if *h == nil {
		*h = Hits{}
	}
	(*h)[name]++
}

// Total is the number of replacements.
func (h Hits) Total() int {
	n := 0
	for _, c := range h {
		n += c
	}
	return n
}

// Names are the secrets replaced, sorted.
func (h Hits) Names() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Bytes scrubs b in place, as a whole (a header value): every match is
// replaced, and a start of one of at least [MinPartialTail] bytes that
// ends b too. It returns what was replaced.
func (s *Scrubber) Bytes(b []byte) Hits {
	var h Hits
	s.scanAll(b, true, &h)
	return h
}

// scanAll runs both passes over b: scan, of the forms as they are, and
// dscan, of the forms escaped a character at a time or broken across
// lines (scrubdecode.go), over what the first pass decided. It returns
// the end of what both decided (see scan).
func (s *Scrubber) scanAll(b []byte, final bool, h *Hits) int {
	r := s.scan(b, 0, final, h)
	return s.dscan(b[:r], final && r == len(b), h)
}

// String is Bytes for a string; it returns s itself when nothing
// changed.
func (s *Scrubber) String(v string) (string, Hits) {
	if len(v) < MinPartialTail {
		return v, nil
	}
	b := []byte(v)
	h := s.Bytes(b)
	if len(h) == 0 {
		return v, nil
	}
	return string(b), h
}

// scan replaces the matches that start in b[from:] and returns the
// first position at which one may start that b does not hold whole (a
// match could go on in the bytes after b), or len(b). With final, b is
// all there is: nothing is left undecided, and a start of a string of at
// least MinPartialTail bytes that ends b is replaced by the start of its
// replacement.
func (s *Scrubber) scan(b []byte, from int, final bool, h *Hits) int {
	pos, n := from, len(b)
	// Where every string that starts at pos fits in b.
	for pos+s.max <= n {
		e := pos + s.min - 1
		k := uint16(b[e-1])<<8 | uint16(b[e])
		if d := s.shift[k]; d > 0 {
			pos += int(d)
			continue
		}
		best := -1
		for _, j := range s.bucket[k] {
			if o := s.old[j]; (best < 0 || len(o) > len(s.old[best])) && bytes.HasPrefix(b[pos:], o) {
				best = int(j)
			}
		}
		if best < 0 {
			pos++
			continue
		}
		copy(b[pos:], s.new[best])
		h.add(s.names[best])
		pos += len(s.old[best])
	}
	// The last bytes, one position at a time.
	for pos < n {
		cands := s.byFirst[b[pos]]
		if len(cands) == 0 {
			pos++
			continue
		}
		rest := b[pos:]
		best, partial := -1, -1
		for _, j32 := range cands {
			j, o := int(j32), s.old[j32]
			switch {
			case len(o) <= len(rest):
				if (best < 0 || len(o) > len(s.old[best])) && bytes.HasPrefix(rest, o) {
					best = j
				}
			case bytes.HasPrefix(o, rest):
				partial = j
			}
		}
		switch {
		case partial >= 0 && !final:
			return pos
		case best >= 0:
			copy(b[pos:], s.new[best])
			h.add(s.names[best])
			pos += len(s.old[best])
		case partial >= 0 && len(rest) >= MinPartialTail:
			copy(b[pos:], s.new[partial][:len(rest)])
			h.add(s.names[partial])
			return n
		default:
			pos++
		}
	}
	return n
}

// Reader returns a reader of r's bytes scrubbed as a stream: a match is
// found wherever r's reads cut it, and only the bytes that may begin one
// (a start of one of the strings, at most MaxLen-1 bytes) are held back
// until the next read of r tells (at most [Scrubber.MaxHold] bytes); everything else is passed on as soon as
// r gives it, so a streamed answer (server-sent events, a long poll)
// keeps flowing. When r ends (io.EOF or another error), the held bytes
// are scrubbed as the end of the data (see [Scrubber.Bytes]), passed on,
// and then r's error is returned; done, when not nil, is called once
// just before that, with the replacements made and r's error.
func (s *Scrubber) Reader(r io.Reader, done func(Hits, error)) io.Reader {
	return &scrubReader{s: s, src: r, done: done}
}

// scrubMinRead is the least a scrubReader asks of its source at once,
// however small the caller's buffer.
const scrubMinRead = 4 << 10

type scrubReader struct {
	s     *Scrubber
	src   io.Reader
	buf   []byte // buf[off:] was read from src and not passed on yet
	off   int
	ready int   // buf[off:off+ready] is scrubbed and final
	err   error // src's error, returned once buf is drained
	ended bool  // the final scan ran
	hits  Hits
	done  func(Hits, error)
}

// Read implements io.Reader.
func (r *scrubReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for r.ready == 0 {
		if r.off > 0 {
			// Only bytes held back are left: to the front.
			r.buf = r.buf[:copy(r.buf, r.buf[r.off:])]
			r.off = 0
		}
		if r.err != nil {
			if !r.ended {
				r.ended = true
				r.ready = r.s.scanAll(r.buf, true, &r.hits)
				if r.done != nil {
					r.done(r.hits, r.err)
				}
				if r.ready > 0 {
					break
				}
			}
			return 0, r.err
		}
		// What is held plus what is read fits in p, so a read of r
		// goes on in one piece (a reverse proxy writes each piece it
		// gets: a piece cut off the end of p would be a write, and a
		// TLS record, of its own).
		want := max(len(p)-len(r.buf), scrubMinRead)
		if cap(r.buf)-len(r.buf) < want {
			nb := make([]byte, len(r.buf), len(r.buf)+want)
			copy(nb, r.buf)
			r.buf = nb
		}
		n, err := r.src.Read(r.buf[len(r.buf) : len(r.buf)+want])
		r.buf = r.buf[:len(r.buf)+n]
		if err != nil {
			r.err = err
			continue
		}
		if n > 0 {
			// Bytes before the held ones were passed on; the held ones
			// are looked at again with what came after them.
			r.ready = r.s.scanAll(r.buf, false, &r.hits)
		}
	}
	n := copy(p, r.buf[r.off:r.off+r.ready])
	r.off += n
	r.ready -= n
	return n, nil
}

// Stream scrubs a stream that is pushed to it a piece at a time, where
// [Scrubber.Reader] pulls one from an io.Reader: a caller that must
// interleave the scrubbed bytes with its own (netproxy re-frames a
// WebSocket message around the control frames the server puts between
// its fragments, RFC 6455 section 5.4) cannot hand the scrubber a reader
// that blocks for more data. The pieces are scrubbed as one stream: a
// match is found wherever they are cut, and only the bytes at the end
// that may begin one are held back, at most [Scrubber.MaxHold]. Not
// safe for concurrent use.
type Stream struct {
	s    *Scrubber
	buf  []byte // buf[:out] was returned last; buf[out:] is held
	out  int
	hits Hits
}

// Stream returns a new stream of s, with nothing held.
func (s *Scrubber) Stream() *Stream { return &Stream{s: s} }

// Scrub scrubs p as the next bytes of the stream and returns the bytes
// of the stream that are now final: the ones held back before and p,
// less those at the end that may begin a match (held until the next
// call). The result is valid until the next call of Scrub or End; p is
// not changed and may be reused at once.
func (st *Stream) Scrub(p []byte) []byte {
	st.buf = append(st.buf[:copy(st.buf, st.buf[st.out:])], p...)
	st.out = st.s.scanAll(st.buf, false, &st.hits)
	return st.buf[:st.out]
}

// End scrubs the bytes held back as the end of the stream (see
// [Scrubber.Bytes]) and returns them; the stream is then empty, and may
// start again. The result is valid until the next call of Scrub or End.
func (st *Stream) End() []byte {
	st.buf = st.buf[:copy(st.buf, st.buf[st.out:])]
	// With final, scanAll decides every byte (it returns len(st.buf)).
	st.s.scanAll(st.buf, true, &st.hits)
	out := st.buf
	st.buf, st.out = st.buf[:0], 0
	return out
}

// Held is the number of bytes held back.
func (st *Stream) Held() int { return len(st.buf) - st.out }

// Hits returns the replacements made so far.
func (st *Stream) Hits() Hits { return st.hits }
