package bwrap

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/corralhq/corral/sandbox"
)

// maxStartAttempts bounds how often Run builds a sandbox for one request
// when bwrap failed because the host's mounts changed under it (each
// attempt plans afresh from the host as it is then).
const maxStartAttempts = 4

// startFailure is run's error when bwrap ended before the command started
// (its json status has no exit-code: bubblewrap reports one only once the
// command has been executed) and bwrap's own message says the host's
// mounts changed while it built the sandbox, and a fresh probe passes. Run
// retries the request; after the last attempt it becomes an error wrapping
// sandbox.ErrHostChanged.
type startFailure struct {
	// line is bwrap's message ("bwrap: Can't mkdir parents for ...").
	line string
}

func (f *startFailure) Error() string {
	return fmt.Sprintf("%v: %s", sandbox.ErrHostChanged, f.line)
}

// final is the error Run returns when the last of attempts failed so.
func (f *startFailure) final(attempts int) error {
	return sandbox.NotStarted(fmt.Errorf("%w (%d attempts, the last: %s); nothing was run, and the machine can sandbox: run the command again", sandbox.ErrHostChanged, attempts, f.line))
}

// hostChangedLine returns the first of bwrap's own messages (lines of its
// stderr starting "bwrap: ") that says a mount source or mount point went
// away while the sandbox was being built, or "". These are the failures of
// a host whose mount tree changes (Docker mounting and unmounting layers,
// a home directory made and removed) between corral's plan, bwrap's copy of
// the mount table and its mounts:
//
//   - a submount of the recursively bound root vanished before bwrap could
//     remount it read-only: `Unable to apply mount flags: remount "P": No
//     such file or directory` (or Invalid argument: P is no longer a mount
//     point);
//   - a directory or file the plan mounts over, or its parent, was removed:
//     `Can't mkdir [parents for] P: Read-only file system` (bwrap tries to
//     make it in the read-only tree; Permission denied when bwrap runs as
//     a root caller's run_as), `Can't create file at P: ...`;
//   - a bind source was removed: `Can't find source path P: No such file or
//     directory`, `Can't bind mount ...: No such file or directory`;
//   - a bind target was replaced: `Can't bind mount ... on P: Unable to find
//     "P" in mount table`.
//
// execvp failures (a missing command) and chdir failures are the command's
// own, never the host's.
func hostChangedLine(lines []string) string {
	for _, l := range lines {
		if !strings.HasPrefix(l, "bwrap: ") || strings.Contains(l, "execvp") || strings.Contains(l, "chdir") {
			continue
		}
		enoent := strings.HasSuffix(l, ": No such file or directory")
		erofs := strings.HasSuffix(l, ": Read-only file system")
		// A root caller's bwrap runs as run_as, which may not write the
		// read-only tree's directories at all: EACCES comes before EROFS.
		eacces := strings.HasSuffix(l, ": Permission denied")
		switch {
		case strings.Contains(l, "Unable to apply mount flags: remount") && (enoent || strings.HasSuffix(l, ": Invalid argument")):
			return l
		case (strings.HasPrefix(l, "bwrap: Can't mkdir") || strings.HasPrefix(l, "bwrap: Can't create file")) && (enoent || erofs || eacces):
			return l
		case strings.HasPrefix(l, "bwrap: Can't bind mount") && strings.HasSuffix(l, "in mount table"):
			// The target was replaced (renamed over, as useradd rewrites
			// /etc/gshadow) between the bind and bwrap's look-up of it in
			// mountinfo, which then shows the old file as deleted.
			return l
		case (strings.HasPrefix(l, "bwrap: Can't find source path") || strings.HasPrefix(l, "bwrap: Can't bind mount") ||
			strings.HasPrefix(l, "bwrap: Can't remount readonly") || strings.HasPrefix(l, "bwrap: Can't mount tmpfs")) && enoent:
			return l
		}
	}
	return ""
}

// maxHeld bounds what a startHold holds back: bwrap's messages are a line
// or two.
const maxHeld = 8 << 10

// startHold passes a sandbox's stderr (and its stdout, when the caller gave
// one writer, not a file, for both) through to w, except that it holds
// back the leading lines that look like bwrap's own ("bwrap: ..."), until
// the attempt is over: those of an attempt that is retried are dropped
// (release(false)), the others are written (release(true)). Only bwrap
// writes before the command starts, so a failed start's output is exactly
// these lines; a command's output passes at once (unless the command itself
// begins with "bwrap: ", which is then held to the end of that line, or of
// the attempt). It keeps the lines for the verdict (bwrapLines). Safe for
// concurrent use.
type startHold struct {
	mu      sync.Mutex
	w       io.Writer
	held    []byte
	lines   []string // complete lines held, bwrap's messages
	passing bool     // past the leading bwrap lines: everything goes to w
	done    bool     // released: everything goes to w
}

// holdStderr wraps req.Stderr in a startHold where that changes nothing the
// command sees: a writer that is not a file already reaches bwrap through
// a pipe os/exec copies from, and so does a file that is not a terminal
// when a limit keeps a tail of stderr (run). A terminal, or a file passed
// as is, is left alone (nil): bwrap's messages then go straight to it and
// cannot be classified.
func holdStderr(req *sandbox.Request) *startHold {
	if req.Stderr == nil {
		return &startHold{w: io.Discard}
	}
	if f, ok := req.Stderr.(*os.File); ok {
		if isTerminal(f) || req.Limits.MemoryMB <= 0 && req.Limits.MaxProcs <= 0 {
			return nil
		}
	}
	return &startHold{w: req.Stderr}
}

// Write implements io.Writer.
func (h *startHold) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.passing || h.done {
		return h.w.Write(p)
	}
	h.held = append(h.held, p...)
	if len(h.held) > maxHeld || !onlyBwrapLines(h.held) {
		// Not (only) bwrap's messages: the command's output.
		h.passing = true
		held := h.held
		h.held = nil
		if _, err := h.w.Write(held); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// onlyBwrapLines reports whether b is lines that begin "bwrap: ", the last
// possibly incomplete (then only its start is compared).
func onlyBwrapLines(b []byte) bool {
	prefix := []byte("bwrap: ")
	for len(b) > 0 {
		line, rest, complete := bytes.Cut(b, []byte("\n"))
		n := len(prefix)
		if !complete {
			n = min(len(line), n)
		}
		if len(line) < n || !bytes.Equal(line[:n], prefix[:n]) {
			return false
		}
		b = rest
	}
	return true
}

// bwrapLines returns the complete lines held back (bwrap's messages of a
// start that failed), or nil once output has passed through.
func (h *startHold) bwrapLines() []string {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.passing {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(h.held), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// release ends the attempt: what is held is written to w when keep is set,
// and dropped otherwise (the attempt is retried); later writes pass.
func (h *startHold) release(keep bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if keep && len(h.held) > 0 {
		_, _ = h.w.Write(h.held)
	}
	h.held, h.done = nil, true
}

// stdinRewinder returns a function that puts req.Stdin back where it was
// now, for another attempt, or nil when it cannot be: os/exec copies a
// reader that is not a file into the sandbox's stdin pipe at once, so a
// failed attempt may have consumed part of it. A file is passed to bwrap
// as is, and a failed start reads nothing from it.
func stdinRewinder(req *sandbox.Request) func() bool {
	switch in := req.Stdin.(type) {
	case nil, *os.File:
		return func() bool { return true }
	case io.Seeker:
		off, err := in.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil
		}
		return func() bool {
			_, err := in.Seek(off, io.SeekStart)
			return err == nil
		}
	}
	return nil
}
