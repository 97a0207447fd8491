package mcpserver

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BashKillInput are the arguments of the bash_kill tool.
type BashKillInput struct {
	// ID names the background process to end.
	ID string `json:"id" jsonschema:"id of the background process to stop, as bash returned it (bg-1)"`
}

// BashKillResult is what bash_kill returns once the process and every
// process it started are gone.
type BashKillResult struct {
	// ID names the background process.
	ID string `json:"id" jsonschema:"the background process"`
	// WasRunning is false when it had already ended by itself.
	WasRunning bool `json:"was_running" jsonschema:"it was still running and was killed; false when it had already ended"`
	// ExitCode is its exit status (137 when killed: SIGKILL).
	ExitCode int `json:"exit_code" jsonschema:"its exit status (128+N for signal N)"`
}

func (s *Server) bashKillTool() Tool {
	return newTool(s, &mcp.Tool{
		Name:  "bash_kill",
		Title: "Stop a background command",
		Description: "Stop a background process started by bash with background: true, and every process it started; returns once they are gone " +
			"(a port it held is free again). Its output stays readable with bash_output.",
		Annotations: &mcp.ToolAnnotations{Title: "bash_kill", DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, nil, s.bashKill)
}

func (s *Server) bashKill(_ context.Context, c *call, in BashKillInput) (*mcp.CallToolResult, BashKillResult, error) {
	var zero BashKillResult
	if err := checkID(in.ID); err != nil {
		return nil, zero, err
	}
	was := false
	for _, p := range c.sess.List() {
		if p.ID == in.ID {
			was = p.Running
		}
	}
	if err := c.sess.Kill(in.ID); err != nil {
		return nil, zero, unknownProcess(c.sess, in.ID, err)
	}
	out := BashKillResult{ID: in.ID, WasRunning: was}
	for _, p := range c.sess.List() {
		if p.ID == in.ID {
			out.ExitCode = p.ExitCode
		}
	}
	text := fmt.Sprintf("%s and every process it started are gone (exit code %d). Its output stays readable with bash_output.", in.ID, out.ExitCode)
	if !was {
		text = fmt.Sprintf("%s had already ended by itself (exit code %d); nothing was killed. Its output stays readable with bash_output.", in.ID, out.ExitCode)
	}
	return textResult(text), out, nil
}
