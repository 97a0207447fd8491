package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/internal/rmtree"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
	"github.com/corralhq/corral/toolcache"
)

func newCacheCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Show or empty the toolchains' caches that sandboxes write",
		Long: `Sandboxes never write the host's own caches (~/.npm, ~/.cache/go-build,
~/go/pkg/mod, ~/.cargo/registry, ~/.cache/pip, ~/.m2, ~/.gradle): npm, yarn,
pnpm, pip, uv, Go, cargo, Gradle and Maven write a cache of corral's own
instead (setting tool_caches): with "shared" (the default) one per user in
the state directory, used by every session, so a package downloaded once
is there for the next session; with "session" one per session, removed with
it. Docker containers keep theirs in their own /tmp.

  corral cache path    the shared cache directory
  corral cache prune   empty it and every session's cache`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "path",
		Short: "Print the shared cache directory",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if config.StateDir() == "" {
				return &exitError{Code: sandbox.ExitCorralError, Err: errors.New("no state directory: set HOME or XDG_STATE_HOME")}
			}
			fmt.Println(toolcache.Dir(config.StateDir()))
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "prune",
		Short: "Empty the shared cache and every session's cache",
		Long: `prune removes everything in the shared cache directory and in each session's
cache (Go's read-only module cache too), keeping the directories. A build
running in a sandbox meanwhile may fail; run it again.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			state := config.StateDir()
			if state == "" {
				return &exitError{Code: sandbox.ExitCorralError, Err: errors.New("no state directory: set HOME or XDG_STATE_HOME")}
			}
			logger := newLogger(g)
			m := session.NewManager(session.Options{StateDir: state, Logger: logger})
			defer m.Close()
			var errs error
			for _, d := range append([]string{toolcache.Dir(state)}, m.CacheDirs()...) {
				freed, err := rmtree.Empty(d)
				logger.Info("cache.pruned", "dir", d, "bytes", freed)
				if err != nil {
					errs = errors.Join(errs, err)
				}
				fmt.Printf("emptied %s (%s)\n", d, sizeText(freed))
			}
			if errs != nil {
				return &exitError{Code: 1, Err: errs}
			}
			return nil
		},
	})
	return cmd
}

// sizeText renders n bytes for a person: "0 B", "12.3 KiB", "1.5 GiB".
func sizeText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
