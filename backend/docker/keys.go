package docker

import (
	"strconv"
	"strings"

	units "github.com/docker/go-units"

	"github.com/corralhq/corral/config"
)

// The docker.* settings are the docker backend's: declared here with
// their defaults (DefaultSettings) and checks, registered with config from
// init, and read back as this package's Settings (SettingsOf). config
// knows none of them by name.
var settingsSection = config.Section{Name: Name, New: func() any { return new(Settings) }, Keys: keys}

func init() { config.RegisterSection(&settingsSection) }

// section returns the docker.* section of st.
func section(st *config.Settings) *Settings { return st.Section(Name).(*Settings) }

// SettingsOf returns the docker.* settings of st (a copy).
func SettingsOf(st *config.Settings) Settings { return *section(st) }

// keys returns the docker.* settings, in the order `corral config list`
// shows them (built at the settings' first use, not at init).
func keys() []config.Key {
	return []config.Key{
		{
			Name: "docker.host", Kind: config.KindString, Default: DefaultSettings.Host,
			Accepts: "an engine address such as unix:///run/podman/podman.sock or tcp://host:2376, or empty",
			Doc:     "docker: the engine's address; DOCKER_HOST, when set, wins; empty searches Docker's socket, then Podman's ($XDG_RUNTIME_DIR/podman/podman.sock, /run/podman/podman.sock)",
			Check:   dockerHostValue,
			Field:   func(s *config.Settings) any { return &section(s).Host },
		},
		{
			Name: "docker.scope", Kind: config.KindEnum, Default: DefaultSettings.Scope,
			Values:  []string{ScopeSession, ScopeShared},
			Accepts: "one of session, shared",
			Doc:     "docker: session (a container per session) or shared (one container for every session with the same settings; they see each other's processes and /tmp)",
			Field:   func(s *config.Settings) any { return &section(s).Scope },
		},
		{
			Name: "docker.image", Kind: config.KindString, Default: DefaultSettings.Image,
			Accepts: "an image reference such as python:3.12-slim",
			Doc:     "docker: image of the containers; it must provide bash, sh, setsid, cat, mkdir, dirname and ls (python3 for run_code); pulled on first use",
			Check:   config.NonEmpty,
			Field:   func(s *config.Settings) any { return &section(s).Image },
		},
		{
			Name: "docker.network", Kind: config.KindString, Default: DefaultSettings.Network,
			Accepts: "none, bridge or the name of a Docker network",
			Doc:     "docker: none (no network at all), bridge (the internet and your local network) or a Docker network's name; host is refused",
			Check:   config.NonEmpty,
			Field:   func(s *config.Settings) any { return &section(s).Network },
		},
		{
			Name: "docker.memory", Kind: config.KindString, Default: DefaultSettings.Memory,
			Accepts: "a size such as 512m or 2g",
			Doc:     "docker: memory of the whole container (docker run --memory), no swap on top; a command killed by it is reported as out of memory",
			Check:   dockerSize,
			Field:   func(s *config.Settings) any { return &section(s).Memory },
		},
		{
			Name: "docker.cpus", Kind: config.KindString, Default: DefaultSettings.CPUs,
			Accepts: "a number of CPUs such as 0.5 or 2",
			Doc:     "docker: CPUs of the container (docker run --cpus)",
			Check:   positiveNumber,
			Field:   func(s *config.Settings) any { return &section(s).CPUs },
		},
		{
			Name: "docker.pids_limit", Kind: config.KindInt, Default: DefaultSettings.PidsLimit, Min: MinPidsLimit,
			Accepts: "a whole number of at least 16",
			Doc:     "docker: processes and threads of the container (docker run --pids-limit); holds fork bombs",
			Field:   func(s *config.Settings) any { return &section(s).PidsLimit },
		},
		{
			Name: "docker.user", Kind: config.KindString, Default: DefaultSettings.User,
			Accepts: `"", none, or uid:gid in numbers`,
			Doc:     `docker: user of commands: "" (the host user's uid:gid, so workspace files keep their owner), uid:gid, or none (the image's user; rootless Docker, Podman)`,
			Check:   dockerUser,
			Field:   func(s *config.Settings) any { return &section(s).User },
		},
		{
			Name: "docker.workdir", Kind: config.KindString, Default: DefaultSettings.Workdir,
			Accepts: "an absolute path, or empty for the workspace's own path",
			Doc:     "docker: where the workspace appears in the container; empty (recommended) means at its own host path, so paths match",
			Check:   config.AbsOrEmpty,
			Field:   func(s *config.Settings) any { return &section(s).Workdir },
		},
		{
			Name: "docker.read_only", Kind: config.KindEnum, Default: DefaultSettings.ReadOnly,
			Values:  []string{"true", "false"},
			Accepts: "true or false",
			Doc:     "docker: read-only root filesystem with a tmpfs /tmp (HOME=/tmp); false makes the image's filesystem writable (lost with the container)",
			Field:   func(s *config.Settings) any { return &section(s).ReadOnly },
		},
		{
			Name: "docker.tmp_size", Kind: config.KindString, Default: DefaultSettings.TmpSize,
			Accepts: "a size such as 256m or 1g",
			Doc:     "docker: size of the tmpfs /tmp when read_only is true",
			Check:   dockerSize,
			Field:   func(s *config.Settings) any { return &section(s).TmpSize },
		},
		{
			Name: "docker.binds", Kind: config.KindBinds, Default: DefaultSettings.Binds,
			Accepts: `a list of {src, dest, readonly} mappings such as [{src: /data}]`,
			Doc:     "docker: extra host paths to mount in containers, as for binds (readonly defaults to true, dest to src); paths are the Docker host's",
			Field:   func(s *config.Settings) any { return &section(s).Binds },
		},
		{
			Name: "docker.host_workspace", Kind: config.KindString, Default: DefaultSettings.HostWorkspace,
			Accepts: "an absolute path on the Docker host, or empty",
			Doc:     "docker: the workspace's path as the Docker daemon sees it, when corral and the daemon do not share a filesystem (corral in a container, a remote DOCKER_HOST)",
			Check:   config.AbsOrEmpty,
			Field:   func(s *config.Settings) any { return &section(s).HostWorkspace },
		},
		{
			Name: "docker.mount_options", Kind: config.KindString, Default: DefaultSettings.MountOptions,
			Accepts: "bind options such as z or Z, comma-separated",
			Doc:     "docker: options for every bind mount (z, Z for SELinux); then no mounted path may contain ':'",
			Field:   func(s *config.Settings) any { return &section(s).MountOptions },
		},
		{
			Name: "docker.extra_run_args", Kind: config.KindString, Default: DefaultSettings.ExtraRunArgs,
			Accepts: `docker run flags such as "--runtime=runsc"`,
			Doc:     "docker: extra docker run flags, split like a shell line: --runtime, --userns, --security-opt, --add-host, --dns, --ulimit, --shm-size, --cpuset-cpus, -e, --label, --group-add, --hostname (--privileged, --cap-add, --device and the like are refused)",
			Field:   func(s *config.Settings) any { return &section(s).ExtraRunArgs },
		},
	}
}

// dockerSize checks a size in Docker's notation (go-units RAMInBytes).
func dockerSize(s string) (string, string) {
	if n, err := units.RAMInBytes(strings.TrimSpace(s)); err != nil || n <= 0 {
		return "", "is not a size"
	}
	return strings.TrimSpace(s), ""
}

// positiveNumber checks a number greater than 0.
func positiveNumber(s string) (string, string) {
	if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err != nil || f <= 0 {
		return "", "is not a number greater than 0"
	}
	return strings.TrimSpace(s), ""
}

// dockerUser checks "", none or uid:gid.
func dockerUser(s string) (string, string) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return s, ""
	}
	u, g, ok := strings.Cut(s, ":")
	_, e1 := strconv.ParseUint(u, 10, 32)
	_, e2 := strconv.ParseUint(g, 10, 32)
	if !ok || e1 != nil || e2 != nil {
		return "", "is not uid:gid in numbers"
	}
	return s, ""
}
