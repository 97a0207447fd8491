package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// Labels every corral container carries. LabelEnv and LabelKey follow the
// reference environment; the others let corral find its own containers
// again (another process's `corral exec`, `corral cleanup`).
const (
	// LabelEnv is "1" on every container corral starts; `corral cleanup`
	// never touches a container without it.
	LabelEnv = "corral.env"
	// LabelKey is the session name, or "shared".
	LabelKey = "corral.env.key"
	// LabelConfig is a hash of everything the container was made from: a
	// container is reused only for the same settings.
	LabelConfig = "corral.config"
	// LabelOwner names the corral process that removes the container:
	// "HOST/BOOTID/PID/STARTTIME" (see owner.go).
	LabelOwner = "corral.owner"
)

// LabelDenyUnix is "true" when the container's commands run with AF_UNIX
// sockets denied (profiles workspace and allowlist).
const LabelDenyUnix = "corral.deny_unix"

// filterSpec is the syscall filter of a container: the Docker seccomp
// profile (seccomp.DockerProfile, JSON) that replaces Docker's default,
// and whether the helpers add the AF_UNIX denial for commands.
type filterSpec struct {
	profile  string
	denyUnix bool
}

// LabelEgress identifies the network allowlist of an allowlist container
// (its allow and deny entries).
const LabelEgress = "corral.egress"

// EgressDir is where an allowlist container sees the proxy's socket
// directory (read-only).
const EgressDir = "/run/corral-net"

// egressSpec is the network allowlist of a container.
type egressSpec struct {
	policy netproxy.Policy
	key    string // the entries, for the label and the hash
	// secs are the secrets the proxy puts in requests to their hosts
	// (real values: never in the container's configuration).
	secs []secrets.Secret
	// nodeShim is the host directory holding the Node preload
	// (egress.WriteNodeShim), bound read-only at egress.NodeShimDir; ""
	// leaves NODE_OPTIONS out, which would otherwise name a missing file
	// and stop every node.
	nodeShim string
}

// NamePrefix starts every container's name: corral-<12 hex>.
const NamePrefix = "corral-"

// sharedKey is the LabelKey of a shared-scope container.
const sharedKey = "shared"

// Home is HOME inside every container: the tmpfs /tmp (writable by any
// uid, gone with the container).
const Home = "/tmp"

// CacheDir is where a container keeps the toolchains' caches (npm, Go, pip,
// cargo, ...; see toolcache.Env) when the tool_caches setting is not off:
// in its own /tmp, kept between the commands of its session and gone with
// the container. A directory of the host is not shared with containers:
// the people a docker session is for (a chat open to a group) could poison
// it for the person's own sandboxes and for other chats' containers, and a
// host directory's owner cannot be made to match every docker.user (none,
// Podman's user namespaces).
const CacheDir = Home + "/.toolcache"

// workspace is the one host directory a container writes.
type workspace struct {
	// Host is the workspace as corral sees it; Source as the daemon sees it
	// (HostWorkspace, or Host); Target where it appears in the container.
	Host, Source, Target string
	// Writable is false under the restricted profile.
	Writable bool
}

// readonlyPaths and maskedPaths are what every container gets read-only and
// masked in its /proc and /sys (HostConfig.ReadonlyPaths, MaskedPaths).
var (
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	maskedPaths   = []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
)

// containerSpec is a container's configuration, built without side
// effects from the settings, the workspace, corral's executable on the
// daemon's host and the labels. It is the policy of this backend: every
// restriction is set here and tested by table.
type containerSpec struct {
	Config *container.Config
	Host   *container.HostConfig
	// Hash identifies the configuration (LabelConfig).
	Hash string
}

// buildSpec returns the container configuration for st and ws. helper is
// the path of a statically linked corral executable on the daemon's host,
// mounted read-only at inside.Path. extra holds parsed extra_run_args.
// binds are docker.binds as the bind policy mounts them (judgeBinds), with
// the paths to cover inside them: directories by an empty read-only tmpfs,
// files by empty, a read-only empty file (emptyFile) bound over them; the
// engine mounts a parent before what lies below it. protected are the
// protected paths (relative to the workspace, existing, reached without
// symlinks) bound read-only over the writable workspace. trust, when not
// nil (secrets), is the trust bundle bound read-only at its destinations.
// rv, when not nil (workspace_mode review, review.go), makes the
// workspace an overlay volume of the host's directory and the session's
// layer, and its protected paths (rv.prot) are mounted read-only from the
// merged view's sources; protected is then unused.
func buildSpec(st *Settings, p *parsed, ws workspace, helper string, extra *extraArgs, binds []hostview.BindDecision, empty string, protected []string, filter *filterSpec, eg *egressSpec, trust *trustSpec, rv *reviewSpec) (*containerSpec, error) {
	if !filepath.IsAbs(ws.Host) || !filepath.IsAbs(ws.Target) || !filepath.IsAbs(ws.Source) {
		return nil, fmt.Errorf("%w: the workspace must be an absolute path", sandbox.ErrBadRequest)
	}
	init := true
	pids := int64(st.PidsLimit)
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode(st.Network),
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", "seccomp=" + filter.profile},
		ReadonlyRootfs: st.ReadOnly,
		// Set, not left to the engine's defaults, so no daemon setting
		// or extra_run_args can weaken them: the kernel's settings and
		// triggers read-only, what leaks host facts masked (the lists of
		// the OCI runtime spec's defaults in moby's oci/defaults.go).
		ReadonlyPaths: slices.Clone(readonlyPaths),
		MaskedPaths:   slices.Clone(maskedPaths),
		Init:          &init,
		Resources: container.Resources{
			Memory:     p.memory,
			MemorySwap: p.memory, // no swap on top of the limit
			NanoCPUs:   p.nanoCPUs,
			PidsLimit:  &pids,
		},
	}
	if st.ReadOnly {
		// exec: scripts and binaries the agent builds under /tmp must run.
		hc.Tmpfs = map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,exec,mode=1777,size=%d", p.tmpBytes)}
	}
	type bindSpec struct {
		src, dst string
		ro       bool
	}
	specs := []bindSpec{
		{ws.Source, ws.Target, !ws.Writable},
		{helper, inside.Path, true},
	}
	if rv != nil {
		// The workspace is the overlay volume below, never the host's
		// directory itself.
		o, err := overlayOptions([]string{rv.l.Lower}, rv.l.Upper(), rv.l.Work())
		if err != nil {
			return nil, fmt.Errorf("%w: workspace_mode review: %v", sandbox.ErrPolicy, err)
		}
		if !ws.Writable || ws.Source != ws.Host {
			return nil, fmt.Errorf("%w: workspace_mode review needs a writable workspace that the daemon sees at corral's path", sandbox.ErrPolicy)
		}
		specs = specs[1:]
		hc.Mounts = append(hc.Mounts, overlayVolume(ws.Target, o, map[string]string{
			LabelEnv: "1", LabelLayer: rv.l.Dir, LabelGeneration: strconv.FormatInt(rv.gen, 10)}))
	}
	var covers []bindSpec
	var tmpfs []mount.Mount
	for _, b := range binds {
		if !filepath.IsAbs(b.Src) || !filepath.IsAbs(b.Dest) {
			return nil, fmt.Errorf("%w: docker.binds: %q is not an absolute path", sandbox.ErrBadRequest, b.Src)
		}
		if b.Dest == "/" || b.Dest == inside.Path || b.Dest == ws.Target {
			return nil, fmt.Errorf("%w: docker.binds: %s would cover %s", sandbox.ErrPolicy, b.Src, b.Dest)
		}
		specs = append(specs, bindSpec{b.Src, b.Dest, b.ReadOnly})
		for _, d := range b.HideDirs {
			tmpfs = append(tmpfs, mount.Mount{Type: mount.TypeTmpfs, Target: d, ReadOnly: true,
				TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 64 << 10, Mode: coverMode}})
		}
		for _, f := range b.EmptyFiles {
			if empty == "" {
				return nil, fmt.Errorf("%w: docker.binds: %s must read as empty, and there is no empty file to bind over it", sandbox.ErrPolicy, f)
			}
			covers = append(covers, bindSpec{empty, f, true})
		}
	}
	addBinds := func(binds []bindSpec) error {
		for _, b := range binds {
			if st.MountOptions == "" {
				hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: b.src, Target: b.dst, ReadOnly: b.ro})
				continue
			}
			// Options such as z/Z exist only in the "src:dst:opts" form.
			if strings.ContainsRune(b.src, ':') || strings.ContainsRune(b.dst, ':') {
				return fmt.Errorf("%w: docker.mount_options needs Docker's src:dst:opts form, which cannot carry the ':' in %q; rename the path or leave mount_options empty", sandbox.ErrBadRequest, b.src+" -> "+b.dst)
			}
			mode := "rw"
			if b.ro {
				mode = "ro"
			}
			hc.Binds = append(hc.Binds, b.src+":"+b.dst+":"+mode+","+st.MountOptions)
		}
		return nil
	}
	if eg != nil && eg.nodeShim != "" {
		specs = append(specs, bindSpec{eg.nodeShim, egress.NodeShimDir, true})
	}
	if trust != nil {
		if eg == nil {
			return nil, fmt.Errorf("%w: secrets need the allowlist profile's proxy", sandbox.ErrBadRequest)
		}
		for _, d := range trust.Dests {
			specs = append(specs, bindSpec{trust.Bundle, d, true})
		}
		for _, d := range trust.JavaDests {
			specs = append(specs, bindSpec{trust.JavaStore, d, true})
		}
		var bindDests []string
		for _, b := range binds {
			bindDests = append(bindDests, b.Dest)
		}
		for _, f := range trust.Files {
			if why := credentialFileRefusal(f.Dest, ws.Target, bindDests); why != "" {
				return nil, fmt.Errorf("%w: secret %s: files entry %s (%s in the container) %s; name a file of your home (for example ~/.netrc) or elsewhere outside the workspace, or drop it from files", sandbox.ErrBadRequest, f.Secret, f.Entry, f.Dest, why)
			}
			specs = append(specs, bindSpec{f.Src, f.Dest, true})
		}
	}
	if err := addBinds(append(specs, covers...)); err != nil {
		return nil, err
	}
	hc.Mounts = append(hc.Mounts, tmpfs...)
	cfg := &container.Config{
		Image:      st.Image,
		User:       p.user,
		WorkingDir: ws.Target,
		Entrypoint: []string{inside.Path},
		Cmd:        []string{inside.ModePause},
		Env:        []string{"HOME=" + Home, "TMPDIR=/tmp"},
		Labels:     map[string]string{LabelEnv: "1", LabelDenyUnix: strconv.FormatBool(filter.denyUnix)},
		// No TTY, no stdin: commands come through exec.
	}
	if extra != nil {
		if err := extra.apply(cfg, hc); err != nil {
			return nil, err
		}
	}
	if eg != nil {
		// allowlist: no network but loopback; the container's main process
		// is corral's forwarder (listening on 127.0.0.1:3128 and :1080,
		// relaying to the proxy sockets bound at EgressDir by start), which
		// runs the pause process through the trampoline; commands get the
		// proxy variables.
		hc.NetworkMode = "none"
		argv := egress.ForwarderArgv(inside.Path, EgressDir, 0, []string{inside.Path, inside.ModePause})
		cfg.Entrypoint, cfg.Cmd = argv[:1], argv[1:]
		env := egress.Env()
		if eg.nodeShim == "" {
			env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "NODE_OPTIONS=") })
		}
		cfg.Env = append(cfg.Env, env...)
		cfg.Labels[LabelEgress] = eg.key
	}
	if rv != nil {
		cfg.Labels[LabelLayer] = rv.l.Dir
	}
	// The hash leaves out the protected paths: they are found when the
	// container is made, and a path that appears later must not replace a
	// session's container (and end its background processes).
	hash := specHash(cfg, hc)
	// Protected paths inside the writable workspace are bound read-only
	// onto themselves, and the directories on the way to them read-write
	// onto themselves: a mount point cannot be renamed or removed (EBUSY),
	// so `mv .git .g && mkdir .git` cannot put a configuration of the
	// command's in the place of the protected one.
	if rv != nil {
		// Review: each protected path of the merged view read-only from
		// where the overlay takes it; nothing on the way is pinned (a
		// read-write bind of the host's directory would write the host),
		// so one moved away from its mount is found after the command
		// (quarantine: not a mount point) and removed.
		var prot []bindSpec
		for _, ps := range rv.prot {
			dst := filepath.Join(ws.Target, filepath.FromSlash(ps.Rel))
			if ps.Src != "" {
				prot = append(prot, bindSpec{ps.Src, dst, true})
				continue
			}
			o, err := overlayOptions(ps.Lowers, "", "")
			if err != nil {
				return nil, fmt.Errorf("%w: workspace_mode review: protected path %s: %v", sandbox.ErrPolicy, ps.Rel, err)
			}
			hc.Mounts = append(hc.Mounts, overlayVolume(dst, o, map[string]string{LabelEnv: "1", LabelLayer: rv.l.Dir}))
		}
		if err := addBinds(prot); err != nil {
			return nil, err
		}
	} else if ws.Writable {
		var prot []bindSpec
		pinned := map[string]bool{}
		for _, rel := range protected {
			for d := filepath.Dir(rel); d != "." && d != "/" && !pinned[d]; d = filepath.Dir(d) {
				pinned[d] = true
				prot = append(prot, bindSpec{filepath.Join(ws.Source, d), filepath.Join(ws.Target, d), false})
			}
		}
		for _, rel := range protected {
			prot = append(prot, bindSpec{filepath.Join(ws.Source, rel), filepath.Join(ws.Target, rel), true})
		}
		if err := addBinds(prot); err != nil {
			return nil, err
		}
	}
	return &containerSpec{Config: cfg, Host: hc, Hash: hash}, nil
}

// specHash is a short stable hash of a configuration (labels excluded).
func specHash(cfg *container.Config, hc *container.HostConfig) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%s|%q|%q|%q|", cfg.Image, cfg.User, cfg.WorkingDir, cfg.Entrypoint, cfg.Cmd, cfg.Env)
	fmt.Fprintf(h, "%s|%q|%q|%v|%q|%q|%d|%d|%d|%d|%v|%s|%s|%q|%q|%q|%q|%d", hc.NetworkMode, hc.CapDrop, hc.SecurityOpt, hc.ReadonlyRootfs, sortedMap(hc.Tmpfs), hc.Binds,
		hc.Memory, hc.MemorySwap, hc.NanoCPUs, *hc.PidsLimit, hc.Init != nil && *hc.Init, hc.Runtime, hc.UsernsMode, hc.ExtraHosts, hc.DNS, hc.GroupAdd, hc.CapAdd, hc.ShmSize)
	fmt.Fprintf(h, "|ro:%q|mask:%q", hc.ReadonlyPaths, hc.MaskedPaths)
	for _, m := range hc.Mounts {
		fmt.Fprintf(h, "|m:%s:%s:%v", m.Source, m.Target, m.ReadOnly)
		if v := m.VolumeOptions; v != nil {
			// An overlay volume: its layers and the layer's generation.
			fmt.Fprintf(h, ":%q", sortedMap(v.Labels))
			if v.DriverConfig != nil {
				fmt.Fprintf(h, ":%s:%q", v.DriverConfig.Name, sortedMap(v.DriverConfig.Options))
			}
		}
	}
	for _, d := range hc.Devices {
		fmt.Fprintf(h, "|d:%s:%s:%s", d.PathOnHost, d.PathInContainer, d.CgroupPermissions)
	}
	for _, u := range hc.Ulimits {
		fmt.Fprintf(h, "|u:%s:%d:%d", u.Name, u.Soft, u.Hard)
	}
	fmt.Fprintf(h, "|%s|%s|%q", hc.CpusetCpus, cfg.Hostname, sortedMap(cfg.Labels))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func sortedMap(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
