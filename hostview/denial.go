package hostview

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/corralhq/corral/internal/lazyre"
	"github.com/corralhq/corral/sandbox"
)

// Kinds of Denial.
const (
	DenialReadOnly = "read-only" // a write to a path outside the writable set
	DenialHidden   = "hidden"    // a path that exists on the host but not in the sandbox
	DenialNetwork  = "network"   // no network, or a host the allowlist refuses
	DenialSyscall  = "syscall"   // a system call the sandbox's filter refuses
	DenialLayer    = "layer"     // a change the review layer cannot hold
)

// Denial is one way a command hit the sandbox's wall, as its output shows:
// Kind (DenialReadOnly, ...), Path or Host when the output names one, and
// Message, one line for the agent and the person that says what happened
// and what would allow it.
type Denial struct {
	Kind    string `json:"kind"`
	Path    string `json:"path,omitempty"`
	Host    string `json:"host,omitempty"`
	Message string `json:"message"`
}

// DenialContext is what ExplainDenials needs to know of the sandbox.
type DenialContext struct {
	// Profile is the sandbox's profile.
	Profile sandbox.Profile
	// Writable are the host paths the sandbox may write (working
	// directory, scratch, read-write binds), named in the message.
	Writable []string
	// Hidden reports whether a path that the output calls missing exists
	// on the host but is hidden from the sandbox; nil skips that kind.
	Hidden func(path string) bool
	// Review is set under workspace_mode review (Request.LayerDir).
	Review bool
	// Cwd is the directory the command started in, as the sandbox names
	// it: a relative path in the output is taken relative to it, to tell
	// a protected path. "" leaves relative paths as printed.
	Cwd string
	// Protected are the protected-path patterns of the sandbox
	// (Request.ProtectedPatterns): a read-only path below a writable
	// directory that one matches is named as protected, which is why it
	// is read-only there.
	Protected []string
}

// maxDenials bounds the lines ExplainDenials returns: a build that fails on
// a thousand files needs the first few reasons, not a thousand.
const maxDenials = 3

var (
	// pathIn finds a path in a line of a tool's error: quoted (', ", ‘’,
	// `') or bare, as coreutils, Python, Node (EROFS: ..., open '...'),
	// Go (mkdir /x: read-only file system) and git print them.
	quotedPath = lazyre.New("['\"‘`](/[^'\"’`\n]*)['\"’`]")
	barePath   = lazyre.New(`(?:^|[\s(=])(/[^\s'"’:,;)]+)`)

	reReadOnly = lazyre.New(`(?i)read-only file system|\bEROFS\b|errno 30\b`)
	// quotedRel and bareRelRO find a relative path in a line about a
	// read-only file system (relPathOf).
	quotedRel = lazyre.New("['\"‘`]([^'\"’`\\s/][^'\"’`\n]*)['\"’`]")
	bareRelRO = lazyre.New(`(?i)(?:^|\s)([^\s'"’:/][^\s'"’:]*): read-only file system`)
	// reBusy: EBUSY, which rename(2) and unlink(2) return for a mount
	// point: a protected path is a read-only bind over the file, and
	// git writes .git/config as config.lock renamed over it ("could not
	// write config file .git/config: Device or resource busy").
	reBusy      = lazyre.New(`(?i)device or resource busy|\bEBUSY\b|errno 16\]`)
	bareRelBusy = lazyre.New(`(?i)(?:^|\s)([^\s'"’:/][^\s'"’:]*): device or resource busy`)
	reMissing   = lazyre.New(`(?i)no such file or directory|\bENOENT\b|errno 2\]`)
	reNoNet     = lazyre.New(`(?i)network is unreachable|could not resolve host|temporary failure in name resolution|name or service not known|getaddrinfo (?:ENOTFOUND|EAI_AGAIN)|no address associated with hostname|\bENETUNREACH\b|dial tcp: lookup [^ ]+ on .*: (?:dial|no such host)|connection refused.*:53\b`)
	// reConnectFailed: a connect that failed without saying why, as curl
	// prints it for an unreachable address ("Failed to connect to 1.1.1.1
	// port 80 after 0 ms: Couldn't connect to server"); the host is
	// matched so that a loopback server that is not running is not
	// blamed on the sandbox.
	reConnectFailed = lazyre.New(`(?i)failed to connect to (\S+) port \d+.*couldn't connect to server`)
	reBlocked       = lazyre.New(`blocked by corral network allowlist: ([^\s(]+)`)
	reProxy403      = lazyre.New(`(?i)(?:CONNECT tunnel failed, response 403|Tunnel connection failed: 403|ProxyError.*403|statusCode[=:]\s*403.*proxy|proxy.*\b403 Forbidden)`)
	reEPERM         = lazyre.New(`(?i)operation not permitted|\bEPERM\b|errno 1\]`)
	// reOverflow: EOVERFLOW, which overlayfs in a user namespace returns
	// when it cannot copy up a file whose owner or group the namespace
	// does not map (the review layer).
	reOverflow = lazyre.New(`(?i)value too large for defined data type|\bEOVERFLOW\b|errno 75\]`)
	// reSockEACCES: EACCES from connect(2) to a Unix socket, as the bwrap
	// backend's supervisor answers for a host socket (Go's "dial unix
	// /x.sock: connect: permission denied", ssh-add's "Error connecting to
	// agent: Permission denied", curl's --unix-socket).
	reSockEACCES = lazyre.New(`(?i)(?:dial unix|connect|\.sock|\bsocket\b|connecting to agent).*(?:permission denied|\bEACCES\b|errno 13\])`)
)

// ExplainDenials reads a failed command's output (its last bytes are
// enough) and returns up to three one-line reasons it hit the sandbox's
// wall, most specific first, without repeats. It is pure: the caller passes
// what it knows of the sandbox in c. The patterns are the messages of libc
// (strerror), coreutils, Python, Node, Go, curl, git and corral's own proxy
// for EROFS, ENOENT, ENETUNREACH, name resolution failures and the proxy's
// 403; an output that names none of them gives none.
func ExplainDenials(output string, c DenialContext) []Denial {
	var out []Denial
	seen := map[string]bool{}
	add := func(d Denial) {
		key := d.Kind + "\x00" + d.Path + "\x00" + d.Host
		if seen[key] || len(out) >= maxDenials {
			return
		}
		seen[key] = true
		out = append(out, d)
	}
	profile := c.Profile
	if profile == "" {
		profile = sandbox.DefaultProfile
	}
	writable := "nothing (profile " + string(profile) + ")"
	if len(c.Writable) > 0 {
		ws := append([]string{}, c.Writable...)
		sort.Strings(ws)
		writable = strings.Join(ws, ", ")
	}
	lines := strings.Split(output, "\n")
	lastPath := -1 // the last line that names a path
	for i, l := range lines {
		if strings.Contains(l, "/") {
			lastPath = i
		}
	}
	for i, line := range lines {
		if len(out) >= maxDenials {
			break
		}
		switch {
		case reReadOnly.MatchString(line):
			what := pathOf(line)
			if what == "" {
				what = relPathOf(line)
			}
			if what == "" {
				if len(out) > 0 || i < lastPath {
					continue // a later line may name the path (npm prints the code first)
				}
				what = "a path"
			}
			p := what
			if what == "a path" {
				p = ""
			} else if !filepath.IsAbs(p) {
				p = ""
				if c.Cwd != "" {
					p = filepath.Join(c.Cwd, what)
				}
			}
			if root, pat, ok := protectedIn(p, c.Writable, c.Protected); ok {
				add(Denial{Kind: DenialReadOnly, Path: p, Message: fmt.Sprintf("corral: %s is a protected path (protected_paths: %s), read-only in this sandbox although %s is writable: programs on the host run it later, so only the person changes it, on the host", what, pat, root)})
				continue
			}
			fix := "; work in the working directory or the scratch directory ($TMPDIR), or ask the person to bind the directory read-write (binds)"
			if !profile.Writable() {
				fix = "; the " + string(profile) + " profile writes nothing but /tmp, the workspace profile writes the working directory"
			}
			add(Denial{Kind: DenialReadOnly, Path: p, Message: fmt.Sprintf("corral: %s is read-only in this sandbox (profile %s); writable: %s%s", what, profile, writable, fix)})
		case reBusy.MatchString(line):
			// Only where it names a protected path: a busy device or
			// mount of the command's own is not the sandbox's wall.
			what := pathOf(line)
			if what == "" {
				if m := bareRelBusy.FindStringSubmatch(line); m != nil {
					what = m[1]
				} else if m := quotedRel.FindStringSubmatch(line); m != nil {
					what = m[1]
				}
			}
			p := what
			if p != "" && !filepath.IsAbs(p) {
				p = ""
				if c.Cwd != "" {
					p = filepath.Join(c.Cwd, what)
				}
			}
			if root, pat, ok := protectedIn(p, c.Writable, c.Protected); ok {
				add(Denial{Kind: DenialReadOnly, Path: p, Message: fmt.Sprintf("corral: %s is a protected path (protected_paths: %s), read-only in this sandbox although %s is writable, and cannot be replaced (a program that writes it by renaming a new copy over it gets EBUSY): programs on the host run it later, so only the person changes it, on the host", what, pat, root)})
			}
		case c.Hidden != nil && reMissing.MatchString(line):
			if p := pathOf(line); p != "" && c.Hidden(p) {
				add(Denial{Kind: DenialHidden, Path: p, Message: fmt.Sprintf("corral: %s exists on the host but is hidden in this sandbox (a credential store, a dot entry of the home directory, or corral's own files); home_allow shows a dot entry read-only, never a credential store", p)})
			}
		case c.Review && reOverflow.MatchString(line):
			p := pathOf(line)
			what := "a file"
			if p != "" {
				what = p
			}
			add(Denial{Kind: DenialLayer, Path: p, Message: fmt.Sprintf("corral: %s belongs to another user or group than yours, so the review layer (workspace_mode review) cannot take a changed copy of it (EOVERFLOW); the person can chown or chgrp it to their own on the host, or use workspace_mode direct", what)})
		case reBlocked.MatchString(line):
			host := reBlocked.FindStringSubmatch(line)[1]
			add(Denial{Kind: DenialNetwork, Host: host, Message: fmt.Sprintf("corral: %s is not in network.allow (profile allowlist), so corral's proxy refused it; the person can add it (corral config set network.allow ...)", host)})
		case reProxy403.MatchString(line) && profile == sandbox.ProfileAllowlist:
			add(Denial{Kind: DenialNetwork, Message: "corral: a host the command reached for is not in network.allow (profile allowlist), so corral's proxy refused it (403); corral's log names it (network.denied)"})
		case (reNoNet.MatchString(line) || remoteConnectFailed(line)) && !profile.HostNetwork():
			msg := fmt.Sprintf("corral: this sandbox has no network (profile %s); the allowlist profile reaches the hosts of network.allow through corral's proxy, network reaches any", profile)
			if profile == sandbox.ProfileAllowlist {
				msg = "corral: under the allowlist profile only corral's proxy is reachable (HTTP_PROXY, HTTPS_PROXY and ALL_PROXY point at it); a program that ignores those variables, or a non-HTTP protocol, cannot get out"
			}
			add(Denial{Kind: DenialNetwork, Message: msg})
		case reSockEACCES.MatchString(line) && profile.DeniesUnixSockets():
			p := pathOf(line)
			what := "a Unix socket"
			if p != "" {
				what = p
			}
			add(Denial{Kind: DenialSyscall, Path: p, Message: fmt.Sprintf("corral: %s may be a Unix socket of the host: under profile %s a command connects only to Unix sockets made inside its own sandbox (EACCES otherwise); the network profile reaches the host's", what, profile)})
		case reEPERM.MatchString(line) && pathOf(line) == "":
			// EPERM about no file is the filter's (a file's would be
			// EACCES, or name it): socket(AF_UNIX) under the confined
			// profiles, mount, ptrace of others, keyrings and the like.
			msg := "corral: a system call was refused by this sandbox's syscall filter (Operation not permitted): mount, ptrace, kernel keyrings, new namespaces with privileges and the like are never allowed"
			if profile.DeniesUnixSockets() {
				msg += fmt.Sprintf("; under profile %s datagram Unix sockets are refused too, and where corral cannot check connect(2) (Docker, arm64) new Unix sockets (AF_UNIX) are refused, which the network profile allows; a Unix socket of the host answers EACCES", profile)
			}
			add(Denial{Kind: DenialSyscall, Message: msg})
		}
	}
	return out
}

// relPathOf returns the relative path a line about a read-only file system
// names: quoted (touch's 'x', Python's and Node's), or the word before
// ": Read-only file system" (dash's "cannot create x:", bash's "bash: x:",
// Go's "open x:"); "" when it names none.
func relPathOf(line string) string {
	if m := quotedRel.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	if m := bareRelRO.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return ""
}

// protectedIn reports whether p, an absolute path, lies below one of the
// writable directories and a protected-path pattern matches it there
// (sandbox.MatchProtected): the directory and the pattern.
func protectedIn(p string, writable, patterns []string) (root, pattern string, ok bool) {
	if p == "" || len(patterns) == 0 {
		return "", "", false
	}
	for _, w := range writable {
		rel, err := filepath.Rel(w, p)
		if err != nil || !filepath.IsLocal(rel) {
			continue
		}
		if pat, ok := sandbox.MatchProtected(filepath.ToSlash(rel), false, patterns); ok {
			return w, pat, true
		}
	}
	return "", "", false
}

// pathOf returns the first absolute path a line names, quoted or bare.
func pathOf(line string) string {
	if m := quotedPath.FindStringSubmatch(line); m != nil {
		return strings.TrimRight(m[1], ".")
	}
	if m := barePath.FindStringSubmatch(line); m != nil {
		return strings.TrimRight(m[1], ".")
	}
	return ""
}

// DenialContextFor returns the DenialContext of a request run by be: its
// profile, the paths it may write as the sandbox names them (a Layout's
// WritableRoots, such as a container's workspace and /tmp; else the
// working directory under a writing profile, the scratch directory, the
// session's home, read-write binds) and, when hostPaths (the sandbox sees
// the host's paths, as on bwrap), a Hidden that takes a path the sandbox
// calls missing but the host has for a hidden one (outside the sandbox's
// own /tmp, /dev and /proc).
func DenialContextFor(r *sandbox.Request, be sandbox.Backend, hostPaths bool) DenialContext {
	c := DenialContext{Profile: r.Profile, Review: r.LayerDir != "", Protected: r.ProtectedPatterns()}
	if hostPaths {
		c.Cwd = r.Dir
		if c.Cwd == "" {
			c.Cwd = r.Workdir // where the backends start it (Request.Dir)
		}
	}
	if c.Profile == "" {
		c.Profile = sandbox.DefaultProfile
	}
	if l, ok := be.(sandbox.Layout); ok {
		// The host's scratch and home directories are not where a
		// container has them: name what the command can write.
		if c.Profile.Writable() {
			c.Writable = l.WritableRoots(r)
		}
	} else if c.Profile.Writable() {
		for _, d := range []string{r.Workdir, r.ScratchDir, r.HomeDir} {
			if d != "" {
				c.Writable = append(c.Writable, d)
			}
		}
		for _, b := range r.Binds {
			if !b.ReadOnly {
				c.Writable = append(c.Writable, b.Target())
			}
		}
	}
	if hostPaths {
		c.Hidden = func(p string) bool {
			p = filepath.Clean(p)
			for _, own := range []string{"/tmp", "/dev", "/proc", "/run/user"} {
				if p == own || strings.HasPrefix(p, own+"/") {
					return false
				}
			}
			_, err := os.Lstat(p)
			return err == nil
		}
	}
	return c
}

// remoteConnectFailed reports whether line is a connect failure that names
// a host other than loopback (reConnectFailed).
func remoteConnectFailed(line string) bool {
	m := reConnectFailed.FindStringSubmatch(line)
	if m == nil {
		return false
	}
	host := strings.Trim(m[1], "[]")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return false
	}
	return true
}
