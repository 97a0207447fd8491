package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/corralhq/corral/approval"
	"github.com/corralhq/corral/audit"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/mcpserver"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

func newMCPCmd(g *globalOptions) *cobra.Command {
	var sessionName string
	cmd := &cobra.Command{
		Use:   "mcp [--session NAME]",
		Short: "Serve corral's tools to an MCP client over stdio",
		Long: `mcp serves the Model Context Protocol on stdin and stdout, for an agent that
starts corral itself (Claude Code, Codex, any MCP client): the tools bash,
bash_output, bash_kill, run_code, read_file, write_file, edit_file and
search_files run in the sandbox of one session. A request larger than 64 MiB
ends the connection (the SDK's frame limit); write_file takes at most 10 MB.

The session is --session NAME, by default "dir:" followed by the working
directory (the cwd setting, else the current directory), so an agent
started again in the same project finds its cwd and variables again. The
routes setting may pick its backend and profile.

Logs go to stderr (--log-level). SIGINT, SIGTERM or the end of stdin stop
the server: running commands and background processes end with it.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runMCP(c.Context(), g, sessionName)
		},
	}
	cmd.Flags().StringVar(&sessionName, "session", "", `session the tools run in (default: "dir:" + the working directory)`)
	return cmd
}

// runMCP serves one session over stdio until the client leaves or a
// signal arrives.
func runMCP(ctx context.Context, g *globalOptions, sessionName string) error {
	logger := newLogger(g)
	srv, m, name, err := newMCPServer(g, sessionName, logger)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	defer closeManager(m, logger) // last: the background processes end
	defer srv.Close()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ss, err := srv.MCPServer(name).Connect(ctx, &mcp.StdioTransport{MaxLineLength: mcpserver.DefaultMaxRequestBytes}, nil)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("mcp over stdio: %w", err)}
	}
	logger.Info("mcp.server.started", "transport", "stdio", "session", name)
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case err = <-ended:
		// The client closed stdin; the SDK cancelled the calls in flight.
	case <-ctx.Done():
		// A signal: end the calls in flight (their commands' process trees
		// are killed) so that closing the session, which waits for them,
		// returns at once.
		logger.Info("mcp.server.stopping", "transport", "stdio")
		srv.Close()
		ss.Close()
		err = <-ended
	}
	logger.Info("mcp.server.stopped", "transport", "stdio")
	if err != nil && ctx.Err() == nil && !errors.Is(err, mcp.ErrConnectionClosed) {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("mcp over stdio: %w", err)}
	}
	return nil
}

// newMCPServer builds the session manager and the MCP server over the
// settings, whose routes choose each session's backend and profile. name
// is the default session: sessionName, else "dir:" + the working
// directory.
func newMCPServer(g *globalOptions, sessionName string, logger *slog.Logger) (*mcpserver.Server, *session.Manager, string, error) {
	st, err := config.Load(g.configPath, os.Environ())
	if err != nil {
		return nil, nil, "", err
	}
	if config.StateDir() == "" {
		return nil, nil, "", errors.New("cannot find a state directory for sessions: set HOME or XDG_STATE_HOME")
	}
	name := sessionName
	if name == "" {
		wd := st.Cwd
		if wd == "" {
			if wd, err = os.Getwd(); err != nil {
				return nil, nil, "", fmt.Errorf("finding the current directory: %w", err)
			}
		}
		if abs, err := filepath.Abs(wd); err == nil {
			wd = abs
		}
		name = mcpserver.DirSessionName(wd)
	}
	if err := mcpserver.ValidSessionName(name); err != nil {
		return nil, nil, "", fmt.Errorf("--session: %w", err)
	}
	resolve := routedResolver(g, logger)
	m := session.NewManager(session.Options{StateDir: config.StateDir(), Resolve: resolve, Logger: logger, Command: g.selfCommand()})
	auditLog, err := audit.Open(audit.Dir(config.StateDir()), int64(st.AuditMaxMB)<<20)
	if err != nil {
		logger.Warn("mcp.audit.unavailable", "error", err)
		auditLog = nil
	}
	srv, err := mcpserver.New(mcpserver.Options{
		Manager: m, DefaultSession: name, Spec: resolve, Logger: logger, Version: version(),
		Audit: auditLog,
		Approval: func(session string) (approval.Policy, error) {
			st, err := config.Load(g.configPath, os.Environ())
			if err != nil {
				return approval.Policy{}, err
			}
			return approval.NewPolicy(st.Approval, st.ApprovalPatterns)
		},
	})
	if err != nil {
		m.Close()
		return nil, nil, "", err
	}
	return srv, m, name, nil
}

// managerCloseLimit bounds how long corral waits, on its way out, for the
// background processes' sandboxes to end.
const managerCloseLimit = 10 * time.Second

// closeManager ends every background process of m, waiting at most
// managerCloseLimit: a sandbox that does not end must not keep corral
// from exiting (its processes are then reported, not waited for).
func closeManager(m *session.Manager, logger *slog.Logger) {
	done := make(chan struct{})
	go func() { m.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(managerCloseLimit):
		logger.Error("mcp.server.stop_timeout", "waited", managerCloseLimit.String(),
			"detail", "background sandboxes did not end in time; some of their processes may remain")
	}
}

// routedResolver returns the resolver of the MCP server's sessions: the
// settings, read afresh for every command, with the first route of the
// routes setting that matches the session's name applied.
func routedResolver(g *globalOptions, logger *slog.Logger) session.Resolver {
	return func(name string) (*session.Spec, error) {
		st, err := config.Load(g.configPath, os.Environ())
		if err != nil {
			return nil, err
		}
		return specFor(g, st.ForSession(name), nil, logger)
	}
}

// version is corral's module version, or "dev" for a build from a
// working tree.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
