package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/backend/docker"
	"github.com/corralhq/corral/config"
)

func newDoctorCmd(g *globalOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that the sandbox works on this machine, and say how to fix it if not",
		Long: `doctor checks the bubblewrap sandbox: bwrap found (path, version), a probe
sandbox runs, unprivileged user namespaces usable, how limits are applied;
and the Docker engine: reachable, its version and API version, whether
docker.image is there. It exits 0 when the configured backend (the backend
setting) can run sandboxes and 1 when not, naming the fix.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			report := doctorReport(c, g)
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
	return cmd
}

// doctorResult is the report `corral doctor` prints.
type doctorResult struct {
	Ready       bool              `json:"ready"`
	ConfigFile  string            `json:"config_file"`
	ConfigError string            `json:"config_error,omitempty"`
	StateDir    string            `json:"state_dir"`
	Backend     string            `json:"backend"`
	Bwrap       *bwrap.Diagnosis  `json:"bwrap"`
	Docker      *docker.Diagnosis `json:"docker"`
	Limits      string            `json:"limits"`
	Root        bool              `json:"root"`
}

func doctorReport(c *cobra.Command, g *globalOptions) *doctorResult {
	r := &doctorResult{StateDir: config.StateDir(), Root: os.Getuid() == 0}
	r.ConfigFile = g.configPath
	if r.ConfigFile == "" {
		r.ConfigFile = config.DefaultPath()
	}
	if _, err := config.Load(g.configPath, os.Environ()); err != nil {
		r.ConfigError = err.Error()
	}
	st, err := config.Load(g.configPath, os.Environ())
	if err != nil {
		st = config.Defaults()
	}
	r.Backend = st.Backend
	r.Bwrap = bwrap.Diagnose(c.Context(), nil, st.Bwrap)
	r.Limits = bwrap.LimitsMechanism(r.Bwrap.Binary)
	e := docker.NewEngine(docker.Options{Logger: newLogger(g)})
	defer e.Close()
	r.Docker = e.Diagnose(c.Context(), dockerSettings(st))
	switch st.Backend {
	case config.BackendDocker:
		r.Ready = r.Docker.Ready() && r.ConfigError == ""
	case config.BackendLocal:
		r.Ready = r.ConfigError == ""
	default:
		r.Ready = r.Bwrap.Ready() && r.ConfigError == ""
	}
	return r
}

func printDoctor(r *doctorResult) {
	ok := func(b bool) string {
		if b {
			return "ok  "
		}
		return "FAIL"
	}
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
			fmt.Printf("%s sandbox probe (all namespaces unshared, /proc, loopback)\n", ok(true))
		} else {
			fmt.Printf("%s sandbox probe: %s\n", ok(false), d.ProbeOutput)
		}
	}
	fmt.Printf("     user namespaces: max_user_namespaces=%s unprivileged_userns_clone=%s apparmor_restrict_unprivileged_userns=%s\n",
		knob(d.MaxUserNamespaces), knob(d.UnprivilegedUsernsClone), knob(d.AppArmorRestrict))
	fmt.Printf("     limits: %s\n", r.Limits)
	if d.Prlimit != "" {
		fmt.Printf("     prlimit: %s (fallback for a setuid bwrap)\n", d.Prlimit)
	} else {
		fmt.Printf("     prlimit: not found (needed only with a setuid bwrap; install util-linux)\n")
	}
	if r.ConfigError != "" {
		fmt.Printf("%s settings %s: %s\n", ok(false), r.ConfigFile, r.ConfigError)
	} else {
		fmt.Printf("%s settings %s\n", ok(true), r.ConfigFile)
	}
	fmt.Printf("     state directory: %s\n", r.StateDir)
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
	fmt.Printf("     backend: %s\n", r.Backend)
	if !r.Ready {
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

func knob(v int) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprint(v)
}
