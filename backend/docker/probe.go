package docker

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/moby/moby/client"
)

// Diagnosis is what `corral doctor` reports about the Docker engine.
type Diagnosis struct {
	// HostChoice is the engine's address and where it came from
	// (DOCKER_HOST, docker.host, the socket search: resolveHost).
	HostChoice
	// Reachable is set when the engine answered; Error says why not.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Version is the engine's version; APIVersion the API version corral
	// negotiated; MinAPIVersion the oldest the engine accepts.
	Version       string `json:"version,omitempty"`
	APIVersion    string `json:"api_version,omitempty"`
	MinAPIVersion string `json:"min_api_version,omitempty"`
	// Podman is set when the engine is Podman's compatible service
	// (podman.go says what corral does differently there).
	Podman bool `json:"podman,omitempty"`
	// Facts are what the engine said of itself beyond its version (nil
	// when it did not answer); Problems what it lacks for corral's
	// containers, with their fixes (engineProblems), each a failure.
	Facts    *EngineFacts `json:"facts,omitempty"`
	Problems []Problem    `json:"problems,omitempty"`
	// Limits, when not "", says how containers' limits hold on an engine
	// whose cgroups cannot hold them (Flavor.PerProcess): per process,
	// not in total (describePerProcess); set by corral doctor's docker
	// part, which knows cpu_seconds.
	Limits string `json:"limits,omitempty"`
	// Image is docker.image; ImagePresent says whether the engine has it
	// (otherwise the first command pulls it).
	Image        string `json:"image"`
	ImagePresent bool   `json:"image_present"`
	// HelperError is set when corral's executable cannot serve as the
	// in-container helper (not static).
	HelperError string `json:"helper_error,omitempty"`
	// SettingsError is set when the docker.* settings are invalid.
	SettingsError string `json:"settings_error,omitempty"`
	// Fix names what to do when not Ready.
	Fix string `json:"fix,omitempty"`
}

// Ready reports whether containers can be started: the engine answers, the
// helper is usable, the settings are valid and the engine lacks nothing
// (Problems). A missing image is not a
// failure (it is pulled on first use).
func (d *Diagnosis) Ready() bool {
	return d.Reachable && d.HelperError == "" && d.SettingsError == "" && len(d.Problems) == 0
}

// readyTimeout bounds Engine.Ready's ping.
const readyTimeout = 5 * time.Second

// Ready reports whether the engine answers a ping (GET /_ping, Docker
// Engine API) within 5 s: nil, else an error naming the engine's address
// (DOCKER_HOST, else the default socket) and the client's error.
func (e *Engine) Ready(ctx context.Context) error {
	cli, err := e.client()
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	if err != nil {
		return fmt.Errorf("docker engine at %s: not reachable: %w", e.address().Addr, err)
	}
	return nil
}

// Diagnose asks the engine for its version and the image, and checks the
// helper and settings, within a few seconds.
func (e *Engine) Diagnose(ctx context.Context, st Settings) *Diagnosis {
	d := &Diagnosis{HostChoice: e.address(), Image: st.Image}
	if _, err := st.check(os.Getuid(), os.Getgid()); err != nil {
		d.SettingsError = err.Error()
	} else if _, err := ParseExtraRunArgs(st.ExtraRunArgs); err != nil {
		d.SettingsError = err.Error()
	}
	if _, err := e.helperPath(); err != nil {
		d.HelperError = err.Error()
		d.Fix = "build corral statically: CGO_ENABLED=0 go build -o corral ./cmd/corral"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli, err := e.client()
	if err == nil {
		var v client.ServerVersionResult
		if v, err = cli.ServerVersion(ctx, client.ServerVersionOptions{}); err == nil {
			d.Reachable = true
			d.Version, d.MinAPIVersion = v.Version, v.MinAPIVersion
			d.APIVersion = cli.ClientVersion()
			var names []string
			for _, c := range v.Components {
				names = append(names, c.Name)
			}
			in, ierr := info(ctx, cli)
			fl := flavorOf(names, in.SecurityOptions, in.Rootless)
			d.Podman = fl.Podman
			if ierr == nil {
				f := engineFacts(ctx, cli, fl, in, d.Addr)
				d.Facts, d.Problems = &f, engineProblems(f)
			}
			if _, err := cli.ImageInspect(ctx, st.Image); err == nil {
				d.ImagePresent = true
			}
		}
	}
	if err != nil {
		d.Error = err.Error()
		d.Fix = reachFix(err)
	}
	return d
}
