package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"
)

// Where the engine's address came from (HostChoice.From), as doctor
// prints it.
const (
	// FromEnv: the DOCKER_HOST variable, which wins over everything (the
	// docker CLI's own rule).
	FromEnv = "DOCKER_HOST"
	// FromSetting: the docker.host setting.
	FromSetting = "docker.host"
	// FromSearch: neither was set; the first existing socket of Docker's
	// and Podman's usual ones.
	FromSearch = "socket search"
	// FromDefault: neither was set and no usual socket exists: Docker's
	// default address, whose absence the first command reports.
	FromDefault = "default, no socket found"
)

// HostChoice is the engine's address and where it came from.
type HostChoice struct {
	// Addr is the address as the Docker client takes it
	// (unix:///path, tcp://host:port, ssh://user@host).
	Addr string `json:"host"`
	// From is FromEnv, FromSetting, FromSearch or FromDefault.
	From string `json:"host_from"`
}

// resolveHost chooses the engine's address: DOCKER_HOST (env) when set,
// then the docker.host setting (setting), then Docker's socket
// (client.DefaultDockerHost) when it exists, then Podman's usual sockets,
// the user's own first (rootless: $XDG_RUNTIME_DIR/podman/podman.sock, as
// `podman system service` and podman.socket make it; an XDG_RUNTIME_DIR
// that is not absolute is ignored), then the system's
// (/run/podman/podman.sock, rootful); else Docker's default. exists says
// whether a socket is at a path. Pure.
func resolveHost(env, setting, xdgRuntimeDir string, exists func(string) bool) HostChoice {
	if env = strings.TrimSpace(env); env != "" {
		return HostChoice{env, FromEnv}
	}
	if setting = strings.TrimSpace(setting); setting != "" {
		return HostChoice{setting, FromSetting}
	}
	docker := strings.TrimPrefix(client.DefaultDockerHost, "unix://")
	if exists(docker) {
		return HostChoice{client.DefaultDockerHost, FromSearch}
	}
	var cands []string
	if filepath.IsAbs(xdgRuntimeDir) {
		cands = append(cands, filepath.Join(xdgRuntimeDir, "podman", "podman.sock"))
	}
	for _, c := range append(cands, "/run/podman/podman.sock") {
		if exists(c) {
			return HostChoice{"unix://" + c, FromSearch}
		}
	}
	return HostChoice{client.DefaultDockerHost, FromDefault}
}

// chooseHost is resolveHost on this process's environment and sockets,
// for the docker.host value setting.
func chooseHost(setting string) HostChoice {
	return resolveHost(os.Getenv("DOCKER_HOST"), setting, os.Getenv("XDG_RUNTIME_DIR"), isSocket)
}

// isSocket says whether p is a Unix socket.
func isSocket(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().Type() == os.ModeSocket
}

// dockerHostValue is docker.host's Check: "" or an address the Docker
// client takes (client.ParseHostURL: unix://, tcp://, ssh://, npipe://).
func dockerHostValue(s string) (string, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", ""
	}
	u, err := client.ParseHostURL(s)
	if err != nil {
		return "", "is not an engine address such as unix:///run/podman/podman.sock or tcp://host:2376"
	}
	if u.Scheme == "unix" && !filepath.IsAbs(u.Host) {
		return "", fmt.Sprintf("names the socket %q, which is not an absolute path", u.Host)
	}
	return s, ""
}
