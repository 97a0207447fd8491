package session

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// parseDeclared parses the output of bash's `declare -px` (bash 4.4 to
// 5.3; builtins/declare.def, show_var_attributes): one line
//
//	declare -FLAGS NAME[=VALUE]
//
// per exported variable, where VALUE is double-quoted with \ before each
// of " \ $ ` (sh_double_quote; a newline stays as it is, so a "line" may
// span several), or, from bash 5.2 on for a value holding a control
// character, ANSI-C quoted as $'...' (ansic_quote), or, for an array
// (flag a or A), a parenthesised list of [KEY]=VALUE.
//
// It returns "NAME=value" for each variable that has a value and is not
// an array: what bash passes to a child's environment (an exported array,
// or a name exported but never set, reaches no child). ok is false when
// the text does not have that form; the caller then keeps nothing of it.
// The text is data from inside a sandbox: it is parsed, never evaluated.
func parseDeclared(s string) (env []string, ok bool) {
	const lead = "declare -"
	for {
		s = strings.TrimLeft(s, "\n")
		if s == "" {
			return env, true
		}
		if !strings.HasPrefix(s, lead) {
			return nil, false
		}
		s = s[len(lead):]
		sp := strings.IndexByte(s, ' ')
		if sp < 1 {
			return nil, false
		}
		flags := s[:sp]
		s = s[sp+1:]
		n := 0
		for n < len(s) && nameByte(s[n], n) {
			n++
		}
		name := s[:n]
		s = s[n:]
		if name == "" {
			return nil, false
		}
		if s == "" || s[0] == '\n' {
			continue // exported, never set: no child sees it
		}
		if s[0] != '=' {
			return nil, false
		}
		s = s[1:]
		var val string
		var good bool
		switch {
		case strings.ContainsAny(flags, "aA"):
			s, good = skipArray(s)
			if !good {
				return nil, false
			}
			continue
		case strings.HasPrefix(s, `"`):
			val, s, good = unquoteDouble(s[1:])
		case strings.HasPrefix(s, "$'"):
			val, s, good = unquoteANSIC(s[2:])
		}
		if !good {
			return nil, false
		}
		env = append(env, name+"="+val)
	}
}

// nameByte reports whether c may stand at index i of a shell variable's
// name ([A-Za-z_][A-Za-z0-9_]*).
func nameByte(c byte, i int) bool {
	return c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9'
}

// unquoteDouble decodes the body of sh_double_quote's "..." from s (just
// past the opening quote) up to the closing quote, returning the value
// and the text after the quote.
func unquoteDouble(s string) (val, rest string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], true
		case '\\':
			if i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
				i++
				b.WriteByte(s[i])
				continue
			}
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false
}

// unquoteANSIC decodes the body of $'...' from s (just past "$'") up to
// the closing quote, with the escapes of bash's ANSI-C quoting (bash(1),
// QUOTING): \a \b \e \E \f \n \r \t \v \\ \' \" \? \nnn (octal) \xHH
// \uHHHH \UHHHHHHHH \cX. It returns the value and the text after the
// quote.
func unquoteANSIC(s string) (val, rest string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\'' {
			return b.String(), s[i+1:], true
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			return "", "", false
		}
		switch e := s[i]; e {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'e', 'E':
			b.WriteByte(0x1b)
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '\\', '\'', '"', '?':
			b.WriteByte(e)
		case 'c':
			if i+1 >= len(s) {
				return "", "", false
			}
			i++
			b.WriteByte(s[i] & 0x1f)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			v, _ := strconv.ParseUint(s[i:j], 8, 16)
			b.WriteByte(byte(v))
			i = j - 1
		case 'x', 'u', 'U':
			max := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			j := i + 1
			for j < len(s) && j < i+1+max && isHex(s[j]) {
				j++
			}
			if j == i+1 {
				b.WriteByte('\\')
				b.WriteByte(e)
				continue
			}
			v, _ := strconv.ParseUint(s[i+1:j], 16, 32)
			if e == 'x' {
				b.WriteByte(byte(v))
			} else {
				b.WriteString(string(utf8.AppendRune(nil, rune(v))))
			}
			i = j - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", "", false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// skipArray returns the text after an array's (...) list, whose keys and
// values are quoted as above (or with '...').
func skipArray(s string) (rest string, ok bool) {
	if !strings.HasPrefix(s, "(") {
		return "", false
	}
	for i := 1; i < len(s); i++ {
		var good bool
		switch {
		case s[i] == ')':
			return s[i+1:], true
		case s[i] == '\\':
			i++
			continue
		case s[i] == '"':
			_, rest, good = unquoteDouble(s[i+1:])
		case strings.HasPrefix(s[i:], "$'"):
			_, rest, good = unquoteANSIC(s[i+2:])
		case s[i] == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			rest, good = s[i+2+j:], j >= 0
		default:
			continue
		}
		if !good {
			return "", false
		}
		i = len(s) - len(rest) - 1
	}
	return "", false
}
