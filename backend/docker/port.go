package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/sandbox"
)

// PortListeners implements sandbox.PortBackend: the listening sockets of
// the session's container, printed by corral's helper inside it.
func (b *Backend) PortListeners(ctx context.Context, req *sandbox.Request) ([]byte, error) {
	c, _, _, _, err := b.ensure(ctx, req)
	if err != nil {
		return nil, err
	}
	defer b.e.done(c)
	cli, err := b.e.client()
	if err != nil {
		return nil, err
	}
	var out, errOut bytes.Buffer
	code, err := b.e.simpleExec(ctx, cli, c, []string{inside.Path, inside.ModePortList}, &out, &errOut)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("reading the listening sockets of container %s: %s", c.name, bytes.TrimSpace(errOut.Bytes()))
	}
	return out.Bytes(), nil
}

// DialPort implements sandbox.PortBackend: an exec of corral's helper in
// the session's container (inside.ModePortConnect) connects to addr there
// and relays the exec's stdin and stdout. The exec runs as the
// container's user, and in the container's network namespace only.
func (b *Backend) DialPort(ctx context.Context, req *sandbox.Request, addr string) (io.ReadWriteCloser, error) {
	c, _, _, _, err := b.ensure(ctx, req)
	if err != nil {
		return nil, err
	}
	// Held while the connection is made, not while it relays: a
	// forwarded port ends with its container, as before.
	defer b.e.done(c)
	cli, err := b.e.client()
	if err != nil {
		return nil, err
	}
	cr, err := cli.ExecCreate(ctx, c.id, client.ExecCreateOptions{
		User: c.user, AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{inside.Path, inside.ModePortConnect, addr}, Env: []string{"HOME=" + Home},
	})
	if err != nil {
		return nil, b.e.execErr(c, err)
	}
	att, err := cli.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, b.e.execErr(c, err)
	}
	pr, pw := io.Pipe()
	pc := &portConn{att: att, r: pr}
	go func() {
		var errOut bytes.Buffer
		_, err := stdcopy.StdCopy(pw, &errOut, att.Reader)
		if err == nil && errOut.Len() > 0 {
			err = fmt.Errorf("%s", bytes.TrimSpace(errOut.Bytes()))
			b.e.log.Warn("docker.port.connect_failed", "container", c.name, "addr", addr, "error", err)
		}
		pw.CloseWithError(err)
	}()
	return pc, nil
}

// portConn is one relayed connection: reads come from the exec's stdout,
// writes go to its stdin.
type portConn struct {
	att  client.ExecAttachResult
	r    *io.PipeReader
	once sync.Once
}

func (p *portConn) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *portConn) Write(b []byte) (int, error) { return p.att.Conn.Write(b) }

// CloseWrite ends the exec's stdin: the helper then half-closes its
// connection to the server.
func (p *portConn) CloseWrite() error { return p.att.CloseWrite() }

// Close ends the exec's streams; the helper exits.
func (p *portConn) Close() error {
	p.once.Do(func() {
		p.att.Close()
		p.r.Close()
	})
	return nil
}

// The session package finds this through the interface: keep it there.
var _ sandbox.PortBackend = (*Backend)(nil)
