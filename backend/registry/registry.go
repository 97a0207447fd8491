// Package registry is the one table of corral's backends. Each backend
// package registers a Driver from its init function, as database/sql
// drivers and containerd's plugins do; corral.Host builds a backend,
// `corral doctor` diagnoses it and `corral cleanup` sweeps its leftovers
// by looking the driver up here, never by naming the backend. Which
// backends a program has is one import list (corral's backends.go), so
// that a new backend touches its own folder and that list alone
// (corral's TestBackendBoundary holds it).
//
// It is a package of its own, not part of package sandbox: sandbox is the
// contract a backend implements and reads no settings, while a driver is
// built from corral's settings (package config) and the Host's shared
// machinery (the allowlist proxies' pool, package egress), which the
// contract must not link.
package registry

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/metrics"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/transfer"
)

// Deps are what corral.Host shares with every backend it builds: the
// same for each, so that a backend built for doctor or cleanup has the
// options commands run with.
type Deps struct {
	// Logger receives the backend's structured events; never nil.
	Logger *slog.Logger
	// StateDir is corral's state directory (absolute); a backend keeps
	// what it must find again under it (bwrap's memory, docker's
	// quarantine and trust, the secrets' file copies in secretfiles/).
	StateDir string
	// HiddenDirs are corral's directories besides StateDir that no
	// sandbox may see or bind: its settings directory and the helper's
	// cache.
	HiddenDirs []string
	// Egress returns the process's pool of allowlist proxies, made at its
	// first call; backends share it.
	Egress func() *egress.Pool
	// Helper returns the helper executable handed to sandboxes (static:
	// one a container or pod can run), or "" for corral's own.
	Helper func(static bool) string
	// PinFiles are files of corral (a helper beside its executable) a
	// sandbox that shows the host must see read-only wherever they are.
	PinFiles []string
	// SweepEvery bounds how often a one-shot process scans for orphaned
	// sandboxes (bwrap.Options.SweepEvery).
	SweepEvery time.Duration
	// OneShot says the process runs one command and exits (a warm pool is
	// claimed from but not refilled).
	OneShot bool
	// JoinContainers lets a backend run commands in another corral
	// process's live sandbox of the same session (corral exec).
	JoinContainers bool
	// Metrics, when set, is where a backend adds the families it counts
	// (the kubernetes backend's API calls and warm pool: docs/serve.md,
	// "Metrics"); nil counts nothing.
	Metrics *metrics.Registry
}

// Instance is a backend in one Host: built once from Deps, kept for the
// life of the Host, and asked for a sandbox.Backend per command's
// settings (an engine with its containers or pods, a cache of bwrap
// backends by path). Close ends what it holds (containers, pods).
type Instance interface {
	// Backend returns the backend that runs a command under st (st's
	// section of this backend's settings). Errors: settings this backend
	// cannot run with.
	Backend(st *config.Settings) (sandbox.Backend, error)
	// Close releases what the instance holds; it is called once, by
	// Host.Close.
	Close() error
}

// Use says how the settings use a backend, for its diagnosis.
type Use struct {
	// Selected is set when the backend setting names it (or doctor's
	// --backend): its report decides whether corral is ready.
	Selected bool
	// Routed is set when Selected is, or a route names it.
	Routed bool
	// HostErr, when set, says why there is no Host (no state directory):
	// the Instance is nil and a backend that needs one says so.
	HostErr error
}

// Report is one backend's part of `corral doctor`.
type Report struct {
	// Fields are the members of doctor's JSON report the backend adds
	// (bwrap: "bwrap", "limits", "memory", ...), each a JSON-encodable
	// value; a name must not be one of doctor's own.
	Fields map[string]any
	// Lines are its lines of doctor's text report, in order, each
	// starting with a four-character mark ("ok  ", "FAIL", "warn" or
	// blanks) and a space.
	Lines []string
	// Ready says whether the backend can run sandboxes here (only the
	// selected backend's counts).
	Ready bool
	// Fix, when the backend is selected and not Ready, is printed before
	// "not ready": lines such as "fix:   ..." (and "cause: ...").
	Fix []string
}

// Swept is what one backend's cleanup found (`corral cleanup`).
type Swept struct {
	// Items are the objects it looked at (containers, pods), each a
	// JSON-encodable value with "removed" and "kept" members, for
	// --json.
	Items []any
	// Lines are its lines of the text report, in order.
	Lines []string
	// Removed are the host paths it removed (cgroups, directories).
	Removed []string
	// Skipped, when set, says why it looked at nothing (no engine
	// answers) and is printed in place of Lines (on stderr with --json).
	Skipped string
}

// Remote is a session's workspace that its backend keeps away from the
// host (in a pod): `corral cp` and `corral sync` copy through it
// (package wscopy).
type Remote interface {
	// Root is the workspace's path on the far side.
	Root() string
	// CopyIn unpacks the tar stream in f below Root (transfer.Unpack's
	// checks on the far side).
	CopyIn(ctx context.Context, f *os.File, o transfer.Options) (transfer.Stats, error)
	// CopyOut writes to f a tar stream of src (relative to Root) whose
	// entries are named below top, at most limit bytes.
	CopyOut(ctx context.Context, src, top string, f *os.File, limit int64) error
}

// DryRunner is the optional part of a sandbox.Backend that can say the
// command line it would run instead of running it (`corral run
// --dry-run`).
type DryRunner interface {
	// DryRun returns the argv that would start req's sandbox, one
	// argument each, and warnings about it.
	DryRun(ctx context.Context, req *sandbox.Request) (argv, warnings []string, err error)
}

// Driver describes one backend. Name and Open are required; the rest
// are optional parts the CLI uses where they are set.
type Driver struct {
	// Name is the value of the backend setting that selects it
	// ("bwrap"); Register makes it one of the backend key's values
	// (config.RegisterBackend).
	Name string
	// Doc says what it is, in the backend key's Doc: its name and, in
	// parentheses, a few words ("bwrap (bubblewrap)").
	Doc string
	// Default makes it the backend of settings that name none (the
	// backend key's default); one backend is.
	Default bool
	// Secrets says its sandboxes carry secrets under the allowlist
	// profile: they reach the network only through corral's egress
	// proxy, which swaps the stand-ins (SecretCarriers).
	Secrets bool
	// Open builds the backend's Instance for one Host. It contacts
	// nothing (an engine connects at its first use).
	Open func(d Deps) Instance
	// Doctor diagnoses the backend under st for `corral doctor`; in is
	// the Host's instance, nil when there is no Host (use.HostErr). A nil
	// Report leaves the backend out (not used, nothing to say).
	Doctor func(ctx context.Context, in Instance, st *config.Settings, use Use) *Report
	// Cleanup removes what processes of corral that are gone left of the
	// backend (all: in use too) for `corral cleanup`; st is nil when the
	// settings cannot be read, and uses says whether they use the
	// backend (backend setting or a route). A nil Swept says nothing.
	// Its error is reported after the rest is done.
	Cleanup func(ctx context.Context, in Instance, st *config.Settings, uses, all bool) (*Swept, error)
	// Workspace returns the session's workspace when the backend keeps
	// it away from the host (nil otherwise: the session's working
	// directory on the host is its workspace).
	Workspace func(ctx context.Context, in Instance, st *config.Settings, session string) (Remote, error)
	// Ready, when set, says whether the backend can take work now under
	// st, for a readiness probe (corral serve's /readyz, Host.Ready): nil
	// when it can, else an error saying what is missing. It must be quick
	// (a few seconds at most: callers bound ctx) and change nothing; the
	// caller caches its answer. A nil Ready is always ready (local).
	Ready func(ctx context.Context, in Instance, st *config.Settings) error
	// Settings, when the backend has a section of settings (keys
	// Name + ".*"), says how they reach it (TestSettingsAgree).
	Settings *Settings

	next *Driver        // the table, newest first
	cfg  config.Backend // its value of the backend key
}

// Settings are a backend's section of corral's settings: how the
// section's keys (config) become the backend's own settings value, and
// that value's defaults. A test of corral checks that the two agree and
// that every field of the section is carried.
type Settings struct {
	// Of returns st's section as the backend's settings value.
	Of func(st *config.Settings) any
	// Defaults returns the backend's own default settings value.
	Defaults func() any
}

// drivers is the table, newest first: a list through Driver.next, so
// that registering (at every start of corral) allocates nothing.
var drivers *Driver

// Register adds d, a package variable of its backend, to the table, and
// its name to the backend key's values (config.RegisterBackend);
// backends call it from init (the table is not locked: it is written
// before main runs and only read after). It panics on a driver without a
// lower-case Name or Open, or a name registered twice: both are a
// program's bug, found at its start.
func Register(d *Driver) {
	if d.Name == "" || d.Open == nil || strings.ToLower(d.Name) != d.Name {
		panic(fmt.Sprintf("registry: driver %q needs a lower-case Name and Open", d.Name))
	}
	if _, dup := Lookup(d.Name); dup {
		panic("registry: backend " + d.Name + " registered twice")
	}
	d.cfg = config.Backend{Name: d.Name, Doc: d.Doc, Default: d.Default}
	config.RegisterBackend(&d.cfg)
	d.next, drivers = drivers, d
}

// Lookup returns the driver called name.
func Lookup(name string) (*Driver, bool) {
	for d := drivers; d != nil; d = d.next {
		if d.Name == name {
			return d, true
		}
	}
	return nil, false
}

// Drivers returns every registered driver, sorted by name (the order
// doctor and cleanup report them in).
func Drivers() []*Driver {
	var out []*Driver
	for d := drivers; d != nil; d = d.next {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *Driver) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Names returns the registered backends' names, sorted.
func Names() []string {
	var out []string
	for _, d := range Drivers() {
		out = append(out, d.Name)
	}
	return out
}

// SecretCarriers returns the names of the backends that carry secrets
// (Driver.Secrets), sorted: what a refusal of secrets by another backend
// names (sandbox.NoSecretsBackendError).
func SecretCarriers() []string {
	var out []string
	for _, d := range Drivers() {
		if d.Secrets {
			out = append(out, d.Name)
		}
	}
	return out
}

// UnknownError is the error for a backend name no driver has.
type UnknownError struct {
	// Name is the name asked for.
	Name string
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("unknown backend %q (want %s)", e.Name, orList(Names()))
}

// NamesText is the registered backends' names as a flag's help gives
// them: "bwrap, docker, kubernetes or local".
func NamesText() string { return orList(Names()) }

// orList joins names as "a, b, c or d".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Uses reports whether st uses the backend called name: the backend
// setting, or a route's backend ("" is no backend).
func Uses(st *config.Settings, name string) bool {
	if name == "" {
		return false
	}
	if st.Backend == name {
		return true
	}
	return slices.ContainsFunc(st.Routes, func(r config.Route) bool { return r.Backend == name })
}
