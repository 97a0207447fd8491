package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/internal/procfs"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

func newCleanupCmd(g *globalOptions) *cobra.Command {
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "cleanup [--all]",
		Short: "Remove containers left behind by a corral that crashed or was killed",
		Long: `cleanup removes the Docker containers corral started (label corral.env=1;
no other container is ever touched) whose corral process is gone: killed
with -9, crashed, or from before a reboot, and any that are not running.
Containers of a corral that still runs on this machine are kept, and so are
those of a corral on another machine unless --all is given. --all removes
every corral container, in use or not.

It also removes the directories a killed corral left in the state
directory: the allowlist proxies' socket directories (net/<pid>-<n>) and
the scratch directories of "corral run" (scratch/run-<pid>-*, and the tool
caches of tool_caches: session beside them), when that pid no longer
exists, and the copies of secrets' credential files (secretfiles/, which
hold stand-ins only) unused for over an hour (each command that binds one
renews it; a bound copy stays readable through its mount). --json lists
containers only. Without a Docker engine that
answers (DOCKER_HOST, or the default socket), the containers are skipped,
which is said (on stderr with --json), and the rest is done.

It also ends bwrap sandboxes whose corral process is gone (a corral killed
with -9 while it started one; every corral does this at its first sandbox
too), and removes the empty memory cgroups (corral-*, older than a minute)
such corral processes left below this process's own cgroup.

Where the settings use the kubernetes backend (backend: kubernetes, or a
route to it), it also deletes the pods, NetworkPolicies and PVCs labelled
corral.io/managed=true in the settings' namespace whose corral is gone, with
the same rules (--all: every one); no other object is touched.

Sessions on disk (cwd, variables, scratch) are not touched: see
"corral sessions prune"; nor are the tool caches: see "corral cache prune".`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			logger := newLogger(g)
			// The Host's own engines, built as for a command; a broken
			// settings file still lets the rest be cleaned up, and is
			// reported after it (the kubernetes part needs the settings).
			h, settingsErr, err := g.openHostAnyway(logger)
			if err != nil {
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			defer h.Close()
			state := h.StateDir()
			dirs := append(egress.SweepStale(filepath.Join(state, "net")), sweepRunScratch(filepath.Join(state, "scratch"))...)
			copies, err := secrets.PruneCopies(filepath.Join(state, "secretfiles"), secrets.CopyLease, time.Now())
			if err != nil {
				// Not fatal: the copies hold stand-ins only.
				fmt.Fprintf(stderr, "corral: secret file copies: %v\n", err)
			}
			dirs = append(dirs, copies...)
			// Each backend's leftovers (registry.Driver.Cleanup), through
			// the Host's own backends; a backend's error is reported
			// after the rest is done.
			// Under broken settings the Host has the defaults: a backend
			// that needs the settings (kubernetes' namespace) gets nil
			// and skips, and settingsErr is reported after the rest.
			var st *config.Settings
			if settingsErr == nil {
				st, _ = h.Settings()
			}
			var items []any
			var lines, skipped []string
			var errs []error
			for _, d := range registry.Drivers() {
				if d.Cleanup == nil {
					continue
				}
				in, err := h.Engine(d.Name)
				if err != nil {
					return &exitError{Code: sandbox.ExitCorralError, Err: err}
				}
				uses := st != nil && registry.Uses(st, d.Name)
				sw, err := d.Cleanup(c.Context(), in, st, uses, all)
				if err != nil {
					errs = append(errs, err)
				}
				if sw == nil {
					continue
				}
				items = append(items, sw.Items...)
				dirs = append(dirs, sw.Removed...)
				if sw.Skipped != "" {
					skipped = append(skipped, sw.Skipped)
				} else {
					lines = append(lines, sw.Lines...)
				}
			}
			if err := errors.Join(append(errs, settingsErr)...); err != nil {
				for _, d := range dirs {
					fmt.Printf("removed %s\n", d)
				}
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			if asJSON {
				for _, s := range skipped {
					fmt.Fprintln(stderr, "corral: "+s)
				}
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(append([]any{}, items...))
			}
			for _, l := range append(lines, skipped...) {
				fmt.Println(l)
			}
			for _, d := range dirs {
				fmt.Printf("removed %s\n", d)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "remove every corral container, including those in use")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was removed and kept as JSON")
	return cmd
}

// sweepRunScratch removes the scratch directories of `corral run`
// processes that are gone (dir/run-<pid>-*, see run.go) and returns them.
func sweepRunScratch(dir string) []string {
	return procfs.SweepDead(dir, func(name string) (int, bool) {
		rest, ok := strings.CutPrefix(name, "run-")
		pidText, _, ok2 := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		return pid, ok && ok2 && err == nil
	})
}
