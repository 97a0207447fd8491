package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/sandbox"
)

// agent is this process's connection to inside.ModeAgent in one container:
// one docker exec, kept open, over which every command of the container
// runs as a channel of frames (inside.WriteMux). When the connection ends
// (corral exits or is killed, the engine restarts) the agent kills every
// command it started.
type agent struct {
	c    *ctr
	conn net.Conn
	wmu  sync.Mutex

	mu    sync.Mutex
	chans map[uint32]*agentCall
	next  uint32
	err   error         // why the agent is gone
	done  chan struct{} // closed when it is gone
	tail  *tail.Buffer  // the agent's stderr
	pid   int           // the agent's pid in the container
}

// agentCall is one command on the agent.
type agentCall struct {
	stdout, stderr io.Writer
	extra          []*os.File
	started        chan int
	finished       chan struct{}
	exit           *inside.Exit
}

// agentFor returns c's agent, starting it when there is none (or the last
// one died).
func (e *Engine) agentFor(ctx context.Context, cli *client.Client, c *ctr) (*agent, error) {
	c.agentMu.Lock()
	defer c.agentMu.Unlock()
	if a := c.agent; a != nil {
		select {
		case <-a.done:
		default:
			return a, nil
		}
	}
	cmd := []string{inside.Path, inside.ModeAgent}
	if c.denyUnix {
		cmd = append(cmd, "--deny-unix")
	}
	cr, err := cli.ExecCreate(ctx, c.id, client.ExecCreateOptions{
		User: c.user, AttachStdin: true, AttachStdout: true, AttachStderr: true,
		WorkingDir: c.ws.Target, Cmd: cmd,
	})
	if err != nil {
		return nil, e.execErr(c, err)
	}
	att, err := cli.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, e.execErr(c, err)
	}
	a := &agent{c: c, conn: att.Conn, chans: map[uint32]*agentCall{}, done: make(chan struct{}), tail: &tail.Buffer{}}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, a.tail, att.Reader)
		pw.CloseWithError(err)
	}()
	go a.read(pr, e)
	c.agent = a
	return a, nil
}

// read dispatches the agent's frames until its stream ends.
func (a *agent) read(r io.Reader, e *Engine) {
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
				a.mu.Lock()
				a.pid = n
				a.mu.Unlock()
			}
			continue
		}
		a.mu.Lock()
		call := a.chans[id]
		a.mu.Unlock()
		if call == nil {
			continue
		}
		switch {
		case kind == inside.KindStdout:
			_, _ = call.stdout.Write(p)
		case kind == inside.KindStderr:
			_, _ = call.stderr.Write(p)
		case kind == inside.KindStarted:
			if n, err := strconv.Atoi(string(p)); err == nil {
				call.started <- n
			}
		case kind == inside.KindExit:
			var ex inside.Exit
			if json.Unmarshal(p, &ex) != nil {
				ex = inside.Exit{Code: 125, Error: "malformed exit report"}
			}
			a.mu.Lock()
			call.exit = &ex
			delete(a.chans, id)
			a.mu.Unlock()
			close(call.finished)
		case int(kind) >= 3 && int(kind) < 3+len(call.extra):
			_, _ = call.extra[int(kind)-3].Write(p)
		}
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("the agent's stream ended")
	}
	a.conn.Close()
	a.mu.Lock()
	a.err = fmt.Errorf("%w: docker backend: lost corral's helper in %s (%v)%s", sandbox.ErrUnavailable, a.c.name, err, tailNote(a.tail))
	for id, call := range a.chans {
		delete(a.chans, id)
		close(call.finished)
	}
	a.mu.Unlock()
	close(a.done)
	e.log.Debug("docker.agent.ended", "container", a.c.name, "error", err)
}

// frame writes one frame to the agent.
func (a *agent) frame(kind byte, id uint32, p []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return inside.WriteMux(a.conn, kind, id, p)
}

// frameTimeout is frame giving up after d; a write cut off by the deadline
// breaks the stream (the agent then kills its commands), so it is used for
// signals only, which want the command ended anyway.
func (a *agent) frameTimeout(kind byte, id uint32, p []byte, d time.Duration) error {
	return writeTimeout(&a.wmu, a.conn, d, func() error { return inside.WriteMux(a.conn, kind, id, p) }, func() { a.conn.Close() })
}

// agentStream is a command on the agent, as a cmdStream.
type agentStream struct {
	a    *agent
	id   uint32
	call *agentCall
}

// start opens a channel and starts req's command on it.
func (a *agent) start(req *sandbox.Request, env []string, dir string) (*agentStream, error) {
	call := &agentCall{stdout: orDiscard(req.Stdout), stderr: orDiscard(req.Stderr), extra: req.ExtraFiles,
		started: make(chan int, 1), finished: make(chan struct{})}
	a.mu.Lock()
	if a.err != nil {
		err := a.err
		a.mu.Unlock()
		return nil, err
	}
	a.next++
	id := a.next
	a.chans[id] = call
	a.mu.Unlock()
	b, _ := json.Marshal(inside.Start{Argv: req.Argv, Env: env, Dir: dir, FDs: len(req.ExtraFiles)})
	if err := a.frame(inside.KindOpen, id, b); err != nil {
		a.conn.Close()
		return nil, fmt.Errorf("%w: docker backend: sending a command to corral's helper: %v", sandbox.ErrUnavailable, err)
	}
	s := &agentStream{a: a, id: id, call: call}
	if req.Stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := req.Stdin.Read(buf)
				if n > 0 && a.frame(inside.KindStdin, id, buf[:n]) != nil {
					return
				}
				if err != nil {
					_ = a.frame(inside.KindStdinEOF, id, nil)
					return
				}
				select {
				case <-call.finished:
					return
				default:
				}
			}
		}()
	} else {
		_ = a.frame(inside.KindStdinEOF, id, nil)
	}
	return s, nil
}

func (s *agentStream) startedC() <-chan int       { return s.call.started }
func (s *agentStream) finishedC() <-chan struct{} { return s.call.finished }
func (s *agentStream) signal(sig syscall.Signal) error {
	return s.a.frameTimeout(inside.KindSignal, s.id, []byte(strconv.Itoa(int(sig))), time.Second)
}
func (s *agentStream) result() (*inside.Exit, error) {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	if s.call.exit != nil {
		return s.call.exit, nil
	}
	// The command was sent: the helper may have run it before it died, so
	// this is no sandbox.ErrUnavailable ("nothing was run").
	cause := strings.TrimPrefix(s.a.err.Error(), sandbox.ErrUnavailable.Error()+": ")
	return nil, fmt.Errorf("%s; the command was sent to it and may have run, in part or whole, but its exit status is unknown: look at its effects before running it again", cause)
}

// tailNote is ": " and what t kept, or "".
func tailNote(t *tail.Buffer) string {
	if s := t.String(); s != "" {
		return ": " + s
	}
	return ""
}
