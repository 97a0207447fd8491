package netproxy

import (
	_ "embed"
	"net"
	"slices"
	"strconv"
	"strings"
)

// nodeShim is the file [NodeOptions] names.
//
//go:embed nodeshim.cjs
var nodeShim []byte

// NodeShimName is the file name backends give [NodeShim] in a sandbox.
const NodeShimName = "nodeshim.cjs"

// NodeShim returns (a copy of) a small CommonJS module that makes Node.js
// versions which ignore NODE_USE_ENV_PROXY (before 22.21 and 24.5) send
// fetch and https.request through HTTPS_PROXY anyway: at fetch's first
// call (Node 18 on; older versions have no fetch), its global dispatcher
// (undici's Agent, found through its global symbol
// Symbol.for("undici.globalDispatcher.1"), which Node's bundled undici
// sets when it loads) is replaced by an Agent of the same class whose
// connector opens a CONNECT tunnel; and https.globalAgent by an Agent
// whose createConnection does the same. Hosts NO_PROXY names connect
// directly. On Node versions that honour NODE_USE_ENV_PROXY, or without
// HTTPS_PROXY, it loads nothing and does nothing. It is written in the
// syntax Node 12 parses. A backend places it read-only in every
// allowlist sandbox and names it in [NodeOptions].
func NodeShim() []byte { return slices.Clone(nodeShim) }

// NodeOptions returns the NODE_OPTIONS value that preloads the file shim
// (an absolute path in the sandbox where [NodeShim] lies):
// "--require=" + shim. --require is accepted in NODE_OPTIONS by every
// Node version (--import, which a data: URL needs, only from 18.19 and
// 20.6: older ones refuse to start at all). Node splits NODE_OPTIONS at
// white space and reads quotes and backslashes, so shim must hold none;
// "" is returned for a path that does, or for a relative one. Measured
// on Node 20 here: node -e 0 costs about 30-50 ms more CPU with the shim
// (swapping the dispatcher at start instead, which loads undici, cost
// about 100 ms).
func NodeOptions(shim string) string {
	if shim == "" || shim[0] != '/' || strings.ContainsAny(shim, " \t\n\r\v\f\"'\\") {
		return ""
	}
	return "--require=" + shim
}

// NoProxy is the NO_PROXY value [ProxyEnv] sets: loopback, where the
// forwarders themselves and the command's own local servers live.
const NoProxy = "localhost,127.0.0.1,::1"

// JavaNonProxyHosts is [NoProxy] in the syntax of Java's
// http.nonProxyHosts property (java.net's networking properties: host
// names separated by "|", an IPv6 address in brackets): loopback goes
// direct.
var JavaNonProxyHosts = javaNonProxy(NoProxy)

// javaNonProxy turns a NO_PROXY list (comma-separated) into Java's
// nonProxyHosts syntax.
func javaNonProxy(noProxy string) string {
	var hs []string
	for h := range strings.SplitSeq(noProxy, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if strings.Contains(h, ":") {
			h = "[" + h + "]"
		}
		hs = append(hs, h)
	}
	return strings.Join(hs, "|")
}

// JavaToolOptions returns the JAVA_TOOL_OPTIONS value that points a JVM's
// HTTP and HTTPS clients at the HTTP proxy on 127.0.0.1:httpPort:
// -Dhttp.proxyHost, -Dhttp.proxyPort, -Dhttps.proxyHost,
// -Dhttps.proxyPort and -Dhttp.nonProxyHosts=[JavaNonProxyHosts] (the
// https scheme reads the http one). Java reads these properties, never
// the proxy variables; java.net.HttpURLConnection and
// java.net.http.HttpClient (through ProxySelector.getDefault()) honour
// them. Every JVM reads JAVA_TOOL_OPTIONS (JVM TI specification) and
// prints "Picked up JAVA_TOOL_OPTIONS: ..." on stderr when it is set.
// The JVM splits the value at white space, which none of these hold.
func JavaToolOptions(httpPort int) string {
	p := strconv.Itoa(httpPort)
	return "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=" + p +
		" -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=" + p +
		" -Dhttp.nonProxyHosts=" + JavaNonProxyHosts
}

// ProxyEnv returns "NAME=value" entries that point the usual tools of a
// sandboxed command at the forwarders listening on 127.0.0.1:httpPort
// (HTTP proxy) and 127.0.0.1:socksPort (SOCKS5). A port of 0 leaves out the
// entries of that proxy. The caller adds them to the command's
// environment; the order is fixed.
//
// With httpPort:
//
//   - http_proxy, HTTP_PROXY = http://127.0.0.1:PORT. Both spellings:
//     curl (and so git's http transport, which uses libcurl) reads only the
//     lower-case http_proxy, while Go, Python (urllib, requests, pip),
//     Node and others read either.
//   - https_proxy, HTTPS_PROXY = the same http:// URL: HTTPS goes through a
//     CONNECT tunnel of the plain-HTTP proxy, TLS stays end to end.
//   - NODE_USE_ENV_PROXY=1: makes Node.js (24.x, and the late 22.x
//     releases that got the backport) honour HTTP_PROXY, HTTPS_PROXY and
//     NO_PROXY in fetch and the http/https modules, which it otherwise
//     ignores; older versions ignore the variable.
//   - NODE_OPTIONS = NodeOptions(nodeShim), when nodeShim is not "" (a
//     path the shim lies at in the sandbox, see [NodeShim]): the same
//     for older Node versions (12 to 20, early 22.x and 24.x); a command
//     that sets NODE_OPTIONS itself must keep this value in it for
//     fetch to work there.
//   - npm_config_proxy, npm_config_https_proxy: npm's own settings, for
//     npm versions and configurations that do not fall back to the
//     variables above.
//   - PIP_PROXY: pip's --proxy option, used for every index request.
//   - YARN_HTTP_PROXY, YARN_HTTPS_PROXY: Yarn 2+ reads only its own
//     settings.
//   - JAVA_TOOL_OPTIONS = JavaToolOptions(httpPort): JVMs read
//     properties, not variables. Every JVM then prints "Picked up
//     JAVA_TOOL_OPTIONS: ..." on stderr (Java's documented behaviour), and
//     a command that sets JAVA_TOOL_OPTIONS itself replaces this value.
//
// With socksPort:
//
//   - all_proxy, ALL_PROXY = socks5h://127.0.0.1:PORT, for protocols with
//     no variable of their own (curl for anything but http/https). The
//     "h" makes the client pass host names to the proxy unresolved, which
//     is required: the sandbox has no DNS, and the policy is by name.
//
// Always (when any port is set): no_proxy, NO_PROXY = [NoProxy].
//
// Not covered: git over ssh (the sandbox cannot reach port 22; use https
// remotes) and git:// remotes.
func ProxyEnv(httpPort, socksPort int, nodeShim string) []string {
	var env []string
	if httpPort > 0 {
		u := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))
		env = append(env,
			"http_proxy="+u, "HTTP_PROXY="+u,
			"https_proxy="+u, "HTTPS_PROXY="+u,
			"NODE_USE_ENV_PROXY=1")
		if o := NodeOptions(nodeShim); o != "" {
			env = append(env, "NODE_OPTIONS="+o)
		}
		env = append(env,
			"npm_config_proxy="+u, "npm_config_https_proxy="+u,
			"PIP_PROXY="+u,
			"YARN_HTTP_PROXY="+u, "YARN_HTTPS_PROXY="+u,
			"JAVA_TOOL_OPTIONS="+JavaToolOptions(httpPort),
		)
	}
	if socksPort > 0 {
		u := "socks5h://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(socksPort))
		env = append(env, "all_proxy="+u, "ALL_PROXY="+u)
	}
	if env != nil {
		env = append(env, "no_proxy="+NoProxy, "NO_PROXY="+NoProxy)
	}
	return env
}
