package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/approval"
	"github.com/corralhq/corral/audit"
)

// approve applies the approval policy to a shell command line before it
// runs (package approval): the hard floor is refused whatever happens;
// under approval: ask a matching pattern is put to the person. The question
// goes out as an input request (multi round-trip requests, SEP-2322): the
// handler returns a result that asks, and the client calls again with the
// answer; for clients of revisions before 2026-07-28 the SDK turns it into
// an elicitation/create request. A client that cannot ask (no elicitation
// capability) gets a refusal. When approve returns a non-nil result, the
// tool returns it as is. The sandbox stays the boundary either way.
func (s *Server) approve(ctx context.Context, c *call, command string) (*mcp.CallToolResult, error) {
	sp, err := c.spec()
	if err != nil {
		// Nothing can run without the session's settings: the error is
		// the one the command would have met.
		return nil, err
	}
	if sp == nil || sp.Approval == nil {
		return nil, nil
	}
	name := c.sess.Name()
	d := approval.Check(command, *sp.Approval)
	switch d.Verdict {
	case approval.Allow:
		return nil, nil
	case approval.Deny:
		c.log.Warn("mcp.approval.denied", "rule", d.Rule)
		return nil, &ToolError{Msg: "refused, and never run: " + d.Reason + " This is corral's hard floor; no setting or approval allows it.", Err: errRefused}
	}
	if p := c.req.Params; p != nil {
		if r, ok := p.InputResponses[approvalInput].(*mcp.ElicitResult); ok {
			if yes, _ := r.Content["approve"].(bool); r.Action == "accept" && yes {
				c.log.Info("mcp.approval.granted", "rule", d.Rule)
				return nil, nil
			}
			c.log.Info("mcp.approval.declined", "rule", d.Rule, "action", r.Action)
			return nil, &ToolError{Msg: "not run: the person declined it (" + d.Reason + "). Do not try it another way; ask them what they want instead.", Err: errRefused}
		}
	}
	ss := c.req.Session
	if ss == nil || ss.InitializeParams() == nil || ss.InitializeParams().Capabilities == nil || ss.InitializeParams().Capabilities.Elicitation == nil {
		c.log.Info("mcp.approval.refused", "rule", d.Rule, "reason", "client cannot ask")
		return nil, &ToolError{Msg: "not run: " + d.Reason + " It needs a person's approval (approval: ask), and this MCP client cannot ask one (no elicitation support). " +
			"Do it another way, or ask the person to run it or to set `corral config set approval off`.", Err: errRefused}
	}
	c.log.Info("mcp.approval.asked", "rule", d.Rule)
	return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{approvalInput: &mcp.ElicitParams{
		Message: fmt.Sprintf("An agent asks to run, in corral's sandbox (session %s):\n\n%s\n\n%s Approve?", name, command, d.Reason),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approve": map[string]any{"type": "boolean", "title": "Run this command", "default": false},
			},
			"required": []string{"approve"},
		},
	}}}, nil
}

// approvalInput names the approval question among a call's input requests.
const approvalInput = "corral_approval"

// record writes one audit line for a tool call (package audit).
func (s *Server) record(session, tool string, req *mcp.CallToolRequest, exit *int, d time.Duration, err error, denials ...string) {
	if s.opts.Audit == nil {
		return
	}
	var args any
	if req != nil && req.Params != nil {
		args = json.RawMessage(req.Params.Arguments)
	}
	e := audit.Entry{Session: session, Tool: tool, Arguments: args, ExitCode: exit, DurationMS: d.Milliseconds(), Denials: denials}
	if err != nil {
		e.Error = err.Error()
	}
	if rerr := s.opts.Audit.Record(e); rerr != nil {
		s.log.Warn("mcp.audit.failed", "error", rerr)
	}
}
