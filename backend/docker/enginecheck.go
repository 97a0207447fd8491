package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/BurntSushi/toml"
	"github.com/moby/moby/client"
)

// EngineFacts are what `corral doctor` learns of the engine beyond its
// version, from its own answers (GET /info; Podman's GET /libpod/info)
// and, for an engine on this machine, Podman's helper directories.
type EngineFacts struct {
	// Flavor is what the engine is (Engine.flavor's reading).
	Flavor Flavor `json:"flavor"`
	// CgroupVersion is the engine host's cgroup version, "1" or "2"
	// (GET /info's CgroupVersion; Podman's libpod answer "v1"/"v2" is
	// read as "1"/"2"); "" when not said.
	CgroupVersion string `json:"cgroup_version,omitempty"`
	// UIDRanges and GIDRanges are how many ranges map ids into rootless
	// Podman's user namespace (GET /libpod/info host.idMappings): 1 means
	// the user's own id only, no subordinate ids (/etc/subuid,
	// /etc/subgid); -1 when unknown (Docker, rootful, no answer).
	UIDRanges int `json:"uid_ranges"`
	GIDRanges int `json:"gid_ranges"`
	// Local is set when the engine's address is a Unix socket, so its
	// host is this machine and InitFound means something.
	Local bool `json:"local"`
	// InitFound is set when Podman's container init, catatonit, is at one
	// of the paths Podman 4.3 looks in (podmanInitPaths), or at InitPath
	// when that is set; meaningful only when Local.
	InitFound bool `json:"init_found"`
	// InitPath is containers.conf's init_path ([containers]) where one
	// of the files Podman reads sets it (containersConfFiles,
	// initPathOf), the one path Podman then runs containers' init from;
	// "" when none sets it.
	InitPath string `json:"init_path,omitempty"`
}

// Problem is one piece the engine lacks for corral's containers: what is
// wrong and the command or setting that fixes it.
type Problem struct {
	What string `json:"what"`
	Fix  string `json:"fix"`
}

// podmanInitPaths are where Podman 4.3 finds catatonit: containers.conf's
// default init_path, then its helper_binaries_dir (containers/common
// pkg/config/default.go, 0.50). Debian's catatonit package puts it at the
// first.
var podmanInitPaths = []string{
	"/usr/libexec/podman/catatonit", "/usr/local/libexec/podman/catatonit",
	"/usr/local/lib/podman/catatonit", "/usr/lib/podman/catatonit",
}

// engineProblems lists what the engine of facts f lacks for corral's
// containers, each with its fix, in a fixed order; none for Docker
// rootful. Pure.
//
//   - a rootless engine that ignores containers' limits (Flavor.NoLimits,
//     ignoresLimits: on cgroup v1, or on v2 without its controllers), so
//     corral refuses it (noLimitsErr);
//   - Podman on this machine without catatonit: every container of
//     corral's has an init, which Podman runs with catatonit ("container-init
//     binary not found on the host");
//   - rootless Podman with one id range: the user has no subordinate ids,
//     so the container's other users cannot exist ("cannot find mappings
//     for user", and images with files of other owners fail to unpack).
func engineProblems(f EngineFacts) []Problem {
	var ps []Problem
	if f.Flavor.NoLimits != "" {
		ps = append(ps, Problem{
			What: "this rootless engine " + f.Flavor.NoLimits + ", so it would ignore containers' limits (docker.memory, docker.cpus, docker.pids_limit): corral refuses it and runs nothing",
			Fix:  noLimitsFix,
		})
	}
	if f.Flavor.Podman && f.Local && !f.InitFound && f.InitPath != "" {
		ps = append(ps, Problem{
			What: "Podman's container init is not at " + f.InitPath + ", the init_path containers.conf sets; every corral container has an init",
			Fix:  "install catatonit there (apt-get install catatonit, dnf install catatonit), or set init_path in containers.conf to where it is",
		})
	}
	if f.Flavor.Podman && f.Local && !f.InitFound && f.InitPath == "" {
		ps = append(ps, Problem{
			What: "Podman's container init, catatonit, is not installed (looked in " + strings.Join(podmanInitPaths, ", ") + "); every corral container has an init",
			Fix:  "install it (apt-get install catatonit, dnf install catatonit), or name another init in containers.conf ([containers] init_path)",
		})
	}
	if f.Flavor.Podman && f.Flavor.Rootless && (f.UIDRanges == 1 || f.GIDRanges == 1) {
		ps = append(ps, Problem{
			What: "rootless Podman has no subordinate ids for this user (/etc/subuid, /etc/subgid), so a container holds one user only",
			Fix:  "sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $USER (a range no other user has), then podman system migrate and restart the service",
		})
	}
	return ps
}

// libpodInfo is what corral reads of Podman's GET /libpod/info.
type libpodInfo struct {
	Host struct {
		CgroupVersion     string   `json:"cgroupVersion"`
		CgroupControllers []string `json:"cgroupControllers"`
		IDMappings        struct {
			UIDMap []json.RawMessage `json:"uidmap"`
			GIDMap []json.RawMessage `json:"gidmap"`
		} `json:"idMappings"`
		Security struct {
			Rootless bool `json:"rootless"`
		} `json:"security"`
	} `json:"host"`
}

// libpodInfoPath is Podman's own information; its API answers under any
// version prefix of its major version, and 4.0.0 is the oldest corral
// meets.
const libpodInfoPath = "/v4.0.0/libpod/info"

// controllers are the cgroup controllers Podman can use (for a rootless
// one: those delegated to its user), never nil.
func (li *libpodInfo) controllers() []string {
	if li.Host.CgroupControllers == nil {
		return []string{}
	}
	return li.Host.CgroupControllers
}

// getJSON asks the engine GET path over the client's own connection and
// decodes its answer (at most 1 MiB) into v.
func getJSON(ctx context.Context, cli *client.Client, path string, v any) error {
	dial := cli.Dialer()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://engine"+path, nil)
	if err != nil {
		return err
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, res.Status)
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// engineFacts asks the engine behind cli, of flavor fl (flavorOf's), its
// GET /info answer in and address addr, what engineProblems needs.
func engineFacts(ctx context.Context, cli *client.Client, fl Flavor, in engineInfo, addr string) EngineFacts {
	f := EngineFacts{Flavor: fl, CgroupVersion: in.CgroupVersion, UIDRanges: -1, GIDRanges: -1, Local: strings.HasPrefix(addr, "unix://")}
	if !fl.Podman {
		f.Flavor = limitsPlan(fl, ignoresLimits(fl, in, nil), in.KernelVersion)
		return f
	}
	var li libpodInfo
	err := getJSON(ctx, cli, libpodInfoPath, &li)
	f.Flavor = limitsPlan(fl, ignoresLimits(fl, in, li.controllers()), in.KernelVersion)
	if err == nil {
		if v := strings.TrimPrefix(li.Host.CgroupVersion, "v"); v != "" {
			f.CgroupVersion = v
		}
		if li.Host.Security.Rootless {
			f.UIDRanges, f.GIDRanges = len(li.Host.IDMappings.UIDMap), len(li.Host.IDMappings.GIDMap)
		}
	}
	if f.Local {
		paths := podmanInitPaths
		var confs [][]byte
		for _, p := range containersConfFiles(fl.Rootless, os.Getenv, readDirNames) {
			if b, err := readConf(p); err == nil {
				confs = append(confs, b)
			}
		}
		if f.InitPath = initPathOf(confs); f.InitPath != "" {
			paths = []string{f.InitPath}
		}
		for _, p := range paths {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				f.InitFound = true
				break
			}
		}
	}
	return f
}

// containersConfFiles returns the containers.conf files Podman 4.3 reads,
// in order, a later one's settings winning (containers/common
// pkg/config/config.go, systemConfigs, 0.50): CONTAINERS_CONF alone when
// set; else /usr/share/containers/containers.conf,
// /etc/containers/containers.conf and the .conf files of
// /etc/containers/containers.conf.d, then for a rootless engine the
// user's $XDG_CONFIG_HOME/containers/containers.conf ($HOME/.config when
// XDG_CONFIG_HOME is unset) and its containers.conf.d. getenv is corral's
// environment, taken as the service's (a rootless service is the user's
// own; a rootful one started with another CONTAINERS_CONF is not seen);
// names lists a directory's entries, sorted (nil when it cannot be read).
// Files that do not exist are left to the reader. Pure but for names.
func containersConfFiles(rootless bool, getenv func(string) string, names func(dir string) []string) []string {
	if p := getenv("CONTAINERS_CONF"); p != "" {
		return []string{p}
	}
	withDir := func(out []string, file string) []string {
		out = append(out, file)
		for _, n := range names(file + ".d") {
			if strings.HasSuffix(n, ".conf") {
				out = append(out, filepath.Join(file+".d", n))
			}
		}
		return out
	}
	out := []string{"/usr/share/containers/containers.conf"}
	out = withDir(out, "/etc/containers/containers.conf")
	if rootless {
		cfg := getenv("XDG_CONFIG_HOME")
		if cfg == "" && getenv("HOME") != "" {
			cfg = filepath.Join(getenv("HOME"), ".config")
		}
		if filepath.IsAbs(cfg) {
			out = withDir(out, filepath.Join(cfg, "containers", "containers.conf"))
		}
	}
	return out
}

// readDirNames lists dir's entries' names, sorted, or nil.
func readDirNames(dir string) []string {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name()
	}
	return names
}

// maxConf bounds a containers.conf file doctor reads, in bytes: Podman's
// own default file is about 30 KiB.
const maxConf = 1 << 20

// readConf reads a containers.conf file for doctor: what it resolves to
// must be a regular file, opened without blocking (CONTAINERS_CONF and
// the user's containers.conf.d may point at a fifo, which would block
// doctor, or at /dev/zero, which would fill its memory), and at most
// maxConf bytes are read.
func readConf(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", path)
	case st.Size() > maxConf:
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxConf)
	}
	return io.ReadAll(io.LimitReader(f, maxConf))
}

// initPathOf returns [containers] init_path of the last of confs (the
// contents of containersConfFiles, in order) that sets it, or "": the
// path Podman runs containers' init from (containers/common
// pkg/config/config.go FindInitBinary: init_path, when set, is the only
// place looked in). A file that is not TOML is passed over, as it gives
// no path. Pure.
func initPathOf(confs [][]byte) string {
	path := ""
	for _, b := range confs {
		var c struct {
			Containers struct {
				InitPath string `toml:"init_path"`
			} `toml:"containers"`
		}
		if _, err := toml.Decode(string(b), &c); err == nil && c.Containers.InitPath != "" {
			path = c.Containers.InitPath
		}
	}
	return path
}
