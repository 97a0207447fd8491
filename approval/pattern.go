package approval

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// Pattern is a parsed dangerous pattern: a regular expression (re:...) or
// a command or pipeline written as in the shell; see the package
// documentation for the syntax. Get one from [ParsePattern]; the zero
// Pattern matches nothing.
type Pattern struct {
	src    string
	re     *regexp.Regexp
	stages []stage
}

// stage is one command of a command pattern.
type stage struct {
	names []*regexp.Regexp // alternatives for the program name
	words [][]alt          // each further word's alternatives
}

type altKind int

const (
	altOperand altKind = iota // a glob matching one argument
	altLong                   // --name
	altShort                  // -x or -xyz
)

// alt is one alternative of a pattern word.
type alt struct {
	kind altKind
	text string         // as written ("--force", "-rf", "+*")
	re   *regexp.Regexp // operands: the glob; long options: the name's glob
}

// String returns the pattern's text as given to [ParsePattern], without
// surrounding blanks.
func (p Pattern) String() string { return p.src }

// ParsePattern parses s, a pattern in either form the package
// documentation describes. Errors say what is wrong in a sentence that
// fits after the pattern's text: an empty pattern, a bad regular
// expression, a command pattern that is not one command or pipeline, holds
// an expansion, a redirection or unbalanced braces.
func ParsePattern(s string) (Pattern, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return Pattern{}, errors.New("empty pattern")
	case strings.IndexByte(s, 0) >= 0:
		return Pattern{}, errors.New("pattern contains a NUL byte")
	}
	if expr, ok := strings.CutPrefix(s, "re:"); ok {
		if strings.TrimSpace(expr) == "" {
			return Pattern{}, errors.New("empty regular expression after re:")
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return Pattern{}, fmt.Errorf("bad regular expression: %v", err)
		}
		return Pattern{src: s, re: re}, nil
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(s), "")
	if err != nil {
		return Pattern{}, fmt.Errorf("not a command pattern: %v", err)
	}
	if len(f.Stmts) != 1 {
		return Pattern{}, errors.New("a pattern is one command or one pipeline (no ;, && or newlines)")
	}
	st := f.Stmts[0]
	var stmts []*syntax.Stmt
	if b, ok := st.Cmd.(*syntax.BinaryCmd); ok && isPipe(b) && !st.Negated && !st.Background && len(st.Redirs) == 0 {
		stmts = flattenPipe(b, nil, map[*syntax.BinaryCmd]bool{})
	} else {
		stmts = []*syntax.Stmt{st}
	}
	p := Pattern{src: s}
	for _, st := range stmts {
		call, ok := st.Cmd.(*syntax.CallExpr)
		if !ok || st.Negated || st.Background || st.Coprocess || len(st.Redirs) > 0 || len(call.Assigns) > 0 || len(call.Args) == 0 {
			return Pattern{}, errors.New("a pattern is one command or one pipeline of plain commands (no redirections, &&, ||, &, subshells or NAME=value)")
		}
		var sg stage
		for i, w := range call.Args {
			alts, err := alternatives(w)
			if err != nil {
				return Pattern{}, err
			}
			if i == 0 {
				for _, a := range alts {
					re, err := globRegexp(a)
					if err != nil {
						return Pattern{}, err
					}
					sg.names = append(sg.names, re)
				}
				continue
			}
			var word []alt
			for _, a := range alts {
				al, err := newAlt(a)
				if err != nil {
					return Pattern{}, err
				}
				word = append(word, al)
			}
			sg.words = append(sg.words, word)
		}
		p.stages = append(p.stages, sg)
	}
	return p, nil
}

// alternatives expands a pattern word's braces and removes its quotes.
func alternatives(w *syntax.Word) ([]string, error) {
	open, closed := 0, 0
	for _, part := range w.Parts {
		if l, ok := part.(*syntax.Lit); ok {
			open += strings.Count(l.Value, "{")
			closed += strings.Count(l.Value, "}")
		}
	}
	if open != closed {
		return nil, fmt.Errorf("unbalanced braces in %q (a list of patterns with {a,b} must be written as a JSON or YAML list)", w.Lit())
	}
	if open > 0 && !syntax.SplitBraces(w) {
		return nil, fmt.Errorf("braces in pattern word %q hold no alternatives (write {a,b})", wordOf(w).text)
	}
	var out []string
	for ew, err := range expand.BracesSeq(nil, w) {
		if err != nil {
			return nil, fmt.Errorf("pattern word: %v", err)
		}
		x := wordOf(ew)
		if !x.lit {
			return nil, fmt.Errorf("pattern word %q holds an expansion ($NAME, $(...)); patterns match literal words", x.text)
		}
		out = append(out, x.text)
	}
	return out, nil
}

func newAlt(s string) (alt, error) {
	switch {
	case strings.HasPrefix(s, "--") && len(s) > 2:
		re, err := globRegexp(s[2:])
		return alt{kind: altLong, text: s, re: re}, err
	case len(s) > 1 && s[0] == '-' && s != "--":
		return alt{kind: altShort, text: s}, nil
	}
	re, err := globRegexp(s)
	return alt{kind: altOperand, text: s, re: re}, err
}

// globRegexp compiles a glob: * matches any run of characters (also /),
// ? one character, [abc], [a-z], [!a] and [^a] one character of a set;
// everything else is literal. An unclosed [ is literal.
func globRegexp(g string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(g); i++ {
		switch c := g[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '[':
			j := i + 1
			if j < len(g) && (g[j] == '!' || g[j] == '^') {
				j++
			}
			if j < len(g) && g[j] == ']' {
				j++
			}
			for j < len(g) && g[j] != ']' {
				j++
			}
			if j >= len(g) {
				b.WriteString(`\[`)
				continue
			}
			set := g[i+1 : j]
			if set != "" && set[0] == '!' {
				set = "^" + set[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(set, `\`, `\\`) + "]")
			i = j
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`)$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("bad glob %q: %v", g, err)
	}
	return re, nil
}

// match reports whether the pattern matches the analysed command line
// (raw is its text) and returns what matched, for messages.
func (p *Pattern) match(a *analysis, raw string) (string, bool) {
	switch {
	case p.re != nil:
		if loc := p.re.FindStringIndex(raw); loc != nil {
			return cut(raw[loc[0]:loc[1]], 120), true
		}
	case len(p.stages) == 1:
		for _, c := range a.cmds {
			if p.stages[0].match(c) {
				return c.String(), true
			}
		}
	case len(p.stages) > 1:
		for _, pipe := range a.pipes {
			j := 0
			for _, c := range pipe {
				if j < len(p.stages) && p.stages[j].match(c) {
					j++
				}
			}
			if j == len(p.stages) {
				parts := make([]string, len(pipe))
				for i, c := range pipe {
					parts[i] = c.String()
				}
				return cut(strings.Join(parts, " | "), 120), true
			}
		}
	}
	return "", false
}

// optionInfo is what a command's options are, for matching.
type optionInfo struct {
	short [256]bool // letters of short options (-rf gives r and f)
	longs []string  // long options' names (--force=x gives force)
	opts  []string  // option words as written
}

func options(c command) *optionInfo {
	o := &optionInfo{}
	for _, a := range c.args {
		t := a.text
		if !a.lit || len(t) < 2 || t[0] != '-' {
			continue
		}
		if t == "--" {
			break
		}
		o.opts = append(o.opts, t)
		if long, ok := strings.CutPrefix(t, "--"); ok {
			name, _, _ := strings.Cut(long, "=")
			o.longs = append(o.longs, name)
			continue
		}
		for i := 1; i < len(t); i++ {
			ch := t[i]
			if !isAlnum(ch) {
				break
			}
			o.short[ch] = true
		}
	}
	return o
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// match reports whether the command c matches the stage.
func (sg *stage) match(c command) bool {
	if c.name == "" {
		return false
	}
	named := false
	for _, re := range sg.names {
		if re.MatchString(c.name) {
			named = true
			break
		}
	}
	if !named {
		return false
	}
	var info *optionInfo
	pos := 0
	for _, alts := range sg.words {
		best := -1
		for _, al := range alts {
			cand := -1
			switch al.kind {
			case altOperand:
				for i := pos; i < len(c.args); i++ {
					if al.re.MatchString(c.args[i].text) {
						cand = i + 1
						break
					}
				}
			default:
				if info == nil {
					info = options(c)
				}
				if info.has(al) {
					cand = pos
				}
			}
			if cand >= 0 && (best < 0 || cand < best) {
				best = cand
			}
		}
		if best < 0 {
			return false
		}
		pos = best
	}
	return true
}

// has reports whether the option alternative al is among the options.
func (o *optionInfo) has(al alt) bool {
	switch al.kind {
	case altLong:
		name := al.text[2:]
		glob := strings.ContainsAny(name, "*?[")
		for _, l := range o.longs {
			if al.re.MatchString(l) || (!glob && l != "" && strings.HasPrefix(name, l)) {
				return true
			}
		}
	case altShort:
		for _, t := range o.opts {
			if t == al.text {
				return true
			}
		}
		for i := 1; i < len(al.text); i++ {
			if !o.short[al.text[i]] {
				return false
			}
		}
		return true
	}
	return false
}
