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

	"github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/backend/kubernetes"
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
			orphans := bwrap.SweepOrphans()
			dirs = append(dirs, bwrap.SweepMemoryCgroups()...)
			e, err := h.DockerEngine()
			if err != nil {
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			los, err := e.Cleanup(c.Context(), all)
			skipped := ""
			if errors.Is(err, sandbox.ErrUnavailable) {
				// Most machines that use bwrap alone have no engine: there
				// are no containers to remove, and the rest is done.
				logger.Debug("cleanup.docker.skipped", "error", err)
				skipped = fmt.Sprintf("docker: skipped, no Docker engine answers at %s (DOCKER_HOST); no container was looked at", dockerHost())
				err = nil
			}
			var klos []kubernetes.Leftover
			if err == nil {
				err = settingsErr
			}
			if err == nil {
				klos, err = cleanupKubernetes(c, h, all)
			}
			if err != nil {
				for _, d := range dirs {
					fmt.Printf("removed %s\n", d)
				}
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			if asJSON {
				if skipped != "" {
					fmt.Fprintln(stderr, "corral: "+skipped)
				}
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				out := []any{}
				for _, lo := range los {
					out = append(out, lo)
				}
				for _, lo := range klos {
					out = append(out, lo)
				}
				return enc.Encode(out)
			}
			for _, lo := range klos {
				if lo.Removed {
					fmt.Printf("removed %s %s/%s (%s)\n", lo.Kind, lo.Namespace, lo.Name, lo.Describe())
				} else {
					fmt.Printf("kept    %s %s/%s (%s): %s\n", lo.Kind, lo.Namespace, lo.Name, lo.Describe(), lo.Kept)
				}
			}
			if skipped != "" {
				fmt.Println(skipped)
			} else {
				removed := 0
				for _, lo := range los {
					if lo.Removed {
						removed++
						fmt.Printf("removed %s (session %s, %s)\n", lo.Name, lo.Key, lo.State)
					} else {
						fmt.Printf("kept    %s (session %s): %s\n", lo.Name, lo.Key, lo.Kept)
					}
				}
				fmt.Printf("%d container(s) removed\n", removed)
			}
			for _, d := range dirs {
				fmt.Printf("removed %s\n", d)
			}
			if orphans > 0 {
				fmt.Printf("ended %d sandbox(es) of corral processes that are gone\n", orphans)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "remove every corral container, including those in use")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was removed and kept as JSON")
	return cmd
}

// cleanupKubernetes runs the kubernetes backend's cleanup (the Host's
// engine) in the namespace of the settings when the settings use that
// backend (backend kubernetes, or a route to it); otherwise no cluster is
// contacted.
func cleanupKubernetes(c *cobra.Command, h *corral.Host, all bool) ([]kubernetes.Leftover, error) {
	st, err := h.Settings()
	if err != nil {
		return nil, err
	}
	uses := st.Backend == config.BackendKubernetes
	for _, r := range st.Routes {
		uses = uses || r.Backend == config.BackendKubernetes
	}
	if !uses {
		return nil, nil
	}
	e, err := h.KubernetesEngine()
	if err != nil {
		return nil, err
	}
	return e.Cleanup(c.Context(), corral.KubernetesSettings(st), all)
}

// dockerHost is the engine address the docker client uses: DOCKER_HOST, or
// the default socket.
func dockerHost() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return client.DefaultDockerHost
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
