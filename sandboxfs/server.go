package sandboxfs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/atomicfile"
)

// Caps of the server's answers.
const (
	maxReadBytes   = 10 << 20  // a file larger than this is read only up to it
	maxOutput      = 256 << 10 // bytes of content one read returns
	maxLineChars   = 2000      // characters of one line shown
	defaultLimit   = 2000      // lines one read shows when no limit is given
	maxWriteBytes  = 10 << 20  // largest content write_file accepts
	maxMatches     = 200       // search results returned
	maxSearchBytes = 64 << 10  // bytes of search output returned
	searchTimeout  = 30 * time.Second
)

// server runs inside the sandbox.
type server struct {
	writable []string // real paths the sandbox may write
	// protectRoots are the real paths at whose top patterns (protected
	// paths) apply: a write whose real target matches is refused.
	protectRoots []string
	patterns     []string
}

// resolveRoots resolves the protected roots inside the sandbox, keeping the
// absolute ones.
func resolveRoots(roots []string) []string {
	var out []string
	for _, r := range roots {
		if !filepath.IsAbs(r) {
			continue
		}
		if real, err := filepath.EvalSymlinks(r); err == nil {
			r = real
		}
		out = append(out, filepath.Clean(r))
	}
	return out
}

// serve answers requests from r on w until r ends.
func (s *server) serve(r io.Reader, w io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	enc := json.NewEncoder(w)
	for sc.Scan() {
		var req request
		var resp response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = &Error{Kind: ErrBadRequest, Message: "malformed request: " + err.Error()}
		} else {
			resp = s.handle(&req)
		}
		resp.ID = req.ID
		if err := enc.Encode(&resp); err != nil {
			return err
		}
	}
	return sc.Err()
}

func (s *server) handle(req *request) (resp response) {
	defer func() {
		if r := recover(); r != nil {
			resp = response{Error: &Error{Kind: ErrInternal, Message: fmt.Sprintf("internal error: %v", r)}}
		}
	}()
	if req.Path == "" || !filepath.IsAbs(req.Path) || strings.IndexByte(req.Path, 0) >= 0 {
		return response{Error: &Error{Kind: ErrBadRequest, Message: fmt.Sprintf("path %q must be a non-empty absolute path without NUL bytes", req.Path)}}
	}
	var err error
	switch req.Op {
	case "read":
		resp.Read, err = s.read(req)
	case "write":
		resp.Write, err = s.write(req)
	case "edit":
		resp.Edit, err = s.edit(req)
	case "search":
		resp.Find, err = s.search(req)
	default:
		err = &Error{Kind: ErrBadRequest, Message: "unknown operation " + req.Op}
	}
	if err != nil {
		var fe *Error
		if !errors.As(err, &fe) {
			fe = fsError(req.Path, err)
		}
		resp.Error = fe
	}
	return resp
}

// fsError turns an OS error into a message a model can act on.
func fsError(path string, err error) *Error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &Error{Kind: ErrNotFound, Message: fmt.Sprintf("%s: no such file or directory (hidden paths do not exist in the sandbox)", path)}
	case errors.Is(err, syscall.EROFS):
		return &Error{Kind: ErrReadOnly, Message: fmt.Sprintf("%s: read-only file system (only the working directory, the scratch directory and read-write binds can be written)", path)}
	case errors.Is(err, syscall.EISDIR):
		return &Error{Kind: ErrIsDir, Message: fmt.Sprintf("%s is a directory", path)}
	case errors.Is(err, fs.ErrPermission):
		return &Error{Kind: ErrPermission, Message: fmt.Sprintf("%s: permission denied", path)}
	}
	return &Error{Kind: ErrInternal, Message: fmt.Sprintf("%s: %v", path, err)}
}

func (s *server) read(req *request) (*ReadResult, error) {
	f, err := os.Open(req.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, &Error{Kind: ErrIsDir, Message: fmt.Sprintf("%s is a directory; use search_files with mode files to list it", req.Path)}
	}
	res := &ReadResult{Path: req.Path, Size: st.Size()}
	data, err := io.ReadAll(io.LimitReader(f, maxReadBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxReadBytes {
		data, res.Truncated = data[:maxReadBytes], true
	}
	probe := data
	if len(probe) > 8000 {
		probe = probe[:8000]
	}
	if bytes.IndexByte(probe, 0) >= 0 {
		res.Binary = true
		return res, nil
	}
	lines := strings.SplitAfter(string(data), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	res.TotalLines = len(lines)
	start := req.Offset
	if start < 1 {
		start = 1
	}
	limit := req.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	res.StartLine = start
	var b strings.Builder
	for i := start - 1; i < len(lines) && i < start-1+limit; i++ {
		line := strings.TrimRight(lines[i], "\n")
		if !utf8.ValidString(line) {
			line, res.InvalidUTF8 = strings.ToValidUTF8(line, "\uFFFD"), true
		}
		if utf8.RuneCountInString(line) > maxLineChars {
			line, res.Truncated = string([]rune(line)[:maxLineChars])+" [line cut]", true
		}
		entry := fmt.Sprintf("%6d\t%s\n", i+1, line)
		if b.Len()+len(entry) > maxOutput {
			res.Truncated = true
			break
		}
		b.WriteString(entry)
		res.Lines++
	}
	if start-1+res.Lines < len(lines) {
		res.Truncated = true
	}
	res.Content = b.String()
	return res, nil
}

// realTarget resolves path for writing: the real path of the file (through
// symlinks), or, for a new file, of its nearest existing parent joined
// with the rest. It refuses a real path outside the writable set, naming it.
func (s *server) realTarget(path string) (string, error) {
	real, err := resolveForWrite(path, 0)
	if err != nil {
		return "", err
	}
	for _, w := range s.writable {
		if real == w || strings.HasPrefix(real, w+"/") {
			if err := s.checkProtected(path, real); err != nil {
				return "", err
			}
			return real, nil
		}
	}
	if real != path {
		return "", &Error{Kind: ErrOutside, Message: fmt.Sprintf("refused: %s resolves to %s, which is outside the writable directories (%s); nothing was written", path, real, strings.Join(s.writable, ", "))}
	}
	return "", &Error{Kind: ErrReadOnly, Message: fmt.Sprintf("%s: read-only file system (writable: %s)", path, strings.Join(s.writable, ", "))}
}

// checkProtected refuses a write whose real target is a protected path or
// lies below one (hostview.MatchProtectedIn: also the hooks and
// configuration of a git directory not named .git, such as a bare
// repository or a separate git directory). It judges the real path, so a
// symlink in the tree that leads into .git/hooks does not get around it,
// and it refuses also what does not exist yet, which the sandbox's
// read-only binds cannot cover.
func (s *server) checkProtected(path, real string) error {
	for _, root := range s.protectRoots {
		if !strings.HasPrefix(real, root+"/") {
			continue
		}
		rel := real[len(root)+1:]
		st, err := os.Lstat(real)
		dir := err == nil && st.IsDir()
		if _, ok := hostview.MatchProtectedIn(root, rel, dir, s.patterns); !ok {
			continue
		}
		what := rel + " is a protected path"
		if filepath.Clean(path) != real {
			what = fmt.Sprintf("%s resolves to %s, a protected path", path, rel)
		}
		return &Error{Kind: ErrProtected, Message: fmt.Sprintf("refused: %s (it runs code on the host later); nothing was written", what)}
	}
	return nil
}

// resolveForWrite returns where a write to path would land: its real path
// through symlinks, following a dangling symlink to where it points, or,
// for a new file, the real path of its nearest existing parent joined with
// the rest.
func resolveForWrite(path string, depth int) (string, error) {
	if depth > 40 {
		return "", &Error{Kind: ErrBadRequest, Message: path + ": too many levels of symbolic links"}
	}
	real, err := filepath.EvalSymlinks(path)
	if err == nil {
		return real, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	// Resolve the parent, then look at the last element.
	parent, err := resolveForWrite(filepath.Dir(path), depth+1)
	if err != nil {
		return "", err
	}
	p := filepath.Join(parent, filepath.Base(path))
	if lst, err := os.Lstat(p); err == nil && lst.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(parent, target)
		}
		return resolveForWrite(filepath.Clean(target), depth+1)
	}
	return p, nil
}

func (s *server) write(req *request) (*WriteResult, error) {
	if len(req.Content) > maxWriteBytes {
		return nil, &Error{Kind: ErrTooLarge, Message: fmt.Sprintf("content of %d bytes is over the %d-byte limit of write_file", len(req.Content), maxWriteBytes)}
	}
	real, err := s.realTarget(req.Path)
	if err != nil {
		return nil, err
	}
	created := false
	if _, err := os.Stat(real); errors.Is(err, fs.ErrNotExist) {
		created = true
		if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
			return nil, fsError(filepath.Dir(real), err)
		}
	}
	if err := writeAtomic(real, []byte(req.Content)); err != nil {
		return nil, fsError(real, err)
	}
	return &WriteResult{Path: real, Bytes: len(req.Content), Created: created}, nil
}

// writeAtomic replaces path by a new file with data, keeping an existing
// file's mode (new files get 0644).
func writeAtomic(path string, data []byte) error {
	return atomicfile.Write(path, data, 0o644, true)
}

func (s *server) edit(req *request) (*EditResult, error) {
	if req.Old == "" {
		return nil, &Error{Kind: ErrBadRequest, Message: "old_string is empty; give the exact text to replace (use write_file to create a file)"}
	}
	if req.Old == req.New {
		return nil, &Error{Kind: ErrBadRequest, Message: "old_string and new_string are the same; nothing to change"}
	}
	real, err := s.realTarget(req.Path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(real)
	if err != nil {
		return nil, fsError(req.Path, err)
	}
	if len(data) > maxReadBytes {
		return nil, &Error{Kind: ErrTooLarge, Message: fmt.Sprintf("%s is %d bytes, over the %d-byte limit of edit_file", req.Path, len(data), maxReadBytes)}
	}
	text := string(data)
	n := strings.Count(text, req.Old)
	switch {
	case n == 0:
		return nil, &Error{Kind: ErrNoMatch, Message: fmt.Sprintf("old_string was not found in %s; read the file and copy the text exactly, whitespace included", req.Path)}
	case n > 1 && !req.All:
		return nil, &Error{Kind: ErrAmbiguous, Message: fmt.Sprintf("old_string occurs %d times in %s; add surrounding lines to make it unique, or set replace_all", n, req.Path)}
	}
	var out string
	if req.All {
		out = strings.ReplaceAll(text, req.Old, req.New)
	} else {
		out = strings.Replace(text, req.Old, req.New, 1)
	}
	if err := writeAtomic(real, []byte(out)); err != nil {
		return nil, fsError(real, err)
	}
	return &EditResult{Path: real, Replacements: n, Diff: shortDiff(req.Path, text, req.Old, req.New, req.All)}, nil
}

// shortDiff renders the first replacement (or each, up to a few) as a
// unified diff hunk with two lines of context.
func shortDiff(path, text, old, new string, all bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s\n+++ %s\n", path, path)
	pos, shown := 0, 0
	for shown < 5 {
		i := strings.Index(text[pos:], old)
		if i < 0 {
			break
		}
		i += pos
		startLine := strings.Count(text[:i], "\n")
		lines := strings.Split(text, "\n")
		oldLines := strings.Split(old, "\n")
		// The whole lines the match touches.
		first := startLine
		last := startLine + len(oldLines) - 1
		lineStart := strings.LastIndex(text[:i], "\n") + 1
		prefix := text[lineStart:i]
		endIdx := i + len(old)
		lineEnd := strings.Index(text[endIdx:], "\n")
		suffix := text[endIdx:]
		if lineEnd >= 0 {
			suffix = text[endIdx : endIdx+lineEnd]
		}
		newLines := strings.Split(prefix+new+suffix, "\n")
		ctxFrom := max(0, first-2)
		ctxTo := min(len(lines)-1, last+2)
		fmt.Fprintf(&b, "@@ -%d,%d +%d,%d @@\n", ctxFrom+1, ctxTo-ctxFrom+1, ctxFrom+1, ctxTo-ctxFrom+1-(last-first+1)+len(newLines))
		for l := ctxFrom; l < first; l++ {
			b.WriteString(" " + lines[l] + "\n")
		}
		for l := first; l <= last && l < len(lines); l++ {
			b.WriteString("-" + lines[l] + "\n")
		}
		for _, l := range newLines {
			b.WriteString("+" + l + "\n")
		}
		for l := last + 1; l <= ctxTo; l++ {
			b.WriteString(" " + lines[l] + "\n")
		}
		shown++
		pos = endIdx
		if !all {
			break
		}
	}
	if len(b.String()) > 8<<10 {
		return b.String()[:8<<10] + "\n[diff cut]\n"
	}
	return b.String()
}

// searchStatus reads a search's exit status as grep(1) and rg(1) give it:
// 1 is no match; 2 is an error, which with a message on stderr is the
// pattern's (a bad request: grep -s and rg --no-messages silence the
// errors of files, never of the pattern) unless results came too, and
// without one is files it could not read (permission denied, gone
// while searched), which the search of the rest outlived.
func searchStatus(tool, pattern string, code int, found bool, stderr string) (unreadable bool, err error) {
	if code <= 1 {
		return false, nil
	}
	if m := strings.TrimSpace(stderr); m != "" && !found {
		if len(m) > 500 {
			m = m[:500] + " [cut]"
		}
		return false, &Error{Kind: ErrBadRequest, Message: fmt.Sprintf("%s could not search for %q: %s", tool, pattern, strings.ToValidUTF8(m, "\uFFFD"))}
	}
	return true, nil
}

func (s *server) search(req *request) (*SearchResult, error) {
	if req.Pattern == "" {
		return nil, &Error{Kind: ErrBadRequest, Message: "pattern is empty"}
	}
	mode := req.Mode
	if mode == "" {
		mode = "content"
	}
	if mode != "content" && mode != "files" {
		return nil, &Error{Kind: ErrBadRequest, Message: fmt.Sprintf("mode %q: want content or files", mode)}
	}
	if _, err := os.Stat(req.Path); err != nil {
		return nil, fsError(req.Path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), searchTimeout)
	defer cancel()
	var argv []string
	res := &SearchResult{}
	if rg, err := exec.LookPath("rg"); err == nil {
		res.Tool = "rg"
		argv = []string{rg, "--no-heading", "--line-number", "--color=never", "--no-messages"}
		if mode == "files" {
			argv = []string{rg, "--files-with-matches", "--null", "--color=never", "--no-messages"}
		}
		if req.Glob != "" {
			argv = append(argv, "--glob", req.Glob)
		}
		argv = append(argv, "-e", req.Pattern, "--", req.Path)
	} else {
		res.Tool = "grep"
		argv = []string{"grep", "-rnIE", "--color=never", "-s"}
		if mode == "files" {
			argv = []string{"grep", "-rlIEZ", "--color=never", "-s"}
		}
		if req.Glob != "" {
			argv = append(argv, "--include="+req.Glob)
		}
		argv = append(argv, "-e", req.Pattern, "--", req.Path)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = nil
	var out bytes.Buffer
	cmd.Stdout = &limitWriter{w: &out, n: maxSearchBytes * 4}
	// What the tool says of the pattern: grep -s and rg --no-messages keep
	// unreadable files quiet, not a pattern they cannot compile.
	var msg bytes.Buffer
	cmd.Stderr = &limitWriter{w: &msg, n: 4 << 10}
	err := cmd.Run()
	if ctx.Err() != nil {
		res.Truncated, res.TimedOut = true, true
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && ctx.Err() == nil {
		return nil, &Error{Kind: ErrInternal, Message: fmt.Sprintf("%s failed: %v", res.Tool, err)}
	}
	if errors.As(err, &ee) && ctx.Err() == nil {
		unreadable, serr := searchStatus(res.Tool, req.Pattern, ee.ExitCode(), out.Len() > 0, msg.String())
		if serr != nil {
			return nil, serr
		}
		res.Unreadable = unreadable
	}
	size := 0
	sep := "\n"
	if mode == "files" {
		sep = "\x00" // names may hold newlines: --null / -Z separate them with NUL
	}
	for _, line := range strings.Split(strings.Trim(out.String(), "\n\x00"), sep) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		if len(res.Matches) >= maxMatches || size+len(line) > maxSearchBytes {
			res.Truncated = true
			break
		}
		line = strings.ToValidUTF8(line, "\uFFFD")
		if len(line) > 500 {
			line = line[:500] + " [cut]"
		}
		res.Matches = append(res.Matches, line)
		size += len(line)
	}
	if res.Matches == nil {
		res.Matches = []string{}
	}
	return res, nil
}

// limitWriter keeps the first n bytes and discards the rest.
type limitWriter struct {
	w io.Writer
	n int
}

// Write implements io.Writer, dropping what exceeds the limit.
func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return len(p), nil
	}
	k := min(len(p), l.n)
	l.n -= k
	_, _ = l.w.Write(p[:k])
	return len(p), nil
}
