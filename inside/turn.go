package inside

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// The session turn (issue 29: any replica serves any session). A session
// whose home is its sandbox (a shared kubernetes pod) keeps there, in one
// directory (TurnRequest.Dir), what every corral that serves it needs:
//
//   - lock: flock(2) LOCK_EX, held by the agent of the corral whose
//     command has the turn. A corral that dies takes its agent's stream
//     with it; the agent then exits and the kernel releases the lock
//     (flock(2): a lock goes with the last descriptor of its open file
//     description), so no expiry is needed.
//   - state: the session's state as the host's session package encodes it
//     (state.json's bytes), written whole (a temporary file and rename(2))
//     at the end of a turn that changed it.
//   - running: the marker of the command that holds the turn, written
//     when the turn is granted and removed when it ends normally. One
//     found at a grant is a command cut off when its corral was lost: the
//     grant reports it (TurnGrant.Interrupted), so the session can say
//     that it may have run.
//
// The frames, on a channel of the agent's stream (WriteMux): the host
// opens a turn with KindTurn (a TurnRequest); the agent answers, once it
// holds the lock, with KindTurnState chunks of the saved state and a
// KindTurn frame (a TurnGrant). The host ends it with KindTurnState
// chunks of the new state, if any, and KindTurnEnd (a TurnEnd); the agent
// answers KindExit (Error set when saving failed). A KindSignal before
// the grant calls the wait off: KindExit with Code 125 and TurnCancelled.
const (
	KindTurn      byte = 'T'
	KindTurnState byte = 'S'
	KindTurnEnd   byte = 'E'
)

// TurnRequest opens a session's turn.
type TurnRequest struct {
	// Dir is the session's directory in the sandbox, made (0700) if
	// missing.
	Dir string `json:"dir"`
	// Marker is what the running marker records of the command (the
	// caller bounds it; at most MaxTurnMarker bytes are kept).
	Marker string `json:"marker,omitempty"`
}

// TurnGrant is the agent's answer once the turn is held.
type TurnGrant struct {
	// Interrupted is the marker of an earlier command that never ended
	// its turn (its corral was lost), or "".
	Interrupted string `json:"interrupted,omitempty"`
	// HasState says a state file was found (its bytes came in
	// KindTurnState chunks, possibly none for an empty file).
	HasState bool `json:"has_state,omitempty"`
	// StateError says why the state file could not be read ("" when it
	// was, or is missing); the session then starts from its own copy.
	StateError string `json:"state_error,omitempty"`
}

// TurnEnd ends a turn.
type TurnEnd struct {
	// Save replaces the state file with the KindTurnState bytes sent
	// before this frame.
	Save bool `json:"save,omitempty"`
}

// TurnCancelled is the Exit.Error of a turn whose wait was called off.
const TurnCancelled = "called off while waiting for the session's turn"

// MaxTurnState bounds the state file read and written, in bytes (the
// session keeps at most 1 MiB of variables; JSON escaping can double it).
const MaxTurnState = 8 << 20

// MaxTurnMarker bounds the running marker, in bytes.
const MaxTurnMarker = 4 << 10

// turnChan is one turn on the agent.
type turnChan struct {
	cancelOnce sync.Once
	cancel     chan struct{}
	end        chan TurnEnd
	mu         sync.Mutex
	state      []byte // the state sent with the end
	tooLarge   bool
}

func newTurnChan() *turnChan {
	return &turnChan{cancel: make(chan struct{}), end: make(chan TurnEnd, 1)}
}

func (t *turnChan) callOff() { t.cancelOnce.Do(func() { close(t.cancel) }) }

// addState appends a KindTurnState chunk, bounded by MaxTurnState.
func (t *turnChan) addState(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.state)+len(p) > MaxTurnState {
		t.tooLarge = true
		return
	}
	t.state = append(t.state, p...)
}

// agentTurn serves one turn: waits for the lock (or its calling off),
// reports the saved state and an earlier command's marker, writes this
// command's marker, and at the end saves the new state, removes the
// marker and lets the lock go. When the agent's stream ends first the
// agent exits: the lock goes with it and the marker stays.
func agentTurn(id uint32, t *turnChan, req TurnRequest, out *muxWriter) {
	exit := func(code int, msg string) {
		b, _ := json.Marshal(Exit{Code: code, Error: msg})
		_ = out.frame(KindExit, id, b)
	}
	if !filepath.IsAbs(req.Dir) {
		exit(125, "bad turn request")
		return
	}
	if err := os.MkdirAll(req.Dir, 0o700); err != nil {
		exit(125, err.Error())
		return
	}
	fd, err := openNoFollow(filepath.Join(req.Dir, "lock"), unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		exit(125, err.Error())
		return
	}
	got := make(chan error, 1)
	go func() { got <- flockEINTR(fd, unix.LOCK_EX) }()
	select {
	case err := <-got:
		if err != nil {
			_ = unix.Close(fd)
			exit(125, "locking the session: "+err.Error())
			return
		}
	case <-t.cancel:
		// A blocking flock(2) cannot be called off: the goroutine lets
		// the lock go as soon as it gets it.
		go func() {
			<-got
			_ = unix.Close(fd)
		}()
		exit(125, TurnCancelled)
		return
	}
	release := func() { _ = unix.Close(fd) }
	var g TurnGrant
	state, serr := readBounded(filepath.Join(req.Dir, "state"), MaxTurnState)
	switch {
	case serr == nil:
		g.HasState = true
	case errors.Is(serr, os.ErrNotExist):
	default:
		g.StateError = serr.Error()
	}
	marker := filepath.Join(req.Dir, "running")
	if m, err := readBounded(marker, MaxTurnMarker); err == nil {
		g.Interrupted = string(m)
		if g.Interrupted == "" {
			g.Interrupted = "(no record of the command)"
		}
	}
	m := req.Marker
	if len(m) > MaxTurnMarker {
		m = m[:MaxTurnMarker]
	}
	if err := writeWhole(marker, []byte(m)); err != nil {
		release()
		exit(125, "recording the running command: "+err.Error())
		return
	}
	for len(state) > 0 {
		n := min(len(state), MaxFrame)
		if out.frame(KindTurnState, id, state[:n]) != nil {
			break
		}
		state = state[n:]
	}
	b, _ := json.Marshal(g)
	_ = out.frame(KindTurn, id, b)
	end := <-t.end
	msg := ""
	t.mu.Lock()
	st, tooLarge := t.state, t.tooLarge
	t.mu.Unlock()
	if end.Save {
		switch {
		case tooLarge:
			msg = fmt.Sprintf("the session's state is over %d bytes and was not saved", MaxTurnState)
		default:
			if err := writeWhole(filepath.Join(req.Dir, "state"), st); err != nil {
				msg = "saving the session's state: " + err.Error()
			}
		}
	}
	if err := os.Remove(marker); err != nil && !errors.Is(err, os.ErrNotExist) && msg == "" {
		msg = "removing the running marker: " + err.Error()
	}
	release()
	exit(0, msg)
}

// openNoFollow opens path (0600 when made) without following a final
// symlink: a command of the session could have put one there.
func openNoFollow(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// flockEINTR is flock(2), made again when a signal interrupted it.
func flockEINTR(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// readBounded reads path, a regular file of at most max bytes, without
// following a final symlink or blocking on a fifo.
func readBounded(path string, max int64) ([]byte, error) {
	fd, err := openNoFollow(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is over %d bytes", path, max)
	}
	return b, nil
}

// writeWhole replaces path with b: a temporary file beside it, renamed
// over it (rename(2) is atomic), so a reader sees the old or the new
// bytes, never a part.
func writeWhole(path string, b []byte) error {
	tmp := path + ".new"
	_ = os.Remove(tmp)
	fd, err := openNoFollow(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
