package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/mcpserver"
	"github.com/corralhq/corral/metrics"
	"github.com/corralhq/corral/sandbox"
)

func newMCPCmd(g *globalOptions) *cobra.Command {
	var sessionName string
	cmd := &cobra.Command{
		Use:   "mcp [--session NAME]",
		Short: "Serve corral's tools to an MCP client over stdio",
		Long: `mcp serves the Model Context Protocol on stdin and stdout, for an agent that
starts corral itself (Claude Code, Codex, any MCP client): the tools bash,
bash_output, bash_kill, run_code, read_file, write_file, edit_file and
search_files run in the sandbox of one session. Each line of stdin is one
JSON-RPC message: a line that is not one is answered with a JSON-RPC error
(-32700 parse error, -32600 invalid request) and the next line is read. A
line longer than 64 MiB is answered with an error and ends the connection;
write_file takes at most 10 MB.

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
	tuneServerGC(ctx)
	logger := newLogger(g)
	h, srv, name, err := newMCPServer(g, sessionName, logger, nil)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	defer h.Close() // last: the background processes end
	defer srv.Close()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ss, err := srv.MCPServer(name).Connect(ctx, &mcpserver.StdioTransport{Logger: logger}, nil)
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

// newMCPServer opens the Host and its MCP server, whose sessions follow
// the routes setting. name is the default session: sessionName, else
// "dir:" + the working directory. On error nothing is left open.
func newMCPServer(g *globalOptions, sessionName string, logger *slog.Logger, reg *metrics.Registry) (*corral.Host, *mcpserver.Server, string, error) {
	h, err := g.openHostWith(nil, logger, reg)
	if err != nil {
		return nil, nil, "", err
	}
	name := sessionName
	if name == "" {
		if name, err = h.DirSession(); err != nil {
			h.Close()
			return nil, nil, "", err
		}
	}
	if err := mcpserver.ValidSessionName(name); err != nil {
		h.Close()
		return nil, nil, "", fmt.Errorf("--session: %w", err)
	}
	srv, err := h.MCPServer(corral.MCPOptions{DefaultSession: name, Version: version()})
	if err != nil {
		h.Close()
		return nil, nil, "", err
	}
	return h, srv, name, nil
}

// version is corral's module version, or "dev" for a build from a
// working tree.
func version() string { return corral.Version() }
