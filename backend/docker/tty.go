package docker

import (
	"context"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/sandbox"
)

// runTTY runs req (req.TTY: its stdin is the slave side of a pseudo-terminal
// corral allocated, as for `corral shell`) on a terminal of the engine's own
// (docker exec with a TTY), so job control works in the container. corral's
// pseudo-terminal is put in raw mode, so that only the container's one
// processes input (no double echo). The window size is the one at start.
func (b *Backend) runTTY(ctx context.Context, cli *client.Client, c *ctr, req *sandbox.Request, env []string, dir string) (*sandbox.Result, error) {
	e := b.e
	start := time.Now()
	var size client.ConsoleSize
	if f, ok := req.Stdin.(*os.File); ok {
		fd := int(f.Fd())
		if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
			size = client.ConsoleSize{Height: uint(ws.Row), Width: uint(ws.Col)}
		}
		if old, err := term.MakeRaw(fd); err == nil {
			defer term.Restore(fd, old)
		}
	}
	pidfile := "/tmp/.corral/tty-" + randomName()[len(NamePrefix):]
	cmd := []string{inside.Path, inside.ModeRelay, "--tty-pidfile", pidfile}
	if c.denyUnix {
		cmd = append(cmd, "--deny-unix")
	}
	cmd = append(append(cmd, "--"), req.Argv...)
	cr, err := cli.ExecCreate(ctx, c.id, client.ExecCreateOptions{
		User: c.user, TTY: true, ConsoleSize: size, AttachStdin: req.Stdin != nil, AttachStdout: true, AttachStderr: true,
		Env: append(env, "TERM="+termName(req.Env)), WorkingDir: dir, Cmd: cmd,
	})
	if err != nil {
		return nil, e.execErr(c, err)
	}
	att, err := cli.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{TTY: true, ConsoleSize: size})
	if err != nil {
		return nil, e.execErr(c, err)
	}
	defer att.Close()
	if req.Stdin != nil {
		go func() { _, _ = io.Copy(att.Conn, req.Stdin) }()
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(orDiscard(req.Stdout), att.Reader)
		close(done)
	}()
	res := &sandbox.Result{}
	var timeoutC <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	select {
	case <-done:
	case <-timeoutC:
		res.TimedOut = true
		b.endTTY(c, pidfile, done)
	case <-ctx.Done():
		b.endTTY(c, pidfile, done)
	}
	res.Duration = time.Since(start)
	// The copy of stdin may still wait in a read of the terminal, which
	// would keep it open (its master then never sees the end): wake it.
	if f, ok := req.Stdin.(*os.File); ok {
		_ = f.SetReadDeadline(time.Now())
	}
	ictx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ins, err := cli.ExecInspect(ictx, cr.ID, client.ExecInspectOptions{})
	if err != nil {
		return nil, e.execErr(c, err)
	}
	res.ExitCode = ins.ExitCode
	return res, nil
}

// endTTY hangs up a terminal session, then kills it after the grace time.
func (b *Backend) endTTY(c *ctr, pidfile string, done <-chan struct{}) {
	_ = b.e.signalTarget(c, "@"+pidfile, syscall.SIGHUP)
	select {
	case <-done:
	case <-time.After(b.e.opts.KillGrace):
		_ = b.e.signalTarget(c, "@"+pidfile, syscall.SIGKILL)
		<-done
	}
}

// termName is the TERM of env, or xterm-256color.
func termName(env []string) string {
	if t, ok := hostview.LookupEnv(env, "TERM"); ok && t != "" {
		return t
	}
	return "xterm-256color"
}
