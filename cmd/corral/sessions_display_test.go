package main

import "testing"

// TestDisplay: a table cell from a session's name or cwd is quoted when
// it holds a control character (a tab and a newline too), a bidi control
// or invalid UTF-8, and cut to its width.
func TestDisplay(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"dir:/home/me/proj", 60, "dir:/home/me/proj"},
		{"dir:/home/jösé", 60, "dir:/home/jösé"},
		{"a\x1b[2Jb", 60, `"a\x1b[2Jb"`},
		{"a\u202eb", 60, `"a\u202eb"`},
		{"a\tb", 60, `"a\tb"`},
		{"a\xffb", 60, `"a\xffb"`},
		{"abcdef", 3, "abc..."},
	} {
		if got := display(tc.in, tc.max); got != tc.want {
			t.Errorf("display(%q, %d) = %s, want %s", tc.in, tc.max, got, tc.want)
		}
	}
}
