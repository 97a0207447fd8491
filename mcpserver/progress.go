package mcpserver

import (
	"context"
	"fmt"
	"math"
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

// notify sends p, its progress raised just above the last one sent if need
// be, so that the values strictly grow, as the protocol requires ("The
// progress value MUST increase with each notification", MCP
// specification, basic/utilities/progress): a note and a tick, or two
// ticks of a loaded machine, can carry the same or an older time.
func (c *call) notify(ctx context.Context, p *mcp.ProgressNotificationParams) {
	c.progMu.Lock()
	defer c.progMu.Unlock()
	p.Progress = nextProgress(c.progLast, c.progSent, p.Progress)
	c.progSent = true
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

// nextProgress is the progress to send for p after last (when sent): p,
// or the next float64 above last when p does not exceed it.
func nextProgress(last float64, sent bool, p float64) float64 {
	if sent && p <= last {
		return math.Nextafter(last, math.Inf(1))
	}
	return p
}
