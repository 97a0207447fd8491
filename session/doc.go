// Package session gives corral's front ends (the CLI, the MCP server,
// library users) a shell's memory across sandboxed commands.
//
// A session has a name (any string, for example "telegram:12345"), a
// backend, a profile, a working directory, a scratch directory and state
// that carries over between its commands: the current directory and the
// exported variables, kept in the session's directory under corral's state
// directory so that separate corral processes share them. Foreground
// commands of one session run one after another (a mutex within a process,
// flock(2) across processes); different sessions run in parallel.
// Background processes each live in their own sandbox, held by the process
// that started them, and are polled for output.
//
//	m := session.NewManager(session.Options{StateDir: dir, Resolve: resolve})
//	defer m.Close()
//	s, _ := m.Open("telegram:12345")
//	s.Exec(ctx, session.ExecRequest{Command: "cd sub && export A=1"})
//	r, _ := s.Exec(ctx, session.ExecRequest{Command: "pwd; echo $A"})
//	// r.Output == ".../sub\n1\n", r.Cwd == ".../sub"
package session
