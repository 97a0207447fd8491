package approval

import (
	"fmt"
	"github.com/corralhq/corral/internal/lazyre"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// floorCommand checks one simple command against the hard floor.
func floorCommand(c command) (Decision, bool) {
	deny := func(rule, reason string) (Decision, bool) {
		return Decision{Verdict: Deny, Rule: rule, Reason: reason}, true
	}
	switch n := c.name; {
	case n == "rm":
		if recursive(c, "rR", 1) && anyOperand(c, isRoot) {
			return deny(RuleRmRoot, fmt.Sprintf("%s would delete every file of the system (recursive rm of /); "+
				"corral refuses it whatever the settings. Remove the directory you mean by its own path.", quoteCmd(c.String())))
		}
	case n == "chmod" || n == "chown" || n == "chgrp":
		if recursive(c, "R", 3) && anyOperand(c, isRoot) {
			return deny(RuleChmodRoot, fmt.Sprintf("%s would change the permissions or owner of every file of the system "+
				"(recursive from /); corral refuses it whatever the settings. Name the directory you mean.", quoteCmd(c.String())))
		}
	case isMkfs(n):
		if anyOperand(c, func(w word) bool { return !w.lit || isDevice(w.text) }) {
			return deny(RuleMkfs, fmt.Sprintf("%s would make a new file system on a device, erasing it; corral refuses it "+
				"whatever the settings. To build a file system image, name an image file rather than a device.", quoteCmd(c.String())))
		}
	case n == "dd":
		for _, a := range c.args {
			if v, ok := strings.CutPrefix(a.text, "of="); ok && a.lit && isDevice(v) {
				return deny(RuleBlockDevice, blockDeviceReason(c.String(), v))
			}
		}
	case n == "tee":
		for _, a := range operands(c) {
			if a.lit && isDevice(a.text) {
				return deny(RuleBlockDevice, blockDeviceReason(c.String(), a.text))
			}
		}
	case n == "shutdown" || n == "reboot" || n == "halt" || n == "poweroff":
		return deny(RuleShutdown, shutdownReason(c.String()))
	case n == "init" || n == "telinit":
		if ops := operands(c); len(ops) > 0 && ops[0].lit && (ops[0].text == "0" || ops[0].text == "6") {
			return deny(RuleShutdown, shutdownReason(c.String()))
		}
	case n == "systemctl":
		for _, a := range operands(c) {
			switch a.text {
			case "poweroff", "reboot", "halt", "kexec", "soft-reboot":
				return deny(RuleShutdown, shutdownReason(c.String()))
			}
		}
	case n == "perl" || n == "ruby" || strings.HasPrefix(n, "python"):
		for _, a := range c.args {
			if a.lit && forkBombCode.MatchString(a.text) {
				return deny(RuleForkBomb, forkBombReason(c.String()))
			}
		}
	}
	return Decision{}, false
}

// forkBombCode matches the one-line fork bombs of perl and python.
var forkBombCode = lazyre.New(`\bfork\s*(while|until)\s*fork\b|while\s*(1|True|true)\s*:\s*os\.fork\(\)`)

func blockDeviceReason(what, dev string) string {
	return fmt.Sprintf("%s would write onto the block device %s, destroying what is on it; "+
		"corral refuses it whatever the settings.", quoteCmd(what), dev)
}

func shutdownReason(what string) string {
	return fmt.Sprintf("%s would shut down or restart the machine; corral refuses it whatever the settings.", quoteCmd(what))
}

func forkBombReason(what string) string {
	return fmt.Sprintf("%s is a fork bomb (it starts copies of itself without end); "+
		"corral refuses it whatever the settings.", quoteCmd(what))
}

// recursive reports whether c has a recursive option: one of the short
// letters, or --recursive abbreviated to at least minLong letters.
func recursive(c command, letters string, minLong int) bool {
	for _, a := range c.args {
		t := a.text
		if !a.lit {
			continue
		}
		if t == "--" {
			return false
		}
		if long, ok := strings.CutPrefix(t, "--"); ok {
			if len(long) >= minLong && strings.HasPrefix("recursive", long) {
				return true
			}
			continue
		}
		if len(t) > 1 && t[0] == '-' && strings.ContainsAny(t[1:], letters) {
			return true
		}
	}
	return false
}

// operands returns c's arguments that are no options: those that do not
// start with '-', and every one after "--".
func operands(c command) []word {
	var out []word
	for i, a := range c.args {
		if a.lit && a.text == "--" {
			return append(out, c.args[i+1:]...)
		}
		if a.lit && len(a.text) > 1 && a.text[0] == '-' {
			continue
		}
		out = append(out, a)
	}
	return out
}

func anyOperand(c command, f func(word) bool) bool {
	for _, a := range operands(c) {
		if f(a) {
			return true
		}
	}
	return false
}

// isRoot reports whether w names the root directory or everything in it:
// "/", "//", "/.", "/..", "/*", "/.*", "/*/*" and the like.
func isRoot(w word) bool {
	if !w.lit || !strings.HasPrefix(w.text, "/") {
		return false
	}
	p := path.Clean(w.text)
	if p == "/" {
		return true
	}
	for comp := range strings.SplitSeq(p[1:], "/") {
		if !strings.Contains(comp, "*") {
			return false
		}
		rest := bracketExpr.ReplaceAllString(comp, "")
		if strings.Trim(rest, "*?.") != "" {
			return false
		}
	}
	return true
}

var bracketExpr = lazyre.New(`\[[^]]*\]`)

// isMkfs reports whether name makes or wipes a file system.
func isMkfs(name string) bool {
	switch name {
	case "mkfs", "mke2fs", "mkswap", "mkdosfs", "mkexfatfs", "mkntfs", "wipefs", "blkdiscard":
		return true
	}
	return strings.HasPrefix(name, "mkfs.")
}

// isDevice reports whether p is a device under /dev that holds data: any
// but the character devices that are safe to write (null, zero, the
// terminals, the standard streams, ...).
func isDevice(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	p = path.Clean(p)
	rest, ok := strings.CutPrefix(p, "/dev/")
	if !ok {
		return false
	}
	switch rest {
	case "null", "zero", "full", "random", "urandom", "tty", "console", "stdin", "stdout", "stderr",
		"ptmx", "kmsg", "log":
		return false
	}
	for _, safe := range []string{"fd/", "pts/", "shm/", "mqueue/", "tty", "hugepages/"} {
		if strings.HasPrefix(rest, safe) {
			return false
		}
	}
	return true
}

// funcDecl refuses a function that is a fork bomb: one that pipes itself
// into itself, or calls itself twice or more with a call in the
// background.
func (a *analysis) funcDecl(fd *syntax.FuncDecl) {
	names := fd.Names
	if fd.Name != nil {
		names = append(names, fd.Name)
	}
	for _, n := range names {
		if n == nil || fd.Body == nil {
			continue
		}
		name := n.Value
		calls, background, piped := 0, false, false
		syntax.Walk(fd.Body, func(node syntax.Node) bool {
			switch x := node.(type) {
			case *syntax.CallExpr:
				if callsName(x, name) {
					calls++
				}
			case *syntax.Stmt:
				if x.Background && stmtCalls(x, name) {
					background = true
				}
			case *syntax.BinaryCmd:
				if isPipe(x) {
					selfs := 0
					for _, s := range flattenPipe(x, nil, map[*syntax.BinaryCmd]bool{}) {
						if stmtCalls(s, name) {
							selfs++
						}
					}
					piped = piped || selfs >= 2
				}
			}
			return true
		})
		if piped || (background && calls >= 2) {
			var src strings.Builder
			if err := syntax.NewPrinter(syntax.Minify(true)).Print(&src, fd); err != nil {
				src.WriteString(name + "()")
			}
			a.deny(RuleForkBomb, forkBombReason(cut(src.String(), 120)))
		}
	}
}

func callsName(c *syntax.CallExpr, name string) bool {
	if len(c.Args) == 0 {
		return false
	}
	w := wordOf(c.Args[0])
	return w.lit && w.text == name
}

// stmtCalls reports whether s calls name anywhere inside.
func stmtCalls(s *syntax.Stmt, name string) bool {
	found := false
	syntax.Walk(s, func(node syntax.Node) bool {
		if c, ok := node.(*syntax.CallExpr); ok && callsName(c, name) {
			found = true
		}
		return !found
	})
	return found
}

// funcDef finds "NAME() {" in text that does not parse.
var funcDef = lazyre.New(`([^\s(){};|&'"]+)\s*\(\s*\)\s*\{`)

// forkBombText finds a fork bomb in text that does not parse: a function
// definition whose name appears as NAME|NAME after it.
func forkBombText(src string) (string, bool) {
	compact := strings.Join(strings.Fields(src), "")
	for _, m := range funcDef.FindAllStringSubmatch(src, 8) {
		if strings.Contains(compact, m[1]+"|"+m[1]) {
			return m[0], true
		}
	}
	return "", false
}
