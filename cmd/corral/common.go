package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/backend/local"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/sandbox"
)

// newLogger returns the stderr logger at the --log-level given.
func newLogger(g *globalOptions) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		lvl = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// newBackend builds the backend called name from the settings.
func newBackend(name string, st *config.Settings, logger *slog.Logger) (sandbox.Backend, error) {
	switch name {
	case "", "bwrap":
		return bwrap.New(bwrap.Options{
			BwrapPath:   st.Bwrap,
			StateDir:    config.StateDir(),
			HiddenDirs:  []string{config.ConfigDir()},
			SecretFiles: []string{st.Path},
			Degrade:     st.DegradedMode != "fail",
			Logger:      logger,
		}), nil
	case "local":
		return local.New(logger), nil
	}
	return nil, fmt.Errorf("unknown backend %q (want bwrap or local)", name)
}

// ensureDir creates d (0700, with parents) and returns it; errors surface
// when d is used.
func ensureDir(d string) string {
	_ = os.MkdirAll(d, 0o700)
	return d
}

// contextWithSignal returns a context cancelled when a signal arrives on sigs.
func contextWithSignal(parent context.Context, sigs <-chan os.Signal) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
