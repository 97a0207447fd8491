package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/helperbin"
)

func newDoctorCmd(g *globalOptions) *cobra.Command {
	var asJSON bool
	var backend string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that the sandbox works on this machine, and say how to fix it if not",
		Long: `doctor checks the bubblewrap sandbox: bwrap found (path, version), a probe
sandbox runs, unprivileged user namespaces usable, how limits are applied
(memory_mb for the whole sandbox in a memory cgroup, or per process through
RLIMIT_DATA, and what would give a cgroup);
the syscall filter every sandbox gets (built and loaded in a throwaway
thread); whether the allowlist profile's proxy can start; and the Docker
engine: reachable, its version and API version, whether docker.image is
there. With the kubernetes backend (the backend setting, a route, or
--backend kubernetes) it reports the cluster: the API server and its
version, the namespace, each permission corral needs (a
SelfSubjectAccessReview), the runtime classes, the seccomp profile, the
node's pod pids limit where visible, and whether NetworkPolicy is enforced
(a short-lived probe pod, removed afterwards). It exits 0 when the configured backend (the backend setting) can run
sandboxes and 1 when not, naming the fix.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			report := doctorReport(c, g, backend)
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(report); err != nil {
					return err
				}
			} else {
				printDoctor(report)
			}
			if !report.Ready {
				return &exitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&backend, "backend", "", "judge readiness for this backend instead of the backend setting ("+registry.NamesText()+")")
	return cmd
}

// doctorResult is the report `corral doctor` prints: its own members,
// and each backend's (registry.Driver.Doctor: bwrap's "bwrap", "limits",
// "memory", "seccomp", "allowlist_proxy"...; "docker"; "kubernetes" when
// the settings use it) beside them in the JSON.
type doctorResult struct {
	// Corral is this executable's build (corral version --json).
	Corral      corral.BuildInfo `json:"corral"`
	Ready       bool             `json:"ready"`
	ConfigFile  string           `json:"config_file"`
	ConfigError string           `json:"config_error,omitempty"`
	// Deprecated warns of each setting the file or environment sets that
	// has no effect (config.Settings.DeprecatedSet); they do not make
	// corral unready.
	Deprecated []string `json:"deprecated,omitempty"`
	StateDir   string   `json:"state_dir"`
	// StateError says why the state directory cannot take what corral
	// writes there (sessions, background output, the audit log): it cannot
	// be written, or its file system has under stateMinFree left.
	StateError string `json:"state_error,omitempty"`
	Backend    string `json:"backend"`
	Root       bool   `json:"root"`
	// Helper is the helper executable sandboxes get (doctor builds it
	// into corral's cache when it is missing).
	Helper helperCheck `json:"helper"`

	// reports are the backends' parts, in registry order (json: their
	// Fields, merged by MarshalJSON).
	reports []backendReport
}

// backendReport is one backend's part of the report.
type backendReport struct {
	name string
	*registry.Report
}

// MarshalJSON implements json.Marshaler: doctor's own members and every
// backend's Fields in one object (a backend's member never replaces one
// of doctor's own).
func (r *doctorResult) MarshalJSON() ([]byte, error) {
	type plain doctorResult
	b, err := json.Marshal((*plain)(r))
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for _, br := range r.reports {
		for k, v := range br.Fields {
			if _, own := m[k]; own {
				return nil, fmt.Errorf("doctor: backend %s reports %q, one of doctor's own members", br.name, k)
			}
			raw, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			m[k] = raw
		}
	}
	return json.Marshal(m)
}

// helperCheck is what doctor found or built of the helper executable
// (package helperbin); an error does not make corral unready: sandboxes
// then get corral's own executable.
type helperCheck struct {
	// Source is "next-to-corral", "cache" or "self" (package helperbin).
	Source string `json:"source"`
	Path   string `json:"path"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// BuildSeconds is the time the build took, when doctor built it.
	BuildSeconds float64 `json:"build_seconds,omitempty"`
	// Error says why no helper could be had, Fix what to do.
	Error string `json:"error,omitempty"`
	Fix   string `json:"fix,omitempty"`
	// PassedOver says, one line each, which helper files were there but
	// refused and why (another protocol, dynamically linked, not an ELF
	// executable): a packager's helper beside corral that is not used.
	PassedOver []string `json:"passed_over,omitempty"`
}

// helperBuildBudget bounds doctor's build of the helper: after README's
// build of corral it takes about half a second (the go build cache holds
// what it links); a build that needs far longer is stopped, and doctor
// says how to build it, rather than hold a diagnosis for minutes.
const helperBuildBudget = 60 * time.Second

// checkHelper finds the helper executable, building it into corral's
// cache when none is usable (helperbin.Locator.Build).
func checkHelper(c *cobra.Command, loc *helperbin.Locator) helperCheck {
	ctx, cancel := context.WithTimeout(c.Context(), helperBuildBudget)
	defer cancel()
	b, err := loc.Build(ctx, func(dest string) {
		// Seconds after README's build, up to a minute otherwise: say
		// why doctor waits.
		fmt.Fprintf(c.ErrOrStderr(), "corral doctor: building corral-helper into corral's cache (%s) with the go command...\n", dest)
	})
	passed := loc.Choose(true).Passed
	if err != nil {
		hc := helperCheck{Source: string(helperbin.SourceSelf), Error: err.Error(), Fix: helperbin.ShipAdvice, PassedOver: passed}
		if exe, err := os.Executable(); err == nil {
			hc.Path = exe
			if st, err := os.Stat(exe); err == nil {
				hc.Size = st.Size()
			}
		}
		switch {
		case errors.Is(err, helperbin.ErrNoToolchain):
			hc.Fix = "install Go (the go command on PATH) and run corral doctor again, or " + helperbin.ShipAdvice
		case errors.Is(err, helperbin.ErrColdCache), errors.Is(err, context.DeadlineExceeded):
			hc.Fix = "build corral with the go command as this user first (its build cache then holds what the helper links), then run corral doctor; or " + helperbin.ShipAdvice
		case errors.Is(err, helperbin.ErrNoSource):
			hc.Fix = "build corral from its source without -trimpath and run corral doctor there, or " + helperbin.ShipAdvice
		}
		return hc
	}
	return helperCheck{Source: string(b.Source), Path: b.Path, Size: b.Size, BuildSeconds: b.Took.Seconds(), PassedOver: passed}
}

func doctorReport(c *cobra.Command, g *globalOptions, backend string) *doctorResult {
	r := &doctorResult{Corral: corral.Build(), StateDir: config.StateDir(), Root: os.Getuid() == 0}
	// The file in use: --config, else $CORRAL_CONFIG, else the default
	// (as `corral config path` says).
	r.ConfigFile, _ = configPath(g)
	if r.ConfigFile == "" {
		r.ConfigFile = config.DefaultPath()
	}
	// Every probe goes through the Host's own backends, built as for a
	// command; a broken settings file is reported, and the defaults
	// probed.
	h, settingsErr, hostErr := g.openHostAnyway(newLogger(g))
	if settingsErr != nil {
		r.ConfigError = settingsErr.Error()
	}
	st := config.Defaults()
	if h != nil {
		defer h.Close()
		r.StateDir = h.StateDir()
		if cur, err := h.Settings(); err == nil {
			st = cur.Clone()
		}
	}
	if backend != "" {
		st.Backend = backend
	}
	r.Backend = st.Backend
	r.Deprecated = st.DeprecatedSet()
	// First: the backends' probes below then find the helper built.
	if h != nil {
		r.Helper = checkHelper(c, h.Helpers())
	} else {
		r.Helper = checkHelper(c, helperbin.New(helperbin.Options{}))
	}
	r.Ready = r.ConfigError == ""
	known := false
	for _, d := range registry.Drivers() {
		use := registry.Use{Selected: d.Name == st.Backend, Routed: registry.Uses(st, d.Name), HostErr: hostErr}
		known = known || use.Selected
		if d.Doctor == nil {
			continue
		}
		var in registry.Instance
		if h != nil {
			// Every probe goes through the Host's own backend, built as
			// for a command.
			in, _ = h.Engine(d.Name)
		}
		rep := d.Doctor(c.Context(), in, st, use)
		if rep == nil {
			continue
		}
		r.reports = append(r.reports, backendReport{name: d.Name, Report: rep})
		if use.Selected {
			r.Ready = r.Ready && rep.Ready
		}
	}
	if !known {
		r.Ready = false
		r.ConfigError = strings.TrimPrefix(r.ConfigError+"; ", "; ") + (&registry.UnknownError{Name: st.Backend}).Error()
	}
	r.StateError = checkStateDir(r.StateDir)
	r.Ready = r.Ready && r.StateError == ""
	return r
}

// stateMinFree is the free space below which doctor calls the state
// directory full: the reserve background output keeps (session's spill
// reserve), and room for a session's state and the audit log.
const stateMinFree = 16 << 20

// checkStateDir says why dir cannot take corral's state, or "": it is
// made if missing, a file is written and removed there, and its file
// system must have stateMinFree bytes free (statfs(2), for unprivileged
// users: f_bavail).
func checkStateDir(dir string) string {
	if dir == "" {
		return "no state directory: set HOME or XDG_STATE_HOME"
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Sprintf("cannot be made (%v): give corral a writable one (XDG_STATE_HOME)", err)
	}
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		return fmt.Sprintf("cannot be written (%v): new sessions fail; free space there or give corral another one (XDG_STATE_HOME)", err)
	}
	f.Close()
	os.Remove(f.Name())
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err == nil {
		if free := int64(fs.Bavail) * fs.Bsize; free < stateMinFree {
			return fmt.Sprintf("its file system has %d KiB free: new sessions, background output and the audit log fail; free space there or give corral another one (XDG_STATE_HOME)", free>>10)
		}
	}
	return ""
}

func printDoctor(r *doctorResult) {
	ok := func(b bool) string {
		if b {
			return "ok  "
		}
		return "FAIL"
	}
	fmt.Printf("     %s\n", versionLine())
	for _, p := range r.Helper.PassedOver {
		fmt.Printf("warn helper passed over: %s\n", p)
	}
	if hc := r.Helper; hc.Error != "" {
		fmt.Printf("warn helper: none usable (%s): sandboxes get corral's own executable (%s, %.1f MB); to fix: %s\n", hc.Error, hc.Path, float64(hc.Size)/1e6, hc.Fix)
	} else if hc.BuildSeconds > 0 {
		fmt.Printf("%s helper %s (%.1f MB, built now into corral's cache in %.1f s)\n", ok(true), hc.Path, float64(hc.Size)/1e6, hc.BuildSeconds)
	} else {
		fmt.Printf("%s helper %s (%.1f MB, %s)\n", ok(true), hc.Path, float64(hc.Size)/1e6, hc.Source)
	}
	if r.ConfigError != "" {
		fmt.Printf("%s settings %s: %s\n", ok(false), r.ConfigFile, r.ConfigError)
	} else if _, err := os.Stat(r.ConfigFile); errors.Is(err, os.ErrNotExist) {
		fmt.Printf("%s settings: no file (%s), so the defaults hold\n", ok(true), r.ConfigFile)
	} else {
		fmt.Printf("%s settings %s\n", ok(true), r.ConfigFile)
	}
	for _, w := range r.Deprecated {
		fmt.Printf("warn settings: %s\n", w)
	}
	if r.StateError != "" {
		fmt.Printf("%s state directory %s: %s\n", ok(false), r.StateDir, r.StateError)
	} else {
		fmt.Printf("     state directory: %s\n", r.StateDir)
	}
	var fix []string
	for _, br := range r.reports {
		for _, l := range br.Lines {
			fmt.Println(l)
		}
		if br.name == r.Backend && !br.Ready {
			fix = br.Fix
		}
	}
	fmt.Printf("     backend: %s\n", r.Backend)
	if !r.Ready {
		if len(fix) > 0 {
			fmt.Printf("\n%s\n", strings.Join(fix, "\n"))
		}
		fmt.Println("\nnot ready: commands will not run (corral never runs them outside the sandbox)")
		return
	}
	fmt.Println("\nready")
}
