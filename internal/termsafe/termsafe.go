// Package termsafe makes text that a sandbox chose (file names, file
// contents, messages that quote them) safe to print for a person on the
// host: what corral prints for humans must not be able to drive the
// person's terminal.
//
// A command in a sandbox picks the names and the bytes of the files it
// writes. Printed raw, an ESC sequence among them can clear the screen
// or move the cursor (and so hide a change in corral diff, or fake a
// prompt), retitle the window, or write the clipboard (OSC 52); a
// carriage return or a backspace can overwrite what came before; a C1
// control (U+0080-U+009F, or the raw byte in an 8-bit terminal) does what
// its ESC form does; and a bidirectional override or isolate (Unicode
// TR#9: U+202A-U+202E, U+2066-U+2069, with the marks U+200E, U+200F and
// U+061C) makes text display in another order than it is read, as in
// Trojan Source (CVE-2021-42574).
//
// corral's rule, for all its output meant for people (stderr notes and
// warnings, errors, corral diff, its tables):
//
//   - A path is printed as Path returns it: git's quoting (core.quotePath,
//     its default), unchanged when it is plain printable ASCII, else in
//     double quotes with C escapes. git quotes every non-ASCII byte this
//     way, so a path can carry neither a control nor a bidi character.
//   - Other text (a diff's content lines, a message that embeds sandbox
//     text) is printed as Text returns it: what could drive the terminal
//     is shown visibly in less(1)'s notation (git's pager is less), and
//     everything else is left alone.
//
// Output for programs is not passed through here: --json output is exact
// (JSON escapes control characters itself), and the MCP server returns a
// diff to the agent that wrote it, not to a terminal.
package termsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Path returns p as git prints a path with core.quotePath (its default,
// quote.c's quote_c_style): unchanged when every byte is printable ASCII
// other than a double quote and a backslash, else in double quotes with C
// escapes (\a \b \t \n \v \f \r \" \\) and three octal digits for every
// other byte (a control character, DEL, a byte of a UTF-8 sequence, which
// covers C1 controls and bidi controls, or a byte of no encoding). A name
// can then never forge a line of a diff ("dir\n+++ b/evil") nor reach the
// terminal as an escape sequence or a bidi override (Trojan Source,
// CVE-2021-42574).
func Path(p string) string {
	need := false
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			need = true
			break
		}
	}
	if !need {
		return p
	}
	var b strings.Builder
	b.Grow(len(p) + 8)
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch c {
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\v':
			b.WriteString(`\v`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		default:
			if c < 0x20 || c >= 0x7f {
				fmt.Fprintf(&b, `\%03o`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Text returns s with everything that could drive a terminal shown
// visibly, in the notation less(1) uses for them without -r (git's pager
// is less): a C0 control other than a tab and a newline, and DEL, in
// caret notation (ESC as ^[, a carriage return as ^M, BEL as ^G, DEL as
// ^?); a C1 control (U+0080-U+009F) and a bidirectional formatting
// character (Unicode TR#9's embeddings, overrides and isolates
// U+202A-U+202E and U+2066-U+2069, and the marks U+200E, U+200F, U+061C:
// Trojan Source, CVE-2021-42574) as <U+XXXX>; and a byte that is not
// part of valid UTF-8 as <XX> in hex (a lone 0x9B is CSI to an 8-bit
// terminal). Tabs, newlines and all other characters are kept, so text
// without such characters comes back unchanged. The result is for people
// to read: it is not reversible (a file may hold "^[" itself), and
// output for programs (JSON, patches to apply) is written exact instead.
func Text(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unsafe(r, n) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case !unsafe(r, n):
			b.WriteString(s[i : i+n])
		case r == utf8.RuneError:
			fmt.Fprintf(&b, "<%02X>", s[i])
		case r == 0x7f:
			b.WriteString("^?")
		case r < 0x20:
			b.WriteByte('^')
			b.WriteByte(byte(r) + '@')
		default:
			fmt.Fprintf(&b, "<U+%04X>", r)
		}
		i += n
	}
	return b.String()
}

// unsafe says whether the rune r, n bytes long in its text, is one Text
// shows visibly.
func unsafe(r rune, n int) bool {
	switch {
	case r == utf8.RuneError && n == 1:
		return true // a byte of no encoding
	case r == '\t' || r == '\n':
		return false
	case r < 0x20 || r >= 0x7f && r <= 0x9f:
		return true
	}
	return Bidi(r)
}

// Bidi reports whether r is a bidirectional formatting character of
// Unicode TR#9 (UAX #9, "Explicit Directional Embeddings, Overrides and
// Isolates" and the implicit marks): LRE, RLE, PDF, LRO, RLO
// (U+202A-U+202E), LRI, RLI, FSI, PDI (U+2066-U+2069), LRM, RLM
// (U+200E, U+200F) and ALM (U+061C). These make a terminal or an editor
// show text in another order than it is stored, the Trojan Source attack
// (CVE-2021-42574).
func Bidi(r rune) bool {
	switch {
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}
