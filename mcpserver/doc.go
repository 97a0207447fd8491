// Package mcpserver is corral's Model Context Protocol server: it offers an
// agent corral's tools (bash, bash_output, bash_kill, run_code, and the
// file tools) over any MCP transport, each call running in a corral session
// (package session), so in the sandbox that session's settings describe.
//
// It is built on the official Go SDK (github.com/modelcontextprotocol/go-sdk).
// Tools are typed: their input and output schemas are inferred from the Go
// structs of each tool_*.go file, the SDK validates arguments against them,
// and every failure reaches the model as a tool result with isError set and
// a message that says what to do (MCP specification 2025-11-25,
// server/tools, "Error Handling"), never as a protocol error.
//
// Sessions: every tool call names a corral session (see
// [Options.SessionName] and [DefaultSessionName]). Over stdio that is one
// fixed session; over HTTP ([Server.HTTPHandler]) it is the session the
// client names in the Corral-Session header ([SessionHeader]), else one per
// MCP session id ("mcp:" + id), else the default.
//
//	srv, _ := mcpserver.New(mcpserver.Options{Manager: m, DefaultSession: "dir:/src/p", Spec: resolve})
//	defer srv.Close()
//	err := srv.MCPServer("dir:/src/p").Run(ctx, &mcpserver.StdioTransport{})
//
// Over stdio, use [StdioTransport] rather than the SDK's: a line that is
// not a JSON-RPC message is answered with a JSON-RPC error and the
// connection goes on.
//
// Log events (log/slog, stable names): mcp.tool.called, mcp.tool.done,
// mcp.tool.rejected, mcp.session.opened, mcp.session.closed,
// mcp.progress.failed, mcp.http.unauthorized, mcp.http.bad_session,
// mcp.stdio.bad_message.
package mcpserver
