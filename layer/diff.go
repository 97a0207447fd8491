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
	"github.com/corralhq/corral/internal/termsafe"
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
	// Own are corral's own files and directories (absolute, resolved:
	// handback.Policy.Own), held as risky wherever a change would write
	// them.
	Own []string
	// Exact writes the contents' lines byte for byte, for a program (the
	// MCP server's workspace_diff, which the agent that wrote them
	// reads). Without it, as for a person's terminal whether or not
	// stdout is one, each line is shown as termsafe.Text shows it:
	// controls, C1 controls, bidi controls and bytes of no encoding made
	// visible (ESC as ^[, U+202E as <U+202E>), so that a file's contents
	// cannot drive the terminal (clear it, hide a change, retitle it,
	// write the clipboard) nor reorder what is read (Trojan Source).
	// Paths are quoted either way (termsafe.Path).
	Exact bool
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
// does by default (see pairRenames), unless either side has more than
// renameMaxFiles candidates: then no rename is looked for, and a "#" line
// at the top says so (git skips its inexact search past diff.renameLimit
// in the same way). Directories are shown only when
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
// them with the rest, or alone by naming the .git directory); past
// ListMax repositories, one line counts the rest.
//
// What would make the host run code once applied (Risky: git hooks and
// configuration at any depth, shell start-up files, editor settings...)
// comes first: a list of the paths and why, in lines starting with "#"
// (git apply skips them; past ListMax paths, a line counts the rest),
// then their patches, those inside git directories included, then the
// rest. Paths are quoted as git quotes them (handback.QuotePath), so no
// name can forge a line or reach the terminal raw; the contents' lines
// are shown as termsafe.Text shows them unless opts.Exact.
//
// DiffLayer does the same from the layer itself, for any number of
// changes.
func Diff(w io.Writer, changes []Change, opts DiffOptions) error {
	if len(changes) == 0 {
		return nil
	}
	src := func(fn func(Change) error) error {
		for _, ch := range changes {
			if err := fn(ch); err != nil {
				return err
			}
		}
		return nil
	}
	_, err := diff(w, changes[0].lower, changes[0].upper, src, opts)
	return err
}

// DiffLayer writes the changes of l selected by paths (as in Changes) as
// Diff does, and returns how many there are (directories included). It
// walks the layer (Walk) two or three times instead of holding the
// changes: first for the list of risky paths and the rename candidates,
// then for the patches of the risky ones (only when more than ListMax,
// else they were kept), then for the rest; with Stat and more than
// statMaxRows files, the patches are made twice, first to learn the
// widths git's form aligns on. Its memory is that of one patch, the
// kept lists and the rename candidates, whatever the number of changes.
// A layer that changes meanwhile (a command of the session running) can
// show a change in one walk and not in the next; each patch is the
// contents as read when it is written, as with Diff.
func DiffLayer(w io.Writer, l *Layer, paths []string, opts DiffOptions) (int, error) {
	sel, err := l.selection(paths)
	if err != nil {
		return 0, err
	}
	src := func(fn func(Change) error) error {
		return l.walk(sel, func(ch Change) error {
			if !sel.match(ch.Path) {
				return nil
			}
			return fn(ch)
		})
	}
	return diff(w, l.Lower, l.Upper(), src, opts)
}

// renameMaxFiles bounds the deleted and the added files rename detection
// pairs: each is kept (path and sides) until the patches are written. A
// variable for tests.
var renameMaxFiles = 10000

// statMaxRows bounds the --stat rows kept to be aligned; past it the
// patches are made twice. A variable for tests.
var statMaxRows = 4096

// diff is Diff over src, which yields the changes in order each time it
// is called; lower and upper are the trees their sides are read from.
func diff(w io.Writer, lower, upper string, src func(func(Change) error) error, opts DiffOptions) (int, error) {
	bw := bufio.NewWriter(w)
	v, err := openMergedView(lower, upper)
	if err != nil {
		return 0, err
	}
	defer v.close()
	policy := GatePolicy(lower, opts.Protected, nil, opts.Own)
	risky := func(ch Change) string { why, _ := v.risk(policy, ch); return why }

	// First: the risky paths, and the rename candidates.
	var risks capped[handback.Risk]
	var riskyChanges []Change
	var cands []patch
	var dels, adds, n int
	err = src(func(ch Change) error {
		n++
		if why := risky(ch); why != "" {
			risks.add(handback.Risk{Path: ch.Path, Why: why})
			if len(riskyChanges) < ListMax {
				riskyChanges = append(riskyChanges, ch)
			}
			return nil
		}
		if _, ok := gitDirOf(ch.Path); ok || ch.Kind == TypeChanged || ch.Kind == Modified {
			return nil
		}
		ps, err := patches(ch)
		if err != nil {
			return err
		}
		for _, p := range ps {
			switch {
			case !renameCandidate(p):
				continue
			case p.b == nil:
				dels++
			default:
				adds++
			}
			if dels <= renameMaxFiles && adds <= renameMaxFiles {
				cands = append(cands, p)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if risks.total > 0 {
		fmt.Fprintf(bw, "# %d risky path%s: the host would run %s, or write out of the project through %s (corral apply holds %s back unless named with --include-risky PATH):\n",
			risks.total, plural(risks.total), itThem(risks.total), itThem(risks.total), itThem(risks.total))
		for _, r := range risks.items {
			fmt.Fprintf(bw, "#   %s\n", r)
		}
		if more := risks.total - len(risks.items); more > 0 {
			fmt.Fprintf(bw, "#   and %d more (corral apply lists them all as it holds them back)\n", more)
		}
	}
	// A rename shows at the added path, from the deleted one, which is
	// not shown by itself.
	renames := map[string]patch{}
	renamedFrom := map[string]bool{}
	if dels > 0 && adds > 0 && (dels > renameMaxFiles || adds > renameMaxFiles) {
		fmt.Fprintf(bw, "# renames not looked for: %d deleted and %d added files, more than %d a side (name fewer paths to see them)\n", dels, adds, renameMaxFiles)
	} else if dels > 0 && adds > 0 {
		paired, err := pairRenames(cands)
		if err != nil {
			return 0, err
		}
		for _, p := range paired {
			if p.from != "" {
				renames[p.path], renamedFrom[p.from] = p, true
			}
		}
	}
	cands = nil

	// Then the patches: the risky ones, then the rest; a repository's
	// files are one run of the order, counted as they pass (a line each
	// at the end, ListMax of them, then one for the rest).
	var repos []string
	var counts []int
	moreFiles := 0
	each := func(emit func(patch) error) error {
		repos, counts, moreFiles = nil, nil, 0
		emitAll := func(ch Change) error {
			ps, err := patches(ch)
			if err != nil {
				return err
			}
			for _, p := range ps {
				if err := emit(p); err != nil {
					return err
				}
			}
			return nil
		}
		if risks.total == len(riskyChanges) {
			for _, ch := range riskyChanges {
				if err := emitAll(ch); err != nil {
					return err
				}
			}
		} else if err := src(func(ch Change) error {
			if risky(ch) == "" {
				return nil
			}
			return emitAll(ch)
		}); err != nil {
			return err
		}
		return src(func(ch Change) error {
			if risky(ch) != "" {
				return nil
			}
			if repo, ok := gitDirOf(ch.Path); ok {
				switch {
				case len(repos) > 0 && repos[len(repos)-1] == repo:
					counts[len(counts)-1]++
				case len(repos) < ListMax:
					repos, counts = append(repos, repo), append(counts, 1)
				default:
					moreFiles++
				}
				return nil
			}
			ps, err := patches(ch)
			if err != nil {
				return err
			}
			for _, p := range ps {
				if ch.Kind != TypeChanged {
					if renameCandidate(p) && p.b == nil && renamedFrom[p.path] {
						continue
					}
					if r, ok := renames[p.path]; ok && p.a == nil {
						p = r
					}
				}
				if err := emit(p); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if opts.Stat {
		err = writeStat(bw, each)
	} else {
		// One patch's text at a time: the hunks are made, written and
		// dropped.
		err = each(func(p patch) error {
			if err := p.render(); err != nil {
				return err
			}
			p.write(bw, opts.Color, opts.Exact)
			return nil
		})
	}
	if err != nil {
		return 0, err
	}
	for i, r := range repos {
		fmt.Fprintf(bw, "git directory %s: %d file%s changed (commits, objects, refs; see git log in the session; applied with the rest, or alone with corral apply %s)\n", handback.QuotePath(r), counts[i], plural(counts[i]), handback.QuotePath(r))
	}
	if moreFiles > 0 {
		fmt.Fprintf(bw, "git directories: %d more file%s changed in further repositories (corral diff PATH shows one)\n", moreFiles, plural(moreFiles))
	}
	return n, bw.Flush()
}

// renameCandidate says whether patch p may be one side of a rename: a
// file or symlink deleted or added whole.
func renameCandidate(p patch) bool {
	switch {
	case p.modeOnly:
		return false
	case p.a != nil && p.b == nil:
		return p.a.Type != "dir" && !special(p.a)
	case p.a == nil && p.b != nil:
		return p.b.Type != "dir" && !special(p.b)
	}
	return false
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

// write prints the patch; its content lines byte for byte when exact,
// else as termsafe.Text shows them.
func (p patch) write(w *bufio.Writer, color, exact bool) {
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
		if !exact {
			// For a person, the session's bytes must not move the
			// cursor, erase what came before (the risky list) or
			// reorder the line.
			l = termsafe.Text(strings.TrimSuffix(l, "\n")) + "\n"
		}
		if color {
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
// each calls its function with the patches in order; it is called once,
// and a second time when there are more than statMaxRows rows, which are
// then not kept: the first time only learns the widths.
func writeStat(w *bufio.Writer, each func(func(patch) error) error) error {
	var st statRows
	st.keep = true
	if err := st.run(each, nil); err != nil {
		return err
	}
	width, most := st.width, st.most
	digits := len(fmt.Sprint(most))
	print := func(r statRow) { r.print(w, width, most, digits) }
	if st.keep {
		for _, r := range st.rows {
			print(r)
		}
	} else if err := (&statRows{}).run(each, print); err != nil {
		return err
	}
	if st.files == 0 {
		return nil
	}
	fmt.Fprintf(w, " %d file%s changed, %d insertion%s(+), %d deletion%s(-)\n",
		st.files, plural(st.files), st.ins, plural(st.ins), st.del, plural(st.del))
	return nil
}

// statRow is one --stat line.
type statRow struct {
	path       string // quoted; a rename's "from => to"
	ins, del   int
	bin, large bool
	kind       string // a special file's
	aS, bS     int64
}

// statRows makes --stat rows from patches: a type change's two patches
// of one path make one row, as git counts it once.
type statRows struct {
	keep bool // rows are kept until statMaxRows, then not
	rows []statRow
	last *statRow
	// Of all rows: the widest name, the most lines changed, the totals.
	width, most, files, ins, del int
}

// run makes the rows of each's patches, calling out (when not nil) with
// each row once it is whole.
func (st *statRows) run(each func(func(patch) error) error, out func(statRow)) error {
	done := func() {
		if st.last == nil {
			return
		}
		r := *st.last
		st.width, st.most = max(st.width, len(r.path)), max(st.most, r.ins+r.del)
		st.files, st.ins, st.del = st.files+1, st.ins+r.ins, st.del+r.del
		if st.keep {
			if len(st.rows) < statMaxRows {
				st.rows = append(st.rows, r)
			} else {
				st.keep, st.rows = false, nil
			}
		}
		if out != nil {
			out(r)
		}
		st.last = nil
	}
	err := each(func(p patch) error {
		if err := p.render(); err != nil {
			return err
		}
		kind := ""
		if special(p.b) {
			kind = p.b.Special
		} else if special(p.a) {
			kind = p.a.Special
		}
		if r := st.last; r != nil && r.path == handback.QuotePath(p.path) {
			r.ins, r.del, r.bin, r.large = r.ins+p.ins, r.del+p.del, r.bin || p.binary, r.large || p.large && p.a != nil && p.b != nil
			r.bS = p.bSize
			if kind != "" {
				r.kind = kind
			}
			return nil
		}
		done()
		name := handback.QuotePath(p.path)
		if p.from != "" {
			name = handback.QuotePath(p.from) + " => " + name
		}
		st.last = &statRow{name, p.ins, p.del, p.binary, p.large && p.a != nil && p.b != nil, kind, p.aSize, p.bSize}
		return nil
	})
	done()
	return err
}

func (r statRow) print(w *bufio.Writer, width, most, digits int) {
	switch {
	case r.kind != "":
		fmt.Fprintf(w, " %-*s | %s\n", width, r.path, r.kind)
		return
	case r.bin:
		fmt.Fprintf(w, " %-*s | Bin %d -> %d bytes\n", width, r.path, r.aS, r.bS)
		return
	case r.large:
		fmt.Fprintf(w, " %-*s | Large %d -> %d bytes\n", width, r.path, r.aS, r.bS)
		return
	}
	plus, minus := r.ins, r.del
	if most > 50 {
		plus, minus = scale(r.ins, most), scale(r.del, most)
	}
	fmt.Fprintf(w, " %-*s | %*d %s%s\n", width, r.path, digits, r.ins+r.del, strings.Repeat("+", plus), strings.Repeat("-", minus))
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
