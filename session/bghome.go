package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/sandbox"
)

// Background processes kept in the session's sandbox (its home:
// sandbox.BackgroundBackend, issue 29). They are not this corral's: they
// outlive it (Close leaves them), any corral serving the session lists,
// reads and kills them, and they end with the sandbox (the session's end,
// its idle removal). Their ids are random ("bg-" and 12 hex digits), as
// corrals that share a session count nothing together.

// bgHomeWait bounds one call to the sandbox for a background process
// (the pod may have to be made or found first).
const bgHomeWait = 5 * time.Minute

// homeBackground returns sp's backend when it keeps the session's
// background processes in its sandbox, else nil.
func homeBackground(sp *Spec) sandbox.BackgroundBackend {
	if bb, ok := sp.Backend.(sandbox.BackgroundBackend); ok && bb.BackgroundHome() {
		return bb
	}
	return nil
}

// homeSpec is the session's Spec and its backend when that keeps the
// session's background processes in its sandbox; nil otherwise.
func (s *Session) homeSpec() (*Spec, sandbox.BackgroundBackend) {
	sp, err := s.m.specFor(s.name, nil)
	if err != nil {
		return nil, nil
	}
	return sp, homeBackground(sp)
}

// homeRequest is a request that finds (or starts) the session's sandbox
// as its commands do; its command and variables are not used.
func (s *Session) homeRequest(sp *Spec) *sandbox.Request {
	dir := sp.Workdir
	if dir == "" {
		dir = sp.Backend.DefaultCwd()
	}
	return s.request(sp, &State{Cwd: dir}, dir, bashArgv(wrapper, "true"), 0)
}

// startState is the state a background command starts from: the one
// saved in the session's sandbox when that is the session's home (another
// corral's last command may have changed it), else this corral's.
func (s *Session) startState(sp *Spec) (*State, error) {
	bb := homeBackground(sp)
	if bb == nil {
		return s.loadState(sp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bgHomeWait)
	defer cancel()
	b, serr, err := bb.SavedState(ctx, s.homeRequest(sp))
	if err != nil {
		return nil, err
	}
	return s.loadStateFrom(sp, &sandbox.SessionTurn{State: b, StateError: serr})
}

// newHomeID is a background process id no other corral picks.
func newHomeID() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "bg-" + hex.EncodeToString(b[:]), nil
}

// startHome is Start for a session whose sandbox keeps its background
// processes. The Process returned has no Done: ask Output.
func (s *Session) startHome(bb sandbox.BackgroundBackend, sp *Spec, st *State, dir string, req StartRequest) (*Process, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	id, err := newHomeID()
	if err != nil {
		return nil, err
	}
	want := ""
	if req.Workdir != "" {
		want = dir
	}
	sreq := s.request(sp, st, dir, bashArgv(bgWrapper, req.Command, want), req.Timeout)
	sreq.Env = shieldStartEnv(sreq.Env, sp.Policy)
	host, _ := os.Hostname()
	ctx, cancel := context.WithTimeout(context.Background(), bgHomeWait)
	defer cancel()
	info, err := bb.StartBackground(ctx, sreq, id, req.Command, fmt.Sprintf("pid %d on %s", os.Getpid(), host), req.Timeout)
	if err != nil {
		return nil, err
	}
	s.m.log.Info("session.background.started", "session", s.name, "id", id, "where", "sandbox")
	if err := s.saveMeta(sp); err != nil {
		s.m.log.Warn("session.meta.save_failed", "session", s.name, "error", err)
	}
	return &Process{ID: id, Command: req.Command, Started: info.Started, done: make(chan struct{})}, nil
}

// outputHome is Output of a process kept in the session's sandbox.
func (s *Session) outputHome(bb sandbox.BackgroundBackend, sp *Spec, id string, offset int64) (*Chunk, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bgHomeWait)
	defer cancel()
	c, err := bb.BackgroundOutput(ctx, s.homeRequest(sp), id, max(offset, 0), bgChunk)
	if err != nil {
		return nil, err
	}
	data := c.Data
	if c.Exit == nil || c.Offset+int64(len(data)) < c.Size {
		// A character cut by the read's end comes whole with the next.
		data = cutPartialRune(data)
	}
	text, invalid, _ := sanitize(data)
	out := &Chunk{Data: text, Offset: c.Offset, Next: c.Offset + int64(len(data)), Running: c.Exit == nil, InvalidUTF8: invalid}
	if ex := c.Exit; ex != nil {
		out.ExitCode, out.TimedOut, out.Error = ex.Code, ex.TimedOut, ex.Error
		if ex.Dropped > 0 {
			out.SkippedReason = fmt.Sprintf("%d bytes of output past the sandbox's bound were not kept", ex.Dropped)
		}
	}
	return out, nil
}

// cutPartialRune drops an incomplete UTF-8 sequence at the end of b
// (pure): at most 3 bytes.
func cutPartialRune(b []byte) []byte {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return b // ASCII: nothing cut
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// killHome is Kill of a process kept in the session's sandbox.
func (s *Session) killHome(bb sandbox.BackgroundBackend, sp *Spec, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), bgHomeWait)
	defer cancel()
	ex, err := bb.KillBackground(ctx, s.homeRequest(sp), id)
	if err != nil {
		return err
	}
	s.m.log.Info("session.background.killed", "session", s.name, "id", id, "where", "sandbox", "exit_code", ex.Code)
	return nil
}

// listHome lists the processes kept in the session's sandbox, when it
// keeps them.
func (s *Session) listHome() []ProcessInfo {
	sp, bb := s.homeSpec()
	if bb == nil {
		return []ProcessInfo{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), bgHomeWait)
	defer cancel()
	l, err := bb.ListBackground(ctx, s.homeRequest(sp))
	if err != nil {
		if !errors.Is(err, ErrClosed) {
			s.m.log.Warn("session.background.list_failed", "session", s.name, "error", err)
		}
		return []ProcessInfo{}
	}
	out := make([]ProcessInfo, 0, len(l))
	for _, p := range l {
		in := ProcessInfo{ID: p.ID, Command: p.Command, Started: p.Started, Running: p.Exit == nil, Bytes: p.Bytes}
		if p.Exit != nil {
			in.ExitCode = p.Exit.Code
		}
		out = append(out, in)
	}
	return out
}
