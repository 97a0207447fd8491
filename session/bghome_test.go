package session

import "testing"

func TestCutPartialRune(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"abc", "abc"},
		{"a\xc3", "a"},             // the first byte of é
		{"a\xc3\xa9", "a\xc3\xa9"}, // é whole
		{"a\xe2\x82", "a"},         // two bytes of €
		{"a\xe2\x82\xac", "a\xe2\x82\xac"},
		{"a\xf0\x9f\x98", "a"}, // three bytes of a four-byte rune
		{"a\xf0\x9f\x98\x80", "a\xf0\x9f\x98\x80"},
		{"a\x80\x80\x80", "a\x80\x80\x80"}, // not UTF-8 at all: kept, sanitize replaces it
	} {
		if got := string(cutPartialRune([]byte(c.in))); got != c.want {
			t.Errorf("cutPartialRune(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
