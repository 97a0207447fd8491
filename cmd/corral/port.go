package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/sandbox"
)

type portOptions struct {
	session  string
	hostPort int
}

func newPortCmd(g *globalOptions) *cobra.Command {
	o := &portOptions{}
	cmd := &cobra.Command{
		Use:   "port --session NAME PORT [--host-port N]",
		Short: "Reach a server in a session's sandbox from the host (127.0.0.1:N)",
		Long: `port forwards 127.0.0.1:N on the host (a free port unless --host-port is
given) to TCP PORT inside the sandbox of the session's running background
process that listens on it: a dev server started by the MCP bash tool with
background: true (npm run dev, python3 -m http.server) under the
workspace or allowlist profile, whose network namespace is its own (on
docker: the session's container). It prints the URL and forwards until the
session ends, that process exits (on docker: nothing listens on PORT any
more), or ^C. Only this host's loopback is opened; nothing inside the
sandbox can open a host port.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error { return o.run(c, g, args[0]) },
	}
	cmd.Flags().StringVar(&o.session, "session", "", "session whose background process listens (required)")
	cmd.Flags().IntVar(&o.hostPort, "host-port", 0, "port on the host's 127.0.0.1 (default: a free one)")
	_ = cmd.MarkFlagRequired("session")
	return cmd
}

func (o *portOptions) run(c *cobra.Command, g *globalOptions, arg string) error {
	port, err := strconv.Atoi(arg)
	if err != nil || port < 1 || port > 65535 {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("port %q is not a number from 1 to 65535", arg)}
	}
	infos, err := stateManager(g).List()
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	found := false
	for _, in := range infos {
		found = found || in.Name == o.session
	}
	if !found {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("no session %q (corral sessions list shows them)", o.session)}
	}
	// The Host resolves the session's backend; on docker it joins the
	// container of the corral mcp or serve that holds the session.
	g.joinContainers = true
	h, err := g.openHost(nil, newLogger(g))
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	defer h.Close()
	s, err := h.Session(o.session)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	fw, t, err := s.ForwardPort(port, o.hostPort)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	defer fw.Close()
	fmt.Fprintln(c.OutOrStdout(), fw.URL())
	fmt.Fprintf(c.ErrOrStderr(), "corral: forwarding %s to port %d of %s (%s) in session %q; ^C ends it\n", fw.Addr(), port, t.ID, clip(oneLine(t.Command), 80), o.session)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	select {
	case <-fw.Done():
		fmt.Fprintf(c.ErrOrStderr(), "corral: the forward ended: %s\n", fw.Reason())
	case <-sigs:
	case <-c.Context().Done():
	}
	return nil
}
