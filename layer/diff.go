package layer

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/corralhq/corral/handback"
)

// DiffOptions says how Diff prints.
type DiffOptions struct {
	// Stat prints one line per file (path, lines changed, a bar of + and
	// -) and a summary instead of the patch, as git diff --stat does.
	Stat bool
	// Color adds ANSI colours as git does on a terminal (headers bold,
	// hunk headers cyan, removed lines red, added lines green).
	Color bool
	// Protected are the protected-path patterns listed among the risky
	// paths (as ApplyOptions.Protected).
	Protected []string
}

// contextLines is how many unchanged lines surround a hunk (diff -u's
// and git's default).
const contextLines = 3

// Diff writes changes (from Changes) to w in the form of git diff: per
// file a "diff --git a/P b/P" header, "new file mode", "deleted file
// mode", "old mode"/"new mode" lines (octal as git prints them: 100644 a
// file, 120000 a symlink, 040755 a directory), "--- a/P" and "+++ b/P"
// (/dev/null for an added or deleted side), and hunks with 3 lines of
// context; "Binary files a/P and b/P differ" for a binary file; a
// symlink's target as its content without a final newline; a type change
// as a deletion followed by an addition; a deleted path and an added one
// whose contents are alike as one rename ("similarity index", "rename
// from", "rename to", then the hunks of what else changed), as git diff
// does by default (see pairRenames). Directories are shown only when
// their mode changes. A special file (fifo, socket, device), which git
// has no form for, is a header and a "#" line naming what it is. A file
// over 2 MiB (diffMaxText) is not compared line by line: "Large files
// a/P and b/P differ (A -> B bytes; ...)", and in Stat "Large A -> B
// bytes", or its line count when the other side is absent. Contents are
// read from Lower and the layer now, beneath their roots without
// following symlinks, one patch at a time and large files in a stream,
// so memory stays bounded whatever the sizes. It fails on an error of w
// or of a read.
//
// What changed inside a git directory (a path component ".git": objects,
// refs, the index, logs) is not printed file by file: its files are
// compressed objects and binary indexes that read as noise, so each
// repository gets one line saying how many of its files changed (the
// commits are seen with git log inside the session; corral apply applies
// them with the rest, or alone by naming the .git directory).
//
// What would make the host run code once applied (Risky: git hooks and
// configuration at any depth, shell start-up files, editor settings...)
// comes first: a list of the paths and why, in lines starting with "#"
// (git apply skips them), then their patches, those inside git
// directories included, then the rest. Paths are quoted as git quotes
// them (handback.QuotePath), so no name can forge a line.
func Diff(w io.Writer, changes []Change, opts DiffOptions) error {
	bw := bufio.NewWriter(w)
	risks, err := Risky(changes, GatePolicy(opts.Protected, nil), false)
	if err != nil {
		return err
	}
	risky := map[string]bool{}
	if len(risks) > 0 {
		fmt.Fprintf(bw, "# %d risky path%s: the host would run %s (corral apply holds %s back unless named with --include-risky PATH):\n",
			len(risks), plural(len(risks)), itThem(len(risks)), itThem(len(risks)))
		for _, r := range risks {
			fmt.Fprintf(bw, "#   %s\n", r)
			risky[r.Path] = true
		}
	}
	var ps, first []patch
	var repos []string
	inRepo := map[string]int{}
	for _, ch := range changes {
		if risky[ch.Path] {
			p, err := patches(ch)
			if err != nil {
				return err
			}
			first = append(first, p...)
			continue
		}
		if repo, ok := gitDirOf(ch.Path); ok {
			if inRepo[repo] == 0 {
				repos = append(repos, repo)
			}
			inRepo[repo]++
			continue
		}
		p, err := patches(ch)
		if err != nil {
			return err
		}
		ps = append(ps, p...)
	}
	renames, err := pairRenames(ps)
	if err != nil {
		return err
	}
	ps = append(first, renames...)
	// One patch's text at a time: the hunks are made, written (or
	// counted) and dropped.
	if opts.Stat {
		if err := writeStat(bw, ps); err != nil {
			return err
		}
	} else {
		for _, p := range ps {
			if err := p.render(); err != nil {
				return err
			}
			p.write(bw, opts.Color)
		}
	}
	for _, r := range repos {
		fmt.Fprintf(bw, "git directory %s: %d file%s changed (commits, objects, refs; see git log in the session; applied with the rest, or alone with corral apply %s)\n", handback.QuotePath(r), inRepo[r], plural(inRepo[r]), handback.QuotePath(r))
	}
	return bw.Flush()
}

// itThem is "it" for one, "them" for more.
func itThem(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// gitDirOf returns the git directory (a path ending in the component
// ".git") that rel lies in or is, if any.
func gitDirOf(rel string) (string, bool) {
	parts := strings.Split(rel, "/")
	for i, c := range parts {
		if c == ".git" {
			return strings.Join(parts[:i+1], "/"), true
		}
	}
	return "", false
}

// patch is the diff of one path from one side to the other; a or b nil
// means /dev/null. The sides' contents are read when the patch is
// rendered, not before, so that a diff holds one patch's text at a time.
type patch struct {
	path         string
	a, b         *Side
	aRoot, bRoot string // the trees the sides are read from (Lower, upper)
	binary       bool
	modeOnly     bool
	aSize        int64
	bSize        int64
	from         string // a rename's source path (pairRenames), else ""
	similarity   int    // a rename's similarity index, in percent

	// Set by render.
	hunks      []string // printed lines, each with its prefix
	ins, del   int
	hasContent bool
	// large: a file side is over diffMaxText, so no hunks are made.
	large bool
}

// diffMaxText bounds, in bytes, a file whose text Diff compares line by
// line (the line diff holds both sides and an index of their lines);
// larger files are shown with their sizes, as git shows binary ones.
const diffMaxText = 2 << 20

// aPath is the a side's path in aRoot.
func (p *patch) aPath() string {
	if p.from != "" {
		return p.from
	}
	return p.path
}

// render reads the sides and makes the hunks and line counts; a file
// side over diffMaxText makes the patch large, its lines counted
// (streaming) only when the other side is absent.
func (p *patch) render() error {
	p.hunks, p.ins, p.del, p.hasContent, p.large = nil, 0, 0, false, false
	if p.modeOnly || p.binary || p.from != "" && p.similarity == 100 || special(p.a) || special(p.b) {
		return nil
	}
	if p.a != nil && p.a.Type == "file" && p.aSize > diffMaxText || p.b != nil && p.b.Type == "file" && p.bSize > diffMaxText {
		p.large = true
		var err error
		switch {
		case p.b == nil:
			p.del, err = countLines(p.aRoot, p.aPath())
		case p.a == nil:
			p.ins, err = countLines(p.bRoot, p.path)
		}
		return err
	}
	aText, err := sideText(p.aRoot, p.aPath(), p.a)
	if err != nil {
		return err
	}
	bText, err := sideText(p.bRoot, p.path, p.b)
	if err != nil {
		return err
	}
	p.hunks, p.ins, p.del = unified(aText, bText)
	p.hasContent = len(p.hunks) > 0
	return nil
}

// special says whether a side is a special file (fifo, socket, device).
func special(s *Side) bool { return s != nil && s.Type == "other" }

// countLines counts the lines of file rel of root as git counts them
// (a last line without a newline counts), reading it in a stream.
func countLines(root, rel string) (int, error) {
	t, err := openTree(root)
	if err != nil {
		return 0, err
	}
	defer t.close()
	fd, err := t.open(rel, unix.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	f := os.NewFile(uintptr(fd), t.abs(rel))
	defer f.Close()
	buf := make([]byte, 64<<10)
	n, last := 0, byte('\n')
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if k > 0 {
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	return n, nil
}

func patches(ch Change) ([]patch, error) {
	switch {
	case ch.Kind == TypeChanged:
		d, err := makePatch(ch, ch.Old, nil)
		if err != nil {
			return nil, err
		}
		a, err := makePatch(ch, nil, ch.New)
		if err != nil {
			return nil, err
		}
		return append(d, a...), nil
	default:
		return makePatch(ch, ch.Old, ch.New)
	}
}

func makePatch(ch Change, a, b *Side) ([]patch, error) {
	p := patch{path: ch.Path, a: a, b: b, binary: ch.Binary, aRoot: ch.lower, bRoot: ch.upper}
	for _, s := range []*Side{a, b} {
		if s != nil && s.Type == "dir" {
			if a != nil && b != nil && a.Mode != b.Mode {
				p.modeOnly = true
				return []patch{p}, nil
			}
			return nil, nil // git shows what is in a directory, not the directory
		}
	}
	p.aSize, p.bSize = sideSize(a), sideSize(b)
	if a != nil && b != nil && !ch.ContentChanged {
		p.modeOnly = true
		return []patch{p}, nil
	}
	if !p.binary || a != nil && a.Type != "file" || b != nil && b.Type != "file" {
		p.binary = false
	}
	return []patch{p}, nil
}

// sideSize is a side's content size: a file's bytes, a symlink target's.
func sideSize(s *Side) int64 {
	switch {
	case s == nil:
		return 0
	case s.Type == "symlink":
		return int64(len(s.Target))
	}
	return s.Size
}

// sideText returns a side's content as lines: a file's bytes, a
// symlink's target (git stores the target as a blob without newline).
// The caller keeps files over diffMaxText away.
func sideText(root, rel string, s *Side) ([]string, error) {
	if s == nil {
		return nil, nil
	}
	switch s.Type {
	case "symlink":
		return splitLines(s.Target), nil
	case "file":
		t, err := openTree(root)
		if err != nil {
			return nil, err
		}
		defer t.close()
		b, err := t.readHead(rel, diffMaxText+1)
		if err != nil {
			return nil, err
		}
		return splitLines(string(b)), nil
	}
	return nil, nil
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// unified returns the hunks turning a into b, and the counts of added
// and removed lines.
func unified(a, b []string) (out []string, ins, del int) {
	// No autojunk: difflib's heuristic (from Python's) ignores lines
	// frequent in files of 200 lines or more, which makes odd hunks.
	m := difflib.NewMatcherWithJunk(a, b, false, nil)
	for _, g := range m.GetGroupedOpCodes(contextLines) {
		first, last := g[0], g[len(g)-1]
		out = append(out, fmt.Sprintf("@@ -%s +%s @@\n", hunkRange(first.I1, last.I2), hunkRange(first.J1, last.J2)))
		for _, c := range g {
			if c.Tag == 'e' {
				for _, l := range a[c.I1:c.I2] {
					out = append(out, " "+l)
				}
				continue
			}
			if c.Tag == 'r' || c.Tag == 'd' {
				for _, l := range a[c.I1:c.I2] {
					out = append(out, "-"+l)
					del++
				}
			}
			if c.Tag == 'r' || c.Tag == 'i' {
				for _, l := range b[c.J1:c.J2] {
					out = append(out, "+"+l)
					ins++
				}
			}
		}
	}
	return out, ins, del
}

// hunkRange formats a hunk's line range as diff -u does (POSIX diff,
// "Unified Format"): "start,count", "start" alone for one line, and
// for none the line before.
func hunkRange(start, stop int) string {
	n := stop - start
	switch n {
	case 1:
		return fmt.Sprint(start + 1)
	case 0:
		return fmt.Sprintf("%d,0", start)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// gitMode is a side's mode as git prints it (S_IFMT bits in octal, then
// the permission bits).
func gitMode(s *Side) string {
	switch s.Type {
	case "symlink":
		return "120000"
	case "dir":
		return fmt.Sprintf("040%03o", s.Mode&0o777)
	}
	return fmt.Sprintf("100%03o", s.Mode&0o777)
}

const (
	colorMeta  = "\x1b[1m"
	colorFrag  = "\x1b[36m"
	colorOld   = "\x1b[31m"
	colorNew   = "\x1b[32m"
	colorReset = "\x1b[m"
)

func (p patch) write(w *bufio.Writer, color bool) {
	meta := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		if color {
			line = colorMeta + line + colorReset
		}
		w.WriteString(line + "\n")
	}
	aPath := p.path
	if p.from != "" {
		aPath = p.from
	}
	q := handback.QuotePath
	meta("diff --git %s %s", q("a/"+aPath), q("b/"+p.path))
	if special(p.a) || special(p.b) {
		// git has no form for them: a comment line (git apply skips it).
		if special(p.a) {
			meta("# deleted: %s", article(p.a.Special))
		}
		if special(p.b) {
			meta("# new: %s (corral apply cannot write a special file; corral discard drops it)", article(p.b.Special))
		}
		return
	}
	switch {
	case p.from != "":
		// git's order: mode lines, then the similarity and the rename.
		if p.a.Mode != p.b.Mode && p.a.Type != "symlink" {
			meta("old mode %s", gitMode(p.a))
			meta("new mode %s", gitMode(p.b))
		}
		meta("similarity index %d%%", p.similarity)
		meta("rename from %s", q(p.from))
		meta("rename to %s", q(p.path))
	case p.a == nil:
		meta("new file mode %s", gitMode(p.b))
	case p.b == nil:
		meta("deleted file mode %s", gitMode(p.a))
	case p.a.Mode != p.b.Mode && p.a.Type != "symlink":
		meta("old mode %s", gitMode(p.a))
		meta("new mode %s", gitMode(p.b))
	}
	if p.modeOnly {
		return
	}
	aName, bName := q("a/"+aPath), q("b/"+p.path)
	if p.a == nil {
		aName = "/dev/null"
	}
	if p.b == nil {
		bName = "/dev/null"
	}
	if p.binary {
		meta("Binary files %s and %s differ", aName, bName)
		return
	}
	if p.large {
		meta("Large files %s and %s differ (%d -> %d bytes; corral diff compares text up to %d MiB)", aName, bName, p.aSize, p.bSize, diffMaxText>>20)
		return
	}
	if !p.hasContent {
		return // an empty file added or deleted: git prints only the header
	}
	meta("--- %s", aName)
	meta("+++ %s", bName)
	for _, l := range p.hunks {
		noEOL := !strings.HasSuffix(l, "\n")
		if noEOL {
			l += "\n"
		}
		if color {
			// On a terminal, the session's bytes must not move the
			// cursor or erase what came before (the risky list).
			l = visibleControls(strings.TrimSuffix(l, "\n")) + "\n"
			c := ""
			switch l[0] {
			case '@':
				c = colorFrag
			case '-':
				c = colorOld
			case '+':
				c = colorNew
			}
			if c != "" {
				l = c + strings.TrimSuffix(l, "\n") + colorReset + "\n"
			}
		}
		w.WriteString(l)
		if noEOL {
			w.WriteString("\\ No newline at end of file\n")
		}
	}
}

// writeStat prints git diff --stat's form: " path | N +++--" per file
// (binary files "Bin A -> B bytes"), the bar scaled to at most 50
// characters, and " F files changed, I insertions(+), D deletions(-)".
func writeStat(w *bufio.Writer, ps []patch) error {
	// A type change is two patches of one path: git counts it once.
	type row struct {
		path       string
		ins, del   int
		bin, large bool
		kind       string // a special file's
		aS, bS     int64
	}
	var rows []row
	for _, p := range ps {
		if err := p.render(); err != nil {
			return err
		}
		kind := ""
		if special(p.b) {
			kind = p.b.Special
		} else if special(p.a) {
			kind = p.a.Special
		}
		if n := len(rows); n > 0 && rows[n-1].path == handback.QuotePath(p.path) {
			r := &rows[n-1]
			r.ins, r.del, r.bin, r.large = r.ins+p.ins, r.del+p.del, r.bin || p.binary, r.large || p.large && p.a != nil && p.b != nil
			r.bS = p.bSize
			if kind != "" {
				r.kind = kind
			}
			continue
		}
		name := handback.QuotePath(p.path)
		if p.from != "" {
			name = handback.QuotePath(p.from) + " => " + name
		}
		rows = append(rows, row{name, p.ins, p.del, p.binary, p.large && p.a != nil && p.b != nil, kind, p.aSize, p.bSize})
	}
	width, most := 0, 0
	for _, r := range rows {
		width = max(width, len(r.path))
		most = max(most, r.ins+r.del)
	}
	digits := len(fmt.Sprint(most))
	var ins, del int
	for _, r := range rows {
		ins, del = ins+r.ins, del+r.del
		switch {
		case r.kind != "":
			fmt.Fprintf(w, " %-*s | %s\n", width, r.path, r.kind)
			continue
		case r.bin:
			fmt.Fprintf(w, " %-*s | Bin %d -> %d bytes\n", width, r.path, r.aS, r.bS)
			continue
		case r.large:
			fmt.Fprintf(w, " %-*s | Large %d -> %d bytes\n", width, r.path, r.aS, r.bS)
			continue
		}
		plus, minus := r.ins, r.del
		if most > 50 {
			plus, minus = scale(r.ins, most), scale(r.del, most)
		}
		fmt.Fprintf(w, " %-*s | %*d %s%s\n", width, r.path, digits, r.ins+r.del, strings.Repeat("+", plus), strings.Repeat("-", minus))
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintf(w, " %d file%s changed, %d insertion%s(+), %d deletion%s(-)\n",
		len(rows), plural(len(rows)), ins, plural(ins), del, plural(del))
	return nil
}

func scale(n, most int) int {
	if n == 0 {
		return 0
	}
	return max(1, n*50/most)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// visibleControls returns line with its control characters other than a
// tab shown in caret notation (ESC as ^[, DEL as ^?, a carriage return as
// ^M), as less(1) shows them: a file's contents printed on a terminal
// cannot move the cursor, erase lines or retitle the window.
func visibleControls(line string) string {
	clean := true
	for i := 0; i < len(line); i++ {
		if c := line[i]; c < 0x20 && c != '\t' || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return line
	}
	var b strings.Builder
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == 0x7f:
			b.WriteString("^?")
		case c < 0x20 && c != '\t':
			b.WriteByte('^')
			b.WriteByte(c + '@')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
