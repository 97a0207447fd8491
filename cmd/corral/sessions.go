package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/internal/termsafe"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// stateManager returns a session manager over the sessions on disk, for
// listing and removing them: it runs no command, so it needs no settings
// (a broken settings file does not keep a person from cleaning up).
func stateManager(g *globalOptions) *session.Manager {
	return session.NewManager(session.Options{StateDir: config.StateDir(), Logger: newLogger(g)})
}

func newSessionsCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List, show and remove sessions (their cwd, variables and scratch directory)",
		Long: `A session keeps its current directory, exported variables and scratch
directory between commands (corral run --session NAME, the MCP server).
It exists once a command ran in it, or while one runs; "corral sessions"
(or "corral sessions list") lists those, most recently used first.
Sessions unused for a day are removed by "corral sessions prune".`,
		Args: cobra.NoArgs,
	}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List sessions that ran a command, most recently used first (the default)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			m := stateManager(g)
			infos, err := m.List()
			if err != nil {
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(infos)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tLAST USED\tBACKEND\tPROFILE\tCWD")
			for _, in := range infos {
				busy := ""
				switch {
				case in.Busy && in.Background > 0:
					busy = fmt.Sprintf(" (running, %d in background)", in.Background)
				case in.Busy:
					busy = " (running)"
				case in.Background > 0:
					busy = fmt.Sprintf(" (%d in background)", in.Background)
				}
				fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\n", display(in.Name, 60), busy, in.LastUsed.Format(time.DateTime), in.Backend, in.Profile, display(in.Cwd, 200))
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	// Bare "corral sessions" lists, as docker ps does.
	cmd.RunE = list.RunE
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a session: directories, cwd and exported variables",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m := stateManager(g)
			infos, err := m.List()
			if err != nil {
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			for _, in := range infos {
				if in.Name != args[0] {
					continue
				}
				var st session.State
				b, _ := os.ReadFile(filepath.Join(in.Dir, "state.json"))
				_ = json.Unmarshal(b, &st)
				out := struct {
					session.Info
					Scratch string   `json:"scratch"`
					Env     []string `json:"env"`
				}{in, filepath.Join(in.Dir, "scratch"), st.Env}
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("no session %q (corral sessions list shows them)", args[0])}
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove sessions: state, scratch directory and logs",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			// Every name is tried: one that fails is said and does not
			// keep the others.
			m := stateManager(g)
			failed := 0
			for _, name := range args {
				if err := m.Remove(name); err != nil {
					fmt.Fprintf(stderr, "corral: session %s: %v\n", termsafe.Path(name), err)
					failed++
				}
			}
			if failed > 0 {
				return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("%d of %d sessions not removed", failed, len(args))}
			}
			return nil
		},
	}
	var maxIdle time.Duration
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove sessions unused for a day (--older-than to choose)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			m := session.NewManager(session.Options{StateDir: config.StateDir(), MaxIdle: maxIdle, Logger: newLogger(g)})
			gone, err := m.Prune()
			if err != nil {
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			for _, n := range gone {
				fmt.Println(n)
			}
			return nil
		},
	}
	prune.Flags().DurationVar(&maxIdle, "older-than", 24*time.Hour, "remove sessions unused for longer than this")
	cmd.AddCommand(list, show, rm, prune)
	return cmd
}

// display makes s safe for a terminal and a table cell: when it holds a
// control character (a tab and a newline too), a bidi control or invalid
// UTF-8 (termsafe.Text), it is quoted (Go quoting escapes them all), and
// it is cut to max characters.
func display(s string, max int) string {
	if termsafe.Text(s) != s || strings.ContainsAny(s, "\t\n") {
		s = strconv.Quote(s)
	}
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "..."
	}
	return s
}
