package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/backend/docker"
	"github.com/corralhq/corral/backend/local"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/egress"
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

// backend builds the backend called name from the settings. The docker
// backend is a view of one engine per process (its containers outlive a
// single command); closeBackends removes them when corral exits.
func (g *globalOptions) backend(name string, st *config.Settings, logger *slog.Logger) (sandbox.Backend, error) {
	switch name {
	case "", config.BackendBwrap:
		return bwrap.New(bwrap.Options{
			BwrapPath:   st.Bwrap,
			StateDir:    config.StateDir(),
			HiddenDirs:  []string{config.ConfigDir()},
			SecretFiles: []string{st.Path},
			RunAs:       st.RunAs,
			Degrade:     st.DegradedMode != "fail",
			Logger:      logger,
			Egress:      g.egressPool(logger),
		}), nil
	case config.BackendDocker:
		pool := g.egressPool(logger)
		g.engineMu.Lock()
		if g.engine == nil {
			g.engine = docker.NewEngine(docker.Options{
				Logger: logger, Egress: pool, Join: g.joinContainers,
				QuarantineDir: filepath.Join(config.StateDir(), "quarantine"),
				// The bind policy's: corral's own directories are never
				// bound, and files a bind must show as empty get the same
				// empty file as the bwrap backend's masks.
				HiddenDirs: []string{config.ConfigDir(), config.StateDir()},
				EmptyFile:  filepath.Join(config.StateDir(), "empty"),
			})
		}
		e := g.engine
		g.engineMu.Unlock()
		return e.Backend(dockerSettings(st)), nil
	case config.BackendLocal:
		return local.New(logger), nil
	}
	return nil, fmt.Errorf("unknown backend %q (want bwrap, docker or local)", name)
}

// dockerSettings converts the docker.* settings.
func dockerSettings(st *config.Settings) docker.Settings {
	d := st.Docker
	return docker.Settings{
		Scope: d.Scope, Image: d.Image, Network: d.Network, Memory: d.Memory, CPUs: d.CPUs,
		PidsLimit: d.PidsLimit, User: d.User, Workdir: d.Workdir, ReadOnly: d.ReadOnly != "false",
		TmpSize: d.TmpSize, Binds: d.Binds, HostWorkspace: d.HostWorkspace,
		MountOptions: d.MountOptions, ExtraRunArgs: d.ExtraRunArgs,
	}
}

// egressPool returns the process's pool of allowlist proxies, making it on
// first use (socket directories under <state dir>/net).
func (g *globalOptions) egressPool(logger *slog.Logger) *egress.Pool {
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	if g.egress == nil {
		g.egress = egress.NewPool(egress.Options{Dir: filepath.Join(config.StateDir(), "net"), Logger: logger})
	}
	return g.egress
}

// closeBackends removes the containers this process started and closes
// its allowlist proxies.
func (g *globalOptions) closeBackends() {
	g.engineMu.Lock()
	e, pool := g.engine, g.egress
	g.engine, g.egress = nil, nil
	g.engineMu.Unlock()
	if e != nil {
		_ = e.Close()
	}
	if pool != nil {
		_ = pool.Close()
	}
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

// selfCommand is the argv that starts corral with this process's settings
// file: the start of a session's stream prefix (corral exec).
func (g *globalOptions) selfCommand() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	argv := []string{exe}
	if g.configPath != "" {
		if abs, err := filepath.Abs(g.configPath); err == nil {
			argv = append(argv, "--config", abs)
		}
	}
	return argv
}
