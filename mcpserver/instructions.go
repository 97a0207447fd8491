package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// Instructions returns the server's instructions for the session called
// name running as sp: the text a client gives the model about the server
// (InitializeResult.instructions, MCP specification 2025-11-25,
// basic/lifecycle; the server/discover result in 2026-07-28). It is
// generated from the live settings, so it tells the model where it is:
// backend, profile, working directory, what is writable, network or none,
// limits, that /tmp is fresh for each command while $TMPDIR persists, and
// how to run something in the background. specErr, when set, is why the
// settings could not be read; sp may then be nil.
func Instructions(name string, sp *session.Spec, specErr error) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

	if sp == nil || sp.Backend == nil {
		p("corral runs your shell commands and code on this machine inside a sandbox, in the session %q.", name)
		if specErr != nil {
			p("Its settings cannot be read right now (%v), so commands will fail until the person running corral fixes them.", specErr)
		}
		p("")
		usage(p)
		return strings.TrimRight(b.String(), "\n")
	}

	wd := sp.Workdir
	if wd == "" {
		wd = sp.Backend.DefaultCwd()
	}
	if wd == "" {
		wd = "the directory corral was started in"
	}
	tr := sandbox.TraitsOf(sp.Backend)
	if tr.Unsandboxed {
		p("corral runs your shell commands and code directly on this machine, WITHOUT a sandbox (backend local), in the session %q: they have the rights of the user running corral, and profiles, binds and resource limits do not apply.", name)
		p("")
		p("- Working directory: %s.", wd)
		p("- Wall-clock limit: %s per command (bash's timeout_s changes it for one call).", human(sp.Timeout))
		p("- Output beyond %s is cut in the middle (the head and the tail are kept).", bytesText(sp.OutputLimit))
		p("")
		usage(p)
		return strings.TrimRight(b.String(), "\n")
	}

	profile := sp.Profile
	if profile == "" {
		profile = sandbox.DefaultProfile
	}
	if l, ok := sp.Backend.(sandbox.Layout); ok {
		containerInstructions(p, name, sp, profile, wd, l)
		return strings.TrimRight(b.String(), "\n")
	}
	p("corral runs your shell commands and code on this machine inside a %s sandbox, in the session %q, under the %s profile.", sp.Backend.Name(), name, profile)
	p("")
	p("Where you are:")
	if profile.Writable() {
		p("- Working directory: %s. It is writable. The rest of the host's filesystem is visible but read-only (writes fail with \"Read-only file system\").", wd)
	} else {
		p("- Working directory: %s. It is read-only under the restricted profile, like the rest of the host's filesystem (writes fail with \"Read-only file system\").", wd)
	}
	if sp.Review && profile.Writable() {
		p("- Review mode: what you change in the working directory lands in this session's own layer, not in the person's project; your commands and file tools see your changes, and the person reviews them (corral diff) and applies them (corral apply); workspace_diff shows you your pending changes. Nothing you do applies them.")
	}
	var writable, readonly []string
	for _, bd := range sp.Binds {
		if bd.ReadOnly {
			readonly = append(readonly, bd.Target())
		} else if profile.Writable() {
			writable = append(writable, bd.Target())
		} else {
			readonly = append(readonly, bd.Target())
		}
	}
	if profile.Writable() {
		writable = append(writable, "$TMPDIR (this session's scratch directory)")
		if sp.SessionHome {
			writable = append(writable, "$HOME (a home directory of this session's own)")
		}
	}
	writable = append(writable, "/tmp and /dev/shm")
	p("- Writable: %s.", strings.Join(writable, ", "))
	if len(readonly) > 0 {
		p("- Also mounted, read-only: %s.", strings.Join(readonly, ", "))
	}
	tmp := sp.TmpSizeMB
	if tmp <= 0 {
		tmp = 512
	}
	if profile.Writable() {
		p("- /tmp is fresh and empty for every command (%d MiB): nothing left there survives the command. $TMPDIR persists between this session's commands: keep scratch files there.", tmp)
	} else {
		p("- /tmp is fresh and empty for every command (%d MiB), and $TMPDIR is /tmp: nothing left there survives the command. This session's scratch directory is read-only under this profile.", tmp)
	}
	if line := cachesLine(sp, profile); line != "" {
		p("%s", line)
	}
	p("- Hidden: credentials (~/.ssh, cloud and package-registry tokens, keyrings) and the dot files of the home directory that are not allowed; secrets are removed from the environment. A hidden path looks missing.")
	networkAndLimits(p, sp, profile, false)
	usage(p)
	return strings.TrimRight(b.String(), "\n")
}

// containerInstructions is Instructions' text for a backend whose sandbox
// is a container or pod of the session's own (sandbox.Layout: docker,
// kubernetes): its filesystem is the image's, not the host's, and its /tmp
// lasts as long as the container.
func containerInstructions(p func(string, ...any), name string, sp *session.Spec, profile sandbox.Profile, wd string, l sandbox.Layout) {
	tr := sandbox.TraitsOf(sp.Backend)
	where := tr.Where
	if where == "" {
		where = "a container"
	}
	p("corral runs your shell commands and code inside %s of this session's own (%s backend), in the session %q, under the %s profile.", where, sp.Backend.Name(), name, profile)
	p("")
	p("Where you are:")
	if profile.Writable() {
		p("- Working directory: %s, the session's workspace. It is writable. The rest of the filesystem is the container image's (the host's files are not there); outside the writable paths it is read-only (writes fail with \"Read-only file system\").", wd)
	} else {
		p("- Working directory: %s, the session's workspace, read-only under the restricted profile. The rest of the filesystem is the container image's (the host's files are not there).", wd)
	}
	req := &sandbox.Request{Policy: sandbox.Policy{Profile: profile, Workdir: wd, Binds: sp.Binds}}
	if roots := l.WritableRoots(req); len(roots) > 0 {
		p("- Writable: %s. /tmp is $HOME and $TMPDIR too, and it lasts as long as this session's %s: files there carry over between commands.", strings.Join(roots, ", "), strings.TrimPrefix(where, "a "))
	}
	if line := cachesLine(sp, profile); line != "" {
		p("%s", line)
	}
	if tr.OwnWorkspace {
		p("- The workspace is the pod's own volume: the person moves files in and out (corral cp, corral sync); what you write stays in the pod until then.")
	}
	p("- Hidden: the host's credentials and files are not in the container; secrets are removed from the environment.")
	networkAndLimits(p, sp, profile, true)
	usage(p)
}

// networkAndLimits writes the network and limits lines of Instructions;
// container is set for a container's or pod's network, which is not the
// host's.
func networkAndLimits(p func(string, ...any), sp *session.Spec, profile sandbox.Profile, container bool) {
	switch {
	case profile.HostNetwork() && container:
		p("- Network: open (downloads and package installs work); 127.0.0.1 is the container's own loopback, not the host's.")
	case profile.HostNetwork():
		p("- Network: the host's network (downloads and package installs work; services on the host's 127.0.0.1 are reachable).")
	case profile == sandbox.ProfileAllowlist:
		allowed := "no host at all (network.allow is empty)"
		if len(sp.NetworkAllow) > 0 {
			allowed = strings.Join(sp.NetworkAllow, ", ")
			if len(sp.NetworkDeny) > 0 {
				allowed += " (but not " + strings.Join(sp.NetworkDeny, ", ") + ")"
			}
		}
		p("- Network: only through corral's proxy, to %s. http_proxy, https_proxy and ALL_PROXY are set, and curl, git over https, pip, npm and Go use them; anything else is refused with \"blocked by corral network allowlist: HOST\". There is no DNS and no direct connection, and tools that ignore proxy settings get no network.", allowed)
		if line := secretsLine(sp.Secrets); line != "" {
			p("%s", line)
		}
	default:
		p("- Network: none. Only a private loopback exists, so downloads, package installs and git fetches fail; use what is installed or already in the working directory.")
	}
	p("- Limits: %s of wall-clock time per command (bash's timeout_s changes it for one call); %s. A command that hits a limit is killed and the result names the setting that raises it. Output beyond %s is cut in the middle (the head and the tail are kept).",
		human(sp.Timeout), limitsText(sp.Limits, memoryPerCommand(sp)), bytesText(sp.OutputLimit))
	p("")
}

// secretsLine names the secrets' variables and hosts (never a value: the
// model sees stand-ins only), or "" when there are none.
func secretsLine(secs []sandbox.Secret) string {
	if len(secs) == 0 {
		return ""
	}
	var parts []string
	for _, s := range secs {
		parts = append(parts, "$"+s.Name+" (for "+strings.Join(s.Hosts, ", ")+")")
	}
	return "- Credentials: " + strings.Join(parts, ", ") + " hold stand-ins, not the real values. Use them as usual in an Authorization header (Bearer, token or Basic), x-api-key or the header the service expects, over https to those hosts, and corral's proxy puts the real value in; sent to any other host, over plain http, in a URL or a request body they are refused or useless. Printing them shows the stand-in only."
}

// cachesLine says where the toolchains' caches go (the tool_caches
// setting, see package toolcache), or "" when there is nothing to say.
func cachesLine(sp *session.Spec, profile sandbox.Profile) string {
	const tools = "npm, yarn, pnpm, pip, uv, Go (GOCACHE, GOMODCACHE), cargo (CARGO_HOME), Gradle and Maven"
	on := sp.CacheDir != "" || sp.SessionCache
	switch {
	case !on:
		return "- Package and build caches: the tools' defaults under $HOME, which are read-only here; point them at $TMPDIR (npm_config_cache, GOCACHE, GOMODCACHE, PIP_CACHE_DIR) when an install or build needs to write one."
	case sandbox.TraitsOf(sp.Backend).CacheDir != "":
		return "- Package and build caches (" + tools + ") are in this container's " + sandbox.TraitsOf(sp.Backend).CacheDir + " (the variables point there): kept between this session's commands, gone with the container."
	case !profile.Writable():
		return "- Package and build caches (npm, yarn, pnpm, pip, uv, Go (GOCACHE, GOMODCACHE), Gradle and Maven) are in /tmp/.toolcache under the restricted profile (the tools' variables point there): fresh for every command, gone after it; cargo keeps its own CARGO_HOME. The host's own caches are never written."
	case sp.SessionCache:
		return "- Package and build caches (" + tools + ") are in a writable directory of this session's own (the tools' variables point there), kept between its commands; the host's own caches (~/.npm, ~/.cache, ~/go/pkg/mod) are never written. Do not change those variables to $HOME paths: they are read-only."
	default:
		return "- Package and build caches (" + tools + ") are in " + sp.CacheDir + ", writable and shared with this user's other sessions (the tools' variables point there), so a package downloaded once is there next time; the host's own caches (~/.npm, ~/.cache, ~/go/pkg/mod) are never written. Do not change those variables to $HOME paths: they are read-only."
	}
}

// usage writes how to use the tools.
func usage(p func(string, ...any)) {
	p("How to work:")
	p("- bash runs one command line with bash. cd and exported variables carry over to the next call, as in one terminal; this session's commands run one at a time. Nothing waits for input: stdin is empty, PAGER=cat, git never prompts.")
	p("- For servers, watchers and anything that runs long: bash with background: true returns an id at once; read its output with bash_output {id} (call again for more; the result says whether it still runs and its exit code) and stop it with bash_kill {id}. A background command starts in the current directory, does not change cwd or variables, and ends with the session.")
	p("- run_code {code, language: python | bash | node} runs a script file with the same limits and returns its output.")
	p("- A failed call says why and what to do; a non-zero exit_code is the command's own result, not a failure of corral.")
}

// memoryScoper is a backend that says how memory_mb holds for its
// commands (bwrap.Backend.MemoryPerCommand).
type memoryScoper interface {
	MemoryPerCommand(ctx context.Context, memoryMB int) bool
}

// memoryPerCommand reports whether sp's backend bounds memory_mb for a
// whole command; backends that do not say bound each process (RLIMIT_DATA).
func memoryPerCommand(sp *session.Spec) bool {
	m, ok := sp.Backend.(memoryScoper)
	return ok && m.MemoryPerCommand(context.Background(), sp.Limits.MemoryMB)
}

// limitsText renders the limits of a command; wholeMemory says memory_mb
// bounds the whole command rather than each process.
func limitsText(l sandbox.Limits, wholeMemory bool) string {
	var parts []string
	if l.MemoryMB > 0 && wholeMemory {
		parts = append(parts, fmt.Sprintf("%d MiB of memory for the whole command (all its processes together)", l.MemoryMB))
	} else if l.MemoryMB > 0 {
		parts = append(parts, fmt.Sprintf("%d MiB of memory per process", l.MemoryMB))
	} else {
		parts = append(parts, "no memory limit")
	}
	if l.CPUSeconds > 0 {
		parts = append(parts, fmt.Sprintf("%d s of CPU time per process", l.CPUSeconds))
	} else {
		parts = append(parts, "no CPU time limit")
	}
	if l.MaxProcs > 0 {
		parts = append(parts, fmt.Sprintf("%d processes and threads", l.MaxProcs))
	} else {
		parts = append(parts, "no process limit")
	}
	return strings.Join(parts, ", ")
}

// human renders a duration as "3 min", "90 s" or "1 h 30 min".
func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "no limit"
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Hour && d%time.Minute == 0:
		return fmt.Sprintf("%d h %d min", d/time.Hour, (d%time.Hour)/time.Minute)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}

// bytesText renders a byte count as "64 KiB" or "1000 bytes".
func bytesText(n int) string {
	if n <= 0 {
		n = 64 << 10
	}
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
