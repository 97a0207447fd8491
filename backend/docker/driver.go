package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

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

// instance is the docker backend in one Host: an Engine per engine
// address setting (docker.host; one for most Hosts) for the process (its
// containers outlive a command; Close removes them), viewed through each
// command's docker.* settings.
type instance struct {
	d registry.Deps

	mu      sync.Mutex
	engines map[string]*Engine // by docker.host
	closed  bool
}

func open(d registry.Deps) registry.Instance {
	return &instance{d: d, engines: map[string]*Engine{}}
}

// engine returns the Engine for docker.host value host, made at its first
// use; after Close, nil.
func (in *instance) engine(host string) *Engine {
	in.mu.Lock()
	defer in.mu.Unlock()
	if e := in.engines[host]; e != nil || in.closed {
		return e
	}
	d := in.d
	e := NewEngine(Options{
		Logger: d.Logger, Egress: d.Egress(), Join: d.JoinContainers, Host: host,
		QuarantineDir: filepath.Join(d.StateDir, "quarantine"),
		TrustDir:      filepath.Join(d.StateDir, "trust"),
		// Shared with the bwrap backend: `corral cleanup` prunes both
		// backends' copies (secrets.PruneCopies).
		SecretFilesDir: filepath.Join(d.StateDir, "secretfiles"),
		// Podman reads the seccomp profile from a file: corral's own,
		// where no sandbox writes.
		ProfileDir: filepath.Join(d.StateDir, "seccomp"),
		// Review mode's read-only overlays on Podman keep their
		// throwaway upper directories there.
		ReviewDir: filepath.Join(d.StateDir, "podman-review"),
		// The bind policy's: corral's own directories are never bound,
		// and files a bind must show as empty get the same empty file as
		// the bwrap backend's masks.
		HiddenDirs: append(append([]string(nil), d.HiddenDirs...), d.StateDir),
		EmptyFile:  filepath.Join(d.StateDir, "empty"),
		FindHelper: func() string { return d.Helper(true) },
	})
	in.engines[host] = e
	return e
}

// Backend implements registry.Instance.
func (in *instance) Backend(st *config.Settings) (sandbox.Backend, error) {
	s := SettingsOf(st)
	e := in.engine(s.Host)
	if e == nil {
		return nil, ErrClosed
	}
	return e.Backend(s), nil
}

// Close implements registry.Instance: it removes the containers the
// engines made.
func (in *instance) Close() error {
	in.mu.Lock()
	in.closed = true
	es := slices.Collect(maps.Values(in.engines))
	in.mu.Unlock()
	var errs []error
	for _, e := range es {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}

// EngineOf returns the Engine behind an Instance of this backend for the
// default docker.host (""), or nil for another backend's or after Close
// (tests reach the engine through it).
func EngineOf(in registry.Instance) *Engine {
	if i, ok := in.(*instance); ok {
		return i.engine("")
	}
	return nil
}

// ready is the docker backend's readiness (registry.Driver.Ready): the
// engine of st's docker.host answers a ping (Engine.Ready).
func ready(ctx context.Context, in registry.Instance, st *config.Settings) error {
	i, ok := in.(*instance)
	if !ok {
		return errors.New("docker: no engine")
	}
	// st is nil when the settings could not be read (registry.Driver's
	// Cleanup): the engine is then found as without docker.host.
	host := ""
	if st != nil {
		host = SettingsOf(st).Host
	}
	e := i.engine(host)
	if e == nil {
		return ErrClosed
	}
	return e.Ready(ctx)
}

// doctor is the docker part of `corral doctor`: whether the engine
// answers, its version, whether docker.image is there, the helper and
// the settings. It always reports (the engine is asked for its version
// only); its problems are failures when docker is the backend in use.
func doctor(ctx context.Context, in registry.Instance, st *config.Settings, use registry.Use) *registry.Report {
	var dd *Diagnosis
	var e *Engine
	if i, ok := in.(*instance); ok {
		e = i.engine(SettingsOf(st).Host)
	}
	if e != nil {
		dd = e.Diagnose(ctx, SettingsOf(st))
	} else {
		// No state directory, so no Host: the engine is not asked.
		msg := "no Host"
		if use.HostErr != nil {
			msg = use.HostErr.Error()
		}
		dd = &Diagnosis{HostChoice: chooseHost(SettingsOf(st).Host), Error: msg, Fix: "give corral a state directory (HOME or XDG_STATE_HOME)"}
	}
	bad := "    "
	if use.Selected {
		bad = "FAIL"
	}
	var lines, fixes []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	if dd.Reachable {
		kind := ""
		if dd.Podman {
			kind = " (Podman)"
		}
		add("ok   docker engine %s%s at %s (from %s; API %s; engine accepts %s and later)", dd.Version, kind, dd.Addr, dd.From, dd.APIVersion, dd.MinAPIVersion)
		if dd.Facts != nil && dd.Facts.Flavor.PerProcess != "" {
			ds := SettingsOf(st)
			if p, err := ds.check(os.Getuid(), os.Getgid()); err == nil {
				dd.Limits = describePerProcess(dd.Facts.Flavor.PerProcess, p.memory, int64(ds.PidsLimit), st.Limits().CPUSeconds)
				add("ok   docker %s", dd.Limits)
			}
		}
		for _, p := range dd.Problems {
			add("%s docker engine: %s", bad, p.What)
			fixes = append(fixes, "fix:   "+p.Fix)
		}
		if dd.ImagePresent {
			add("ok   docker image %s", dd.Image)
		} else {
			add("     docker image %s: not on the engine; pulled on first use", dd.Image)
		}
	} else {
		add("%s docker engine at %s (from %s): not reachable (%s)", bad, dd.Addr, dd.From, dd.Error)
	}
	if dd.HelperError != "" {
		add("%s docker helper: %s", bad, dd.HelperError)
	}
	if dd.SettingsError != "" {
		add("FAIL docker settings: %s", dd.SettingsError)
	}
	if dd.Fix != "" || len(fixes) == 0 {
		fixes = append(fixes, "fix:   "+dd.Fix)
	}
	return &registry.Report{Fields: map[string]any{"docker": dd}, Lines: lines, Ready: dd.Ready(), Fix: fixes}
}

// cleanup is the docker part of `corral cleanup`: the engine's Cleanup,
// or, where no engine answers (most machines that use bwrap alone), a
// note that no container was looked at.
func cleanup(ctx context.Context, in registry.Instance, st *config.Settings, _, all bool) (*registry.Swept, error) {
	i, ok := in.(*instance)
	if !ok {
		return nil, nil
	}
	// st is nil when the settings could not be read (registry.Driver's
	// Cleanup): the engine is then found as without docker.host.
	host := ""
	if st != nil {
		host = SettingsOf(st).Host
	}
	e := i.engine(host)
	if e == nil {
		return nil, ErrClosed
	}
	los, err := e.Cleanup(ctx, all)
	if errors.Is(err, sandbox.ErrUnavailable) {
		e.log.Debug("cleanup.docker.skipped", "error", err)
		h := e.address()
		return &registry.Swept{Skipped: fmt.Sprintf("docker: skipped, no Docker engine answers at %s (from %s); no container was looked at", h.Addr, h.From)}, nil
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
