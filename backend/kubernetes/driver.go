package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/transfer"
)

// driver is the backend's entry in backend/registry.
var driver = registry.Driver{
	Doc:       "kubernetes (a pod per session, see kubernetes.*; preview)",
	Name:      Name,
	Secrets:   true,
	Open:      open,
	Doctor:    doctor,
	Cleanup:   cleanup,
	Workspace: workspace,
	Ready:     ready,
	Settings: &registry.Settings{
		Of:       func(st *config.Settings) any { return SettingsOf(st) },
		Defaults: func() any { return DefaultSettings },
	},
}

func init() { registry.Register(&driver) }

// instance is the kubernetes backend in one Host: one Engine for the
// process (its pods, through each command's kubernetes.* settings); it
// contacts no cluster until asked.
type instance struct{ e *Engine }

func open(d registry.Deps) registry.Instance {
	return &instance{e: NewEngine(Options{Logger: d.Logger, Egress: d.Egress(), OneShot: d.OneShot,
		SecretFilesDir: filepath.Join(d.StateDir, "secretfiles"), Metrics: d.Metrics,
		FindHelper: func() string { return d.Helper(true) }})}
}

// Backend implements registry.Instance.
func (in *instance) Backend(st *config.Settings) (sandbox.Backend, error) {
	return in.e.Backend(SettingsOf(st)), nil
}

// Close implements registry.Instance: it deletes the pods the engine
// made.
func (in *instance) Close() error { return in.e.Close() }

// EngineOf returns the Engine behind an Instance of this backend, or nil
// for another backend's (tests reach the engine through it).
func EngineOf(in registry.Instance) *Engine {
	if i, ok := in.(*instance); ok {
		return i.e
	}
	return nil
}

// Workspace returns the workspace of the pod t as a registry.Remote
// (where `corral cp` and `corral sync` copy: CopyIn and CopyOut).
func (e *Engine) Workspace(t *PodTarget) registry.Remote { return podWorkspace{e: e, t: t} }

// podWorkspace is a session's pod as a registry.Remote.
type podWorkspace struct {
	e *Engine
	t *PodTarget
}

// Root implements registry.Remote.
func (w podWorkspace) Root() string { return w.t.Workspace }

// CopyIn implements registry.Remote (Engine.CopyIn).
func (w podWorkspace) CopyIn(ctx context.Context, f *os.File, o transfer.Options) (transfer.Stats, error) {
	return w.e.CopyIn(ctx, w.t, f, o)
}

// CopyOut implements registry.Remote (Engine.CopyOut).
func (w podWorkspace) CopyOut(ctx context.Context, src, top string, f *os.File, limit int64) error {
	return w.e.CopyOut(ctx, w.t, src, top, f, limit)
}

// workspace returns the session's live pod (SessionPod) as where `corral
// cp` and `corral sync` copy.
func workspace(ctx context.Context, in registry.Instance, st *config.Settings, session string) (registry.Remote, error) {
	i, ok := in.(*instance)
	if !ok {
		return nil, fmt.Errorf("kubernetes: no engine")
	}
	t, err := i.e.SessionPod(ctx, SettingsOf(st), session)
	if err != nil {
		return nil, err
	}
	return i.e.Workspace(t), nil
}

// doctor is the kubernetes part of `corral doctor`, when the settings use
// it (the backend setting, a route, or --backend): the cluster's report,
// whose problems are failures when kubernetes is the backend in use.
// Otherwise it says nothing and no cluster is contacted.
func doctor(ctx context.Context, in registry.Instance, st *config.Settings, use registry.Use) *registry.Report {
	if !use.Routed {
		return nil
	}
	var d *Diagnosis
	if i, ok := in.(*instance); ok {
		d = i.e.Diagnose(ctx, SettingsOf(st), true)
	} else {
		msg := "no Host"
		if use.HostErr != nil {
			msg = use.HostErr.Error()
		}
		d = &Diagnosis{Error: msg, Problems: []string{msg}}
	}
	r := &registry.Report{Fields: map[string]any{"kubernetes": d}, Lines: diagnosisLines(d, use.Selected), Ready: d.Ready()}
	for _, p := range d.Problems {
		r.Fix = append(r.Fix, "fix:   "+p)
	}
	return r
}

// diagnosisLines are the cluster's lines of doctor's text report; fatal
// marks problems FAIL (kubernetes is the backend in use), else they are
// noted.
func diagnosisLines(d *Diagnosis, fatal bool) []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	bad := "    "
	if fatal {
		bad = "FAIL"
	}
	if d.SettingsError != "" {
		add("%s kubernetes settings: %s", bad, d.SettingsError)
	}
	if !d.Reachable {
		add("%s kubernetes API server %s: not reachable (%s)", bad, d.Server, d.Error)
		return out
	}
	add("ok   kubernetes API server %s (%s)", d.Server, d.Version)
	switch d.NamespaceExists {
	case "yes":
		add("ok   kubernetes namespace %s exists", d.Namespace)
	case "no":
		add("%s kubernetes namespace %s does not exist", bad, d.Namespace)
	default:
		add("     kubernetes namespace %s: existence unknown (not readable with these credentials)", d.Namespace)
	}
	for _, a := range d.Access {
		mark := "ok  "
		if !a.Allowed {
			mark = bad
		}
		add("%s kubernetes may %-38s (%s)", mark, a.String()+" in "+d.Namespace, a.Why)
	}
	if d.RuntimeClassesError != "" {
		add("     kubernetes runtime classes: not listable (%s)", d.RuntimeClassesError)
	} else {
		classes := "none"
		if len(d.RuntimeClasses) > 0 {
			classes = strings.Join(d.RuntimeClasses, ", ")
		}
		add("     kubernetes runtime classes: %s", classes)
	}
	if d.RuntimeClass != "" {
		mark := "ok  "
		if d.RuntimeClassesError == "" && !slices.Contains(d.RuntimeClasses, d.RuntimeClass) {
			mark = bad
		}
		add("%s kubernetes.runtime_class %s", mark, d.RuntimeClass)
	} else {
		add("     kubernetes.runtime_class: not set (the cluster's default runtime)")
	}
	add("     kubernetes seccomp: %s", d.Seccomp)
	add("     kubernetes pod pids limit: %s", d.PidsLimit)
	mark := "ok  "
	if d.NetworkPolicy != PolicyEnforced {
		mark = "warn"
	}
	add("%s kubernetes NetworkPolicy: %s (%s)", mark, d.NetworkPolicy, d.PolicyDetail)
	for _, w := range d.Warnings {
		add("warn kubernetes: %s", w)
	}
	return out
}

// cleanup is the kubernetes part of `corral cleanup`, where the settings
// use the backend (backend kubernetes, or a route to it): the engine's
// Cleanup in their namespace. Otherwise no cluster is contacted.
func cleanup(ctx context.Context, in registry.Instance, st *config.Settings, uses, all bool) (*registry.Swept, error) {
	i, ok := in.(*instance)
	if !ok || st == nil || !uses {
		return nil, nil
	}
	los, err := i.e.Cleanup(ctx, SettingsOf(st), all)
	if err != nil {
		return nil, err
	}
	s := &registry.Swept{}
	for _, lo := range los {
		s.Items = append(s.Items, lo)
		if lo.Removed {
			s.Lines = append(s.Lines, fmt.Sprintf("removed %s %s/%s (%s)", lo.Kind, lo.Namespace, lo.Name, lo.Describe()))
		} else {
			s.Lines = append(s.Lines, fmt.Sprintf("kept    %s %s/%s (%s): %s", lo.Kind, lo.Namespace, lo.Name, lo.Describe(), lo.Kept))
		}
	}
	return s, nil
}
