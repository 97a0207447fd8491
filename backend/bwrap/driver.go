package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/seccomp"
)

// Name is the bwrap backend's name, the value of the backend setting
// that selects it.
const Name = "bwrap"

// driver is the backend's entry in backend/registry.
var driver = registry.Driver{
	Doc:     "bwrap (bubblewrap)",
	Default: true,
	Name:    Name,
	Secrets: true,
	Open:    open,
	Doctor:  doctor,
	Cleanup: cleanup,
	Ready:   ready,
}

func init() { registry.Register(&driver) }

// instance is the bwrap backend in one Host: a Backend per bwrap path,
// run_as and settings file (what a Backend is built from, of the
// settings), built on first use and kept with its caches.
type instance struct {
	deps registry.Deps
	mu   sync.Mutex
	bs   map[instanceKey]*Backend // nil once closed
}

// errInstanceClosed is Backend's error after Close (a command that raced
// the Host's Close).
var errInstanceClosed = errors.New("bwrap backend closed")

// instanceKey is what a Backend is built from, of the settings.
type instanceKey struct {
	path, runAs, secret string
}

func open(d registry.Deps) registry.Instance {
	return &instance{deps: d, bs: map[instanceKey]*Backend{}}
}

// Backend implements registry.Instance.
func (in *instance) Backend(st *config.Settings) (sandbox.Backend, error) {
	b, err := in.get(st)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// get returns the Backend of st's bwrap path, run_as and settings file.
// Errors: errInstanceClosed.
func (in *instance) get(st *config.Settings) (*Backend, error) {
	k := instanceKey{path: st.Bwrap, runAs: st.RunAs, secret: st.Path}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.bs == nil {
		return nil, errInstanceClosed
	}
	if b := in.bs[k]; b != nil {
		return b, nil
	}
	b := New(Options{
		BwrapPath:   k.path,
		StateDir:    in.deps.StateDir,
		HiddenDirs:  in.deps.HiddenDirs,
		SecretFiles: []string{k.secret},
		RunAs:       k.runAs,
		Logger:      in.deps.Logger,
		Egress:      in.deps.Egress(),
		SweepEvery:  in.deps.SweepEvery,
		FindHelper:  func() string { return in.deps.Helper(false) },
		PinFiles:    in.deps.PinFiles,
	})
	in.bs[k] = b
	return b, nil
}

// Close implements registry.Instance: it closes every Backend built.
func (in *instance) Close() error {
	in.mu.Lock()
	bs := in.bs
	in.bs = nil
	in.mu.Unlock()
	var first error
	for _, b := range bs {
		if err := b.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

var _ registry.DryRunner = (*Backend)(nil)

// DryRun implements registry.DryRunner: the bwrap command line of req
// (Command's argv), for `corral run --dry-run`.
func (b *Backend) DryRun(ctx context.Context, req *sandbox.Request) (argv, warnings []string, err error) {
	argv, _, warnings, err = b.Command(ctx, req)
	return argv, warnings, err
}

// FilterCheck is what doctor found out about the syscall filter.
type FilterCheck struct {
	// OK is set when seccomp.Probe built the filter, put it in a memfd and
	// loaded it on a throwaway thread, where it refused what it should.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Rules is the number of rows of the strictest variant (AF_UNIX
	// sockets denied) that apply on this architecture (seccomp.Rules).
	Rules int    `json:"rules"`
	Arch  string `json:"arch"`
}

// ProxyCheck says whether the allowlist profile's proxy can start and,
// when bwrap is the backend in use, whether a command runs in its network
// namespace.
type ProxyCheck struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Dir is where the proxies' socket directories are made.
	Dir string `json:"dir"`
	// Join is how a bwrap command enters the session's network namespace
	// ("ptrace gate" or "nsenter"), set when a command ran there.
	Join string `json:"join,omitempty"`
}

// checkFilter probes the syscall filter (seccomp.Probe) and counts its
// rows.
func checkFilter() FilterCheck {
	c := FilterCheck{Arch: runtime.GOARCH}
	for _, rule := range seccomp.Rules(seccomp.Options{DenyUnixSockets: true}) {
		if len(rule.Arches) == 0 || slices.Contains(rule.Arches, runtime.GOARCH) {
			c.Rules++
		}
	}
	if err := seccomp.Probe(); err != nil {
		c.Error = err.Error()
	} else {
		c.OK = true
	}
	return c
}

// usesAllowlist reports whether the settings run any session under the
// allowlist profile (the profile key, or a route).
func usesAllowlist(st *config.Settings) bool {
	if st.Profile == sandbox.ProfileAllowlist {
		return true
	}
	return slices.ContainsFunc(st.Routes, func(r config.Route) bool { return r.Profile == sandbox.ProfileAllowlist })
}

// RootIdentity describes, for a root caller, who holds its sandboxes
// (run_as).
func RootIdentity(runAs string) string {
	const why = "never host uid 0, which could write /proc/sys and reach root-only sockets and files; commands still see uid 0"
	if ra, fixed, err := sandbox.ParseRunAs(runAs); err == nil && fixed {
		return fmt.Sprintf("bwrap sandboxes run as %s on the host (run_as), %s; files they write in the working directory keep its owner", ra, why)
	}
	return fmt.Sprintf("bwrap sandboxes run on the host as the working directory's owner, or as nobody (%s) when root owns it (set run_as to choose), %s; files they write there keep its owner. docker: commands run as a person's workspace owner, as uid 0 with no capabilities in a root-owned one", sandbox.NobodyRunAs, why)
}

// doctor is the bwrap part of `corral doctor`: bwrap found and its probe,
// the syscall filter every sandbox loads, the allowlist proxy, who holds
// a root caller's sandboxes, how limits and memory_mb hold, and, when
// bwrap is the backend in use, a command with the configured limits and
// one in the allowlist's network namespace. It always reports: every
// machine's sandbox is bwrap by default.
func doctor(ctx context.Context, in registry.Instance, st *config.Settings, use registry.Use) *registry.Report {
	d := Diagnose(ctx, nil, st.Bwrap)
	stateDir := config.StateDir()
	if bi, ok := in.(*instance); ok {
		stateDir = bi.deps.StateDir
	}
	fc := checkFilter()
	proxy := ProxyCheck{Dir: filepath.Join(stateDir, "net")}
	var b *Backend
	if bi, ok := in.(*instance); ok && d.Ready() && use.Selected {
		b, _ = bi.get(st) // nil when closed: the checks below are skipped
	}
	if err := egress.Check(proxy.Dir); err != nil {
		proxy.Error = err.Error()
	} else if b != nil {
		var err error
		if proxy.Join, err = b.CheckEgress(ctx, ""); err != nil {
			proxy.Error = err.Error()
		} else {
			proxy.OK = true
		}
	} else {
		proxy.OK = true
	}
	commandErr := ""
	if b != nil {
		if err := b.CheckCommand(ctx, "", st.Limits()); err != nil {
			commandErr = err.Error()
		}
	}
	limits := LimitsMechanism(d.Binary)
	// After the command: what its memory limit settled on (a systemd user
	// scope asked for, say), else what a command would get.
	md := DiagnoseMemory(d.Binary, st.MemoryMB)
	r := &registry.Report{
		Fields: map[string]any{"bwrap": d, "limits": limits, "memory": md.Line, "memory_kind": md.Kind, "seccomp": fc, "allowlist_proxy": proxy},
		// Every bwrap sandbox loads the filter, and allowlist commands
		// need the proxy: without them nothing runs (fail closed).
		Ready: d.Ready() && fc.OK && commandErr == "" && (proxy.OK || !usesAllowlist(st)),
	}
	identity := ""
	if os.Getuid() == 0 {
		identity = RootIdentity(st.RunAs)
		r.Fields["identity"] = identity
	}
	if commandErr != "" {
		r.Fields["command_error"] = commandErr
	}
	r.Lines = doctorLines(d, fc, proxy, identity, limits, md.Line, commandErr)
	if d.Cause != "" {
		r.Fix = []string{"cause: " + d.Cause, "fix:   " + d.Fix}
	}
	return r
}

// ready is the bwrap backend's readiness (registry.Driver.Ready): bwrap
// is found at st's path and its probe sandbox runs `true` (Diagnose, the
// first of doctor's checks); otherwise the error is the probe's cause and
// fix.
func ready(ctx context.Context, _ registry.Instance, st *config.Settings) error {
	d := Diagnose(ctx, nil, st.Bwrap)
	if d.Ready() {
		return nil
	}
	return errors.New(d.Summary())
}

// doctorLines are the bwrap lines of doctor's text report.
func doctorLines(d *Diagnosis, fc FilterCheck, p ProxyCheck, identity, limits, memory, commandErr string) []string {
	ok := func(b bool) string {
		if b {
			return "ok  "
		}
		return "FAIL"
	}
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	if d.Binary != nil {
		setuid := ""
		if d.Binary.Setuid {
			setuid = " (setuid)"
		}
		add("%s bwrap %s at %s%s", ok(true), d.Binary.Version, d.Binary.Path, setuid)
		if d.ProbeOK {
			add("%s sandbox probe (all namespaces unshared, /proc, loopback, syscall filter)", ok(true))
		} else {
			add("%s sandbox probe: %s", ok(false), d.ProbeOutput)
		}
	} else {
		add("%s bwrap: %s", ok(false), d.BinaryError)
	}
	if fc.OK {
		add("%s syscall filter: seccomp, %d rules on %s (under restricted, workspace and allowlist: bwrap on amd64 mediates connect(2) so only the sandbox's own Unix sockets are reachable; elsewhere AF_UNIX sockets are refused)", ok(true), fc.Rules, fc.Arch)
	} else {
		add("%s syscall filter: %s (bwrap sandboxes do not run without it)", ok(false), fc.Error)
	}
	if p.OK {
		join := ""
		if p.Join != "" {
			join = fmt.Sprintf("; a command ran in its network namespace (entered through %s)", p.Join)
		}
		add("%s allowlist proxy: starts (HTTP and SOCKS5 on Unix sockets under %s)%s", ok(true), p.Dir, join)
	} else {
		add("%s allowlist proxy: %s (commands of the allowlist profile do not run)", ok(false), p.Error)
	}
	if identity != "" {
		add("     root caller: %s", identity)
	}
	add("     user namespaces: max_user_namespaces=%s unprivileged_userns_clone=%s apparmor_restrict_unprivileged_userns=%s",
		knob(d.MaxUserNamespaces), knob(d.UnprivilegedUsernsClone), knob(d.AppArmorRestrict))
	add("     limits: %s", limits)
	add("     %s", memory)
	if commandErr != "" {
		add("%s a command with your limits: %s", ok(false), commandErr)
	}
	if d.Prlimit != "" {
		add("     prlimit: %s (fallback for a setuid bwrap)", d.Prlimit)
	} else {
		add("     prlimit: not found (needed only with a setuid bwrap; install util-linux)")
	}
	return out
}

// knob prints a sysctl's value, or n/a for one that does not exist.
func knob(v int) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprint(v)
}

// cleanup is the bwrap part of `corral cleanup`: it ends sandboxes whose
// corral process is gone and removes the empty memory cgroups such
// processes left.
func cleanup(_ context.Context, _ registry.Instance, _ *config.Settings, _, _ bool) (*registry.Swept, error) {
	s := &registry.Swept{}
	if n := SweepOrphans(); n > 0 {
		s.Lines = append(s.Lines, fmt.Sprintf("ended %d sandbox(es) of corral processes that are gone", n))
	}
	s.Removed = SweepMemoryCgroups()
	return s, nil
}
