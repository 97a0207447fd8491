package secrets

// This file is the Scrubber's second pass: the forms of EncodedForms
// matched where the server wrote some of their characters escaped one at
// a time, or broke them across lines. Each byte of a form may appear as
// itself or as one of these escapes of it (a "unit"):
//
//   - %XX, percent-encoding (RFC 3986), upper- or lower-case hex;
//   - \u00XX (for XX below 80, upper- or lower-case hex) and \" \\ \/ \b
//     \f \n \r \t, JSON string escapes (RFC 8259 section 7);
//   - &#N; and &#xH; (or &#XH;), HTML character references of up to 7
//     digits, and &amp; &lt; &gt; &quot; &apos;.
//
// and between two units there may be up to maxGap bytes of SP, HTAB, CR
// and LF: base64 wrapped at 76 (MIME) or 64 (PEM) columns with CRLF or
// LF, and a header value that the server folded (obs-fold, RFC 9112
// section 5.2), which Go's HTTP client hands over with the fold replaced
// by one SP. Each unit is rewritten as the same escape of the stand-in's
// byte, of the same length; where that cannot be (a two-byte JSON escape
// or a named reference of a byte the stand-in changes, a decimal
// reference with too few digits for it), the unit is left as it was:
// one character of the value, never all of it.

const (
	// maxGap is the longest run of SP, HTAB, CR and LF between two units
	// of a match ("\r\n " at the most).
	maxGap = 3
	// maxUnit is the longest unit: "&#x000041;".
	maxUnit = 10
)

// special marks the bytes that may begin an escape (1) or sit between
// two units (2).
var special = [256]uint8{'%': 1, '\\': 1, '&': 1, ' ': 2, '\t': 2, '\r': 2, '\n': 2}

// isGap reports whether c may sit between two units of a match.
func isGap(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// namedRefs are the HTML named references a unit may be.
var namedRefs = []struct {
	ref string
	c   byte
}{{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}}

// decodeUnit decodes the unit at the start of b (not empty): the byte it
// stands for and its length; more when b ends before that can be told
// and final is false (more bytes may come).
func decodeUnit(b []byte, final bool) (c byte, n int, more bool) {
	switch b[0] {
	case '%':
		if len(b) < 3 {
			if !final {
				return 0, 0, true
			}
			break
		}
		hi, ok1 := unhex(b[1])
		lo, ok2 := unhex(b[2])
		if ok1 && ok2 {
			return hi<<4 | lo, 3, false
		}
	case '\\':
		if len(b) < 2 {
			if !final {
				return 0, 0, true
			}
			break
		}
		switch b[1] {
		case '"', '\\', '/':
			return b[1], 2, false
		case 'b':
			return '\b', 2, false
		case 'f':
			return '\f', 2, false
		case 'n':
			return '\n', 2, false
		case 'r':
			return '\r', 2, false
		case 't':
			return '\t', 2, false
		case 'u':
			if len(b) < 6 {
				if !final && couldBeU00(b[2:]) {
					return 0, 0, true
				}
				break
			}
			hi, ok1 := unhex(b[4])
			lo, ok2 := unhex(b[5])
			if b[2] == '0' && b[3] == '0' && ok1 && ok2 && hi < 8 {
				return hi<<4 | lo, 6, false
			}
		}
	case '&':
		return decodeRef(b, final)
	}
	return b[0], 1, false
}

// couldBeU00 reports whether b, what follows `\u`, cut short, may be the
// start of "00XX".
func couldBeU00(b []byte) bool {
	for i, c := range b {
		if _, ok := unhex(c); i >= 2 && !ok || i < 2 && c != '0' {
			return false
		}
	}
	return true
}

// decodeRef is decodeUnit for b starting with '&'.
func decodeRef(b []byte, final bool) (c byte, n int, more bool) {
	for _, r := range namedRefs {
		if len(b) >= len(r.ref) {
			if string(b[:len(r.ref)]) == r.ref {
				return r.c, len(r.ref), false
			}
		} else if !final && string(b) == r.ref[:len(b)] {
			return 0, 0, true
		}
	}
	if len(b) < 2 {
		return '&', 1, !final
	}
	if b[1] != '#' {
		return '&', 1, false
	}
	i, base := 2, 10
	if len(b) > 2 && (b[2] == 'x' || b[2] == 'X') {
		i, base = 3, 16
	}
	v, digits := 0, 0
	for ; i < len(b) && i < maxUnit; i++ {
		d, ok := unhex(b[i])
		if b[i] == ';' && digits > 0 {
			if v < 0x80 {
				return byte(v), i + 1, false
			}
			return '&', 1, false
		}
		if !ok || base == 10 && d > 9 {
			return '&', 1, false
		}
		v = v*base + int(d)
		digits++
		if v >= 0x80 {
			return '&', 1, false
		}
	}
	if i == len(b) && i < maxUnit && !final {
		return 0, 0, true
	}
	return '&', 1, false
}

// walkResult is how far a pattern matched at a position.
type walkResult int

const (
	walkNone    walkResult = iota // no match
	walkFull                      // all of the pattern
	walkPartial                   // b ended in the middle of it
)

// walk matches o against b from p, unit by unit, calling fn (when not
// nil) with the start and length of each unit and the index of the byte
// of o it stands for. It returns how far it got, the end of the last
// unit matched and the count of units matched.
func walk(b []byte, p int, o []byte, final bool, fn func(start, n, k int)) (walkResult, int, int) {
	i := p
	for k := 0; k < len(o); k++ {
		gap := 0
		for {
			if i >= len(b) {
				if final {
					return walkPartial, i - gap, k
				}
				return walkPartial, i - gap, k
			}
			c, n, more := decodeUnit(b[i:], final)
			if more {
				return walkPartial, i - gap, k
			}
			if c == o[k] {
				if fn != nil {
					fn(i, n, k)
				}
				i += n
				break
			}
			if k == 0 || gap >= maxGap || !isGap(b[i]) {
				return walkNone, 0, 0
			}
			i++
			gap++
		}
	}
	return walkFull, i, len(o)
}

// dscan is scan for the second pass (see the top of this file): the
// same contract, for the matches that the first pass, of the forms as
// they are, leaves. Where a match could go on past b and b is not
// final, it returns the position it starts at.
func (s *Scrubber) dscan(b []byte, final bool, h *Hits) int {
	for pos := 0; pos < len(b); pos++ {
		// The common cases first: a plain byte that no pattern starts
		// with, two plain bytes that no pattern starts with.
		x := b[pos]
		if !s.start[x] {
			continue
		}
		if pos+1 < len(b) {
			y := b[pos+1]
			if k := uint(x)<<8 | uint(y); special[x]|special[y] == 0 && s.pair2[k/64]&(1<<(k%64)) == 0 {
				continue
			}
		}
		c, _, more := decodeUnit(b[pos:], final)
		if more {
			return pos
		}
		cands := s.byFirst[c]
		if len(cands) == 0 {
			continue
		}
		best, bestEnd, partial, partialK := -1, 0, -1, 0
		for _, j32 := range cands {
			j := int(j32)
			res, end, k := walk(b, pos, s.old[j], final, nil)
			switch res {
			case walkFull:
				if best < 0 || len(s.old[j]) > len(s.old[best]) {
					best, bestEnd = j, end
				}
			case walkPartial:
				if k > partialK || partial < 0 {
					partial, partialK = j, k
				}
			}
		}
		switch {
		case partial >= 0 && !final:
			return pos
		case best >= 0:
			s.rewrite(b, pos, best, final)
			h.add(s.names[best])
			pos = bestEnd - 1
		case partial >= 0 && partialK >= MinPartialTail:
			s.rewrite(b, pos, partial, final)
			h.add(s.names[partial])
			return len(b)
		}
	}
	return len(b)
}

// rewrite replaces each unit of the match of pattern j at pos by the
// same escape of the stand-in's byte.
func (s *Scrubber) rewrite(b []byte, pos, j int, final bool) {
	o, nw := s.old[j], s.new[j]
	walk(b, pos, o, final, func(start, n, k int) {
		reencode(b[start:start+n], o[k], nw[k])
	})
}

const hexUpper, hexLower = "0123456789ABCDEF", "0123456789abcdef"

// reencode rewrites u, a unit that stands for old, as the same kind of
// unit of the same length for c; it leaves u as it is where it cannot.
func reencode(u []byte, old, c byte) {
	if old == c {
		return
	}
	switch {
	case len(u) == 1:
		u[0] = c
	case u[0] == '%':
		writeHex(u[1:3], c)
	case u[0] == '\\' && len(u) == 6:
		writeHex(u[4:6], c)
	case u[0] == '\\' && (c == '"' || c == '\\' || c == '/'):
		u[1] = c
	case len(u) > 3 && u[0] == '&' && u[1] == '#':
		digits := u[2 : len(u)-1]
		if u[2] == 'x' || u[2] == 'X' {
			writeHex(u[3:len(u)-1], c)
			return
		}
		if !writeDec(digits, c) {
			// The other case of a letter may fit in fewer digits.
			switch {
			case c >= 'a' && c <= 'z':
				writeDec(digits, c-'a'+'A')
			case c >= 'A' && c <= 'Z':
				writeDec(digits, c-'A'+'a')
			}
		}
	}
}

// writeHex writes c into d in hex, zero-padded, in the case of d's
// letters (upper where d has none); it leaves d when c does not fit.
func writeHex(d []byte, c byte) {
	if len(d) < 2 && c >= 16 {
		return
	}
	digits := hexUpper
	for _, x := range d {
		if x >= 'a' && x <= 'f' {
			digits = hexLower
		}
	}
	v := int(c)
	for i := len(d) - 1; i >= 0; i-- {
		d[i] = digits[v&15]
		v >>= 4
	}
}

// writeDec writes c into d in decimal, zero-padded; false (d left) when
// c does not fit.
func writeDec(d []byte, c byte) bool {
	v := int(c)
	limit := 1
	for range d {
		limit *= 10
	}
	if v >= limit {
		return false
	}
	for i := len(d) - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return true
}
