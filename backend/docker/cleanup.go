package docker

import (
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/internal/owner"
)

// Leftover is a corral container that Cleanup looked at.
type Leftover struct {
	// Name is the container's name (corral-<12 hex>); Key its LabelKey.
	Name string `json:"name"`
	Key  string `json:"key"`
	// State is the engine's state ("running", "exited", ...).
	State string `json:"state"`
	// Owner is the LabelOwner value.
	Owner string `json:"owner"`
	// Removed is set when Cleanup removed it; Kept says why it did not.
	Removed bool   `json:"removed"`
	Kept    string `json:"kept,omitempty"`
}

// Cleanup removes the corral containers (label corral.env=1; it never
// touches another container) left behind by corral processes that are gone
// (a crash, kill -9): those whose owner ran on this machine and has exited,
// and those that are not running. A container whose owner still runs is
// kept, and so is one owned by a process on another machine unless all is
// set; all removes every corral container, in use or not. Review overlay
// volumes that no container uses are removed too (cleanupVolumes).
func (e *Engine) Cleanup(ctx context.Context, all bool) ([]Leftover, error) {
	cli, err := e.client()
	if err != nil {
		return nil, err
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", LabelEnv+"=1")})
	if err != nil {
		return nil, e.engineErr("listing containers", err)
	}
	var out []Leftover
	for _, c := range res.Items {
		if c.Labels[LabelEnv] != "1" {
			continue
		}
		lo := Leftover{Key: c.Labels[LabelKey], State: string(c.State), Owner: c.Labels[LabelOwner], Name: c.ID[:12]}
		if len(c.Names) > 0 {
			lo.Name = strings.TrimPrefix(c.Names[0], "/")
		}
		o, ok := owner.Parse(lo.Owner)
		st := owner.Unknown
		if ok {
			st = o.State(e.self)
		}
		switch {
		case all:
		case st == owner.Dead:
		case st == owner.Alive:
			// Also while it is being created or checked.
			lo.Kept = fmt.Sprintf("in use by corral (pid %d)", o.PID)
		case lo.State != "running":
		default:
			lo.Kept = "owned by a corral process on another machine (" + o.Host + "); --all removes it"
		}
		if lo.Kept == "" && !all && lo.State == "running" {
			tmp := &ctr{id: c.ID, name: lo.Name}
			if e.othersInside(ctx, cli, tmp) {
				lo.Kept = "its corral is gone, but another corral (corral exec) runs commands in it"
			}
		}
		if lo.Kept == "" {
			_, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !cerrdefs.IsNotFound(err) {
				lo.Kept = "removal failed: " + err.Error()
			} else {
				lo.Removed = true
				e.log.Info("docker.container.removed", "container", lo.Name, "key", lo.Key, "reason", "cleanup")
				e.removeVolumesOf(ctx, cli, lo.Name, "cleanup")
			}
		}
		out = append(out, lo)
	}
	return append(out, e.cleanupVolumes(ctx, cli, all)...), nil
}

// cleanupVolumes removes the review overlay volumes (label corral.env=1)
// that no container uses: each is anonymous and goes with its container,
// so one is left only when its container was removed without its volumes
// (docker rm without -v). A volume holds nothing of its own (the layer is
// in the session's directory); removing it unmounts the overlay. They are
// reported as Leftovers with State "volume" and Key the layer directory.
//
// On Podman the volumes are named ones made just before their container
// (podmanVolumes), so one whose owner (LabelOwner) still runs is kept
// unless all is set: its container may be being made.
func (e *Engine) cleanupVolumes(ctx context.Context, cli *client.Client, all bool) []Leftover {
	res, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", LabelEnv+"=1").Add("dangling", "true")})
	if err != nil {
		e.log.Warn("docker.volume.list_failed", "error", err)
		return nil
	}
	var out []Leftover
	for _, v := range res.Items {
		if v.Labels[LabelEnv] != "1" {
			continue
		}
		if o, ok := owner.Parse(v.Labels[LabelOwner]); ok && !all && o.State(e.self) == owner.Alive {
			continue
		}
		lo := Leftover{Name: v.Name, Key: v.Labels[LabelLayer], State: "volume"}
		if _, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{}); cerrdefs.IsConflict(err) {
			// In use: Podman 4.3 lists used volumes too (its filters
			// are ORed); the container's line says why it stays.
			continue
		} else if err != nil && !cerrdefs.IsNotFound(err) {
			lo.Kept = "removal failed: " + err.Error()
		} else {
			lo.Removed = true
			e.removeScratch(v.Name)
			e.log.Info("docker.volume.removed", "volume", v.Name, "layer", lo.Key, "reason", "cleanup")
		}
		out = append(out, lo)
	}
	return out
}
