package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/mcpserver"
	"github.com/corralhq/corral/sandbox"
)

// shutdownGrace is how long serve waits for HTTP responses to finish once
// the calls in flight have ended, before closing the connections.
const shutdownGrace = 3 * time.Second

type serveOptions struct {
	listen         string
	session        string
	sessionTimeout time.Duration
	noToken        bool
}

func newServeCmd(g *globalOptions) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR]",
		Short: "Serve corral's tools to MCP clients over streamable HTTP at /mcp",
		Long: `serve serves the Model Context Protocol over streamable HTTP at
http://ADDR/mcp, to any number of clients, in both the 2026-07-28 revision
(stateless) and the ones before it (sessions with an Mcp-Session-Id).

Sessions: a client names the corral session its calls run in with the
header "Corral-Session: NAME" (a chat bot: one per chat). Without it, each
MCP session of the older revisions gets a session of its own, "mcp:" + its
id, whose background processes end with it; stateless clients share the
--session session. The routes setting picks backend and profile by name.

ADDR defaults to the listen setting, else 127.0.0.1:8765 (loopback only).
Every request must carry "Authorization: Bearer TOKEN". TOKEN is the token
setting (or CORRAL_TOKEN); without one, serve makes a token and keeps it in
<state dir>/serve-token (mode 0600, hidden from every sandbox; the same
token after a restart), whose path it prints. Loopback is not private:
other users of the machine, and commands in network-profile sandboxes,
reach it too. --no-token serves loopback without one, for a client that
cannot send headers, on a machine where no one else can reach it. Listening
beyond loopback requires a token you set. Put a TLS proxy in front of a
server reachable from other machines: the token travels in the clear
otherwise.

Probes and metrics (docs/serve.md): GET /healthz answers 200 while the
process serves; GET /readyz answers 200 when the settings read and every
backend they use can take work (bwrap's probe sandbox, the docker engine,
the kubernetes API server and corral's permissions there), else 503,
naming each check; both without the token, saying why a check fails only
to a request that carries it. GET /metrics serves Prometheus metrics
(tool calls, latency, sessions, denials, the kubernetes backend's API
calls and warm pool, the process) and needs the token.

SIGINT or SIGTERM stop the server: running commands and background
processes end, nothing is left behind.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return o.run(c, g) },
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "", "host:port to listen on (default: the listen setting, else "+config.DefaultListen+")")
	f.StringVar(&o.session, "session", "", `session of stateless clients that send no Corral-Session header (default: "dir:" + the working directory)`)
	f.BoolVar(&o.noToken, "no-token", false, "on loopback, serve without a bearer token (anyone who reaches the port, sandboxes with the network profile included, can run commands)")
	f.DurationVar(&o.sessionTimeout, "session-timeout", 24*time.Hour, "close an MCP session idle for this long, ending its background processes (0: never)")
	return cmd
}

func (o *serveOptions) run(c *cobra.Command, g *globalOptions) error {
	fail := func(err error) error { return &exitError{Code: sandbox.ExitCorralError, Err: err} }
	tuneServerGC(c.Context())
	logger := newLogger(g)
	reg := newServeMetrics()
	h, srv, name, err := newMCPServer(g, o.session, logger, reg)
	if err != nil {
		return fail(err)
	}
	defer h.Close()
	defer srv.Close()
	// The settings the Host read (once, for the server and its calls).
	st, err := h.Settings()
	if err != nil {
		return fail(err)
	}
	addr := o.listen
	if addr == "" {
		addr = st.Listen
	}
	if addr == "" {
		addr = config.DefaultListen
	}
	if err := mcpserver.CheckListen(addr, st.Token); err != nil {
		return fail(err)
	}
	token, tokenNote, tokenHint, err := o.bearerToken(st.Token)
	if err != nil {
		return fail(err)
	}
	if o.sessionTimeout < 0 {
		return fail(fmt.Errorf("--session-timeout: %s is negative (0 means never)", o.sessionTimeout))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fail(fmt.Errorf("listening on %s: %w", addr, err))
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(mcpserver.HTTPOptions{Token: token, TokenHint: tokenHint, SessionTimeout: o.sessionTimeout}))
	mux.Handle("/healthz", getOnly(http.HandlerFunc(healthz)))
	mux.Handle("/readyz", getOnly(readyz(h, token)))
	mux.Handle("/metrics", getOnly(srv.RequireToken(token, tokenHint, metricsHandler(reg))))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	url := fmt.Sprintf("http://%s/mcp", ln.Addr())
	fmt.Fprintf(stderr, "corral: serving MCP at %s (default session %q)\n", url, name)
	fmt.Fprintf(stderr, "corral: %s\n", tokenNote)
	fmt.Fprintf(stderr, "corral: probes at http://%s/healthz and /readyz (no token needed); Prometheus metrics at /metrics (with the token)\n", ln.Addr())
	logger.Info("mcp.server.started", "transport", "http", "url", url, "session", name, "token", token != "")

	select {
	case err = <-served:
		srv.Close()
		return fail(fmt.Errorf("serving %s: %w", url, err))
	case <-ctx.Done():
	}
	logger.Info("mcp.server.stopping", "transport", "http")
	// End the calls in flight first (their commands' process trees are
	// killed), so that their responses complete; then the connections
	// (standalone SSE streams never finish by themselves); the deferred
	// Host.Close ends the background processes.
	srv.Close()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Warn("mcp.server.error", "error", err)
	}
	logger.Info("mcp.server.stopped", "transport", "http")
	return nil
}

// bearerToken picks the token requests must carry: the token setting, else
// none with --no-token (CheckListen has kept that to loopback), else the
// one kept in the state directory. note tells the user how clients present
// it, without the token itself (serve's stderr often ends in a log); hint,
// for a kept token, says where it is, for the 401 answers.
func (o *serveOptions) bearerToken(set string) (token, note, hint string, err error) {
	switch {
	case set != "":
		if o.noToken {
			return "", "", "", errors.New("--no-token, and a token is set (the token setting or CORRAL_TOKEN): drop one of them")
		}
		return set, `clients send "Authorization: Bearer TOKEN", TOKEN being the token setting`, "", nil
	case o.noToken:
		return "", "warning: no bearer token (--no-token): any program that reaches this port, commands in network-profile sandboxes included, can run commands here", "", nil
	}
	dir := config.StateDir()
	if dir == "" {
		return "", "", "", errors.New("no state directory to keep the bearer token in: set HOME or XDG_STATE_HOME, or set a token (CORRAL_TOKEN)")
	}
	path := filepath.Join(dir, mcpserver.TokenFileName)
	token, created, err := mcpserver.LoadOrCreateToken(path)
	if err != nil {
		return "", "", "", err
	}
	made := "kept"
	if created {
		made = "made now, kept"
	}
	return token, fmt.Sprintf(`clients send "Authorization: Bearer $(cat %s)" (the token was %s there; set the token setting to choose your own)`, path, made),
		"corral serve keeps the token in " + path, nil
}
