package approval

import (
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// Bounds on the work one Check does on nested scripts (bash -c '...',
// eval, ...): how deep they nest and how many are parsed in all.
const (
	maxDepth   = 4
	maxScripts = 64
)

// word is one shell word after quote removal.
type word struct {
	// text is the word's value with quotes and backslashes removed; in a
	// word with expansions they stand as $NAME, $(…) and the like.
	text string
	// lit is true when the word has no expansions, so text is exactly
	// what the command receives (before globbing).
	lit bool
}

// command is one simple command: a program and its arguments.
type command struct {
	// name is the program's name without its directory ("rm" for
	// /bin/rm); "" when the name is not literal.
	name string
	args []word
}

// String returns the command as words joined by spaces, cut to 120 bytes,
// for messages.
func (c command) String() string {
	var b strings.Builder
	b.WriteString(c.name)
	for _, a := range c.args {
		b.WriteByte(' ')
		b.WriteString(a.text)
		if b.Len() > 120 {
			break
		}
	}
	return cut(b.String(), 120)
}

// analysis is what a command line holds: its simple commands (wrappers
// such as sudo count once as themselves and once for the command they
// run), its pipelines, and the floor violations found in its structure.
type analysis struct {
	cmds    []command
	pipes   [][]command
	denies  []Decision
	scripts int // nested scripts parsed so far
}

func analyze(src string) *analysis {
	a := &analysis{}
	a.script(src, 0)
	return a
}

// script parses src as bash and records what it holds; src that does not
// parse is read conservatively by fallback.
func (a *analysis) script(src string, depth int) {
	if depth > maxDepth || a.scripts >= maxScripts {
		return
	}
	a.scripts++
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		a.fallback(src, depth)
		return
	}
	a.file(f, depth)
}

func (a *analysis) deny(rule, reason string) {
	a.denies = append(a.denies, Decision{Verdict: Deny, Rule: rule, Reason: reason})
}

func (a *analysis) file(f *syntax.File, depth int) {
	seen := map[*syntax.BinaryCmd]bool{}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Stmt:
			a.stmt(n, depth)
		case *syntax.CallExpr:
			layers, scripts := resolve(words(n.Args))
			a.cmds = append(a.cmds, layers...)
			for _, s := range scripts {
				a.script(s, depth+1)
			}
		case *syntax.BinaryCmd:
			if isPipe(n) && !seen[n] {
				stages := flattenPipe(n, nil, seen)
				a.pipeline(stages, depth)
			}
		case *syntax.FuncDecl:
			a.funcDecl(n)
		}
		return true
	})
}

// stmt checks a statement's redirections and feeds here-documents and
// here-strings given to a shell back to script.
func (a *analysis) stmt(s *syntax.Stmt, depth int) {
	var shell bool
	if call, ok := s.Cmd.(*syntax.CallExpr); ok {
		layers, _ := resolve(words(call.Args))
		shell = len(layers) > 0 && shellReadsStdin(layers[len(layers)-1])
	}
	for _, r := range s.Redirs {
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.AppClob, syntax.RdrInOut,
			syntax.RdrAll, syntax.AppAll, syntax.RdrAllClob, syntax.AppAllClob:
			a.target(wordOf(r.Word), "> "+wordOf(r.Word).text)
		case syntax.Hdoc, syntax.DashHdoc:
			if shell && r.Hdoc != nil {
				a.script(wordOf(r.Hdoc).text, depth+1)
			}
		case syntax.WordHdoc:
			if shell {
				a.script(wordOf(r.Word).text, depth+1)
			}
		}
	}
}

// target checks a file that something writes to: a block device or
// /proc/sysrq-trigger is on the floor.
func (a *analysis) target(w word, what string) {
	if !w.lit {
		return
	}
	switch {
	case isDevice(w.text):
		a.deny(RuleBlockDevice, blockDeviceReason(what, w.text))
	case path.Clean(w.text) == "/proc/sysrq-trigger":
		a.deny(RuleShutdown, shutdownReason(what))
	}
}

func isPipe(b *syntax.BinaryCmd) bool {
	return b.Op == syntax.Pipe || b.Op == syntax.PipeAll
}

// flattenPipe returns the stages of the pipeline b, left to right, and
// marks the pipe nodes it went through in seen.
func flattenPipe(b *syntax.BinaryCmd, out []*syntax.Stmt, seen map[*syntax.BinaryCmd]bool) []*syntax.Stmt {
	seen[b] = true
	for _, s := range []*syntax.Stmt{b.X, b.Y} {
		if x, ok := s.Cmd.(*syntax.BinaryCmd); ok && isPipe(x) && !s.Negated && len(s.Redirs) == 0 {
			out = flattenPipe(x, out, seen)
		} else {
			out = append(out, s)
		}
	}
	return out
}

// pipeline records a pipeline's commands (the innermost command of each
// stage; "" for a stage that is not a simple command) and follows
// `echo SCRIPT | sh`.
func (a *analysis) pipeline(stages []*syntax.Stmt, depth int) {
	cmds := make([]command, len(stages))
	for i, s := range stages {
		if call, ok := s.Cmd.(*syntax.CallExpr); ok {
			if layers, _ := resolve(words(call.Args)); len(layers) > 0 {
				cmds[i] = layers[len(layers)-1]
			}
		}
	}
	a.pipes = append(a.pipes, cmds)
	for i := 1; i < len(cmds); i++ {
		if shellReadsStdin(cmds[i]) {
			if s, ok := echoed(cmds[i-1]); ok {
				a.script(s, depth+1)
			}
		}
	}
}

// echoed returns what an echo or printf command with literal arguments
// prints, roughly.
func echoed(c command) (string, bool) {
	if c.name != "echo" && c.name != "printf" {
		return "", false
	}
	var parts []string
	for i, w := range c.args {
		if !w.lit {
			return "", false
		}
		if c.name == "echo" && i == len(parts) && len(w.text) > 1 && w.text[0] == '-' && strings.Trim(w.text[1:], "neE") == "" {
			continue
		}
		parts = append(parts, w.text)
	}
	s := strings.Join(parts, " ")
	return strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace(s), true
}

// words converts the words of a command, brace-expanded as bash does
// (rm -rf /{,} is rm -rf / /); a word that expands to more than 64 words,
// or is too large to try (see hasBrace), is kept as written.
func words(ws []*syntax.Word) []word {
	out := make([]word, 0, len(ws))
	for _, w := range ws {
		if !hasBrace(w) {
			out = append(out, wordOf(w))
			continue
		}
		cp := &syntax.Word{Parts: slices.Clone(w.Parts)}
		var exp []word
		if syntax.SplitBraces(cp) {
			for ew, err := range expand.BracesSeq(nil, cp) {
				if err != nil || len(exp) == 64 {
					exp = nil
					break
				}
				exp = append(exp, wordOf(ew))
			}
		}
		if len(exp) == 0 {
			exp = []word{wordOf(w)}
		}
		out = append(out, exp...)
	}
	return out
}

// hasBrace reports whether w may hold a brace expansion worth expanding:
// words longer than 512 bytes or with more than 16 braces are left alone,
// which keeps the expansion's cost bounded.
func hasBrace(w *syntax.Word) bool {
	n, size := 0, 0
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok {
			n += strings.Count(l.Value, "{")
			size += len(l.Value)
		}
	}
	return n > 0 && n <= 16 && size <= 512
}

// wordOf removes quotes and backslashes from w. Parts with expansions make
// the word non-literal and stand in its text as $NAME, $(…), $((…)), <(…)
// or ….
func wordOf(w *syntax.Word) word {
	if w == nil {
		return word{lit: true}
	}
	var b strings.Builder
	lit := wordParts(&b, w.Parts, false)
	return word{text: b.String(), lit: lit}
}

func wordParts(b *strings.Builder, parts []syntax.WordPart, inDouble bool) bool {
	lit := true
	for _, p := range parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(unescape(p.Value, inDouble))
		case *syntax.SglQuoted:
			if p.Dollar {
				s, err := expand.Literal(nil, &syntax.Word{Parts: []syntax.WordPart{p}})
				if err != nil {
					s = p.Value
				}
				b.WriteString(s)
			} else {
				b.WriteString(p.Value)
			}
		case *syntax.DblQuoted:
			if !wordParts(b, p.Parts, true) {
				lit = false
			}
		case *syntax.ParamExp:
			lit = false
			b.WriteByte('$')
			if p.Param != nil {
				b.WriteString(p.Param.Value)
			}
		case *syntax.CmdSubst:
			lit = false
			b.WriteString("$(…)")
		case *syntax.ArithmExp:
			lit = false
			b.WriteString("$((…))")
		case *syntax.ProcSubst:
			lit = false
			b.WriteString("<(…)")
		default:
			lit = false
			b.WriteString("…")
		}
	}
	return lit
}

// unescape removes the backslashes the shell removes from an unquoted
// literal (every one, and a backslash-newline pair entirely) or from one
// inside double quotes (only before $ ` " \ and newline).
func unescape(s string, inDouble bool) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		n := s[i+1]
		switch {
		case n == '\n':
			i++
		case !inDouble || strings.IndexByte("$`\"\\", n) >= 0:
			b.WriteByte(n)
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// progName returns the program name of a command word: its last path
// element.
func progName(s string) string {
	s = strings.TrimRight(s, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// resolve turns a command's words into its layers: the command itself,
// then, while it is a wrapper such as sudo, the command the wrapper runs.
// It also returns the scripts the layers hand to a shell (bash -c SCRIPT,
// eval, ...). A command whose name is not literal has no layer.
func resolve(ws []word) ([]command, []string) {
	var layers []command
	var scripts []string
	for range 16 {
		if len(ws) == 0 || !ws[0].lit {
			break
		}
		c := command{name: progName(ws[0].text), args: ws[1:]}
		layers = append(layers, c)
		if s, ok := nestedScript(c); ok {
			scripts = append(scripts, s)
		}
		next, ok := unwrap(c)
		if !ok {
			break
		}
		ws = next
	}
	return layers, scripts
}

// wrapper describes a program that runs the command given after its own
// options and operands.
type wrapper struct {
	name     string   // the program's name
	argOpts  string   // short options that take a value
	longArgs []string // long options that take a value unless written --opt=value
	operands int      // operands before the command (timeout's duration)
	assigns  bool     // NAME=value words may come before the command
	stopOpts string   // short options with which no command is run
}

// wrappers are the wrapper programs known, by name.
var wrappers = []wrapper{
	{name: "sudo", argOpts: "CDghpRrTtUu", longArgs: []string{"close-from", "chdir", "group", "host", "prompt",
		"chroot", "role", "command-timeout", "type", "other-user", "user"}},
	{name: "doas", argOpts: "uC"},
	{name: "pkexec", longArgs: []string{"user"}},
	{name: "env", argOpts: "uCS", longArgs: []string{"unset", "chdir", "split-string"}, assigns: true},
	{name: "command", stopOpts: "vV"},
	{name: "builtin"},
	{name: "exec", argOpts: "a"},
	{name: "nice", argOpts: "n", longArgs: []string{"adjustment"}},
	{name: "nohup"},
	{name: "setsid"},
	{name: "unbuffer"},
	{name: "fakeroot"},
	{name: "torsocks"},
	{name: "proxychains", argOpts: "f"},
	{name: "proxychains4", argOpts: "f"},
	{name: "timeout", argOpts: "sk", longArgs: []string{"signal", "kill-after"}, operands: 1},
	{name: "stdbuf", argOpts: "ioe", longArgs: []string{"input", "output", "error"}},
	{name: "ionice", argOpts: "cnp", longArgs: []string{"class", "classdata", "pid", "pgid", "uid"}},
	{name: "chrt", argOpts: "TPD", operands: 1},
	{name: "taskset", operands: 1},
	{name: "time", argOpts: "fo", longArgs: []string{"format", "output"}},
	{name: "busybox"},
	{name: "xargs", argOpts: "aEeILlnPsd", longArgs: []string{"arg-file", "delimiter", "eof", "replace", "max-lines",
		"max-args", "max-procs", "max-chars", "process-slot-var"}},
}

// wrapperFor returns the wrapper named name. wrappers is a slice, not a
// map, so that the compiler lays it out statically: nothing is built when
// the package is initialised.
func wrapperFor(name string) (wrapper, bool) {
	for _, w := range wrappers {
		if w.name == name {
			return w, true
		}
	}
	return wrapper{}, false
}

// unwrap returns the words of the command a wrapper runs, and false when
// c is no wrapper or runs nothing.
func unwrap(c command) ([]word, bool) {
	spec, ok := wrapperFor(c.name)
	if !ok {
		return nil, false
	}
	args := c.args
	operands := spec.operands
	i := 0
	for i < len(args) {
		a := args[i]
		t := a.text
		if !a.lit {
			if operands > 0 {
				operands--
				i++
				continue
			}
			break
		}
		if t == "--" {
			i++
			break
		}
		if spec.assigns && isAssign(t) {
			i++
			continue
		}
		if len(t) > 1 && t[0] == '-' {
			if strings.HasPrefix(t, "--") {
				name, val, hasVal := strings.Cut(t[2:], "=")
				if c.name == "env" && name == "split-string" {
					if !hasVal && i+1 < len(args) {
						val = args[i+1].text
						i++
					}
					return splitString(val, args[i+1:]), true
				}
				if !hasVal && slices.Contains(spec.longArgs, name) {
					i++
				}
				i++
				continue
			}
			for j := 1; j < len(t); j++ {
				ch := t[j]
				if strings.IndexByte(spec.stopOpts, ch) >= 0 {
					return nil, false
				}
				if strings.IndexByte(spec.argOpts, ch) < 0 {
					continue
				}
				val := t[j+1:]
				if val == "" && i+1 < len(args) {
					val = args[i+1].text
					i++
				}
				if c.name == "env" && ch == 'S' {
					return splitString(val, args[i+1:]), true
				}
				break
			}
			i++
			continue
		}
		if operands > 0 {
			operands--
			i++
			continue
		}
		break
	}
	for operands > 0 && i < len(args) {
		operands--
		i++
	}
	return args[i:], i < len(args)
}

// splitString is env -S: s split at blanks, followed by rest.
func splitString(s string, rest []word) []word {
	var out []word
	for f := range strings.FieldsSeq(s) {
		out = append(out, word{text: strings.Trim(f, `'"`), lit: true})
	}
	return append(out, rest...)
}

// isAssign reports whether s is NAME=value.
func isAssign(s string) bool {
	name, _, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if r != '_' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// shells reports whether name is a program that runs a script given
// with -c.
func shells(name string) bool {
	switch name {
	case "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "yash", "posh", "rbash":
		return true
	}
	return false
}

// shellArgs reads a shell's arguments: whether -c is given and the first
// operand (the script with -c, else a script file), and whether -s is.
func shellArgs(c command) (hasC, hasS bool, operand *word) {
	for i := 0; i < len(c.args); i++ {
		a := c.args[i]
		t := a.text
		if !a.lit || len(t) < 2 || (t[0] != '-' && t[0] != '+') {
			if t == "--" && a.lit {
				if i+1 < len(c.args) {
					operand = &c.args[i+1]
				}
				return hasC, hasS, operand
			}
			return hasC, hasS, &c.args[i]
		}
		if strings.HasPrefix(t, "--") {
			if t == "--command" {
				hasC = true
			}
			if t == "--rcfile" || t == "--init-file" {
				i++
			}
			continue
		}
		letters := t[1:]
		if strings.ContainsRune(letters, 'c') {
			hasC = true
		}
		if strings.ContainsRune(letters, 's') {
			hasS = true
		}
		if strings.ContainsAny(letters, "oO") {
			i++ // -o pipefail, -O extglob
		}
	}
	return hasC, hasS, nil
}

// shellReadsStdin reports whether c is a shell that reads its script from
// standard input.
func shellReadsStdin(c command) bool {
	if !shells(c.name) {
		return false
	}
	hasC, hasS, op := shellArgs(c)
	return !hasC && (op == nil || hasS)
}

// nestedScript returns the script c hands to a shell, when it is literal:
// sh -c SCRIPT, su -c SCRIPT, eval WORDS, watch WORDS, ssh HOST WORDS.
func nestedScript(c command) (string, bool) {
	switch {
	case shells(c.name):
		if hasC, _, op := shellArgs(c); hasC && op != nil && op.lit {
			return op.text, true
		}
	case c.name == "eval":
		args := c.args
		for len(args) > 0 && args[0].lit && args[0].text == "eval" {
			args = args[1:]
		}
		return joinWords(args), len(args) > 0
	case c.name == "su" || c.name == "runuser":
		for i, a := range c.args {
			t := a.text
			switch {
			case strings.HasPrefix(t, "--command=") || strings.HasPrefix(t, "--session-command="):
				_, v, _ := strings.Cut(t, "=")
				return v, true
			case (t == "--command" || t == "--session-command" ||
				(len(t) > 1 && t[0] == '-' && t[1] != '-' && strings.HasSuffix(t, "c"))) && i+1 < len(c.args):
				return c.args[i+1].text, true
			}
		}
	case c.name == "watch":
		for i := 0; i < len(c.args); i++ {
			t := c.args[i].text
			if t == "--" {
				return joinWords(c.args[i+1:]), i+1 < len(c.args)
			}
			if len(t) > 1 && t[0] == '-' {
				if t == "-n" || t == "--interval" || t == "-q" || t == "--equexit" {
					i++
				}
				continue
			}
			return joinWords(c.args[i:]), true
		}
	case c.name == "ssh":
		for i := 0; i < len(c.args); i++ {
			t := c.args[i].text
			if len(t) > 1 && t[0] == '-' {
				if strings.ContainsAny(t[len(t)-1:], "BbcDEeFIiJLlmOoPpQRSWw") {
					i++
				}
				continue
			}
			return joinWords(c.args[i+1:]), i+1 < len(c.args)
		}
	}
	return "", false
}

func joinWords(ws []word) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.text
	}
	return strings.Join(parts, " ")
}

// fallback reads src that does not parse: quotes and backslashes are
// dropped, ; & | ( ) { } ` and newlines end commands, and every word of a
// command may start a command of its own, so that a dangerous command
// anywhere in it is found (and some harmless text is taken for one).
func (a *analysis) fallback(src string, depth int) {
	if name, ok := forkBombText(src); ok {
		a.deny(RuleForkBomb, forkBombReason(name))
	}
	type segment struct {
		words  []word
		pipeTo bool
	}
	var segs []segment
	var cur segment
	var w strings.Builder
	inWord, redirect := false, false
	endWord := func() {
		if !inWord {
			return
		}
		wd := word{text: w.String(), lit: true}
		if redirect {
			a.target(wd, "> "+wd.text)
			redirect = false
		} else {
			cur.words = append(cur.words, wd)
		}
		w.Reset()
		inWord = false
	}
	endSeg := func(pipe bool) {
		endWord()
		cur.pipeTo = pipe
		segs = append(segs, cur)
		cur = segment{}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case '\'', '"':
			inWord = true
		case '\\':
			inWord = true
			if i+1 < len(src) {
				i++
				if src[i] != '\n' {
					w.WriteByte(src[i])
				}
			}
		case ' ', '\t', '\r':
			endWord()
		case '>':
			endWord()
			redirect = true
		case '|':
			pipe := (i+1 == len(src) || src[i+1] != '|') && (i == 0 || src[i-1] != '|')
			endSeg(pipe)
		case ';', '&', '(', ')', '{', '}', '`', '\n', '<':
			endSeg(false)
		default:
			inWord = true
			w.WriteByte(c)
		}
	}
	endSeg(false)

	var pipe []command
	for _, s := range segs {
		for i := range s.words {
			layers, scripts := resolve(s.words[i:])
			a.cmds = append(a.cmds, layers...)
			for _, sc := range scripts {
				if i == 0 {
					a.script(sc, depth+1)
				}
			}
		}
		var inner command
		if layers, _ := resolve(s.words); len(layers) > 0 {
			inner = layers[len(layers)-1]
		}
		pipe = append(pipe, inner)
		if !s.pipeTo {
			if len(pipe) > 1 {
				a.pipes = append(a.pipes, pipe)
			}
			pipe = nil
		}
	}
}

// cut shortens s to at most n bytes, at a character boundary, marking the
// cut with "…".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// quoteCmd renders a command for a message: `cmd`.
func quoteCmd(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return "`" + strings.ToValidUTF8(s, "\uFFFD") + "`"
}
