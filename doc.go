// Package corral embeds corral in a Go program: the sandboxed shell,
// sessions and MCP tools that the corral command serves, with the same
// settings.
//
// A program opens one Host per process. The Host reads the settings once
// (again only when the settings file changes), builds each backend once
// and keeps it with its caches, and resolves every command of a session
// from that cached data: the session's route (the routes setting), then
// Options.Override.
//
//	h, err := corral.Open(corral.Options{}) // the person's settings, as the CLI reads them
//	defer h.Close()                         // ends background processes, removes containers
//	s, err := h.Session("tg:1234")          // a *session.Session: cwd and variables carry over
//	r, err := s.Exec(ctx, session.ExecRequest{Command: "make test"})
//
// The entry points:
//
//   - [Open] and [Options]: settings file or fixed settings, overrides,
//     logger, state directory.
//   - [Host.Session]: a named session (package session).
//   - [Host.MCPServer]: corral's MCP tools bound to the Host (package
//     mcpserver), for stdio or HTTP.
//   - [Host.Command]: one command outside any session (corral run).
//   - [Host.Spec], [Host.Backend], [PolicyOf]: the resolver underneath,
//     for programs that build their own front end.
//   - [Host.Close].
//
// Sandboxes re-execute the running program as corral's helpers (the file
// server, the allowlist's forwarder, the docker helpers), so a program that
// embeds corral calls reexec.Init first thing in its main (package reexec),
// as the corral command does.
//
// What a command may do is one type, sandbox.Policy, shared by
// sandbox.Request, session.Spec and the file server; what it may write is
// sandbox.WritableRoots.
package corral
