package session

import (
	"fmt"
	"sync"
	"unicode/utf8"
)

// capture keeps the first and the last bytes written to it, up to limit in
// all, and counts the rest, so a command's output costs bounded memory
// whatever it prints. It is safe for concurrent writers.
type capture struct {
	mu    sync.Mutex
	limit int
	head  []byte
	tail  []byte // ring of the last limit-len(head) bytes, oldest first after fix-up
	total int64
}

func newCapture(limit int) *capture {
	if limit < 64 {
		limit = 64
	}
	return &capture{limit: limit}
}

// Write implements io.Writer, keeping the head and the tail.
func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	headCap := c.limit / 2
	if len(c.head) < headCap {
		k := min(headCap-len(c.head), len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	tailCap := c.limit - headCap
	if len(p) >= tailCap {
		c.tail = append(c.tail[:0], p[len(p)-tailCap:]...)
		return n, nil
	}
	c.tail = append(c.tail, p...)
	if over := len(c.tail) - tailCap; over > 0 {
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
	return n, nil
}

// Output is a command's output made safe for a model: valid UTF-8, bounded.
type Output struct {
	// Text is the output; when Omitted > 0 it is the head and the tail with
	// a line between them that says how many bytes were left out.
	Text string
	// Bytes is how many bytes the command wrote in all.
	Bytes int64
	// Omitted is how many bytes in the middle were left out.
	Omitted int64
	// InvalidUTF8 is set when bytes that are not UTF-8 were replaced by
	// U+FFFD; Binary when the output looks like binary data (NUL bytes).
	InvalidUTF8, Binary bool
}

// result renders what was captured.
func (c *capture) result() Output {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := Output{Bytes: c.total}
	kept := int64(len(c.head) + len(c.tail))
	o.Omitted = c.total - kept
	head, tail := c.head, c.tail
	var raw []byte
	if o.Omitted > 0 {
		// Cut at rune boundaries so no character is split by the gap.
		head = trimPartialEnd(head)
		tail = trimPartialStart(tail)
		o.Omitted = c.total - int64(len(head)+len(tail))
		raw = append(append(append([]byte{}, head...), fmt.Sprintf("\n[... %d bytes of output omitted ...]\n", o.Omitted)...), tail...)
	} else {
		raw = append(append([]byte{}, head...), tail...)
	}
	o.Text, o.InvalidUTF8, o.Binary = sanitize(raw)
	return o
}

// sanitize returns b as valid UTF-8 without NUL bytes, and whether
// anything had to be replaced.
func sanitize(b []byte) (string, bool, bool) {
	binary := false
	for _, c := range b {
		if c == 0 {
			binary = true
			break
		}
	}
	invalid := !utf8.Valid(b)
	if !invalid && !binary {
		return string(b), false, false
	}
	out := make([]rune, 0, len(b))
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1:
			out = append(out, utf8.RuneError)
		case r == 0:
			out = append(out, '\uFFFD')
		default:
			out = append(out, r)
		}
		b = b[size:]
	}
	return string(out), invalid, binary
}

func trimPartialEnd(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[len(b)-1-i]) {
			if utf8.FullRune(b[len(b)-1-i:]) {
				return b
			}
			return b[:len(b)-1-i]
		}
	}
	return b
}

func trimPartialStart(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b
}
