// Package agentclient is the host's side of corral's agent protocol: one
// long-lived stream to inside.ModeAgent in a container or pod, over which
// every command of that sandbox runs as a channel of frames
// (inside.WriteMux), and the wait for one command that turns its frames,
// timeout, cancellation and signals into a sandbox.Result. The docker and
// kubernetes backends share it; each opens the stream its own way (a
// docker exec, a Kubernetes exec).
package agentclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/sandbox"
)

// Conn is this process's connection to one agent. When the stream ends
// (corral exits or is killed, the container or pod goes) the agent kills
// every command it started, and the commands still waiting here end with
// an error.
type Conn struct {
	label string // "docker backend: lost corral's helper in NAME"
	w     io.WriteCloser
	wmu   sync.Mutex

	mu    sync.Mutex
	chans map[uint32]*call
	next  uint32
	err   error         // why the agent is gone
	done  chan struct{} // closed when it is gone
	tail  *tail.Buffer  // the agent's stderr
	pid   int           // the agent's pid in the sandbox

	// ending counts the session turns ended (Turn.End) whose end the
	// agent has not answered yet: Close waits for them, so that a corral
	// that stops after its last command still saves its state and clears
	// its running marker in the sandbox.
	ending sync.WaitGroup
}

// call is one command on the agent.
type call struct {
	stdout, stderr io.Writer
	extra          []*os.File
	started        chan int
	finished       chan struct{}
	exit           *inside.Exit
	// turn is set on a session turn's channel (Conn.Turn): the grant and
	// the state that came before it.
	turn *turnCall
}

// New returns a Conn over an agent's stdin (w: frames to the agent) and
// stdout (r: frames from it); stderr is the agent's stderr tail, quoted in
// errors (nil: none). what names the sandbox in errors ("docker backend:
// ... in corral-0123"). A goroutine reads r until it ends, then closes w.
func New(w io.WriteCloser, r io.Reader, stderr *tail.Buffer, backend, name string) *Conn {
	if stderr == nil {
		stderr = &tail.Buffer{}
	}
	c := &Conn{label: fmt.Sprintf("%s: lost corral's helper in %s", backend, name), w: w,
		chans: map[uint32]*call{}, done: make(chan struct{}), tail: stderr}
	go c.read(r)
	return c
}

// Done is closed when the agent is gone.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Alive reports whether the agent's stream is still open.
func (c *Conn) Alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// PID is the agent's pid in the sandbox, once it reported it (else 0).
func (c *Conn) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid
}

// Close ends the stream: the agent kills its commands and exits. It
// first waits, at most closeWait, for the agent's answers to the turns
// ended (Turn.End).
func (c *Conn) Close() error {
	done := make(chan struct{})
	go func() { c.ending.Wait(); close(done) }()
	select {
	case <-done:
	case <-c.done:
	case <-time.After(closeWait):
	}
	return c.w.Close()
}

// closeWait bounds Close's wait for the answers to ended turns: a round
// trip on an open stream, far less when the agent is there; a stuck one
// does not hold corral's exit longer.
const closeWait = 10 * time.Second

// read dispatches the agent's frames until its stream ends.
func (c *Conn) read(r io.Reader) {
	buf := make([]byte, inside.MaxFrame)
	var err error
	for {
		var (
			kind byte
			id   uint32
			p    []byte
		)
		kind, id, p, err = inside.ReadMux(r, buf)
		if err != nil {
			break
		}
		if id == 0 && kind == inside.KindStarted {
			if n, err := strconv.Atoi(string(p)); err == nil {
				c.mu.Lock()
				c.pid = n
				c.mu.Unlock()
			}
			continue
		}
		c.mu.Lock()
		cl := c.chans[id]
		c.mu.Unlock()
		if cl == nil {
			continue
		}
		switch {
		case cl.turn != nil && kind == inside.KindTurnState:
			cl.turn.addState(p)
		case cl.turn != nil && kind == inside.KindTurn:
			cl.turn.grant(p)
		case kind == inside.KindStdout:
			_, _ = cl.stdout.Write(p)
		case kind == inside.KindStderr:
			_, _ = cl.stderr.Write(p)
		case kind == inside.KindStarted:
			if n, err := strconv.Atoi(string(p)); err == nil {
				cl.started <- n
			}
		case kind == inside.KindExit:
			var ex inside.Exit
			if json.Unmarshal(p, &ex) != nil {
				ex = inside.Exit{Code: 125, Error: "malformed exit report"}
			}
			c.mu.Lock()
			cl.exit = &ex
			delete(c.chans, id)
			c.mu.Unlock()
			close(cl.finished)
		case int(kind) >= 3 && int(kind) < 3+len(cl.extra):
			_, _ = cl.extra[int(kind)-3].Write(p)
		}
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("the agent's stream ended")
	}
	c.w.Close()
	c.mu.Lock()
	c.err = fmt.Errorf("%w: %s (%v)%s", sandbox.ErrUnavailable, c.label, err, tailNote(c.tail))
	for id, cl := range c.chans {
		delete(c.chans, id)
		close(cl.finished)
	}
	c.mu.Unlock()
	close(c.done)
}

// frame writes one frame to the agent.
func (c *Conn) frame(kind byte, id uint32, p []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return inside.WriteMux(c.w, kind, id, p)
}

// frameTimeout is frame giving up after d; a write cut off by the deadline
// breaks the stream (the agent then kills its commands), so it is used for
// signals only, which want the command ended anyway.
func (c *Conn) frameTimeout(kind byte, id uint32, p []byte, d time.Duration) error {
	return WriteTimeout(&c.wmu, c.w, d, func() error { return inside.WriteMux(c.w, kind, id, p) }, func() { c.w.Close() })
}

// Start opens a channel and starts req's command on it with env (the
// whole environment the command adds to the agent's) in dir. req.Stdin,
// when set, is copied to the command in a goroutine; req.Stdout,
// req.Stderr and req.ExtraFiles receive its output.
func (c *Conn) Start(req *sandbox.Request, env []string, dir string) (*Stream, error) {
	cl := &call{stdout: orDiscard(req.Stdout), stderr: orDiscard(req.Stderr), extra: req.ExtraFiles,
		started: make(chan int, 1), finished: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		// The helper is gone and nothing was sent: the next command
		// starts another helper (or container).
		err := c.err
		c.mu.Unlock()
		return nil, sandbox.Transient(err)
	}
	c.next++
	id := c.next
	c.chans[id] = cl
	c.mu.Unlock()
	b, _ := json.Marshal(inside.Start{Argv: req.Argv, Env: env, Dir: dir, FDs: len(req.ExtraFiles),
		Merged: sandbox.SameWriter(req.Stdout, req.Stderr)})
	if err := c.frame(inside.KindOpen, id, b); err != nil {
		c.w.Close()
		// Not sent whole, so not run: a frame is read only complete.
		return nil, sandbox.Transient(fmt.Errorf("%w: %s: sending a command to corral's helper: %v", sandbox.ErrUnavailable, strings.SplitN(c.label, ":", 2)[0], err))
	}
	s := &Stream{c: c, id: id, call: cl}
	if req.Stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := req.Stdin.Read(buf)
				if n > 0 && c.frame(inside.KindStdin, id, buf[:n]) != nil {
					return
				}
				if err != nil {
					_ = c.frame(inside.KindStdinEOF, id, nil)
					return
				}
				select {
				case <-cl.finished:
					return
				default:
				}
			}
		}()
	} else {
		_ = c.frame(inside.KindStdinEOF, id, nil)
	}
	return s, nil
}

// Stream is a command on the agent; it implements Command.
type Stream struct {
	c    *Conn
	id   uint32
	call *call
}

// StartedC implements Command.
func (s *Stream) StartedC() <-chan int { return s.call.started }

// FinishedC implements Command.
func (s *Stream) FinishedC() <-chan struct{} { return s.call.finished }

// Signal implements Command: a frame on the agent's stream, given up after
// a second (a stuck stream is then broken, which ends the command too).
func (s *Stream) Signal(sig syscall.Signal) error {
	return s.c.frameTimeout(inside.KindSignal, s.id, []byte(strconv.Itoa(int(sig))), time.Second)
}

// Result implements Command.
func (s *Stream) Result() (*inside.Exit, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.call.exit != nil {
		return s.call.exit, nil
	}
	// The command was sent: the helper may have run it before it died, so
	// this is no sandbox.ErrUnavailable ("nothing was run").
	cause := strings.TrimPrefix(s.c.err.Error(), sandbox.ErrUnavailable.Error()+": ")
	return nil, sandbox.MayHaveRun(fmt.Errorf("%s; the command was sent to it and may have run, in part or whole, but its exit status is unknown: look at its effects before running it again", cause))
}

// tailNote is ": " and what t kept, or "".
func tailNote(t *tail.Buffer) string {
	if s := t.String(); s != "" {
		return ": " + s
	}
	return ""
}

// WriteTimeout runs write (a frame to w) holding mu, giving up when mu is
// not free within d or the write does not finish within d; broken runs
// when the write failed part way or timed out. A w with SetWriteDeadline
// (a net.Conn) gets a deadline; for another (a pipe) the write runs in a
// goroutine that broken's close ends.
func WriteTimeout(mu *sync.Mutex, w io.Writer, d time.Duration, write func() error, broken func()) error {
	locked := make(chan struct{})
	go func() { mu.Lock(); close(locked) }()
	select {
	case <-locked:
	case <-time.After(d):
		go func() { <-locked; mu.Unlock() }()
		return errors.New("stream busy")
	}
	if dl, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		defer mu.Unlock()
		_ = dl.SetWriteDeadline(time.Now().Add(d))
		err := write()
		_ = dl.SetWriteDeadline(time.Time{})
		if err != nil {
			broken()
		}
		return err
	}
	done := make(chan error, 1)
	go func() { defer mu.Unlock(); done <- write() }()
	select {
	case err := <-done:
		if err != nil {
			broken()
		}
		return err
	case <-time.After(d):
		broken()
		return errors.New("stream stuck")
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
