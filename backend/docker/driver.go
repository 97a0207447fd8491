package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/moby/client"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/sandbox"
)

// driver is the backend's entry in backend/registry.
var driver = registry.Driver{
	Doc:     "docker (a container per session, see docker.*)",
	Name:    Name,
	Secrets: true,
	Open:    open,
	Doctor:  doctor,
	Cleanup: cleanup,
	Ready:   ready,
	Settings: &registry.Settings{
		Of:       func(st *config.Settings) any { return SettingsOf(st) },
		Defaults: func() any { return DefaultSettings },
	},
}

func init() { registry.Register(&driver) }

// instance is the docker backend in one Host: one Engine for the process
// (its containers outlive a command; Close removes them), viewed through
// each command's docker.* settings.
type instance struct{ e *Engine }

func open(d registry.Deps) registry.Instance {
	return &instance{e: NewEngine(Options{
		Logger: d.Logger, Egress: d.Egress(), Join: d.JoinContainers,
		QuarantineDir: filepath.Join(d.StateDir, "quarantine"),
		TrustDir:      filepath.Join(d.StateDir, "trust"),
		// Shared with the bwrap backend: `corral cleanup` prunes both
		// backends' copies (secrets.PruneCopies).
		SecretFilesDir: filepath.Join(d.StateDir, "secretfiles"),
		// The bind policy's: corral's own directories are never bound,
		// and files a bind must show as empty get the same empty file as
		// the bwrap backend's masks.
		HiddenDirs: append(append([]string(nil), d.HiddenDirs...), d.StateDir),
		EmptyFile:  filepath.Join(d.StateDir, "empty"),
		FindHelper: func() string { return d.Helper(true) },
	})}
}

// Backend implements registry.Instance.
func (in *instance) Backend(st *config.Settings) (sandbox.Backend, error) {
	return in.e.Backend(SettingsOf(st)), nil
}

// Close implements registry.Instance: it removes the containers the
// engine made.
func (in *instance) Close() error { return in.e.Close() }

// EngineOf returns the Engine behind an Instance of this backend, or nil
// for another backend's (tests reach the engine through it).
func EngineOf(in registry.Instance) *Engine {
	if i, ok := in.(*instance); ok {
		return i.e
	}
	return nil
}

// engineHost is the engine address the docker client uses: DOCKER_HOST,
// or the default socket.
func engineHost() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return client.DefaultDockerHost
}

// ready is the docker backend's readiness (registry.Driver.Ready): the
// engine answers a ping (Engine.Ready).
func ready(ctx context.Context, in registry.Instance, _ *config.Settings) error {
	i, ok := in.(*instance)
	if !ok {
		return errors.New("docker: no engine")
	}
	return i.e.Ready(ctx)
}

// doctor is the docker part of `corral doctor`: whether the engine
// answers, its version, whether docker.image is there, the helper and
// the settings. It always reports (the engine is asked for its version
// only); its problems are failures when docker is the backend in use.
func doctor(ctx context.Context, in registry.Instance, st *config.Settings, use registry.Use) *registry.Report {
	var dd *Diagnosis
	if i, ok := in.(*instance); ok {
		dd = i.e.Diagnose(ctx, SettingsOf(st))
	} else {
		// No state directory, so no Host: the engine is not asked.
		msg := "no Host"
		if use.HostErr != nil {
			msg = use.HostErr.Error()
		}
		dd = &Diagnosis{Host: engineHost(), Error: msg, Fix: "give corral a state directory (HOME or XDG_STATE_HOME)"}
	}
	bad := "    "
	if use.Selected {
		bad = "FAIL"
	}
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	if dd.Reachable {
		add("ok   docker engine %s at %s (API %s; engine accepts %s and later)", dd.Version, dd.Host, dd.APIVersion, dd.MinAPIVersion)
		if dd.ImagePresent {
			add("ok   docker image %s", dd.Image)
		} else {
			add("     docker image %s: not on the engine; pulled on first use", dd.Image)
		}
	} else {
		add("%s docker engine at %s: not reachable (%s)", bad, dd.Host, dd.Error)
	}
	if dd.HelperError != "" {
		add("%s docker helper: %s", bad, dd.HelperError)
	}
	if dd.SettingsError != "" {
		add("FAIL docker settings: %s", dd.SettingsError)
	}
	return &registry.Report{Fields: map[string]any{"docker": dd}, Lines: lines, Ready: dd.Ready(), Fix: []string{"fix:   " + dd.Fix}}
}

// cleanup is the docker part of `corral cleanup`: the engine's Cleanup,
// or, where no engine answers (most machines that use bwrap alone), a
// note that no container was looked at.
func cleanup(ctx context.Context, in registry.Instance, _ *config.Settings, _, all bool) (*registry.Swept, error) {
	i, ok := in.(*instance)
	if !ok {
		return nil, nil
	}
	los, err := i.e.Cleanup(ctx, all)
	if errors.Is(err, sandbox.ErrUnavailable) {
		i.e.log.Debug("cleanup.docker.skipped", "error", err)
		return &registry.Swept{Skipped: fmt.Sprintf("docker: skipped, no Docker engine answers at %s (DOCKER_HOST); no container was looked at", engineHost())}, nil
	}
	if err != nil {
		return nil, err
	}
	s := &registry.Swept{}
	removed := 0
	for _, lo := range los {
		s.Items = append(s.Items, lo)
		if lo.Removed {
			removed++
			s.Lines = append(s.Lines, fmt.Sprintf("removed %s (session %s, %s)", lo.Name, lo.Key, lo.State))
		} else {
			s.Lines = append(s.Lines, fmt.Sprintf("kept    %s (session %s): %s", lo.Name, lo.Key, lo.Kept))
		}
	}
	s.Lines = append(s.Lines, fmt.Sprintf("%d container(s) removed", removed))
	return s, nil
}
