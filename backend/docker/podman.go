package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/internal/atomicfile"
	"github.com/corralhq/corral/internal/rmtree"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
)

// Podman serves the Engine API too (`podman system service`), with a few
// differences corral's containers meet; this file holds them, so Docker's
// path stays as it was. Source: Podman's compat handlers
// (pkg/api/handlers/compat/containers_create.go, 4.3): the security
// options are parsed as `podman create --security-opt`'s, where seccomp=
// names a file; Init needs the catatonit binary on the engine's host.

// Flavor is what corral needs to know of the engine behind the socket.
type Flavor struct {
	// Podman is set when the engine is Podman's compatible service.
	Podman bool
	// Rootless is set when the engine runs in a user namespace of an
	// unprivileged user (rootless Podman or rootless Docker): its uid 0 is
	// that user, and other uids are the user's subordinate ids.
	Rootless bool
	// NoLimits, when not "", says why the engine ignores containers'
	// limits (ignoresLimits): a rootless engine on cgroup v1 ("Resource
	// limits are not supported and ignored on cgroups V1 rootless
	// systems", Podman 4.3), or on cgroup v2 without the controllers
	// delegated to its user. Set only where corral refuses the engine:
	// where its containers' limits can hold per process instead,
	// PerProcess is set and NoLimits is "" (limitsPlan).
	NoLimits string
	// PerProcess, when not "", says why the engine's cgroups cannot
	// limit containers (ignoresLimits' reason), whose limits then hold
	// per process, not in total (limitsPlan, perProcessRlimits):
	// docker.memory as RLIMIT_DATA and docker.pids_limit as RLIMIT_NPROC
	// (counted in the container's own user namespace), and cpu_seconds as
	// RLIMIT_CPU's soft limit, on every process of the container (each of
	// corral's helpers there sets them on itself, reexec.RlimitsEnv, and
	// what it starts inherits them), as bwrap does for a plain user on
	// cgroup v1.
	PerProcess string
}

// podmanComponent is the name Podman gives itself among the version
// answer's Components (GET /version; Docker's is "Engine").
const podmanComponent = "Podman Engine"

// flavorOf reads the engine's flavor from its answers to GET /version
// (components' names) and GET /info: Docker lists "name=rootless" among
// the security options when it runs rootless; Podman 4.3 does not, and
// answers "Rootless": true, a field of its own (rootless). Pure.
func flavorOf(components []string, securityOptions []string, rootless bool) Flavor {
	f := Flavor{Rootless: rootless}
	for _, c := range components {
		if strings.EqualFold(strings.TrimSpace(c), podmanComponent) {
			f.Podman = true
		}
	}
	for _, o := range securityOptions {
		for kv := range strings.SplitSeq(o, ",") {
			if kv == "name=rootless" {
				f.Rootless = true
			}
		}
	}
	return f
}

// engineInfo is what corral reads of GET /info: Podman's Rootless is no
// field of the client's types, so the answer is decoded here.
type engineInfo struct {
	SecurityOptions []string
	Rootless        bool
	CgroupVersion   string
	// What the engine says it can limit (Docker reads them from its
	// cgroup's controllers; Podman's compatible answer says true on
	// cgroup v1 rootless, where it limits nothing).
	MemoryLimit, PidsLimit, CpuCfsQuota bool
	// KernelVersion is the engine host's kernel release (uname -r).
	KernelVersion string
}

// info asks the engine GET /info.
func info(ctx context.Context, cli *client.Client) (engineInfo, error) {
	var in engineInfo
	err := getJSON(ctx, cli, "/v"+cli.ClientVersion()+"/info", &in)
	return in, err
}

// flavor asks the engine once per process what it is (two small calls,
// before the first container) and remembers the answer; an engine that
// does not answer is not remembered, so a later command asks again.
func (e *Engine) flavor(ctx context.Context) (Flavor, error) {
	e.flavorMu.Lock()
	defer e.flavorMu.Unlock()
	if e.flavorKnown {
		return e.flavorVal, nil
	}
	cli, err := e.client()
	if err != nil {
		return Flavor{}, err
	}
	v, err := cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return Flavor{}, e.engineErr("asking the engine's version", err)
	}
	var names []string
	for _, c := range v.Components {
		names = append(names, c.Name)
	}
	in, err := info(ctx, cli)
	if err != nil {
		return Flavor{}, e.engineErr("asking the engine's information", err)
	}
	e.flavorVal, e.flavorKnown = flavorOf(names, in.SecurityOptions, in.Rootless), true
	var controllers []string
	if e.flavorVal.Podman && e.flavorVal.Rootless {
		var li libpodInfo
		if err := getJSON(ctx, cli, libpodInfoPath, &li); err != nil {
			e.flavorKnown = false
			return Flavor{}, e.engineErr("asking Podman's information", err)
		}
		controllers = li.controllers()
	}
	e.flavorVal = limitsPlan(e.flavorVal, ignoresLimits(e.flavorVal, in, controllers), in.KernelVersion)
	e.log.Info("docker.engine", "version", v.Version, "podman", e.flavorVal.Podman, "rootless", e.flavorVal.Rootless, "cgroup", in.CgroupVersion, "kernel", in.KernelVersion, "no_limits", e.flavorVal.NoLimits, "per_process_limits", e.flavorVal.PerProcess)
	return e.flavorVal, nil
}

// profileFileName is the name of the file holding a seccomp profile:
// content-addressed, so a profile is written once and a file never
// changes under a container being made.
func profileFileName(profile []byte) string {
	sum := sha256.Sum256(profile)
	return "seccomp-" + hex.EncodeToString(sum[:8]) + ".json"
}

// writeProfile returns the path of a file in dir holding profile (mode
// 0644, in a directory of mode 0755: the engine, root or the user, reads
// it), writing it when missing or when what is there differs. dir is
// corral's state directory's, which no sandbox is given.
func writeProfile(dir string, profile []byte) (string, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%w: docker backend: Podman takes the seccomp profile as a file, and this engine has no directory to write it in (Options.ProfileDir)", sandbox.ErrUnavailable)
	}
	p := filepath.Join(dir, profileFileName(profile))
	if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, profile) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm() == 0o644 {
			return p, nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%w: docker backend: the seccomp profile's directory: %v", sandbox.ErrUnavailable, err)
	}
	if err := atomicfile.Write(p, profile, 0o644, false); err != nil {
		return "", fmt.Errorf("%w: docker backend: writing the seccomp profile for Podman: %v", sandbox.ErrUnavailable, err)
	}
	return p, nil
}

// forPodman returns the security options sec in Podman's form: the
// seccomp profile's JSON (Docker's form, "seccomp=<JSON>") replaced by
// "seccomp=<path>", the file holding it (writeProfile). Other options
// pass unchanged ("no-new-privileges" means the same to both). Pure but
// for the write.
func forPodman(sec []string, dir string) ([]string, error) {
	out := slices.Clone(sec)
	for i, o := range out {
		v, ok := strings.CutPrefix(o, "seccomp=")
		if !ok || !strings.HasPrefix(strings.TrimSpace(v), "{") {
			continue // unconfined, or a path already
		}
		p, err := writeProfile(dir, []byte(v))
		if err != nil {
			return nil, err
		}
		out[i] = "seccomp=" + p
	}
	return out, nil
}

// podmanFix is the fix to add to an engine's error that a Podman host
// lacks a piece for (the messages of Podman 4.3), or "".
func podmanFix(msg string) string {
	switch {
	case strings.Contains(msg, "container-init binary not found") || strings.Contains(msg, "catatonit"):
		return "Podman runs containers' init (corral's containers have one, for zombies) with catatonit: install it on the engine's host (apt-get install catatonit, dnf install catatonit) or set init_path in containers.conf"
	case strings.Contains(msg, "error setting rlimit") && strings.Contains(msg, "operation not permitted"):
		return "rootful Podman raises containers' limits of open files and processes to its defaults (1048576), which fails where its root lacks CAP_SYS_RESOURCE (some VMs and containers): set default_ulimits in the service's containers.conf (/etc/containers/containers.conf, or the file CONTAINERS_CONF names for it: [containers] default_ulimits = [\"nofile=N:N\", \"nproc=M:M\"]) to the service's own hard limits, read from the running service (grep -E 'open files|processes' /proc/$(pgrep -f 'podman system service')/limits: Podman lowers its own process limit, so a shell's `ulimit -Hu` can be too high), and restart the service"
	case strings.Contains(msg, "newuidmap") || strings.Contains(msg, "newgidmap") || strings.Contains(msg, "/etc/subuid") || strings.Contains(msg, "/etc/subgid"):
		return "rootless Podman needs subordinate ids for the user (apt-get install uidmap; usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $USER; podman system migrate)"
	}
	return ""
}

// adaptHost turns hc, the container's configuration as Docker takes it
// (buildSpec: the policy), into what the engine of flavor f takes for the
// same policy; dir is Options.ProfileDir. Docker's is left as it is. On
// Podman: the seccomp profile as a file (forPodman); rootless, the user
// namespace "keep-id", which maps the user running the service (the
// workspace's owner, corral's caller) to the same uid and gid in the
// container, so docker.user "" (the caller's ids) writes the workspace as
// the caller, as on Docker; without it uid 0 in the container is the
// caller and the caller's uid is one of its subordinate ids, which cannot
// write the workspace. Its tmpfs mounts without a copy-up (podmanTmpfs).
// A user namespace named by docker.extra_run_args is kept. The masked
// paths as the security option "mask=<path>:<path>...": Podman 4.3's
// compatible API ignores HostConfig.MaskedPaths and masks its own list
// (containers/common's default, without /proc/interrupts), found by
// TestMaskedPaths; its default read-only paths hold corral's
// (readonlyPaths). Review mode's overlay volumes as named volumes to
// make first, which it returns (podmanVolumes; name is the container's,
// reviewDir Options.ReviewDir).
//
// Where the engine's limits hold per process (Flavor.PerProcess), the
// container's environment cfg.Env carries them as rlimits
// (perProcessRlimits, with cpuSeconds, the request's cpu_seconds); a
// user namespace other than keep-id is refused (RLIMIT_NPROC counts a
// user's processes per user namespace, kernel/ucount.c, and keep-id
// gives each container one of its own, while another may hold the
// service's and other containers' processes too), and so is a
// docker.memory below minPerProcessMemory.
func adaptHost(cfg *container.Config, hc *container.HostConfig, f Flavor, dir, name, reviewDir string, cpuSeconds int) ([]podmanVolume, error) {
	if !f.Podman {
		return nil, nil
	}
	sec, err := forPodman(hc.SecurityOpt, dir)
	if err != nil {
		return nil, err
	}
	if len(hc.MaskedPaths) > 0 {
		sec = append(sec, "mask="+strings.Join(hc.MaskedPaths, ":"))
	}
	hc.SecurityOpt = sec
	hc.Mounts, hc.Tmpfs = podmanTmpfs(hc.Mounts, hc.Tmpfs)
	if f.Rootless && hc.UsernsMode == "" {
		hc.UsernsMode = "keep-id"
	}
	if f.PerProcess != "" {
		if hc.UsernsMode != "keep-id" {
			return nil, fmt.Errorf("%w: docker backend: this rootless engine %s, so corral holds containers' limits per process, and the process limit (RLIMIT_NPROC, docker.pids_limit) counts the processes of a user namespace: the container needs one of its own (--userns=keep-id, corral's default), not %q from docker.extra_run_args; nothing was run", sandbox.ErrPolicy, f.PerProcess, string(hc.UsernsMode))
		}
		if hc.Memory > 0 && hc.Memory < minPerProcessMemory {
			return nil, fmt.Errorf("%w: docker backend: docker.memory is %d MiB, and this rootless engine %s, so corral holds it per process (RLIMIT_DATA), on its own helpers in the container too, which need %d MiB: raise docker.memory to %dm or more; nothing was run", sandbox.ErrPolicy, hc.Memory>>20, f.PerProcess, minPerProcessMemory>>20, minPerProcessMemory>>20)
		}
		var pids int64
		if hc.PidsLimit != nil {
			pids = *hc.PidsLimit
		}
		cfg.Env = slices.DeleteFunc(cfg.Env, func(kv string) bool { return strings.HasPrefix(kv, reexec.RlimitsEnv+"=") })
		if v := perProcessRlimits(hc.Memory, pids, cpuSeconds); v != "" {
			cfg.Env = append(cfg.Env, reexec.RlimitsEnv+"="+v)
		}
	}
	mounts, vols, err := podmanVolumes(hc.Mounts, name, reviewDir)
	if err != nil {
		return nil, err
	}
	hc.Mounts = mounts
	return vols, nil
}

// minPerProcessMemory is the least docker.memory, in bytes, that holds
// per process (perProcessRlimits): corral's helpers in the container,
// Go programs, run under it too, and one did not start below 72 to 76
// MiB of RLIMIT_DATA (corral-helper and corral, Go 1.26, measured with
// prlimit --data; the Go runtime maps its first heap at start), so the
// container could run nothing.
const minPerProcessMemory = 128 << 20

// perProcessRlimits returns the limits of a container whose engine
// cannot limit it by cgroups (Flavor.PerProcess), as reexec.RlimitsEnv's
// value: "data" (RLIMIT_DATA, bytes: what each process maps writable and
// private, since Linux 4.7; never RLIMIT_AS, which counts reservations
// and stopped node, go and java at bwrap's defaults, docs/sandbox.md) at
// memory (docker.memory, bytes) and "nproc" (RLIMIT_NPROC: the processes
// and threads of the container's user in its user namespace,
// kernel/ucount.c since Linux 5.14) at pids (docker.pids_limit), each
// soft and hard; and "cpu" (RLIMIT_CPU, seconds of CPU per process) at
// cpuSeconds as the soft limit only, hard unlimited (-1) on the helpers
// themselves: a hard limit would SIGKILL corral's helper in the container
// (the agent, one process for the container's life, relaying every
// command). Each command gets a hard one, the soft plus a second, from
// the reaper that starts it (reexec.CommandCPU, reaper.Spec.CPUSeconds),
// so that it cannot raise its soft limit again: SIGXCPU at cpuSeconds,
// SIGKILL a second later (setrlimit(2)), as under bwrap. A value of 0 or
// less sets no limit of that name; "" when none is set. Pure.
//
// They travel in the container's environment, not as HostConfig.Ulimits:
// Podman's compatible API drops a rootless caller's Ulimits
// (pkg/api/handlers/compat/containers_create.go, 4.3 to 5: "if
// !rootless.IsRootless()"), so each helper sets them on itself
// (reexec.Init), and the commands it starts inherit them.
func perProcessRlimits(memory, pids int64, cpuSeconds int) string {
	var ul []string
	if memory > 0 {
		ul = append(ul, (&container.Ulimit{Name: "data", Soft: memory, Hard: memory}).String())
	}
	if pids > 0 {
		ul = append(ul, (&container.Ulimit{Name: "nproc", Soft: pids, Hard: pids}).String())
	}
	if cpuSeconds > 0 {
		ul = append(ul, (&container.Ulimit{Name: "cpu", Soft: int64(cpuSeconds), Hard: -1}).String())
	}
	return strings.Join(ul, ",")
}

// limitsPlan returns f with how containers' limits hold on it, given
// why its cgroups cannot hold them (ignoresLimits; "" when they can) and
// the engine host's kernel release (GET /info's KernelVersion, "6.1.0-13-amd64"):
// by cgroups (why ""), per process (PerProcess = why: rlimits on every
// process of the container, perProcessRlimits), or not at all, refused
// (NoLimits, noLimitsErr):
//
//   - a rootless engine other than Podman (rootless Docker): its
//     containers share rootlesskit's user namespace with the engine and
//     with each other, so RLIMIT_NPROC would count them all together;
//   - Linux before 5.14 (or a release not understood): RLIMIT_NPROC was
//     counted per user across every namespace, so a container's limit
//     would count the user's other processes too; 5.14 moved the count
//     into the user namespace (kernel/ucount.c, "Reimplement
//     RLIMIT_NPROC on top of ucounts"), and Podman's keep-id gives each
//     container a user namespace of its own.
//
// Pure.
func limitsPlan(f Flavor, why, kernel string) Flavor {
	f.NoLimits, f.PerProcess = "", ""
	switch {
	case why == "":
	case !f.Podman:
		f.NoLimits = why + ", and its containers share one user namespace with the engine, so a per-process limit of processes (RLIMIT_NPROC) would count them all"
	case !kernelAtLeast(kernel, 5, 14):
		f.NoLimits = why + ", and its kernel (" + kernel + ") is older than Linux 5.14, where a limit of processes (RLIMIT_NPROC) counts every process of the user, not the container's"
	default:
		f.PerProcess = why
	}
	return f
}

// kernelAtLeast says whether release (uname -r) is major.minor or later;
// false for a release it cannot read. Pure.
func kernelAtLeast(release string, major, minor int) bool {
	f := strings.SplitN(strings.TrimSpace(release), ".", 3)
	if len(f) < 2 {
		return false
	}
	num := func(s string) (int, bool) {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		n, err := strconv.Atoi(s[:i])
		return n, err == nil
	}
	ma, ok1 := num(f[0])
	mi, ok2 := num(f[1])
	return ok1 && ok2 && (ma > major || ma == major && mi >= minor)
}

// describePerProcess says in one line how a container's limits hold on
// an engine whose cgroups cannot hold them for reason why
// (Flavor.PerProcess), with docker.memory memory (bytes), docker.pids_limit
// pids and cpu_seconds cpuSeconds, for corral doctor and the log; bwrap
// says the same of RLIMIT_DATA for a plain user on cgroup v1
// (describeMemory). Pure.
func describePerProcess(why string, memory, pids int64, cpuSeconds int) string {
	var parts []string
	if memory > 0 {
		parts = append(parts, fmt.Sprintf("memory RLIMIT_DATA %d MiB per process (docker.memory)", memory>>20))
	}
	if pids > 0 {
		parts = append(parts, fmt.Sprintf("RLIMIT_NPROC %d processes and threads in the container's user namespace (docker.pids_limit)", pids))
	}
	if cpuSeconds > 0 {
		parts = append(parts, fmt.Sprintf("RLIMIT_CPU %d s of CPU per process (SIGXCPU, then SIGKILL a second later; cpu_seconds)", cpuSeconds))
	}
	if len(parts) == 0 {
		parts = append(parts, "none set")
	}
	return "limits per process, not in total (this rootless engine " + why + "): " + strings.Join(parts, ", ") + "; a memory bomb is held per process, not in total, shared memory (memfd, MAP_SHARED) not at all, and docker.cpus is not held"
}

// withPodmanFix adds podmanFix's fix to err, an engine's error, on Podman.
func withPodmanFix(f Flavor, err error) error {
	if fix := podmanFix(err.Error()); f.Podman && fix != "" {
		return fmt.Errorf("%w; %s", err, fix)
	}
	return err
}

// podmanTmpfs returns mounts without their tmpfs mounts, and tmpfs with
// them and every tmpfs it held marked "notmpcopyup". Podman fills a
// tmpfs with what lies below its mount point ("tmpcopyup", its default,
// for --mount type=tmpfs and --tmpfs alike), so an empty tmpfs over a
// credential directory in a bind (binds.go's covers) would show the
// directory's files; only the --tmpfs form (HostConfig.Tmpfs) carries
// the option through the compatible API. Docker never copies up and
// refuses the option, so this is Podman's alone. Pure.
func podmanTmpfs(mounts []mount.Mount, tmpfs map[string]string) ([]mount.Mount, map[string]string) {
	out := make(map[string]string, len(tmpfs))
	for dst, opts := range tmpfs {
		if !slices.Contains(strings.Split(opts, ","), "notmpcopyup") {
			opts = strings.TrimPrefix(opts+",notmpcopyup", ",")
		}
		out[dst] = opts
	}
	var kept []mount.Mount
	for _, m := range mounts {
		if m.Type != mount.TypeTmpfs {
			kept = append(kept, m)
			continue
		}
		opts := []string{"rw"}
		if m.ReadOnly {
			opts[0] = "ro"
		}
		if o := m.TmpfsOptions; o != nil {
			if o.SizeBytes > 0 {
				opts = append(opts, fmt.Sprintf("size=%d", o.SizeBytes))
			}
			if o.Mode != 0 {
				opts = append(opts, fmt.Sprintf("mode=%#o", o.Mode.Perm()))
			}
		}
		out[m.Target] = strings.Join(append(opts, "nosuid", "nodev", "notmpcopyup"), ",")
	}
	if len(out) == 0 {
		out = nil
	}
	return kept, out
}

// rootlessReviewRefusal says why workspace_mode review cannot run on
// rootless Podman for a container of user user (Config.User, "uid:gid")
// in the user namespace userns (HostConfig.UsernsMode), made by a corral
// of uid and gid, whose image holds the path held at an overlay's target
// ("" when it holds none); "" when it can. Podman chowns a named
// volume's root at its first mount (libpod's fixVolumePermissions, which
// 4.3's APIs cannot turn off: a "uid=" option reaches overlayfs, which
// refuses it), through the overlay, so the layer's own upper directory
// on the host takes the new owner: first the container's user, then,
// when the image holds the target, the image directory's owner, mode and
// times. Rootful, corral (root) sets them back (restoreRoot). Rootless,
// any owner but the caller's own is a subordinate uid on the host,
// which an unprivileged corral can neither chown back nor write below
// (the layer would be lost to it), so it must never happen: the
// container's user must be the caller through keep-id (corral's default
// there: uid and gid map to themselves), and the target absent from the
// image. Pure.
func rootlessReviewRefusal(user, userns string, uid, gid int, held string) string {
	const fix = "use docker.user \"\" (your own uid:gid), no --userns in docker.extra_run_args, and a docker.workdir the image does not hold (\"\", the workspace's own path, is the usual choice); or rootful Podman, Docker, or the bwrap backend"
	if userns != "keep-id" && !strings.HasPrefix(userns, "keep-id:") {
		return fmt.Sprintf("its user namespace is %q, not keep-id, so the layer's files would belong to a subordinate uid of yours that corral cannot write as; %s", userns, fix)
	}
	if user != fmt.Sprintf("%d:%d", uid, gid) {
		return fmt.Sprintf("the container's user is %q, not yours (%d:%d): Podman would give the layer's root to it, a subordinate uid on the host that corral cannot write as or chown back; %s", user, uid, gid, fix)
	}
	if held != "" {
		return fmt.Sprintf("the image holds %s, where the workspace is mounted: Podman would give the layer's root that directory's owner (the image's, a subordinate uid on the host), which corral cannot chown back without root; %s", held, fix)
	}
	return ""
}

// errReviewRootless is rootlessReviewRefusal's answer why as an error;
// nothing was run and the layer is untouched.
func errReviewRootless(why string) error {
	return fmt.Errorf("%w: docker backend: workspace_mode review on rootless Podman: %s; nothing was run", sandbox.ErrUnavailable, why)
}

// imageHolds returns the first of paths the image holds (in a created,
// never started container of it, as imageBundle reads the image; ""
// when none), for rootlessReviewRefusal. Answers are kept per image ID
// and path: an image's files never change under its ID. An error other
// than "not found" is returned, so the caller refuses rather than
// guesses.
func (e *Engine) imageHolds(ctx context.Context, cli *client.Client, image string, paths []string) (string, error) {
	ins, err := cli.ImageInspect(ctx, image)
	if err != nil {
		return "", e.engineErr("inspecting image "+image, err)
	}
	var ask []string
	e.mu.Lock()
	for _, p := range paths {
		held, ok := e.holds[ins.ID+"\x00"+p]
		if ok && held {
			e.mu.Unlock()
			return p, nil
		}
		if !ok {
			ask = append(ask, p)
		}
	}
	e.mu.Unlock()
	if len(ask) == 0 {
		return "", nil
	}
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Entrypoint: []string{"/nonexistent"}, Labels: map[string]string{LabelEnv: "1", LabelKey: "path-probe", LabelOwner: e.self.String()}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
		Name:       randomName(),
	})
	if err != nil {
		return "", e.engineErr("creating a container to read the image's paths", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 30e9)
		defer cancel()
		_, _ = cli.ContainerRemove(rctx, res.ID, client.ContainerRemoveOptions{Force: true})
	}()
	for _, p := range ask {
		_, err := cli.ContainerStatPath(ctx, res.ID, client.ContainerStatPathOptions{Path: p})
		if err != nil && !cerrdefs.IsNotFound(err) {
			return "", e.engineErr("looking for "+p+" in image "+image, err)
		}
		e.mu.Lock()
		if e.holds == nil {
			e.holds = map[string]bool{}
		}
		e.holds[ins.ID+"\x00"+p] = err == nil
		e.mu.Unlock()
		if err == nil {
			return p, nil
		}
	}
	return "", nil
}

// LabelContainer is set on the named volumes corral makes for a
// container on Podman (podmanVolumes): the container's name, by which
// its removal finds them (removeVolumesOf).
const LabelContainer = "corral.container"

// podmanVolume is a named volume of the local driver that corral makes
// before a container on Podman (podmanVolumes) and removes after it.
type podmanVolume struct {
	Name string
	// Options are the driver's (type, device, o), Labels the volume's.
	Options, Labels map[string]string
	// Scratch, when not "", is the directory holding the throwaway
	// upper and work directories of a read-only overlay; removed with
	// the volume.
	Scratch string
}

// podmanVolumes turns mounts, as Docker takes them, into what Podman
// 4.3's compatible API takes for the same mounts; ctr is the
// container's name, scratchRoot Options.ReviewDir. Docker makes the
// review layer's overlay as an anonymous volume given inline with the
// container (overlayVolume), whose driver options Podman's compatible
// create drops (pkg/api/handlers/compat/containers_create.go: an inline
// volume becomes a plain one), so the container would get an empty
// directory, not the workspace. A named volume made first (POST
// /volumes/create) keeps them: Podman mounts it with mount(8) at the
// container's start, with exactly the options given, and unmounts it
// when the container stops (measured, Podman 4.3.1). So each volume
// mount with a driver's options becomes one, named <ctr>-v<N> and
// labelled with the container's name (LabelContainer), mounted by name.
//
// Podman, unlike Docker, chowns a named volume's root to the
// container's user at its first mount (libpod's fixVolumePermissions;
// nothing in 4.3's compatible API turns it off: its "uid=" option would
// reach overlayfs's mount options, which refuse it). A lower-only
// overlay (a protected directory both the layer and the host's tree
// hold, "ro,lowerdir=A:B") is read-only to the kernel, so that chown
// fails (EROFS) and the container does not start; such a volume gets a
// throwaway upper and work directory under scratchRoot/<name> that
// takes the chown and nothing else, and is mounted read-only into the
// container (Mount.ReadOnly), which keeps the directory read-only as on
// Docker. Volume mounts without driver options, and other mounts, are
// unchanged. Pure.
func podmanVolumes(mounts []mount.Mount, ctr, scratchRoot string) ([]mount.Mount, []podmanVolume, error) {
	var out []mount.Mount
	var vols []podmanVolume
	for _, m := range mounts {
		if m.Type != mount.TypeVolume || m.Source != "" || m.VolumeOptions == nil || m.VolumeOptions.DriverConfig == nil {
			out = append(out, m)
			continue
		}
		d := m.VolumeOptions.DriverConfig
		if d.Name != "local" && d.Name != "" {
			return nil, nil, fmt.Errorf("%w: docker backend: a volume of driver %q given inline, which Podman's compatible API cannot make", sandbox.ErrUnavailable, d.Name)
		}
		v := podmanVolume{Name: fmt.Sprintf("%s-v%d", ctr, len(vols)), Options: maps.Clone(d.Options), Labels: maps.Clone(m.VolumeOptions.Labels)}
		if v.Labels == nil {
			v.Labels = map[string]string{}
		}
		v.Labels[LabelContainer] = ctr
		ro := m.ReadOnly
		if lowers, readOnly := lowerOnly(v.Options["o"]); readOnly {
			if scratchRoot == "" || !filepath.IsAbs(scratchRoot) {
				return nil, nil, fmt.Errorf("%w: docker backend: a read-only overlay on Podman needs a directory for its throwaway upper layer, and this engine has none (Options.ReviewDir)", sandbox.ErrUnavailable)
			}
			v.Scratch = filepath.Join(scratchRoot, v.Name)
			o, err := overlayOptions(lowers, filepath.Join(v.Scratch, "upper"), filepath.Join(v.Scratch, "work"))
			if err != nil {
				return nil, nil, fmt.Errorf("%w: workspace_mode review on Podman: %v", sandbox.ErrPolicy, err)
			}
			v.Options["o"] = o
			ro = true
		}
		vols = append(vols, v)
		out = append(out, mount.Mount{Type: mount.TypeVolume, Source: v.Name, Target: m.Target, ReadOnly: ro,
			// The engine must not copy the image's files at the
			// target into the volume (it would write them to the layer).
			VolumeOptions: &mount.VolumeOptions{NoCopy: true}})
	}
	return out, vols, nil
}

// restoreRoot gives the directory merged (the container's view of the
// review workspace, through /proc/PID/root) back the owner, mode and
// times of before, the layer's upper directory as it was before the
// container started, when they differ, and reports whether it did.
// Podman, at a named volume's first mount, chowns its root to the
// container's user and, when the image holds the target, to that
// directory's owner, mode and times (libpod's fixVolumePermissions):
// with a workspace path the image has (docker.workdir /home, say) the
// project's root turned root's, 0755, of 1970, where Docker shows the
// layer's own. The change goes through the overlay (merged), never to
// upper beneath it: overlayfs keeps its inodes' attributes from its
// own setattr, and a change below a mount is undefined (overlayfs.rst).
func restoreRoot(merged string, before os.FileInfo) (bool, error) {
	now, err := os.Lstat(merged)
	if err != nil {
		return false, err
	}
	b, okb := before.Sys().(*syscall.Stat_t)
	n, okn := now.Sys().(*syscall.Stat_t)
	if !okb || !okn {
		return false, fmt.Errorf("no ownership in the stat of %s", merged)
	}
	if b.Uid == n.Uid && b.Gid == n.Gid && before.Mode() == now.Mode() && before.ModTime().Equal(now.ModTime()) {
		return false, nil
	}
	if err := os.Lchown(merged, int(b.Uid), int(b.Gid)); err != nil {
		return false, err
	}
	if err := os.Chmod(merged, before.Mode()); err != nil {
		return false, err
	}
	atime := time.Unix(b.Atim.Sec, b.Atim.Nsec)
	return true, os.Chtimes(merged, atime, before.ModTime())
}

// lowerOnly returns the lower directories of o, an overlay's mount
// options as overlayOptions makes them, and whether o has no upper
// directory (a read-only overlay). overlayOptions' paths hold no ',' or
// ':', so the split is exact. Pure.
func lowerOnly(o string) (lowers []string, readOnly bool) {
	readOnly = true
	for opt := range strings.SplitSeq(o, ",") {
		if v, ok := strings.CutPrefix(opt, "lowerdir="); ok {
			lowers = strings.Split(v, ":")
		}
		if strings.HasPrefix(opt, "upperdir=") {
			readOnly = false
		}
	}
	return lowers, readOnly && len(lowers) > 0
}

// createVolumes makes vols on the engine (their scratch directories
// first, mode 0700: the engine, root, reads them); on an error it
// removes what it made and returns the error.
func (e *Engine) createVolumes(ctx context.Context, cli *client.Client, vols []podmanVolume) error {
	for i, v := range vols {
		err := func() error {
			if v.Scratch != "" {
				for _, d := range []string{"upper", "work"} {
					if err := os.MkdirAll(filepath.Join(v.Scratch, d), 0o700); err != nil {
						return fmt.Errorf("%w: docker backend: the read-only overlay's scratch directory: %v", sandbox.ErrUnavailable, err)
					}
				}
			}
			_, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: v.Name, Driver: "local", DriverOpts: v.Options, Labels: v.Labels})
			if err != nil {
				return e.engineErr("creating the volume "+v.Name, err)
			}
			return nil
		}()
		if err != nil {
			e.dropVolumes(vols[:i+1], "failed to create")
			return err
		}
	}
	return nil
}

// dropVolumes removes vols (podmanVolumes) and their scratch
// directories, once the container that used them is gone or was never
// made; why is logged.
func (e *Engine) dropVolumes(vols []podmanVolume, why string) {
	cli, err := e.client()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range vols {
		e.removeVolume(ctx, cli, v.Name, v.Labels[LabelLayer], why)
	}
}

// removeVolume removes the named volume name and the scratch directory
// podmanVolumes gave it, if any (Options.ReviewDir/<name>: never a path
// read from the engine). A volume still in use (HTTP 409; Podman 4.3's
// volume list ORs its filters, so cleanup's dangling ones include used
// ones) is kept, and so is its scratch. It reports whether the volume
// is gone.
func (e *Engine) removeVolume(ctx context.Context, cli *client.Client, name, layerDir, why string) bool {
	if _, err := cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		if !cerrdefs.IsConflict(err) {
			e.log.Warn("docker.volume.remove_failed", "volume", name, "error", err)
		}
		return false
	}
	e.removeScratch(name)
	e.log.Info("docker.volume.removed", "volume", name, "layer", layerDir, "reason", why)
	return true
}

// removeScratch removes the scratch directory podmanVolumes gave the
// volume name, if any (Options.ReviewDir/<name>: never a path read from
// the engine), once the volume is gone.
func (e *Engine) removeScratch(name string) {
	if e.opts.ReviewDir == "" || !filepath.IsAbs(e.opts.ReviewDir) || !validVolumeName(name) {
		return
	}
	if err := rmtree.RemoveAll(filepath.Join(e.opts.ReviewDir, name)); err != nil {
		e.log.Warn("docker.volume.scratch_failed", "volume", name, "error", err)
	}
}

// validVolumeName reports whether name is one podmanVolumes gives
// (<NamePrefix><hex>-v<N>), so that it names a directory below
// Options.ReviewDir and nothing else. Pure.
func validVolumeName(name string) bool {
	rest, ok := strings.CutPrefix(name, NamePrefix)
	if !ok {
		return false
	}
	hexPart, n, ok := strings.Cut(rest, "-v")
	if !ok || hexPart == "" || n == "" {
		return false
	}
	for _, c := range hexPart {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// removeVolumesOf removes the volumes podmanVolumes made for the
// container named name, after its removal: Podman removes with a
// container (RemoveVolumes) only its anonymous volumes, and these are
// named. Nothing to do on Docker (its are anonymous: gone with the
// container), so the engine's flavor decides; an engine that does not
// say leaves them to `corral cleanup` (cleanupVolumes).
func (e *Engine) removeVolumesOf(ctx context.Context, cli *client.Client, name, why string) {
	if fl, err := e.flavor(ctx); err != nil || !fl.Podman {
		return
	}
	res, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", LabelContainer+"="+name)})
	if err != nil {
		e.log.Warn("docker.volume.list_failed", "error", err)
		return
	}
	for _, v := range res.Items {
		if v.Labels[LabelContainer] == name && v.Labels[LabelEnv] == "1" {
			e.removeVolume(ctx, cli, v.Name, v.Labels[LabelLayer], why)
		}
	}
}

// ignoresLimits says why an engine of flavor f, answering in (GET /info)
// and, for rootless Podman, controllers (GET /libpod/info's
// host.cgroupControllers: those delegated to its user; nil for other
// engines), would ignore containers' memory, CPU and pids limits, or ""
// when it enforces them. A rootful engine is trusted to. A rootless one
// on cgroup v1 never can; on cgroup v2 it needs the memory, pids and cpu
// controllers delegated to its user (a systemd user session): Podman
// lists them, Docker says so in MemoryLimit, PidsLimit and CpuCfsQuota.
// Pure.
func ignoresLimits(f Flavor, in engineInfo, controllers []string) string {
	if !f.Rootless {
		return ""
	}
	if in.CgroupVersion == "1" {
		return "runs on cgroup v1, where a rootless engine ignores every container limit"
	}
	var missing []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		have := slices.Contains(controllers, c)
		if !f.Podman {
			have = map[string]bool{"memory": in.MemoryLimit, "pids": in.PidsLimit, "cpu": in.CpuCfsQuota}[c]
		}
		if !have {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return "has no " + strings.Join(missing, ", ") + " cgroup controller delegated to its user, so it cannot limit containers"
	}
	return ""
}

// noLimitsErr refuses an engine that would ignore docker.memory, cpus
// and pids_limit for reason why (Flavor.NoLimits): a fork bomb would take
// the machine.
func noLimitsErr(why string) error {
	return fmt.Errorf("%w: docker backend: this rootless engine %s, so it would ignore containers' limits (docker.memory, docker.cpus, docker.pids_limit); nothing was run: %s", sandbox.ErrUnavailable, why, noLimitsFix)
}

// noLimitsFix is what to do about an engine that ignores limits.
const noLimitsFix = "use rootless Podman on Linux 5.14 or later, where corral holds the limits per process, or a rootful engine (Podman: sudo podman system service --time=0 unix:///run/podman/podman.sock, then docker.host: unix:///run/podman/podman.sock), or a host with cgroup v2 (systemd.unified_cgroup_hierarchy=1) where the rootless engine runs in a systemd user session, which delegates the memory, pids and cpu controllers"

// perProcessLimitHit names the per-process limit (perProcessRlimits) that
// most likely ended res, a command in a container whose engine cannot
// limit it by cgroups, from the end of its stderr, or "": the process
// limit when a fork was refused (reported even when the command went
// on, as bwrap does), the CPU limit when it died of SIGXCPU (the soft
// RLIMIT_CPU of cpuSeconds), the memory limit when a program said an
// allocation failed; none for a command that timed out (corral ended
// it) or, but for the process limit, succeeded. Pure.
func perProcessLimitHit(res *sandbox.Result, cpuSeconds int, stderr string) string {
	switch {
	case res.TimedOut:
		return ""
	case sandbox.ForkRefused(stderr):
		return sandbox.LimitContainerProcs
	case res.ExitCode == 0:
		return ""
	case cpuSeconds > 0 && res.Signal == int(syscall.SIGXCPU):
		return sandbox.LimitCPU
	case sandbox.RanOutOfMemory(stderr):
		return sandbox.LimitContainerProcessMemory
	}
	return ""
}
