package docker

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	units "github.com/docker/go-units"
	"github.com/moby/moby/api/types/container"
	"github.com/spf13/pflag"
	"mvdan.cc/sh/v3/shell"

	"github.com/corralhq/corral/sandbox"
)

// extraArgs are the `docker run` flags of docker.extra_run_args that corral
// understands. corral talks to the Engine API, not the CLI, so each flag is
// mapped to its API field here; flags that would undo the container's
// restrictions (--privileged, --cap-add, --pid/--ipc/--network host, host
// devices, extra volumes that skip the bind rules) are refused, not ignored.
type extraArgs struct {
	runtime, userns, shmSize, cpuset, hostname string
	securityOpt, addHost, dns, ulimit          []string
	env, label, groupAdd                       []string
}

// refusedRunFlag returns why the docker run flag name (without dashes) is
// refused, and whether it is.
func refusedRunFlag(name string) (string, bool) {
	for _, f := range refusedRunFlags {
		if f.flag == name {
			return f.why, true
		}
	}
	return "", false
}

// refusedRunFlags name the docker run flags refused, with the reason: a
// slice the compiler lays out statically, not a map built at start.
var refusedRunFlags = []struct{ flag, why string }{
	{"privileged", "it gives the container every capability and device"},
	{"cap-add", "commands run with all capabilities dropped"},
	{"pid", "the container keeps its own process namespace"},
	{"ipc", "the container keeps its own IPC namespace"},
	{"uts", "the container keeps its own UTS namespace"},
	{"network", "use docker.network"},
	{"net", "use docker.network"},
	{"volume", "use docker.binds (the bind rules and the mount check apply there)"},
	{"v", "use docker.binds (the bind rules and the mount check apply there)"},
	{"mount", "use docker.binds (the bind rules and the mount check apply there)"},
	{"user", "use docker.user"},
	{"u", "use docker.user"},
	{"workdir", "use docker.workdir"},
	{"w", "use docker.workdir"},
	{"memory", "use docker.memory"},
	{"m", "use docker.memory"},
	{"cpus", "use docker.cpus"},
	{"pids-limit", "use docker.pids_limit"},
	{"read-only", "use docker.read_only"},
	{"tmpfs", "use docker.tmp_size"},
	{"entrypoint", "corral runs its own helper as the entrypoint"},
	// A device node reaches the host below the container's restrictions (a
	// raw disk, /dev/kvm, a GPU's driver); the container gets none (issue
	// 11, finding 5: --device was accepted).
	{"device", "the container gets no host devices: a device node reaches the host below the container's restrictions"},
	{"device-cgroup-rule", "the container gets no host devices: a device node reaches the host below the container's restrictions"},
	{"gpus", "the container gets no host devices: a device node reaches the host below the container's restrictions"},
}

// ParseExtraRunArgs parses s (docker.extra_run_args, split like a POSIX shell
// command line with no expansions) into the flags corral maps to the Engine
// API: --runtime, --userns, --security-opt, --add-host, --dns, --ulimit,
// --shm-size, --cpuset-cpus, -e/--env, --label, --group-add and
// -h/--hostname. A flag of refusedRunFlags, in any spelling (--device X,
// --device=X), is an error wrapping sandbox.ErrPolicy that says why; any
// other flag, or a positional argument, one wrapping ErrBadRequest.
func ParseExtraRunArgs(s string) (*extraArgs, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	words, err := shell.Fields(s, func(string) string { return "" })
	if err != nil {
		return nil, fmt.Errorf("%w: docker.extra_run_args: %v", sandbox.ErrBadRequest, err)
	}
	for _, w := range words {
		name := strings.TrimLeft(w, "-")
		name, _, _ = strings.Cut(name, "=")
		if why, ok := refusedRunFlag(name); ok && strings.HasPrefix(w, "-") {
			return nil, fmt.Errorf("%w: docker.extra_run_args: %s is refused: %s", sandbox.ErrPolicy, w, why)
		}
	}
	x := &extraArgs{}
	fs := pflag.NewFlagSet("docker.extra_run_args", pflag.ContinueOnError)
	fs.SetOutput(discard{})
	fs.StringVar(&x.runtime, "runtime", "", "")
	fs.StringVar(&x.userns, "userns", "", "")
	fs.StringVar(&x.shmSize, "shm-size", "", "")
	fs.StringVar(&x.cpuset, "cpuset-cpus", "", "")
	fs.StringVarP(&x.hostname, "hostname", "h", "", "")
	fs.StringArrayVar(&x.securityOpt, "security-opt", nil, "")
	fs.StringArrayVar(&x.addHost, "add-host", nil, "")
	fs.StringArrayVar(&x.dns, "dns", nil, "")
	fs.StringArrayVar(&x.ulimit, "ulimit", nil, "")
	fs.StringArrayVarP(&x.env, "env", "e", nil, "")
	fs.StringArrayVar(&x.label, "label", nil, "")
	fs.StringArrayVar(&x.groupAdd, "group-add", nil, "")
	if err := fs.Parse(words); err != nil {
		return nil, fmt.Errorf("%w: docker.extra_run_args: %v (understood: --runtime, --userns, --security-opt, --add-host, --dns, --ulimit, --shm-size, --cpuset-cpus, -e/--env, --label, --group-add, -h/--hostname)", sandbox.ErrBadRequest, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: docker.extra_run_args: unexpected argument %q (only flags)", sandbox.ErrBadRequest, fs.Arg(0))
	}
	if strings.EqualFold(strings.TrimSpace(x.userns), "host") {
		// Undoes the daemon's userns-remap, the one thing that keeps a
		// root-owned workspace's uid 0 in the container from being the
		// host's root.
		return nil, fmt.Errorf("%w: docker.extra_run_args: --userns=host is refused: the container keeps the daemon's user namespace remapping", sandbox.ErrPolicy)
	}
	for _, o := range x.securityOpt {
		lo := strings.ToLower(strings.ReplaceAll(o, ":", "="))
		switch {
		case strings.HasPrefix(lo, "no-new-privileges") && strings.HasSuffix(lo, "false"):
			return nil, fmt.Errorf("%w: docker.extra_run_args: --security-opt %s is refused: commands run with no-new-privileges", sandbox.ErrPolicy, o)
		case strings.HasPrefix(lo, "seccomp"):
			return nil, fmt.Errorf("%w: docker.extra_run_args: --security-opt %s is refused: corral sets the seccomp profile itself", sandbox.ErrPolicy, o)
		case lo == "apparmor=unconfined", lo == "label=disable", lo == "systempaths=unconfined":
			return nil, fmt.Errorf("%w: docker.extra_run_args: --security-opt %s is refused: it removes a protection of the container", sandbox.ErrPolicy, o)
		}
	}
	return x, nil
}

type discard struct{}

// Write implements io.Writer, dropping p (pflag's usage text).
func (discard) Write(p []byte) (int, error) { return len(p), nil }

// apply sets the parsed flags on the configuration.
func (x *extraArgs) apply(cfg *container.Config, hc *container.HostConfig) error {
	hc.Runtime = x.runtime
	hc.UsernsMode = container.UsernsMode(x.userns)
	hc.CpusetCpus = x.cpuset
	if x.hostname != "" {
		cfg.Hostname = x.hostname
	}
	if x.shmSize != "" {
		n, err := units.RAMInBytes(x.shmSize)
		if err != nil {
			return fmt.Errorf("%w: docker.extra_run_args: --shm-size %q: %v", sandbox.ErrBadRequest, x.shmSize, err)
		}
		hc.ShmSize = n
	}
	hc.SecurityOpt = append(hc.SecurityOpt, x.securityOpt...)
	hc.ExtraHosts = append(hc.ExtraHosts, x.addHost...)
	for _, d := range x.dns {
		a, err := netip.ParseAddr(d)
		if err != nil {
			return fmt.Errorf("%w: docker.extra_run_args: --dns %q is not an IP address", sandbox.ErrBadRequest, d)
		}
		hc.DNS = append(hc.DNS, a)
	}
	for _, u := range x.ulimit {
		ul, err := units.ParseUlimit(u)
		if err != nil {
			return fmt.Errorf("%w: docker.extra_run_args: --ulimit %q: %v", sandbox.ErrBadRequest, u, err)
		}
		hc.Ulimits = append(hc.Ulimits, ul)
	}
	for _, e := range x.env {
		if !strings.Contains(e, "=") {
			return fmt.Errorf("%w: docker.extra_run_args: -e %q needs NAME=VALUE (corral passes no host variables by name)", sandbox.ErrBadRequest, e)
		}
		cfg.Env = append(cfg.Env, e)
	}
	for _, l := range x.label {
		k, v, _ := strings.Cut(l, "=")
		if strings.HasPrefix(k, "corral.") {
			return errors.New("docker.extra_run_args: labels corral.* are corral's own")
		}
		cfg.Labels[k] = v
	}
	hc.GroupAdd = append(hc.GroupAdd, x.groupAdd...)
	return nil
}
