package termsafe

import (
	"strings"
	"testing"
)

func TestText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain text, tabs\tand\nnewlines", "plain text, tabs\tand\nnewlines"},
		{"héllo wörld ☃ 日本", "héllo wörld ☃ 日本"},
		{"\uFFFD stays", "\uFFFD stays"},
		// C0 controls and DEL in caret notation.
		{"\x1b[2J", "^[[2J"},
		{"\x1b]52;c;ZXZpbA==\a", "^[]52;c;ZXZpbA==^G"},
		{"\x1b]0;title\x1b\\", "^[]0;title^[\\"},
		{"ok\rEVIL", "ok^MEVIL"},
		{"a\bb", "a^Hb"},
		{"\x00\x01\x1f\x7f", "^@^A^_^?"},
		// C1 controls as code points.
		{"\u009b2J", "<U+009B>2J"},
		{"\u0085\u0080\u009f", "<U+0085><U+0080><U+009F>"},
		{"\u00a0 is printable", "\u00a0 is printable"},
		// Bidi controls (Trojan Source).
		{"if admin \u202e } \u2066{", "if admin <U+202E> } <U+2066>{"},
		{"\u202a\u202b\u202c\u202d\u2067\u2068\u2069\u200e\u200f\u061c", "<U+202A><U+202B><U+202C><U+202D><U+2067><U+2068><U+2069><U+200E><U+200F><U+061C>"},
		{"\u2029 and \u200b are left", "\u2029 and \u200b are left"},
		// Bytes of no encoding in hex.
		{"\x9b2J", "<9B>2J"},
		{"caf\xe9", "caf<E9>"},
		{"\xe2\x80", "<E2><80>"},
		{"x\xff\x1b", "x<FF>^["},
	} {
		if got := Text(tc.in); got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestTextLeavesNoControl: whatever the input, Text's result holds no
// byte a terminal acts on other than tab and newline, no C1 control, no
// bidi control, and is valid UTF-8.
func TestTextLeavesNoControl(t *testing.T) {
	var all strings.Builder
	for b := 0; b < 256; b++ {
		all.WriteByte(byte(b))
	}
	for r := rune(0x80); r < 0x3000; r++ {
		all.WriteRune(r)
	}
	got := Text(all.String())
	if !strings.ContainsRune(got, 'A') || !strings.ContainsRune(got, 'é') {
		t.Fatalf("Text dropped printable characters: %q", got)
	}
	for _, r := range got {
		if r < 0x20 && r != '\t' && r != '\n' || r >= 0x7f && r <= 0x9f || Bidi(r) || r == 0xfffd {
			t.Errorf("Text left %U", r)
		}
	}
}

func TestPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a/b.txt", "a/b.txt"},
		{"with space", "with space"},
		{"\x1b[2J", `"\033[2J"`},
		{"a\u202eb", `"a\342\200\256b"`},
		{"\u009b", `"\302\233"`},
		{"tab\tnl\ncr\r", `"tab\tnl\ncr\r"`},
		{`q"b\`, `"q\"b\\"`},
		{"\xff", `"\377"`},
		{"é", `"\303\251"`},
	} {
		if got := Path(tc.in); got != tc.want {
			t.Errorf("Path(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestBidi(t *testing.T) {
	for _, r := range []rune{0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069, 0x200e, 0x200f, 0x061c} {
		if !Bidi(r) {
			t.Errorf("Bidi(%U) = false", r)
		}
	}
	for _, r := range []rune{'a', 0x2029, 0x200b, 0x2065, 0x206a, 0x2029, 0x202f} {
		if Bidi(r) {
			t.Errorf("Bidi(%U) = true", r)
		}
	}
}
