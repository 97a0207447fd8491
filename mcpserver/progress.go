package mcpserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// progress sends a progress notification every Options.ProgressInterval
// while a command runs, when the client asked for them with a progress
// token (MCP specification 2025-11-25, basic/utilities/progress): progress
// is the seconds elapsed, which only grow, and total the seconds the
// timeout allows. The returned stop ends the notifications and returns
// only when none can follow, so none arrives after the result.
func (c *call) progress(ctx context.Context, what string, timeout time.Duration) (stop func()) {
	token := c.req.Params.GetProgressToken()
	if token == nil || c.req.Session == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	c.progMu.Lock()
	if c.progStart.IsZero() {
		c.progStart = time.Now()
	}
	start := c.progStart
	c.progMu.Unlock()
	go func() {
		defer wg.Done()
		t := time.NewTicker(c.srv.opts.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				el := now.Sub(start)
				p := &mcp.ProgressNotificationParams{
					ProgressToken: token,
					Progress:      el.Seconds(),
					Message:       fmt.Sprintf("%s: running for %s", what, el.Round(time.Second)),
				}
				if timeout > 0 {
					p.Total = timeout.Seconds()
					p.Message += fmt.Sprintf(" of at most %s", human(timeout))
				}
				c.notify(ctx, p)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// notify sends p, its progress raised to the last one sent if need be, so
// that the values only grow.
func (c *call) notify(ctx context.Context, p *mcp.ProgressNotificationParams) {
	c.progMu.Lock()
	defer c.progMu.Unlock()
	if p.Progress < c.progLast {
		p.Progress = c.progLast
	}
	c.progLast = p.Progress
	if err := c.req.Session.NotifyProgress(ctx, p); err != nil {
		c.log.Debug("mcp.progress.failed", "error", err)
	}
}

// note returns a function that sends one progress notification with a
// message (an image pull on the docker backend), or nil when the client
// asked for no progress.
func (c *call) note(ctx context.Context) func(string) {
	token := c.req.Params.GetProgressToken()
	if token == nil || c.req.Session == nil {
		return nil
	}
	c.progMu.Lock()
	if c.progStart.IsZero() {
		c.progStart = time.Now()
	}
	start := c.progStart
	c.progMu.Unlock()
	return func(msg string) {
		c.notify(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: time.Since(start).Seconds(), Message: msg})
	}
}
