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
	// Host is the engine's address (DOCKER_HOST or the default socket).
	Host string `json:"host"`
	// Reachable is set when the engine answered; Error says why not.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Version is the engine's version; APIVersion the API version corral
	// negotiated; MinAPIVersion the oldest the engine accepts.
	Version       string `json:"version,omitempty"`
	APIVersion    string `json:"api_version,omitempty"`
	MinAPIVersion string `json:"min_api_version,omitempty"`
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
// helper is usable and the settings are valid. A missing image is not a
// failure (it is pulled on first use).
func (d *Diagnosis) Ready() bool {
	return d.Reachable && d.HelperError == "" && d.SettingsError == ""
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
		return fmt.Errorf("docker engine at %s: not reachable: %w", engineHost(), err)
	}
	return nil
}

// Diagnose asks the engine for its version and the image, and checks the
// helper and settings, within a few seconds.
func (e *Engine) Diagnose(ctx context.Context, st Settings) *Diagnosis {
	d := &Diagnosis{Host: os.Getenv("DOCKER_HOST"), Image: st.Image}
	if d.Host == "" {
		d.Host = client.DefaultDockerHost
	}
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
