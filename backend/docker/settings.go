package docker

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	units "github.com/docker/go-units"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/sandbox"
)

// Scopes of Settings.Scope.
const (
	// ScopeSession gives every session a container of its own.
	ScopeSession = "session"
	// ScopeShared gives all sessions (with the same settings and workspace)
	// one container, removed when the last of them closes.
	ScopeShared = "shared"
)

// UserNone in Settings.User passes no user to Docker: the image's user runs
// commands (rootless Docker, Podman with --userns=keep-id).
const UserNone = "none"

// MinPidsLimit is the smallest pids_limit accepted: below it the helpers and
// a shell cannot start.
const MinPidsLimit = 16

// Settings are the docker section of corral's settings (keys docker.*). The
// names and defaults follow the reference Docker environment.
type Settings struct {
	// Scope is ScopeSession or ScopeShared.
	Scope string
	// Image is the image reference; it must provide bash, sh, setsid, cat,
	// mkdir, dirname and ls, and python3 for run_code.
	Image string
	// Network is "none", "bridge", "host" is refused, or a network's name.
	Network string
	// Memory is the container's memory limit in Docker's notation ("1g",
	// "512m"); swap is not added on top.
	Memory string
	// CPUs is the number of CPUs, possibly fractional ("0.5", "2").
	CPUs string
	// PidsLimit caps the container's processes and threads (>= MinPidsLimit).
	PidsLimit int
	// User is "" (the host user's uid:gid), "uid:gid", or UserNone.
	User string
	// Workdir is where the workspace appears inside the container; "" means
	// at its own host path (recommended: paths the agent sees match).
	Workdir string
	// ReadOnly makes the root filesystem read-only, with a tmpfs /tmp of
	// TmpSize.
	ReadOnly bool
	// TmpSize is the size of /tmp in Docker's notation ("512m").
	TmpSize string
	// Binds are extra host paths to mount, judged by the bind policy every
	// backend shares (hostview.DecideBind; see judgeBinds).
	Binds []sandbox.Bind
	// HostWorkspace is the workspace's path on the Docker host, when corral
	// and the daemon do not share a filesystem; "" means the same path.
	HostWorkspace string
	// MountOptions are bind options such as "z" or "Z" (SELinux relabeling)
	// applied to every bind; they need Docker's "src:dst:opts" form, so
	// paths holding ':' are refused when set.
	MountOptions string
	// ExtraRunArgs are extra `docker run` flags, split like a shell command
	// line; see ParseExtraRunArgs for the ones understood.
	ExtraRunArgs string
	// Host is the engine's address (unix:///run/podman/podman.sock,
	// tcp://host:2376, ssh://user@host); "" searches the usual sockets.
	// DOCKER_HOST, when set, wins over it (resolveHost).
	Host string
}

// DefaultSettings are the reference environment's defaults.
var DefaultSettings = Settings{
	Scope:     ScopeSession,
	Image:     "python:3.12-slim",
	Network:   "none",
	Memory:    "1g",
	CPUs:      "1",
	PidsLimit: 256,
	ReadOnly:  true,
	TmpSize:   "512m",
}

// systemTrees are host directories no container may write as its
// workspace and no workspace may appear in (docker.workdir): the system's
// own trees and the engine's state. Matched at or below. (Binds are judged
// by the policy every backend shares: hostview.DecideBind.)
var systemTrees = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run", "/sbin", "/sys", "/usr", "/var/lib", "/var/run", "/var/log", "/var/spool", "/var/cache"}

// inSystemTree returns the system tree p (clean, absolute) is at or below,
// or "" (also for "/" itself, which callers refuse on their own).
func inSystemTree(p string) string {
	for _, t := range systemTrees {
		if p == t || strings.HasPrefix(p, t+"/") {
			return t
		}
	}
	return ""
}

// parsed are Settings turned into engine units.
type parsed struct {
	memory   int64 // bytes
	nanoCPUs int64 // 1e-9 CPUs
	tmpBytes int64
	user     string // "" for none
}

// check validates s and converts its sizes; uid and gid are the host
// user's. Errors name the key and what it accepts.
func (s *Settings) check(uid, gid int) (*parsed, error) {
	var p parsed
	var err error
	switch s.Scope {
	case ScopeSession, ScopeShared:
	default:
		return nil, fmt.Errorf("%w: docker.scope %q is not session or shared", sandbox.ErrBadRequest, s.Scope)
	}
	if strings.TrimSpace(s.Image) == "" {
		return nil, fmt.Errorf("%w: docker.image is empty", sandbox.ErrBadRequest)
	}
	switch s.Network {
	case "":
		return nil, fmt.Errorf("%w: docker.network is empty (none, bridge or a network name)", sandbox.ErrBadRequest)
	case "host":
		return nil, fmt.Errorf("%w: docker.network host would share the host's network namespace (loopback services, abstract sockets); use bridge or a network of your own", sandbox.ErrPolicy)
	}
	if strings.HasPrefix(s.Network, "container:") {
		return nil, fmt.Errorf("%w: docker.network %q would join another container's namespace", sandbox.ErrPolicy, s.Network)
	}
	if p.memory, err = units.RAMInBytes(s.Memory); err != nil || p.memory < 6<<20 {
		return nil, fmt.Errorf("%w: docker.memory %q is not a size of at least 6m such as 512m or 1g", sandbox.ErrBadRequest, s.Memory)
	}
	cpus, err := strconv.ParseFloat(s.CPUs, 64)
	if err != nil || cpus <= 0 || cpus > 1024 {
		return nil, fmt.Errorf("%w: docker.cpus %q is not a number of CPUs such as 0.5 or 2", sandbox.ErrBadRequest, s.CPUs)
	}
	p.nanoCPUs = int64(cpus * 1e9)
	if s.PidsLimit < MinPidsLimit {
		return nil, fmt.Errorf("%w: docker.pids_limit %d is below %d", sandbox.ErrBadRequest, s.PidsLimit, MinPidsLimit)
	}
	switch {
	case s.User == "":
		p.user = fmt.Sprintf("%d:%d", uid, gid)
	case s.User == UserNone:
	default:
		u, g, ok := strings.Cut(s.User, ":")
		if _, e1 := strconv.ParseUint(u, 10, 32); e1 != nil || !ok {
			return nil, fmt.Errorf("%w: docker.user %q is not \"\", none or uid:gid in numbers", sandbox.ErrBadRequest, s.User)
		}
		if _, e2 := strconv.ParseUint(g, 10, 32); e2 != nil {
			return nil, fmt.Errorf("%w: docker.user %q is not \"\", none or uid:gid in numbers", sandbox.ErrBadRequest, s.User)
		}
		p.user = s.User
	}
	if s.Workdir != "" && (!filepath.IsAbs(s.Workdir) || filepath.Clean(s.Workdir) == "/") {
		return nil, fmt.Errorf("%w: docker.workdir %q is not an absolute path below /", sandbox.ErrBadRequest, s.Workdir)
	}
	if t := inSystemTree(filepath.Clean(s.Workdir)); s.Workdir != "" && (t != "" || filepath.Clean(s.Workdir) == "/tmp") {
		return nil, fmt.Errorf("%w: docker.workdir %s lies in %s, which the container's system uses; pick a path such as /work", sandbox.ErrPolicy, s.Workdir, max(t, "/tmp"))
	}
	if s.HostWorkspace != "" && !filepath.IsAbs(s.HostWorkspace) {
		return nil, fmt.Errorf("%w: docker.host_workspace %q is not absolute", sandbox.ErrBadRequest, s.HostWorkspace)
	}
	if hw := filepath.Clean(s.HostWorkspace); s.HostWorkspace != "" && (hw == "/" || inSystemTree(hw) != "" || hostview.EnginePath(hw) != "") {
		return nil, fmt.Errorf("%w: docker.host_workspace %s is the host's root or a system tree, which no container may write", sandbox.ErrPolicy, s.HostWorkspace)
	}
	// The bind policy needs the request and the host (judgeBinds); here
	// only the form.
	for _, b := range s.Binds {
		if !filepath.IsAbs(b.Src) || b.Dest != "" && !filepath.IsAbs(b.Dest) {
			return nil, fmt.Errorf("%w: docker.binds: %q -> %q: source and destination must be absolute paths", sandbox.ErrBadRequest, b.Src, b.Dest)
		}
	}
	if s.ReadOnly {
		if p.tmpBytes, err = units.RAMInBytes(s.TmpSize); err != nil || p.tmpBytes <= 0 {
			return nil, fmt.Errorf("%w: docker.tmp_size %q is not a size such as 256m or 1g", sandbox.ErrBadRequest, s.TmpSize)
		}
	}
	for _, o := range strings.Split(s.MountOptions, ",") {
		switch strings.TrimSpace(o) {
		case "", "z", "Z", "cached", "delegated", "consistent", "shared", "slave", "private", "rshared", "rslave", "rprivate", "nocopy":
		default:
			return nil, fmt.Errorf("%w: docker.mount_options %q: %q is not a bind option (z, Z, cached, delegated, consistent, [r]shared, [r]slave, [r]private)", sandbox.ErrBadRequest, s.MountOptions, o)
		}
	}
	return &p, nil
}
