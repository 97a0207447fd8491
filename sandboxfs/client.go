package sandboxfs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/layer"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// exeInSandbox runs corral's executable inside the file server's sandbox:
// it is opened read-only on the host and handed in as descriptor 3, so it
// need not be visible there (it may lie in the working directory, where a
// bind would be refused, or in a hidden path).
const exeInSandbox = "/proc/self/fd/3"

// callTimeout bounds one operation (a search may walk a large tree).
const callTimeout = 60 * time.Second

// ErrUnavailable wraps failures to start or reach the file server.
var ErrUnavailable = errors.New("file server unavailable")

// Client performs file operations in one session's sandbox. It is safe for
// concurrent use; operations are serialized.
type Client struct {
	sess *session.Session

	mu  sync.Mutex
	srv *serverProc
	id  int64
}

type serverProc struct {
	key    string
	stdin  io.WriteCloser
	out    *bufio.Reader
	cancel context.CancelFunc
	done   chan struct{} // closed when the server's sandbox has ended
	stderr *tail.Buffer
}

// For returns the file client of s, creating it on first use; it is closed
// with the session.
func For(s *session.Session) (*Client, error) {
	c, err := s.Attach("sandboxfs", func() (io.Closer, error) { return &Client{sess: s}, nil })
	if err != nil {
		return nil, err
	}
	return c.(*Client), nil
}

// Close stops the file server.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked()
	return nil
}

func (c *Client) stopLocked() {
	if c.srv == nil {
		return
	}
	c.srv.stdin.Close()
	c.srv.cancel()
	<-c.srv.done
	c.srv = nil
}

// checkPath refuses paths the file tools cannot carry or name.
func checkPath(path string) error {
	switch {
	case path == "":
		return &Error{Kind: ErrBadRequest, Message: "path is empty"}
	case strings.IndexByte(path, 0) >= 0:
		return &Error{Kind: ErrBadRequest, Message: "path contains a NUL byte"}
	case !utf8.ValidString(path):
		return &Error{Kind: ErrBadRequest, Message: "path is not valid UTF-8: the file tools carry paths as JSON text; use bash (with $'\\xNN' quoting) for such names"}
	}
	return nil
}

// Read returns lines of the file at path (absolute, or relative to the
// session's cwd), from line offset (1-based; 0 means 1), at most limit
// lines (0: 2000).
func (c *Client) Read(ctx context.Context, path string, offset, limit int) (*ReadResult, error) {
	resp, err := c.call(ctx, &request{Op: "read", Path: path, Offset: offset, Limit: limit})
	if err != nil {
		return nil, err
	}
	return resp.Read, nil
}

// Write replaces (or creates, with its parents) the file at path with
// content. A path whose real location is outside the writable set is
// refused with an *Error naming the real path.
func (c *Client) Write(ctx context.Context, path, content string) (*WriteResult, error) {
	resp, err := c.call(ctx, &request{Op: "write", Path: path, Content: content})
	if err != nil {
		return nil, err
	}
	return resp.Write, nil
}

// Edit replaces old with new in the file at path: exactly one occurrence,
// or every one when all is set.
func (c *Client) Edit(ctx context.Context, path, old, new string, all bool) (*EditResult, error) {
	resp, err := c.call(ctx, &request{Op: "edit", Path: path, Old: old, New: new, All: all})
	if err != nil {
		return nil, err
	}
	return resp.Edit, nil
}

// Search looks for the regular expression pattern under path (default: the
// session's cwd), in files matching glob, returning matching lines (mode
// "content") or file names (mode "files"), with ripgrep when the sandbox
// has it and grep otherwise.
func (c *Client) Search(ctx context.Context, pattern, path, glob, mode string) (*SearchResult, error) {
	if path == "" {
		path = "."
	}
	resp, err := c.call(ctx, &request{Op: "search", Path: path, Pattern: pattern, Glob: glob, Mode: mode})
	if err != nil {
		return nil, err
	}
	return resp.Find, nil
}

// call sends one request, starting or replacing the server as needed. The
// session's settings and state are read once per call: they give the
// server's sandbox and the cwd a relative path resolves against.
func (c *Client) call(ctx context.Context, req *request) (*response, error) {
	if err := checkPath(req.Path); err != nil {
		return nil, err
	}
	sreq, sp, st, err := c.sess.SandboxRequest([]string{exeInSandbox})
	if err != nil {
		return nil, err
	}
	if filepath.IsAbs(req.Path) {
		req.Path = filepath.Clean(req.Path)
	} else {
		req.Path = filepath.Join(st.Cwd, req.Path)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for attempt := 0; ; attempt++ {
		srv, err := c.serverLocked(sreq, sp)
		if err != nil {
			return nil, err
		}
		c.id++
		req.ID = c.id
		resp, err := c.roundTrip(ctx, srv, req)
		if err == nil {
			if resp.Error != nil {
				return nil, resp.Error
			}
			return resp, nil
		}
		// The server died or hung: replace it once, and ask again if
		// asking twice cannot change the outcome.
		c.stopLocked()
		if !retryable(req.Op, err) {
			return nil, fmt.Errorf("%w: it did not answer (%v)%s; the edit may have been made: read the file before you edit it again", ErrUnavailable, err, note(srv.stderr))
		}
		if attempt > 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %v%s", ErrUnavailable, err, note(srv.stderr))
		}
	}
}

// errNotSent marks a round trip whose request never reached the server.
var errNotSent = errors.New("the request was not sent")

// retryable reports whether an operation whose round trip failed with err
// may be sent again to a new server. An edit that may have reached the
// server (which then hung past callTimeout, or died) is not: it may have
// been made, and made again it would fail (old_string is gone) or replace
// twice. Reads, searches and writes (of the same content) give the same
// outcome when repeated.
func retryable(op string, err error) bool {
	return op != "edit" || errors.Is(err, errNotSent)
}

func (c *Client) roundTrip(ctx context.Context, srv *serverProc, req *request) (*response, error) {
	line, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	type result struct {
		resp *response
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		if _, err := srv.stdin.Write(append(line, '\n')); err != nil {
			ch <- result{nil, fmt.Errorf("%w: %v", errNotSent, err)}
			return
		}
		b, err := srv.out.ReadBytes('\n')
		if err != nil {
			ch <- result{nil, err}
			return
		}
		var resp response
		if err := json.Unmarshal(b, &resp); err != nil {
			ch <- result{nil, err}
			return
		}
		if resp.ID != req.ID {
			ch <- result{nil, fmt.Errorf("answer %d to request %d", resp.ID, req.ID)}
			return
		}
		ch <- result{&resp, nil}
	}()
	t := time.NewTimer(callTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("no answer in %s", callTimeout)
	case <-srv.done:
		return nil, errors.New("the file server exited")
	}
}

// serverLocked returns a live server built from the session's current
// request, starting one, or replacing one built from other settings.
func (c *Client) serverLocked(template *sandbox.Request, sp *session.Spec) (*serverProc, error) {
	// The file server is the session's helper executable
	// (cmd/corral-helper when there is one), passed to the backend as a
	// descriptor.
	exe, err := c.sess.Helper()
	if err != nil {
		return nil, fmt.Errorf("%w: finding corral's executable: %v", ErrUnavailable, err)
	}
	copied := *template // a copy: a retry starts from the same template
	req := &copied
	writable := writableRoots(req)
	layout, hasLayout := sp.Backend.(sandbox.Layout)
	if hasLayout && layout.HelperPath() != "" {
		// The backend mounts corral's executable itself (docker).
		req.Argv = append([]string{layout.HelperPath()}, req.Argv[1:]...)
		writable = layout.WritableRoots(req)
	}
	wj, _ := json.Marshal(writable)
	roots := protectedRoots(req, writable)
	if hasLayout && layout.HelperPath() != "" {
		// docker: /tmp is the container's own (HOME); nothing on the host
		// runs from it.
		roots = slices.DeleteFunc(roots, func(r string) bool { return r == "/tmp" })
	}
	pj, _ := json.Marshal(protectSpec{Roots: roots, Patterns: req.ProtectedPatterns()})
	// The sandbox is rebuilt when the settings change, and when the home
	// directory (or .config, .local, .local/share) gains or loses entries,
	// which the sandbox's rebuilt home would not show.
	// Under review mode, also when the layer's generation moves on: an
	// apply or discard changed the layer under the server's mount, which
	// overlayfs leaves undefined, and the backend mounts a new one.
	key := fmt.Sprintf("%s|%s|%s|%v|%v|%v|%v|%v|%s|%s|%s|%s", sp.Backend.Name(), req.Profile, req.Workdir, req.Binds, req.HomeAllow, req.Skills, req.HomeDir, req.EnvDeny, wj, pj, homeStamp(), layerStamp(req.LayerDir))
	if c.srv != nil && c.srv.key == key {
		select {
		case <-c.srv.done:
		default:
			return c.srv, nil
		}
	}
	c.stopLocked()
	exeFile, err := os.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("%w: opening corral's executable: %v", ErrUnavailable, err)
	}
	if !hasLayout || layout.HelperPath() == "" {
		req.ExtraFiles = []*os.File{exeFile}
	}
	req.Env = append(append([]string{}, req.Env...), EnvServe+"=serve", EnvWritable+"="+string(wj), EnvProtect+"="+string(pj))
	req.EnvAllow = append(append([]string{}, req.EnvAllow...), EnvServe, EnvWritable, EnvProtect)
	// A long-lived helper of corral's own: no CPU-time limit, room for the
	// Go runtime, a few processes for rg/grep.
	req.Limits = sandbox.Limits{MemoryMB: 0, CPUSeconds: 0, MaxProcs: 64}
	req.Dir = req.Workdir
	inR, inW, err := os.Pipe()
	if err != nil {
		exeFile.Close()
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		exeFile.Close()
		inR.Close()
		inW.Close()
		return nil, err
	}
	req.Stdin, req.Stdout = inR, outW
	errTail := &tail.Buffer{}
	req.Stderr = errTail
	runCtx, cancel := context.WithCancel(context.Background())
	srv := &serverProc{key: key, stdin: inW, out: bufio.NewReaderSize(outR, 256<<10), cancel: cancel, done: make(chan struct{}), stderr: errTail}
	go func() {
		_, err := sp.Backend.Run(runCtx, req)
		exeFile.Close()
		inR.Close()
		outW.Close()
		if err != nil {
			_, _ = errTail.Write([]byte(err.Error()))
		}
		outR.Close()
		close(srv.done)
	}()
	c.srv = srv
	return srv, nil
}

// homeStamp fingerprints the listings the sandbox's home is built from.
func homeStamp() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, d := range []string{"", ".config", ".local", ".local/share"} {
		if st, err := os.Stat(filepath.Join(home, d)); err == nil {
			fmt.Fprintf(&b, "%d.", st.ModTime().UnixNano())
		}
	}
	return b.String()
}

// writableRoots are the paths a command of the session may write
// (sandbox.WritableRoots), resolved, as the file server judges a write's
// real target.
func writableRoots(req *sandbox.Request) []string {
	var out []string
	for _, w := range sandbox.WritableRoots(req) {
		p := w.Path
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		out = append(out, p)
	}
	return out
}

// protectedRoots are the directories at whose top the protected-path
// patterns apply, as the file server sees them: the writable roots but the
// scratch directory, the session home and the tool cache (corral's own;
// nothing on the host runs from them). As in the bwrap backend, when the working directory
// is the home directory, its writable parts are its non-dot entries, and the
// patterns apply at the top of each.
func protectedRoots(req *sandbox.Request, writable []string) []string {
	skip := map[string]bool{}
	for _, p := range []string{req.ScratchDir, req.HomeDir, req.CacheDir} {
		if p == "" {
			continue
		}
		skip[p] = true
		if r, err := filepath.EvalSymlinks(p); err == nil {
			skip[r] = true
		}
	}
	home := ""
	if h, err := os.UserHomeDir(); err == nil {
		if r, err := filepath.EvalSymlinks(h); err == nil {
			home = r
		}
	}
	var out []string
	for _, w := range writable {
		switch {
		case skip[w]:
		case w == home && home != "/":
			ents, _ := os.ReadDir(home)
			for _, e := range ents {
				if !strings.HasPrefix(e.Name(), ".") && e.IsDir() {
					out = append(out, filepath.Join(home, e.Name()))
				}
			}
		default:
			out = append(out, w)
		}
	}
	return out
}

// note is " (" and the end of the server's stderr ")", or "".
func note(t *tail.Buffer) string {
	if s := t.String(); s != "" {
		return " (" + s + ")"
	}
	return ""
}

// layerStamp names the generation of the review layer in dir ("" when
// the session has none, or it cannot be read: then the next command's
// backend reports it).
func layerStamp(dir string) string {
	if dir == "" {
		return ""
	}
	g, err := layer.New(dir, "").Generation()
	if err != nil {
		return ""
	}
	return strconv.FormatInt(g, 10)
}
