package wscopy

import (
	"strings"
	"testing"
)

func TestParsePair(t *testing.T) {
	for _, tc := range []struct {
		src, dst, sess string
		want           string // "s|p -> s|p" or an error substring
	}{
		{"./src", "demo:work", "", "|./src -> demo|work"},
		{"demo:out", ".", "", "demo|out -> |."},
		{":out", "/tmp/x", "demo", "demo|out -> |/tmp/x"},
		{"/abs", "demo:", "", "|/abs -> demo|."},
		{"./a:b", "demo:/work/x", "", "|./a:b -> demo|/work/x"},
		{":out", "x", "", "names no session"},
		{":out", "x", "dir:/work/p", "dir:/work/p|out -> |x"},
		{"a", "b", "", "one of SRC and DST must be"},
		{"s1:a", "s2:b", "", "one of SRC and DST must be"},
		{"", "s:b", "", "an empty path"},
	} {
		s, d, err := ParsePair(tc.src, tc.dst, tc.sess)
		got := s.Session + "|" + s.Path + " -> " + d.Session + "|" + d.Path
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%q %q --session %q: %q, want %q", tc.src, tc.dst, tc.sess, got, tc.want)
		}
	}
}

func TestRel(t *testing.T) {
	w := &Workspace{Session: "s", Root: "/work/p"}
	for in, want := range map[string]string{
		".": ".", "a/b": "a/b", "/work/p": ".", "/work/p/a/../b": "b", "a/../..": "outside", "/etc/passwd": "outside", "/work/pp": "outside",
	} {
		got, err := w.Rel(in)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, want) {
			t.Errorf("Rel(%q) = %q, want %q", in, got, want)
		}
	}
}
