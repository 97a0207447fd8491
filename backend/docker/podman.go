package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/internal/atomicfile"
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
		return "rootful Podman raises containers' limits of open files and processes to its defaults (1048576), which fails where its root lacks CAP_SYS_RESOURCE (some VMs and containers): set default_ulimits in containers.conf ([containers] default_ulimits = [\"nofile=N:N\", \"nproc=M:M\"], within the service's own `ulimit -Hn` and `ulimit -Hu`) and restart the service"
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
// (readonlyPaths).
//
// Where the engine's limits hold per process (Flavor.PerProcess), the
// container's environment cfg.Env carries them as rlimits
// (perProcessRlimits, with cpuSeconds, the request's cpu_seconds); a
// user namespace other than keep-id is refused (RLIMIT_NPROC counts a
// user's processes per user namespace, kernel/ucount.c, and keep-id
// gives each container one of its own, while another may hold the
// service's and other containers' processes too), and so is a
// docker.memory below minPerProcessMemory.
func adaptHost(cfg *container.Config, hc *container.HostConfig, f Flavor, dir string, cpuSeconds int) error {
	if !f.Podman {
		return nil
	}
	sec, err := forPodman(hc.SecurityOpt, dir)
	if err != nil {
		return err
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
			return fmt.Errorf("%w: docker backend: this rootless engine %s, so corral holds containers' limits per process, and the process limit (RLIMIT_NPROC, docker.pids_limit) counts the processes of a user namespace: the container needs one of its own (--userns=keep-id, corral's default), not %q from docker.extra_run_args; nothing was run", sandbox.ErrPolicy, f.PerProcess, string(hc.UsernsMode))
		}
		if hc.Memory > 0 && hc.Memory < minPerProcessMemory {
			return fmt.Errorf("%w: docker backend: docker.memory is %d MiB, and this rootless engine %s, so corral holds it per process (RLIMIT_DATA), on its own helpers in the container too, which need %d MiB: raise docker.memory to %dm or more; nothing was run", sandbox.ErrPolicy, hc.Memory>>20, f.PerProcess, minPerProcessMemory>>20, minPerProcessMemory>>20)
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
	return nil
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
// cpuSeconds as the soft limit only, hard unlimited (-1): at the soft
// limit the kernel sends SIGXCPU, which ends a command that does not
// handle it (setrlimit(2)), while a hard limit would also SIGKILL
// corral's helper in the container (the agent, one process for the
// container's life, relaying every command), a Go program that ignores
// SIGXCPU (os/signal). A value of 0 or less sets no limit of that name;
// "" when none is set. Pure.
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
		parts = append(parts, fmt.Sprintf("RLIMIT_CPU %d s of CPU per process, soft (SIGXCPU; cpu_seconds)", cpuSeconds))
	}
	if len(parts) == 0 {
		parts = append(parts, "none set")
	}
	return "limits per process, not in total (this rootless engine " + why + "): " + strings.Join(parts, ", ") + "; a memory bomb is held per process, not in total, and docker.cpus is not held"
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

// errReviewPodman refuses workspace_mode review on Podman: the review
// layer is an overlay volume of the local driver given inline with the
// container (overlayVolume), and Podman 4.3's compatible API drops an
// inline volume's driver options (the container would get an empty
// volume, not the workspace). Nothing was run.
var errReviewPodman = fmt.Errorf("%w: docker backend: workspace_mode review is not available on Podman (its compatible API drops the overlay volume's options the review layer is made of); use workspace_mode direct, the bwrap backend for review, or Docker", sandbox.ErrUnavailable)

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
