package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/agentclient"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/sandbox"
)

// simpleExec runs argv in c without stdin and waits for it, copying stdout
// and stderr; it returns the exit status.
func (e *Engine) simpleExec(ctx context.Context, cli *client.Client, c *ctr, argv []string, stdout, stderr io.Writer) (int, error) {
	cr, err := cli.ExecCreate(ctx, c.id, client.ExecCreateOptions{
		User: c.user, AttachStdout: true, AttachStderr: true, Cmd: argv, Env: []string{"HOME=" + Home},
	})
	if err != nil {
		return 0, e.execErr(c, err)
	}
	att, err := cli.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{})
	if err != nil {
		return 0, e.execErr(c, err)
	}
	defer att.Close()
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, att.Reader)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if err != nil {
		return 0, e.execErr(c, err)
	}
	ins, err := cli.ExecInspect(ctx, cr.ID, client.ExecInspectOptions{})
	if err != nil {
		return 0, e.execErr(c, err)
	}
	return ins.ExitCode, nil
}

// execErr describes a failed exec: a container that is gone (removed by
// its owner, or by `corral cleanup`) or an unreachable engine.
func (e *Engine) execErr(c *ctr, err error) error {
	if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
		e.forget(c)
		// Stopped is not gone: it would stay on the engine for good.
		e.removeStopped(c)
		// Passing: the next command makes a new container.
		return sandbox.Transient(fmt.Errorf("%w: docker backend: container %s is gone or stopped (%v); the next command starts a new one", sandbox.ErrUnavailable, c.name, err))
	}
	return e.engineErr("running a command in "+c.name, err)
}

// forget drops c from the engine's table for good (its container is
// gone or stopped: removeStopped and Close's sweep take what is left).
func (e *Engine) forget(c *ctr) { e.table.Forget(c) }

// signal sends sig to the process group (and session) pgid in c, through
// inside.ModeKill. It is best effort: a failure is logged
// (docker.signal_failed) and returned.
func (e *Engine) signal(c *ctr, pgid int, sig syscall.Signal) error {
	return e.signalTarget(c, strconv.Itoa(pgid), sig)
}

// signalTarget is signal for a pgid in text, or "@FILE" naming a file in
// the container that holds it.
func (e *Engine) signalTarget(c *ctr, target string, sig syscall.Signal) error {
	cli, err := e.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, err := e.simpleExec(ctx, cli, c, []string{inside.Path, inside.ModeKill, strconv.Itoa(int(sig)), target}, io.Discard, io.Discard)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	if err != nil {
		e.log.Warn("docker.signal_failed", "container", c.name, "pgid", target, "signal", int(sig), "error", err)
	}
	return err
}

// runCmd runs req in c: on the container's agent, or, for another user
// (req.User), in a docker exec of its own.
func (b *Backend) runCmd(ctx context.Context, cli *client.Client, c *ctr, req *sandbox.Request, env []string, dir string) (*sandbox.Result, error) {
	start := time.Now()
	// Where the container's limits hold per process, which of them ended
	// the command is read from the end of its stderr (perProcessLimitHit),
	// as bwrap does for RLIMIT_DATA; the flavor is known by now (start).
	var errTail *tail.Buffer
	if fl, err := b.e.flavor(ctx); err == nil && fl.PerProcess != "" {
		errTail = &tail.Buffer{Size: 4096}
		r := *req
		if sandbox.SameWriter(req.Stdout, req.Stderr) {
			w := io.MultiWriter(req.Stdout, errTail)
			r.Stdout, r.Stderr = w, w
		} else {
			r.Stderr = io.MultiWriter(orDiscard(req.Stderr), errTail)
		}
		req = &r
	}
	res, err := b.runCmdOn(ctx, cli, c, req, env, dir, start)
	if errTail != nil && res != nil && res.LimitHit == "" {
		res.LimitHit = perProcessLimitHit(res, req.Limits.CPUSeconds, errTail.String())
	}
	return res, err
}

// runCmdOn is runCmd's run of req, from start.
func (b *Backend) runCmdOn(ctx context.Context, cli *client.Client, c *ctr, req *sandbox.Request, env []string, dir string, start time.Time) (*sandbox.Result, error) {
	var s agentclient.Command
	if req.User != "" && req.User != c.user {
		rs, err := b.startRelay(ctx, cli, c, req, env, dir)
		if err != nil {
			return nil, err
		}
		defer rs.att.Close()
		s = rs
	} else {
		a, err := b.e.agentFor(ctx, cli, c)
		if err != nil {
			return nil, err
		}
		as, err := a.Start(req, env, dir)
		if err != nil {
			return nil, err
		}
		s = as
	}
	return b.wait(ctx, c, req, s, start)
}

// wait waits for s (agentclient.Wait), signalling through a helper
// process when its stream is stuck, and asking the engine whether the
// container's memory limit killed a process.
func (b *Backend) wait(ctx context.Context, c *ctr, req *sandbox.Request, s agentclient.Command, start time.Time) (*sandbox.Result, error) {
	return agentclient.Wait(ctx, req, s, start, agentclient.WaitOptions{
		KillGrace: b.e.opts.KillGrace,
		Fallback:  func(pgid int, sig syscall.Signal) { _ = b.e.signal(c, pgid, sig) },
		OOM:       func() bool { return b.oomKilled(c) },
		OOMLimit:  sandbox.LimitContainerMemory,
		// The helper stopped answering: the container goes, whatever
		// holds it, and its scope's next command gets a new one.
		Stuck: func(why string) {
			b.e.log.Warn("docker.container.stuck", "container", c.name, "reason", why)
			if took, d := b.e.table.Take(c, "its helper stopped answering", nil); took && d != nil {
				b.e.remove(d.Handle, d.Why)
			} else {
				b.e.remove(c, why)
			}
		},
	})
}

// relayStream is a command in a docker exec of its own (inside.ModeRelay
// with a control stream on its stdin).
type relayStream struct {
	e        *Engine
	c        *ctr
	cli      *client.Client
	execID   string
	att      client.ExecAttachResult
	ctl      *controlWriter
	started  chan int
	finished chan struct{}
	mu       sync.Mutex
	exit     *inside.Exit
	ferr     error
}

// startRelay starts req in a docker exec of its own.
func (b *Backend) startRelay(ctx context.Context, cli *client.Client, c *ctr, req *sandbox.Request, env []string, dir string) (*relayStream, error) {
	e := b.e
	cmd := []string{inside.Path, inside.ModeRelay, "--control", "--fds", strconv.Itoa(len(req.ExtraFiles))}
	if c.denyUnix {
		cmd = append(cmd, "--deny-unix")
	}
	if sandbox.SameWriter(req.Stdout, req.Stderr) {
		cmd = append(cmd, "--merged")
	}
	cmd = append(append(cmd, "--"), req.Argv...)
	cr, err := cli.ExecCreate(ctx, c.id, client.ExecCreateOptions{
		User: req.User, AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Env: env, WorkingDir: dir, Cmd: cmd,
	})
	if err != nil {
		return nil, e.execErr(c, err)
	}
	att, err := cli.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, e.execErr(c, err)
	}
	rs := &relayStream{e: e, c: c, cli: cli, execID: cr.ID, att: att, ctl: &controlWriter{conn: att.Conn},
		started: make(chan int, 1), finished: make(chan struct{})}
	if req.Stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := req.Stdin.Read(buf)
				if n > 0 && rs.ctl.frame(inside.KindStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					_ = rs.ctl.frame(inside.KindStdinEOF, nil)
					return
				}
			}
		}()
	} else {
		_ = rs.ctl.frame(inside.KindStdinEOF, nil)
	}
	stdout, stderr := orDiscard(req.Stdout), orDiscard(req.Stderr)
	pr, pw := io.Pipe()
	copyDone := make(chan struct{})
	go func() {
		_, err := stdcopy.StdCopy(pw, stderr, att.Reader)
		pw.CloseWithError(err)
		close(copyDone)
	}()
	go func() {
		defer close(rs.finished)
		defer func() { <-copyDone }()
		buf := make([]byte, inside.MaxFrame)
		for {
			kind, p, err := inside.ReadFrame(pr, buf)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					rs.mu.Lock()
					rs.ferr = err
					rs.mu.Unlock()
				}
				pr.CloseWithError(err)
				return
			}
			switch {
			case kind == inside.KindStdout:
				_, _ = stdout.Write(p)
			case kind == inside.KindStderr:
				_, _ = stderr.Write(p)
			case kind == inside.KindStarted:
				if n, err := strconv.Atoi(string(p)); err == nil {
					rs.started <- n
				}
			case kind == inside.KindExit:
				var ex inside.Exit
				if json.Unmarshal(p, &ex) == nil {
					rs.mu.Lock()
					rs.exit = &ex
					rs.mu.Unlock()
				}
			case int(kind) >= 3 && int(kind) < 3+len(req.ExtraFiles):
				_, _ = req.ExtraFiles[int(kind)-3].Write(p)
			}
		}
	}()
	return rs, nil
}

// StartedC delivers the command's process group once the relay reports
// it (agentclient's stream of a command).
func (r *relayStream) StartedC() <-chan int { return r.started }

// FinishedC is closed when the relay has reported the command's end.
func (r *relayStream) FinishedC() <-chan struct{} { return r.finished }

// Signal sends sig to the command's process group through the container.
func (r *relayStream) Signal(sig syscall.Signal) error {
	return r.ctl.frameTimeout(inside.KindSignal, []byte(strconv.Itoa(int(sig))), time.Second)
}

// Result is the relay's report, or what the engine says of the exec when
// the relay died without one (the container was removed).
func (r *relayStream) Result() (*inside.Exit, error) {
	r.mu.Lock()
	ex, ferr := r.exit, r.ferr
	r.mu.Unlock()
	if ex != nil {
		return ex, nil
	}
	// The command was started: from here on no error may say that nothing
	// ran (sandbox.ErrUnavailable); what became of it is unknown.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ins, err := r.cli.ExecInspect(ctx, r.execID, client.ExecInspectOptions{})
	if err != nil {
		return nil, sandbox.MayHaveRun(fmt.Errorf("docker backend: the command was started, but its output stream ended without its exit status and the engine did not say how it ended (%v); it may have run, in part or whole: look at its effects before running it again", err))
	}
	if ins.Running || ferr != nil {
		return nil, sandbox.MayHaveRun(fmt.Errorf("docker backend: the command was started, but corral lost its output stream (%v); it may have run, in part or whole: look at its effects before running it again", ferr))
	}
	return &inside.Exit{Code: ins.ExitCode}, nil
}

// controlWriter writes control frames to the relay's stdin from several
// goroutines.
type controlWriter struct {
	mu   sync.Mutex
	conn net.Conn
}

func (w *controlWriter) frame(kind byte, p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return inside.WriteFrame(w.conn, kind, p)
}

// frameTimeout is frame giving up after d (the relay is not reading: its
// stdin queue is full). A write cut off by the deadline leaves a partial
// frame, so the stream's write side is closed then: the relay kills the
// session at the end of its control stream, which is what a signal sent
// this way is for.
func (w *controlWriter) frameTimeout(kind byte, p []byte, d time.Duration) error {
	return agentclient.WriteTimeout(&w.mu, w.conn, d, func() error { return inside.WriteFrame(w.conn, kind, p) }, func() {
		if cw, ok := w.conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	})
}

// oomKilled asks the engine whether the container's memory cgroup has
// killed a process (State.OOMKilled; it stays set until the container
// restarts).
func (b *Backend) oomKilled(c *ctr) bool {
	cli, err := b.e.client()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
	if err != nil || r.Container.State == nil {
		return false
	}
	return r.Container.State.OOMKilled
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
