package egress

import (
	"net"
	"path"
	"slices"
	"strconv"

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

// Env returns the variables that point a command's tools at the
// forwarder: netproxy.ProxyEnv(HTTPPort, SOCKSPort), "NAME=value" each
// (http_proxy and HTTP_PROXY, https_proxy and HTTPS_PROXY, all_proxy and
// ALL_PROXY as socks5h://, no_proxy and NO_PROXY for loopback,
// NODE_USE_ENV_PROXY, npm_config_proxy, npm_config_https_proxy, PIP_PROXY,
// YARN_HTTP_PROXY, YARN_HTTPS_PROXY).
func Env() []string { return netproxy.ProxyEnv(HTTPPort, SOCKSPort) }

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
