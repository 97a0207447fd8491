package egress

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/corralhq/corral/internal/atomicfile"
	"github.com/corralhq/corral/netproxy"
)

// Ports the forwarder listens on inside a sandbox, on 127.0.0.1 of the
// sandbox's own network namespace (so they never collide with the host's
// or another sandbox's). HTTPPort is the HTTP proxy (CONNECT and plain
// http://), SOCKSPort the SOCKS5 proxy.
const (
	HTTPPort  = 3128
	SOCKSPort = 1080
)

// ForwarderArgv returns the argv that runs cmd inside a sandbox under
// corral's forwarder:
//
//	exe __corral-net-forward --http 127.0.0.1:3128=SOCKDIR/http.sock
//	    --socks 127.0.0.1:1080=SOCKDIR/socks.sock [--pass-fds N] -- cmd...
//
// exe is corral's executable as the sandbox can execute it (a path, or
// /proc/self/fd/N for a descriptor passed in); sockDir is where the
// sandbox sees the server's socket directory. passFDs is the number of
// descriptors from 3 up that the command must still get (a session's state
// pipe); the forwarder closes every other inherited descriptor before the
// command starts. The forwarder listens before the command starts, and the
// command runs through the trampoline, which applies the syscall filter
// (AF_UNIX sockets denied) before it executes cmd (see package netproxy,
// ForwarderMain and TrampolineMain).
func ForwarderArgv(exe, sockDir string, passFDs int, cmd []string) []string {
	argv := []string{exe, netproxy.ForwarderArg,
		"--http", net.JoinHostPort("127.0.0.1", strconv.Itoa(HTTPPort)) + "=" + path.Join(sockDir, netproxy.HTTPSocketName),
		"--socks", net.JoinHostPort("127.0.0.1", strconv.Itoa(SOCKSPort)) + "=" + path.Join(sockDir, netproxy.SOCKSSocketName),
	}
	if passFDs > 0 {
		argv = append(argv, "--pass-fds", strconv.Itoa(passFDs))
	}
	argv = append(argv, "--")
	return append(argv, cmd...)
}

// ServeArgv returns the argv of a forwarder that runs no command and
// relays until its standard input reaches end of file or it is signalled
// (netproxy.ForwarderMain --serve):
//
//	exe __corral-net-forward --http 127.0.0.1:3128=SOCKDIR/http.sock
//	    --socks 127.0.0.1:1080=SOCKDIR/socks.sock --ready-fd READYFD --serve
//
// It is the only process of the sandbox that holds a network namespace
// other sandboxes join (bwrap's allowlist profile). readyFD is a
// descriptor the forwarder writes its listening addresses to and closes
// once both ports listen; exe and sockDir are as for [ForwarderArgv].
func ServeArgv(exe, sockDir string, readyFD int) []string {
	argv := ForwarderArgv(exe, sockDir, 0, nil)
	argv = argv[:len(argv)-1] // "--"
	return append(argv, "--ready-fd", strconv.Itoa(readyFD), "--serve")
}

// NodeShimDir is where every allowlist sandbox, of either backend, sees a
// read-only directory that holds only netproxy.NodeShim, at
// [NodeShimPath], which the NODE_OPTIONS of [Env] names. The backend binds
// the host directory [WriteNodeShim] fills there.
//
// Why /dev: both bwrap (--dev) and the container runtime give each
// sandbox a fresh tmpfs there, so the mount target is never a host path
// or a file a command made (a symlink planted there cannot redirect the
// mount), and it exists in every sandbox (bwrap binds the host's root
// read-only, where no new directory such as /.corral can be made). The
// directory itself is the mount point, not the file: a mount point can
// be neither renamed nor removed (EBUSY), and a read-only mount cannot be
// written, while the parent of a bound file in bwrap's /dev (owned by
// the sandbox's user) can be renamed away and replaced (checked with
// bwrap 0.8 here).
const NodeShimDir = "/dev/.corral"

// NodeShimPath is the Node preload's path in a sandbox.
const NodeShimPath = NodeShimDir + "/" + netproxy.NodeShimName

// Env returns the variables that point a command's tools at the
// forwarder: netproxy.ProxyEnv(HTTPPort, SOCKSPort, NodeShimPath),
// "NAME=value" each (http_proxy and HTTP_PROXY, https_proxy and
// HTTPS_PROXY, all_proxy and ALL_PROXY as socks5h://, no_proxy and
// NO_PROXY for loopback, NODE_USE_ENV_PROXY, NODE_OPTIONS preloading
// NodeShimPath, npm_config_proxy, npm_config_https_proxy, PIP_PROXY,
// YARN_HTTP_PROXY, YARN_HTTPS_PROXY). The sandbox must have the shim at
// NodeShimDir (WriteNodeShim): NODE_OPTIONS naming a missing file stops
// every node from starting.
func Env() []string { return netproxy.ProxyEnv(HTTPPort, SOCKSPort, NodeShimPath) }

// WriteNodeShim makes dir (mode 0755; its parents 0700 where missing)
// hold netproxy.NodeShim as netproxy.NodeShimName (0644), written
// atomically when missing or different, and returns dir, for a backend to
// bind read-only at NodeShimDir. The file is public (no secret in it):
// the modes let a sandbox's user read it through the bind whatever its
// uid. A process checks the file once per dir and trusts it after that
// while it exists. Errors are the file system's.
func WriteNodeShim(dir string) (string, error) {
	shimWritten.mu.Lock()
	defer shimWritten.mu.Unlock()
	path := filepath.Join(dir, netproxy.NodeShimName)
	if shimWritten.dirs[dir] {
		if _, err := os.Lstat(path); err == nil {
			return dir, nil
		}
	}
	data := netproxy.NodeShim()
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, data) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return "", err
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return "", err
		}
		if err := atomicfile.Write(path, data, 0o644, false); err != nil {
			return "", fmt.Errorf("writing %s: %w", path, err)
		}
	}
	if shimWritten.dirs == nil {
		shimWritten.dirs = map[string]bool{}
	}
	shimWritten.dirs[dir] = true
	return dir, nil
}

// shimWritten are the directories WriteNodeShim filled in this process.
var shimWritten struct {
	mu   sync.Mutex
	dirs map[string]bool
}

// WithoutEnv returns env without the entries that [Env] sets, where they
// still hold exactly Env's values: a session that ran under allowlist
// saves them with its exported variables, and they must not follow it to
// another profile, where nothing listens on those ports. A variable the
// command set to another value is kept. env is not changed.
func WithoutEnv(env []string) []string {
	ours := Env()
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return slices.Contains(ours, kv)
	})
}
