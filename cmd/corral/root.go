package main

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/sandbox"
)

// globalOptions are the flags every verb shares.
type globalOptions struct {
	configPath string
	logLevel   string

	// joinContainers lets this process's docker commands join another
	// corral's live container of the same session (corral exec).
	joinContainers bool
}

func newRootCmd(g *globalOptions) *cobra.Command {
	root := &cobra.Command{
		Use:   "corral",
		Short: "Run an AI agent's commands, code and file edits inside a sandbox",
		Long: `corral runs commands inside a sandbox (bubblewrap by default) that keeps the
host read-only, hides credentials and limits resources.

Exit status: the command's own status (126 when it could not be executed,
127 when it was not found, as a shell says), 128+N when it died of signal N,
124 when it timed out (its whole sandbox was ended), and 125 when corral
itself failed (bad flags or settings, sandbox unavailable).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       corral.Version(),
		// A --session given empty is a mistake (an unset variable in a
		// script), never "no session": run would not join the words.
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			if f := c.Flags().Lookup("session"); f != nil && f.Changed && strings.TrimSpace(f.Value.String()) == "" {
				return &exitError{Code: sandbox.ExitCorralError, Err: errors.New("--session: a session needs a name (leave the flag out for none)")}
			}
			return nil
		},
	}
	root.SetVersionTemplate(versionLine() + "\n")
	root.PersistentFlags().StringVar(&g.configPath, "config", "", "settings file (default: $XDG_CONFIG_HOME/corral/config.yaml; env CORRAL_CONFIG)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "warn", "log level: debug, info, warn or error (logs go to stderr)")
	root.AddCommand(
		newRunCmd(g),
		newExecCmd(g),
		newCleanupCmd(g),
		newCacheCmd(g),
		newDoctorCmd(g),
		newConfigCmd(g),
		newSessionsCmd(g),
		newShellCmd(g),
		newLogCmd(g),
		newMCPCmd(g),
		newServeCmd(g),
		newPortCmd(g),
		newDiffCmd(g),
		newApplyCmd(g),
		newDiscardCmd(g),
		newCpCmd(g),
		newSyncCmd(g),
		newVersionCmd(),
	)
	return root
}
