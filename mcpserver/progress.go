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
	go func() {
		defer wg.Done()
		start := time.Now()
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
				if err := c.req.Session.NotifyProgress(ctx, p); err != nil {
					c.log.Debug("mcp.progress.failed", "error", err)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
