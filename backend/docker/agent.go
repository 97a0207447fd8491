package docker

import (
	"context"
	"io"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/agentclient"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/internal/tail"
)

// agentFor returns c's agent, starting it when there is none (or the last
// one died).
func (e *Engine) agentFor(ctx context.Context, cli *client.Client, c *ctr) (*agentclient.Conn, error) {
	c.agentMu.Lock()
	defer c.agentMu.Unlock()
	if a := c.agent; a != nil && a.Alive() {
		return a, nil
	}
	// --owner marks the agent as this process's, so that othersInside
	// never takes one of ours that is still ending for another corral's.
	cmd := []string{inside.Path, inside.ModeAgent, "--owner", e.self.String()}
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
	stderr := &tail.Buffer{}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, stderr, att.Reader)
		pw.CloseWithError(err)
	}()
	a := agentclient.New(att.Conn, pr, stderr, "docker backend", c.name)
	go func() {
		<-a.Done()
		e.log.Debug("docker.agent.ended", "container", c.name)
	}()
	c.agent = a
	return a, nil
}
