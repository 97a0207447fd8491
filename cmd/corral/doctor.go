package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/backend/docker"
	"github.com/corralhq/corral/backend/kubernetes"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/helperbin"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/seccomp"
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
	cmd.Flags().StringVar(&backend, "backend", "", "judge readiness for this backend instead of the backend setting (bwrap, docker, kubernetes, local)")
	return cmd
}

// doctorResult is the report `corral doctor` prints.
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
	StateError string            `json:"state_error,omitempty"`
	Backend    string            `json:"backend"`
	Bwrap      *bwrap.Diagnosis  `json:"bwrap"`
	Docker     *docker.Diagnosis `json:"docker"`
	// Kubernetes is the cluster's report, when the kubernetes backend is
	// configured (the backend setting, a route) or asked for (--backend).
	Kubernetes *kubernetes.Diagnosis `json:"kubernetes,omitempty"`
	Limits     string                `json:"limits"`
	// Memory says how memory_mb holds for a bwrap command: for the whole
	// command (a memory cgroup) or per process (RLIMIT_DATA), and where
	// per process, why and what would give a cgroup (bwrap.DiagnoseMemory).
	Memory string `json:"memory"`
	// MemoryKind is bwrap.DiagnoseMemory's kind: "cgroup-v1", "cgroup-v2",
	// "rlimit-data" or "none".
	MemoryKind string `json:"memory_kind"`
	Root       bool   `json:"root"`
	// Identity says which host user holds the sandboxes of a root caller
	// (run_as); "" when corral does not run as root.
	Identity string      `json:"identity,omitempty"`
	Seccomp  filterCheck `json:"seccomp"`
	Proxy    proxyCheck  `json:"allowlist_proxy"`
	// Command says whether a command with the configured limits ran under
	// bwrap (the backend in use): "" when it did or was not tried.
	CommandError string `json:"command_error,omitempty"`
	// Helper is the helper executable sandboxes get (doctor builds it
	// into corral's cache when it is missing).
	Helper helperCheck `json:"helper"`
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

// filterCheck is what doctor found out about the syscall filter.
type filterCheck struct {
	// OK is set when seccomp.Probe built the filter, put it in a memfd and
	// loaded it on a throwaway thread, where it refused what it should.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Rules is the number of rows of the strictest variant (AF_UNIX
	// sockets denied) that apply on this architecture (seccomp.Rules).
	Rules int    `json:"rules"`
	Arch  string `json:"arch"`
}

// proxyCheck says whether the allowlist profile's proxy can start and, on
// bwrap, whether a command runs in its network namespace.
type proxyCheck struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Dir is where the proxies' socket directories are made.
	Dir string `json:"dir"`
	// Join is how a bwrap command enters the session's network namespace
	// ("ptrace gate" or "nsenter"), set when a command ran there.
	Join string `json:"join,omitempty"`
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
	if r.Root {
		r.Identity = rootIdentity(st.RunAs)
	}
	// First: the backends' probes below then find the helper built.
	if h != nil {
		r.Helper = checkHelper(c, h.Helpers())
	} else {
		r.Helper = checkHelper(c, helperbin.New(helperbin.Options{}))
	}
	r.Bwrap = bwrap.Diagnose(c.Context(), nil, st.Bwrap)
	r.Limits = bwrap.LimitsMechanism(r.Bwrap.Binary)
	r.Seccomp = checkFilter()
	r.Proxy = proxyCheck{Dir: filepath.Join(r.StateDir, "net")}
	var b *bwrap.Backend
	if h != nil && r.Bwrap.Ready() && st.Backend == config.BackendBwrap {
		b, _ = h.Bwrap(st)
	}
	if err := egress.Check(r.Proxy.Dir); err != nil {
		r.Proxy.Error = err.Error()
	} else if b != nil {
		var err error
		r.Proxy.Join, err = b.CheckEgress(c.Context(), "")
		if err != nil {
			r.Proxy.Error = err.Error()
		} else {
			r.Proxy.OK = true
		}
	} else {
		r.Proxy.OK = true
	}
	if b != nil {
		if err := b.CheckCommand(c.Context(), "", st.Limits()); err != nil {
			r.CommandError = err.Error()
		}
	}
	// After the command: what its memory limit settled on (a systemd user
	// scope asked for, say), else what a command would get.
	md := bwrap.DiagnoseMemory(r.Bwrap.Binary, st.MemoryMB)
	r.Memory, r.MemoryKind = md.Line, md.Kind
	usesKube := st.Backend == config.BackendKubernetes || slices.ContainsFunc(st.Routes, func(r config.Route) bool { return r.Backend == config.BackendKubernetes })
	if h == nil {
		// No state directory, so no Host: the engines are not asked
		// (StateError says why and how to fix it).
		r.Docker = &docker.Diagnosis{Error: hostErr.Error(), Fix: "give corral a state directory (HOME or XDG_STATE_HOME)"}
		if usesKube {
			r.Kubernetes = &kubernetes.Diagnosis{Error: hostErr.Error(), Problems: []string{hostErr.Error()}}
		}
	} else {
		if e, err := h.DockerEngine(); err == nil {
			r.Docker = e.Diagnose(c.Context(), corral.DockerSettings(st))
		}
		if ke, err := h.KubernetesEngine(); err == nil && usesKube {
			r.Kubernetes = ke.Diagnose(c.Context(), corral.KubernetesSettings(st), true)
		}
	}
	r.StateError = checkStateDir(r.StateDir)
	switch st.Backend {
	case config.BackendKubernetes:
		r.Ready = r.Kubernetes.Ready() && r.ConfigError == ""
	case config.BackendDocker:
		r.Ready = r.Docker.Ready() && r.ConfigError == ""
	case config.BackendLocal:
		r.Ready = r.ConfigError == ""
	default:
		// Every bwrap sandbox loads the filter, and allowlist commands need
		// the proxy: without them nothing runs (fail closed).
		r.Ready = r.Bwrap.Ready() && r.ConfigError == "" && r.Seccomp.OK && r.CommandError == "" && (r.Proxy.OK || !usesAllowlist(st))
	}
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

// rootIdentity describes, for a root caller, who holds its sandboxes.
func rootIdentity(runAs string) string {
	const why = "never host uid 0, which could write /proc/sys and reach root-only sockets and files; commands still see uid 0"
	if ra, fixed, err := sandbox.ParseRunAs(runAs); err == nil && fixed {
		return fmt.Sprintf("bwrap sandboxes run as %s on the host (run_as), %s; files they write in the working directory keep its owner", ra, why)
	}
	return fmt.Sprintf("bwrap sandboxes run on the host as the working directory's owner, or as nobody (%s) when root owns it (set run_as to choose), %s; files they write there keep its owner. docker: commands run as a person's workspace owner, as uid 0 with no capabilities in a root-owned one", sandbox.NobodyRunAs, why)
}

// checkFilter probes the syscall filter (seccomp.Probe) and counts its rows.
func checkFilter() filterCheck {
	c := filterCheck{Arch: runtime.GOARCH}
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

func printDoctor(r *doctorResult) {
	ok := func(b bool) string {
		if b {
			return "ok  "
		}
		return "FAIL"
	}
	fmt.Printf("     %s\n", versionLine())
	d := r.Bwrap
	if d.Binary != nil {
		fmt.Printf("%s bwrap %s at %s", ok(true), d.Binary.Version, d.Binary.Path)
		if d.Binary.Setuid {
			fmt.Print(" (setuid)")
		}
		fmt.Println()
	} else {
		fmt.Printf("%s bwrap: %s\n", ok(false), d.BinaryError)
	}
	if d.Binary != nil {
		if d.ProbeOK {
			fmt.Printf("%s sandbox probe (all namespaces unshared, /proc, loopback, syscall filter)\n", ok(true))
		} else {
			fmt.Printf("%s sandbox probe: %s\n", ok(false), d.ProbeOutput)
		}
	}
	if f := r.Seccomp; f.OK {
		fmt.Printf("%s syscall filter: seccomp, %d rules on %s (under restricted, workspace and allowlist: bwrap on amd64 mediates connect(2) so only the sandbox's own Unix sockets are reachable; elsewhere AF_UNIX sockets are refused)\n", ok(true), f.Rules, f.Arch)
	} else {
		fmt.Printf("%s syscall filter: %s (bwrap sandboxes do not run without it)\n", ok(false), f.Error)
	}
	if p := r.Proxy; p.OK {
		fmt.Printf("%s allowlist proxy: starts (HTTP and SOCKS5 on Unix sockets under %s)", ok(true), p.Dir)
		if p.Join != "" {
			fmt.Printf("; a command ran in its network namespace (entered through %s)", p.Join)
		}
		fmt.Println()
	} else {
		fmt.Printf("%s allowlist proxy: %s (commands of the allowlist profile do not run)\n", ok(false), p.Error)
	}
	if r.Identity != "" {
		fmt.Printf("     root caller: %s\n", r.Identity)
	}
	fmt.Printf("     user namespaces: max_user_namespaces=%s unprivileged_userns_clone=%s apparmor_restrict_unprivileged_userns=%s\n",
		knob(d.MaxUserNamespaces), knob(d.UnprivilegedUsernsClone), knob(d.AppArmorRestrict))
	fmt.Printf("     limits: %s\n", r.Limits)
	fmt.Printf("     %s\n", r.Memory)
	if r.CommandError != "" {
		fmt.Printf("%s a command with your limits: %s\n", ok(false), r.CommandError)
	}
	if d.Prlimit != "" {
		fmt.Printf("     prlimit: %s (fallback for a setuid bwrap)\n", d.Prlimit)
	} else {
		fmt.Printf("     prlimit: not found (needed only with a setuid bwrap; install util-linux)\n")
	}
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
	dd := r.Docker
	if dd.Reachable {
		fmt.Printf("%s docker engine %s at %s (API %s; engine accepts %s and later)\n", ok(true), dd.Version, dd.Host, dd.APIVersion, dd.MinAPIVersion)
		if dd.ImagePresent {
			fmt.Printf("%s docker image %s\n", ok(true), dd.Image)
		} else {
			fmt.Printf("     docker image %s: not on the engine; pulled on first use\n", dd.Image)
		}
	} else {
		mark := "    "
		if r.Backend == config.BackendDocker {
			mark = ok(false)
		}
		fmt.Printf("%s docker engine at %s: not reachable (%s)\n", mark, dd.Host, dd.Error)
	}
	if dd.HelperError != "" {
		mark := "    "
		if r.Backend == config.BackendDocker {
			mark = ok(false)
		}
		fmt.Printf("%s docker helper: %s\n", mark, dd.HelperError)
	}
	if dd.SettingsError != "" {
		fmt.Printf("%s docker settings: %s\n", ok(false), dd.SettingsError)
	}
	if r.Kubernetes != nil {
		printKubernetes(r.Kubernetes, r.Backend == config.BackendKubernetes)
	}
	fmt.Printf("     backend: %s\n", r.Backend)
	if !r.Ready {
		if r.Backend == config.BackendKubernetes {
			for _, p := range r.Kubernetes.Problems {
				fmt.Printf("\nfix:   %s\n", p)
			}
			fmt.Println("\nnot ready: commands will not run (corral never runs them outside the sandbox)")
			return
		}
		if r.Backend == config.BackendDocker {
			fmt.Printf("\nfix:   %s\n", dd.Fix)
			fmt.Println("\nnot ready: commands will not run (corral never runs them outside the sandbox)")
			return
		}
		if d.Cause != "" {
			fmt.Printf("\ncause: %s\nfix:   %s\n", d.Cause, d.Fix)
		}
		fmt.Println("\nnot ready: commands will not run (corral never runs them outside the sandbox)")
		return
	}
	fmt.Println("\nready")
}

// printKubernetes prints the cluster's lines of the report; fatal marks
// problems FAIL (kubernetes is the backend in use), else they are noted.
func printKubernetes(d *kubernetes.Diagnosis, fatal bool) {
	bad := "    "
	if fatal {
		bad = "FAIL"
	}
	if d.SettingsError != "" {
		fmt.Printf("%s kubernetes settings: %s\n", bad, d.SettingsError)
	}
	if !d.Reachable {
		fmt.Printf("%s kubernetes API server %s: not reachable (%s)\n", bad, d.Server, d.Error)
		return
	}
	fmt.Printf("ok   kubernetes API server %s (%s)\n", d.Server, d.Version)
	switch d.NamespaceExists {
	case "yes":
		fmt.Printf("ok   kubernetes namespace %s exists\n", d.Namespace)
	case "no":
		fmt.Printf("%s kubernetes namespace %s does not exist\n", bad, d.Namespace)
	default:
		fmt.Printf("     kubernetes namespace %s: existence unknown (not readable with these credentials)\n", d.Namespace)
	}
	for _, a := range d.Access {
		mark := "ok  "
		if !a.Allowed {
			mark = bad
		}
		fmt.Printf("%s kubernetes may %-38s (%s)\n", mark, a.String()+" in "+d.Namespace, a.Why)
	}
	if d.RuntimeClassesError != "" {
		fmt.Printf("     kubernetes runtime classes: not listable (%s)\n", d.RuntimeClassesError)
	} else {
		fmt.Printf("     kubernetes runtime classes: %s\n", listOrNone(d.RuntimeClasses))
	}
	if d.RuntimeClass != "" {
		mark := "ok  "
		if d.RuntimeClassesError == "" && !slices.Contains(d.RuntimeClasses, d.RuntimeClass) {
			mark = bad
		}
		fmt.Printf("%s kubernetes.runtime_class %s\n", mark, d.RuntimeClass)
	} else {
		fmt.Printf("     kubernetes.runtime_class: not set (the cluster's default runtime)\n")
	}
	fmt.Printf("     kubernetes seccomp: %s\n", d.Seccomp)
	fmt.Printf("     kubernetes pod pids limit: %s\n", d.PidsLimit)
	mark := "ok  "
	if d.NetworkPolicy != kubernetes.PolicyEnforced {
		mark = "warn"
	}
	fmt.Printf("%s kubernetes NetworkPolicy: %s (%s)\n", mark, d.NetworkPolicy, d.PolicyDetail)
	for _, w := range d.Warnings {
		fmt.Printf("warn kubernetes: %s\n", w)
	}
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

func knob(v int) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprint(v)
}
