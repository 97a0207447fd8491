package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/approval"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
)

// Kind is the type of a setting's value: how it is written in the file, in
// the environment and on the `corral config set` command line, and which Go
// type it has in [Settings].
type Kind int

const (
	// KindString is free text (Go type string). NUL bytes are refused.
	KindString Kind = iota
	// KindEnum is one of the words in [Key.Values] (Go type string, or a
	// named string type such as sandbox.Profile).
	KindEnum
	// KindInt is a whole number not below [Key.Min] (Go type int). Text is
	// parsed in base 10.
	KindInt
	// KindDuration is a time span greater than zero (Go type
	// time.Duration), written as a Go duration ("90s", "5m", "1h30m") or as
	// a whole number of seconds.
	KindDuration
	// KindPath is an absolute host path or empty (Go type string). "~" and
	// "~/x" are expanded to the home directory; the path is cleaned.
	KindPath
	// KindStringList is a list of strings (Go type []string). In the file it
	// is a YAML sequence; as text (environment, `config set`) it is a JSON or
	// YAML flow sequence (`[".a", ".b"]`) or a comma-separated list.
	KindStringList
	// KindBinds is a list of {src, dest, readonly} mappings (Go type
	// []sandbox.Bind). src is an absolute host path ("~/x" is expanded),
	// dest an absolute path inside the sandbox (empty means src), readonly a
	// boolean that defaults to true. As text it is a JSON or YAML flow
	// sequence (`[{src: /data}]`) or a single such mapping.
	KindBinds
	// KindRoutes is a list of {sessions, backend, profile, allow, deny, secrets, workspace_mode, ports}
	// mappings (Go type []Route): sessions is a glob over session names (see
	// [Route.Match]), backend and profile are words as for the backend and
	// profile keys, allow and deny lists as for network.allow and
	// network.deny, ports as for the ports key; every field is optional. As text it is a JSON or YAML
	// flow sequence (`[{sessions: "tg:*", profile: workspace}]`) or a single
	// such mapping.
	KindRoutes
	// KindPorts is a list of TCP port numbers from 1 to 65535 (Go type
	// []int), duplicates dropped. In the file it is a YAML sequence of
	// numbers; as text a JSON or YAML flow sequence (`[3000, 5173]`) or a
	// comma-separated list.
	KindPorts
	// KindSecrets is a list of {name, from, hosts, headers} mappings (Go
	// type []sandbox.Secret, see [parseSecrets]): name an environment
	// variable name, from "env:VAR" or "file:/abs/path", hosts a non-empty
	// list of host names as for network.allow (no IP addresses), headers
	// optional HTTP header names, username optional (git's credential
	// helper), kind "token" or "aws" (then secret_from, and optional
	// secret_name, give the secret access key). As text it is a JSON or
	// YAML flow sequence or a single such mapping.
	KindSecrets
)

// String returns the kind's name as shown in help text ("int", "binds").
func (k Kind) String() string {
	switch k {
	case KindString:
		return "string"
	case KindEnum:
		return "enum"
	case KindInt:
		return "int"
	case KindDuration:
		return "duration"
	case KindPath:
		return "path"
	case KindStringList:
		return "list"
	case KindBinds:
		return "binds"
	case KindRoutes:
		return "routes"
	case KindPorts:
		return "ports"
	case KindSecrets:
		return "secrets"
	}
	return "unknown"
}

// Key describes one setting. The registry is a table of Keys (see [Keys]);
// adding a setting means adding a row there and a field to [Settings].
type Key struct {
	// Name is the key as written in the file, lower case; dots separate
	// the levels of nested keys ("memory_mb", "docker.image").
	Name string
	// Kind is the value's type.
	Kind Kind
	// Default is the value used when neither the file nor the environment
	// sets the key, with the Go type of the Settings field (string, int,
	// time.Duration, []string, []sandbox.Bind, []Route, sandbox.Profile).
	Default any
	// Doc is a one-line description, with units and what 0 means.
	Doc string
	// Values lists the accepted words of a KindEnum key.
	Values []string
	// Min is the smallest accepted value of a KindInt key.
	Min int
	// Accepts says, after "is not", what the key accepts; it ends every
	// error about the key's value ("a whole number of MiB (0 disables)").
	Accepts string
	// Deprecated, when set, says that the key has no effect and why, and
	// what to do instead. Such a key is still accepted, so that settings
	// files naming it keep loading; Settings.DeprecatedSet warns of it.
	Deprecated string

	// builtin, for a KindStringList key whose unset (nil) value means a
	// built-in list and whose [] means none, returns that list: `corral
	// config get/list` show it for an unset key, so unset and [] read
	// apart.
	builtin func() []string
	// Check, when set, checks and normalises one element of a
	// KindStringList key, or the value of a KindString key: it returns
	// the value to keep and "", or the reason the value is refused ("is
	// not a size"), which Accepts completes.
	Check func(string) (string, string)
	// Field returns a pointer to the key's field in s, of the Go type
	// its Kind has (a section's key: in its section, Settings.Section);
	// a KindEnum field may be a bool, for the words true and false.
	Field func(s *Settings) any
}

// EnvName returns the environment variable that sets the key:
// "CORRAL_" followed by the name upper-cased with '.' replaced by '_'
// (memory_mb → CORRAL_MEMORY_MB, docker.pids_limit → CORRAL_DOCKER_PIDS_LIMIT).
func (k Key) EnvName() string { return EnvName(k.Name) }

// EnvName returns the environment variable for the key called name; see
// [Key.EnvName]. It does not check that the key exists.
func EnvName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, ".", "_"))
}

const envPrefix = "CORRAL_"

// EnvConfig is the environment variable that names the settings file when
// no path is given explicitly.
const EnvConfig = "CORRAL_CONFIG"

// Accepted values of the enum settings.
const (
	WorkspaceDirect = "direct" // workspace_mode: commands write the host's working directory
	WorkspaceReview = "review" // workspace_mode: commands write the session's layer; a person applies it

	HomeModeHost    = "host"    // home_mode: the host's home directory, hidden but for allowed entries
	HomeModeSession = "session" // home_mode: a fresh home directory per session

	// tool_caches: where the toolchains' caches go (see package toolcache).
	ToolCachesShared  = "shared"  // one per user, <state dir>/cache, shared by every session
	ToolCachesSession = "session" // one per session, in its directory; `corral run` alone gets one for the command
	ToolCachesOff     = "off"     // none: the tools' defaults, read-only in a sandbox

	DegradedDegrade = "degrade" // degraded_mode (deprecated, no effect): kept so settings naming it stay valid
	DegradedFail    = "fail"    // degraded_mode (deprecated, no effect): kept so settings naming it stay valid
)

// Defaults of the settings that have no constant elsewhere.
const (
	// DefaultTimeout is the default of timeout.
	DefaultTimeout = 180 * time.Second
	// DefaultTmpSizeMB is the default of tmp_size_mb.
	DefaultTmpSizeMB = 512
	// DefaultOutputLimit is the default of output_limit, in bytes.
	DefaultOutputLimit = 64 << 10
	// DefaultListen is the address `corral serve` listens on when neither
	// --listen nor the listen key says otherwise: loopback only.
	DefaultListen = "127.0.0.1:8765"
)

// Accepted values of the approval key, and the default of audit_max_mb.
const (
	ApprovalAsk = string(approval.ModeAsk) // approval: put commands that match approval_patterns to a person
	ApprovalOff = string(approval.ModeOff) // approval: let them run; the hard floor is still refused

	// DefaultAuditMaxMB is the default of audit_max_mb, in MiB.
	DefaultAuditMaxMB = 10
)

// approvalPattern checks one element of approval_patterns.
func approvalPattern(s string) (string, string) {
	if _, err := approval.ParsePattern(s); err != nil {
		return "", "is not an approval pattern: " + err.Error()
	}
	return strings.TrimSpace(s), ""
}

// protectedPattern checks one element of protected_paths.
func protectedPattern(s string) (string, string) {
	s = strings.TrimSpace(s)
	if err := sandbox.CheckProtected([]string{s}); err != nil {
		return "", "is not a protected-path pattern: " + err.Error()
	}
	return s, ""
}

// netPattern checks one element of network.allow or network.deny (and of
// a route's allow and deny).
func netPattern(s string) (string, string) {
	s = strings.TrimSpace(s)
	if err := netproxy.ValidatePattern(s); err != nil {
		return "", "is not a host pattern: " + strings.TrimPrefix(err.Error(), fmt.Sprintf("%s %q: ", netproxy.ErrInvalidPattern, s))
	}
	return s, ""
}

// NonEmpty is a Key.Check that refuses an empty or blank string and
// trims the rest.
func NonEmpty(s string) (string, string) {
	if strings.TrimSpace(s) == "" {
		return "", "is empty"
	}
	return strings.TrimSpace(s), ""
}

// AbsOrEmpty is a Key.Check that accepts "" or an absolute path, which it
// cleans.
func AbsOrEmpty(s string) (string, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", ""
	}
	if !filepath.IsAbs(s) {
		return "", "is not an absolute path"
	}
	return filepath.Clean(s), ""
}

// coreKeys are the settings of corral itself, declared here; a backend
// declares its own (RegisterSection).
var coreKeys = []Key{
	{
		// Default, Values, Accepts and Doc come from the backends
		// registered (RegisterBackend), when the registry is built.
		Name: "backend", Kind: KindEnum,
		Field: func(s *Settings) any { return &s.Backend },
	},
	{
		Name: "profile", Kind: KindEnum, Default: sandbox.DefaultProfile,
		Values:  profileNames(),
		Accepts: "one of " + strings.Join(profileNames(), ", "),
		Doc:     "what commands may write and reach: restricted (read-only, no network), workspace (writable working directory, no network), allowlist (writable working directory, HTTP(S) and SOCKS5 to the hosts of network.allow through corral's proxy) or network (the host's network)",
		Field:   func(s *Settings) any { return &s.Profile },
	},
	{
		Name: "memory_mb", Kind: KindInt, Default: sandbox.DefaultLimits.MemoryMB,
		Accepts: "a whole number of MiB (0 disables)",
		Doc:     "memory, in MiB: of the whole command where corral can make a memory cgroup (bwrap as root; cgroup v2 delegated or through a systemd user scope), else of each process (RLIMIT_DATA); `corral doctor` says which; 0 disables",
		Field:   func(s *Settings) any { return &s.MemoryMB },
	},
	{
		Name: "cpu_seconds", Kind: KindInt, Default: sandbox.DefaultLimits.CPUSeconds,
		Accepts: "a whole number of seconds (0 disables)",
		Doc:     "CPU time per process, in seconds (RLIMIT_CPU); 0 disables",
		Field:   func(s *Settings) any { return &s.CPUSeconds },
	},
	{
		Name: "max_procs", Kind: KindInt, Default: sandbox.DefaultLimits.MaxProcs,
		Accepts: "a whole number of processes (0 disables)",
		Doc:     "processes and threads a command may run; 0 disables",
		Field:   func(s *Settings) any { return &s.MaxProcs },
	},
	{
		Name: "binds", Kind: KindBinds, Default: []sandbox.Bind(nil),
		Accepts: `a list of {src, dest, readonly} mappings such as [{src: /data}]`,
		Doc:     "extra host paths to mount: [{src: /abs/host/path, dest: /abs/path/inside, readonly: true}]; readonly defaults to true, dest to src",
		Field:   func(s *Settings) any { return &s.Binds },
	},
	{
		Name: "home_allow", Kind: KindStringList, Default: []string(nil),
		Accepts: `a list of paths relative to the home directory such as [".gitconfig", ".config/nvim"]`,
		Doc:     "entries of the home directory to show read-only, relative to it (.gitconfig, .config/nvim)",
		Check:   homeRelative,
		Field:   func(s *Settings) any { return &s.HomeAllow },
	},
	{
		Name: "skills", Kind: KindStringList, Default: []string{"~/.agents/skills", "~/.claude/skills", "~/.codex/skills"},
		Accepts: `a list of absolute or ~/ paths such as ["~/.agents/skills", "/opt/skills"]`,
		Doc:     "directories of agent skills shown read-only at their host paths in every sandbox (bwrap and docker), so scripts a skill names are found; ones that do not exist are left out; [] shows none",
		Check:   skillPath,
		Field:   func(s *Settings) any { return &s.Skills },
	},
	{
		Name: "cwd", Kind: KindPath, Default: "",
		Accepts: "an absolute path, ~ or ~/path, or empty for the directory corral was started in",
		Doc:     "working directory of commands (absolute, ~ expands); empty means the directory corral was started in",
		Field:   func(s *Settings) any { return &s.Cwd },
	},
	{
		Name: "timeout", Kind: KindDuration, Default: DefaultTimeout,
		Accepts: `a duration greater than 0 such as "90s" or "5m", or a whole number of seconds`,
		Doc:     `wall-clock limit of one command: a duration ("90s", "5m") or whole seconds`,
		Field:   func(s *Settings) any { return &s.Timeout },
	},
	{
		Name: "home_mode", Kind: KindEnum, Default: HomeModeHost,
		Values:  []string{HomeModeHost, HomeModeSession},
		Accepts: "one of host, session",
		Doc:     "home directory inside the sandbox: host (the real one, hidden but for home_allow) or session (a fresh one per session)",
		Field:   func(s *Settings) any { return &s.HomeMode },
	},
	{
		Name: "workspace_mode", Kind: KindEnum, Default: WorkspaceDirect,
		Values:  []string{WorkspaceDirect, WorkspaceReview},
		Accepts: "one of direct, review",
		Doc:     "direct: commands change the working directory itself; review: a session's changes land in a layer of its own (bwrap and docker backends), shown by `corral diff` and written to the host by `corral apply`",
		Field:   func(s *Settings) any { return &s.WorkspaceMode },
	},
	{
		Name: "tool_caches", Kind: KindEnum, Default: ToolCachesShared,
		Values:  []string{ToolCachesShared, ToolCachesSession, ToolCachesOff},
		Accepts: "one of shared, session, off",
		Doc:     "writable caches of npm, yarn, pnpm, pip, uv, Go, cargo, Gradle and Maven in the sandbox, never the host's own: shared (one per user under the state directory, `corral cache path`), session (one per session), off (the tools' defaults, read-only)",
		Field:   func(s *Settings) any { return &s.ToolCaches },
	},
	{
		Name: "degraded_mode", Kind: KindEnum, Default: DegradedDegrade,
		Values:  []string{DegradedDegrade, DegradedFail},
		Accepts: "one of degrade, fail",
		Doc:     "deprecated, no effect (accepted so old settings files load): when no sandbox can be had the command is never run, whatever this says",
		Deprecated: "corral never runs a command outside its sandbox, so there is nothing to degrade to: when no sandbox can be had, the command is not run, " +
			"corral says why and names the fix (exit 125; a tool error over MCP) either way; remove it (corral config unset degraded_mode)",
		Field: func(s *Settings) any { return &s.DegradedMode },
	},
	{
		Name: "tmp_size_mb", Kind: KindInt, Default: DefaultTmpSizeMB, Min: 1,
		Accepts: "a whole number of MiB greater than 0",
		Doc:     "size of each command's fresh /tmp and of /dev/shm, in MiB (tmpfs, counted in the host's memory)",
		Field:   func(s *Settings) any { return &s.TmpSizeMB },
	},
	{
		Name: "env_deny", Kind: KindStringList, Default: []string(nil),
		Accepts: `a list of variable name patterns such as ["MYCORP_*", "SECRET_THING"]`,
		Doc:     "more environment variable name patterns (shell globs, case-insensitive) kept out of sandboxes, on top of the built-in deny list",
		Field:   func(s *Settings) any { return &s.EnvDeny },
	},
	{
		Name: "env_allow", Kind: KindStringList, Default: []string(nil),
		Accepts: `a list of variable name patterns such as ["GITHUB_TOKEN"]`,
		Doc:     "environment variable name patterns let into sandboxes although the deny list matches them or their value carries a credential",
		Field:   func(s *Settings) any { return &s.EnvAllow },
	},
	{
		Name: "run_as", Kind: KindString, Default: "",
		Accepts: `empty, UID[:GID] or USER[:GROUP], not root`,
		Doc:     "when corral runs as root: the host user that holds every sandbox instead of root; empty means the working directory's owner, or nobody (65534) when that is root; files written in the working directory keep its owner either way",
		Check:   runAs,
		Field:   func(s *Settings) any { return &s.RunAs },
	},
	{
		Name: "bwrap", Kind: KindPath, Default: "",
		Accepts: "an absolute path to the bwrap executable, or empty to use /usr/bin, /usr/local/bin or /bin",
		Doc:     "bubblewrap executable; never looked up in PATH, where a sandboxed command could plant one",
		Field:   func(s *Settings) any { return &s.Bwrap },
	},
	{
		Name: "output_limit", Kind: KindInt, Default: DefaultOutputLimit, Min: 1,
		Accepts: "a whole number of bytes greater than 0",
		Doc:     "bytes of a command's output shown to agents before it is cut",
		Field:   func(s *Settings) any { return &s.OutputLimit },
	},
	{
		Name: "approval", Kind: KindEnum, Default: ApprovalAsk,
		Values:  []string{ApprovalOff, ApprovalAsk},
		Accepts: "one of off, ask",
		Doc:     "commands that match approval_patterns: ask (a person approves each first; refused when the MCP client cannot ask) or off (they run); the hard floor (rm -rf /, mkfs on a device, fork bombs, shutdown, ...) is refused either way",
		Field:   func(s *Settings) any { return &s.Approval },
	},
	{
		Name: "approval_patterns", Kind: KindStringList, Default: []string(nil),
		Accepts: `a list of command patterns such as ["git push --force", "rm {-r,-R}", "curl | sh", "re:(?i)drop table"]`,
		Doc:     `commands that need approval under approval: ask; empty means the built-in list (git push --force, git reset --hard, git clean -f, git branch -D, rm -r, curl | sh, chmod -R, chown -R, DROP TABLE, ...), a list replaces it: shell-like patterns ("git reset --hard", "rm {-r,-R}", "curl | sh") or re:REGEXP; write patterns holding {a,b} as a JSON or YAML list`,
		Check:   approvalPattern,
		builtin: approval.DefaultPatterns,
		Field:   func(s *Settings) any { return &s.ApprovalPatterns },
	},
	{
		Name: "audit_max_mb", Kind: KindInt, Default: DefaultAuditMaxMB, Min: 1,
		Accepts: "a whole number of MiB greater than 0",
		Doc:     "size of the audit log (audit/audit.jsonl in the state directory) at which it is rotated, in MiB; 3 older files are kept",
		Field:   func(s *Settings) any { return &s.AuditMaxMB },
	},
	{
		Name: "routes", Kind: KindRoutes, Default: []Route(nil),
		Accepts: `a list of {sessions, backend, profile, allow, deny, secrets, workspace_mode, ports} mappings such as [{sessions: "tg:*", profile: workspace}]`,
		Doc:     `backend, profile, network allowlist, secrets, workspace_mode and ports by session name: [{sessions: "tg:*", backend: bwrap, profile: allowlist, allow: ["pypi.org"]}, ...]; sessions is a glob (* also matches / and :), the first matching route wins, every field is optional, and what a route leaves out comes from the backend, profile, network.allow, network.deny, secrets and workspace_mode keys (secrets: [] gives its sessions none)`,
		Field:   func(s *Settings) any { return &s.Routes },
	},
	{
		Name: "protected_paths", Kind: KindStringList, Default: []string(nil),
		Accepts: `a list of patterns relative to a writable directory such as [".git/hooks", "**/.git/config", ".vscode"]`,
		Doc:     "paths inside the writable directories that stay read-only because programs on the host run them later; unset means the built-in list (.git/hooks, .git/config, shell start-up files, .vscode, .idea, .mcp.json, .claude, .codex, ...), [] protects nothing; **/ matches at any depth (two levels scanned), * within a name",
		Check:   protectedPattern,
		builtin: func() []string { return slices.Clone(sandbox.DefaultProtected) },
		Field:   func(s *Settings) any { return &s.ProtectedPaths },
	},
	{
		Name: "network.allow", Kind: KindStringList, Default: []string(nil),
		Accepts: `a list of host names such as ["pypi.org", "*.pythonhosted.org"]`,
		Doc:     `hosts the allowlist profile lets commands reach through corral's proxy: "example.com" (that name only), "*.example.com" (its strict subdomains, not example.com itself) or an IP address; case-insensitive, no port or scheme; empty refuses every host`,
		Check:   netPattern,
		Field:   func(s *Settings) any { return &s.NetworkAllow },
	},
	{
		Name: "network.deny", Kind: KindStringList, Default: []string(nil),
		Accepts: `a list of host names such as ["upload.pypi.org", "*.internal.example.com"]`,
		Doc:     "hosts refused under the allowlist profile even when network.allow matches them (checked first); same syntax as network.allow",
		Check:   netPattern,
		Field:   func(s *Settings) any { return &s.NetworkDeny },
	},
	{
		Name: "ports", Kind: KindPorts, Default: []int(nil),
		Accepts: "a list of TCP ports from 1 to 65535 such as [3000, 5173]",
		Doc:     "ports of a session's background servers that the MCP server (and corral serve) forwards to 127.0.0.1 on the host once one listens (workspace and allowlist profiles, bwrap); the host port is the same when free, else any free one",
		Field:   func(s *Settings) any { return &s.Ports },
	},
	{
		Name: "secrets", Kind: KindSecrets, Default: []sandbox.Secret(nil),
		Accepts: `a list of {name, from, hosts, headers} mappings such as [{name: GITHUB_TOKEN, from: "env:GH_TOKEN", hosts: [github.com, api.github.com]}]`,
		Doc:     `credentials commands use but never see (allowlist profile only): the variable name holds a stand-in of the real value's length and shape, and corral's proxy puts the real value (from env:VAR or file:/abs/path, read on the host) into the Authorization, x-api-key and listed headers of HTTPS requests to hosts only (kind: aws pairs, with secret_from, are re-signed with SigV4; git gets corral as credential helper, username optional; files: [~/.netrc, ...] shows those credential files (.npmrc, .netrc, .git-credentials, Docker's config.json, .pypirc) read-only with only the entries that hold a secret's value, the stand-in in its place; on docker and kubernetes below the container's HOME, /tmp); the hosts' answers are scrubbed of the real value; the hosts are allowed egress`,
		Field:   func(s *Settings) any { return &s.Secrets },
	},
	{
		Name: "listen", Kind: KindString, Default: "",
		Accepts: `a host:port address such as "127.0.0.1:8765", or empty for 127.0.0.1:8765`,
		Doc:     "address `corral serve` listens on (host:port); empty means 127.0.0.1:8765; an address beyond loopback requires token",
		Check:   listenAddr,
		Field:   func(s *Settings) any { return &s.Listen },
	},
	{
		Name: "token", Kind: KindString, Default: "",
		Accepts: "a string of at least 16 characters, or empty for none",
		Doc:     "bearer token clients of `corral serve` must send (Authorization: Bearer TOKEN); empty: serve makes one and keeps it in <state dir>/serve-token; required to listen beyond loopback; prefer the CORRAL_TOKEN environment variable to the file",
		Check:   bearerToken,
		Field:   func(s *Settings) any { return &s.Token },
	},
}

// Section is a backend's part of the settings: the keys NAME.*, declared
// by the backend that reads them (RegisterSection, from its init), with
// their defaults and checks; config knows none of them by name.
type Section struct {
	// Name is the section's name, the keys' first level ("docker").
	Name string
	// New returns a new zero value of the section's struct, as a pointer;
	// its keys' Field functions point into it (Settings.Section).
	New func() any
	// Keys returns the section's settings, each named Name + "." + a name
	// of its own, in the order `corral config list` shows them. It is
	// called once, at the settings' first use: a table built at package
	// initialisation would cost every start of corral (and every helper
	// it re-executes) its allocations.
	Keys func() []Key

	next *Section // the list of sections, newest first
}

// sections are the registered sections, newest first (a list through
// Section.next: registering allocates nothing).
var sections *Section

// indexed is set once the registry is built: a section registered later
// would be missing from it.
var indexed atomic.Bool

// RegisterSection adds a backend's section of settings (a package
// variable of the backend's) to the registry; backends call it from
// init, before any settings are read. It panics on a section registered
// twice or without a Name, New or Keys, or registered after the settings
// were first used; the keys are checked when the registry is built (each
// named within the section, with Field, Doc and Accepts). Each is a
// program's bug, found at its start.
func RegisterSection(sec *Section) {
	if indexed.Load() {
		panic("config: section " + sec.Name + " registered after the settings were read")
	}
	if sec.Name == "" || sec.New == nil || sec.Keys == nil || sectionNamed(sec.Name) != nil {
		panic("config: section " + sec.Name + " registered twice, or without a Name, New or Keys")
	}
	sec.next, sections = sections, sec
}

// sectionNamed returns the registered section called name, or nil.
func sectionNamed(name string) *Section {
	for sec := sections; sec != nil; sec = sec.next {
		if sec.Name == name {
			return sec
		}
	}
	return nil
}

// Backend is one value of the backend key (and of a route's backend),
// declared by the backend it selects: backend/registry registers one
// for each driver. config knows none by name.
type Backend struct {
	// Name is the value ("bwrap").
	Name string
	// Doc says what it is, in the backend key's Doc: "bwrap
	// (bubblewrap)".
	Doc string
	// Default makes it the backend key's default; one backend is.
	Default bool

	next *Backend // the list of backends, newest first
}

// backends are the registered backends, newest first (a list through
// Backend.next: registering allocates nothing).
var backends *Backend

// RegisterBackend adds a value of the backend key (a package variable of
// its backend's); it is called from init, before any settings are read
// (backend/registry.Register does). It panics on a name registered twice
// or empty, or a call after the settings were first used.
func RegisterBackend(b *Backend) {
	if indexed.Load() {
		panic("config: backend " + b.Name + " registered after the settings were read")
	}
	for o := backends; o != nil; o = o.next {
		if o.Name == b.Name {
			panic("config: backend " + b.Name + " registered twice")
		}
	}
	if b.Name == "" {
		panic("config: a backend without a name")
	}
	b.next, backends = backends, b
}

// BackendNames returns the names of the registered backends, sorted.
func BackendNames() []string {
	var out []string
	for b := backends; b != nil; b = b.next {
		out = append(out, b.Name)
	}
	slices.Sort(out)
	return out
}

// DefaultBackend returns the backend key's default (the registered
// backend that says it is), or "" when none does.
func DefaultBackend() string {
	for b := backends; b != nil; b = b.next {
		if b.Default {
			return b.Name
		}
	}
	return ""
}

// backendKey completes the backend key k from the registered backends:
// its default, values, what it accepts and its Doc ("sandbox backend: A
// (what), B (what) or C (what)").
func backendKey(k *Key) {
	names := BackendNames()
	docs := make([]string, len(names))
	for i, n := range names {
		for b := backends; b != nil; b = b.next {
			if b.Name == n {
				docs[i] = b.Doc
			}
		}
	}
	k.Default, k.Values = DefaultBackend(), names
	k.Accepts = "one of " + strings.Join(names, ", ")
	k.Doc = "sandbox backend: " + orList(docs)
}

// orList joins items as "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// sectionsBefore is the key the sections' keys come before in the
// registry (where `corral config list` has always shown docker.* and
// kubernetes.*).
const sectionsBefore = "listen"

// registry returns the table of settings, in the order `corral config
// list` shows them: coreKeys, with the sections' keys, sections sorted by
// name, before sectionsBefore. It is built at its first call and the same
// slice returned after.
var registry = sync.OnceValue(func() []Key {
	indexed.Store(true)
	var secs []*Section
	for sec := sections; sec != nil; sec = sec.next {
		secs = append(secs, sec)
	}
	slices.SortFunc(secs, func(a, b *Section) int { return strings.Compare(a.Name, b.Name) })
	at := slices.IndexFunc(coreKeys, func(k Key) bool { return k.Name == sectionsBefore })
	out := slices.Clone(coreKeys[:at])
	backendKey(&out[slices.IndexFunc(out, func(k Key) bool { return k.Name == "backend" })])
	for _, sec := range secs {
		for _, k := range sec.Keys() {
			if !strings.HasPrefix(k.Name, sec.Name+".") || k.Field == nil || k.Doc == "" || k.Accepts == "" {
				panic("config: key " + k.Name + " of section " + sec.Name + " lacks its prefix, Field, Doc or Accepts")
			}
			out = append(out, k)
		}
	}
	return append(out, coreKeys[at:]...)
})

// registryIndex indexes the registry by name and by environment variable,
// built at first use (not at package initialisation, which every start of
// corral's executable pays).
var registryIndex = sync.OnceValues(func() (map[string]*Key, map[string]*Key) {
	n := make(map[string]*Key, len(registry()))
	e := make(map[string]*Key, len(registry()))
	for i := range registry() {
		k := &registry()[i]
		n[k.Name] = k
		e[k.EnvName()] = k
	}
	return n, e
})

// byName returns the registry's index by setting name.
func byName() map[string]*Key { n, _ := registryIndex(); return n }

// byEnv returns the registry's index by environment variable name.
func byEnv() map[string]*Key { _, e := registryIndex(); return e }

func profileNames() []string {
	out := make([]string, len(sandbox.Profiles))
	for i, p := range sandbox.Profiles {
		out[i] = string(p)
	}
	return out
}

// Keys returns the registry: every setting, in the order `corral config
// list` shows them. The slice is a copy.
func Keys() []Key {
	out := make([]Key, len(registry()))
	copy(out, registry())
	return out
}

// Names returns the names of every setting, in registry order.
func Names() []string {
	out := make([]string, len(registry()))
	for i, k := range registry() {
		out[i] = k.Name
	}
	return out
}

// Lookup returns the setting called name (exact, lower-case match).
func Lookup(name string) (Key, bool) {
	k, ok := byName()[name]
	if !ok {
		return Key{}, false
	}
	return *k, true
}

// lookupKey is Lookup returning an *UnknownKeyError for unknown names.
func lookupKey(name string) (*Key, error) {
	if k, ok := byName()[name]; ok {
		return k, nil
	}
	return nil, &UnknownKeyError{Key: name}
}

// isSection reports whether name is a level above some nested key
// ("docker" when docker.image exists).
func isSection(name string) bool {
	for _, k := range registry() {
		if strings.HasPrefix(k.Name, name+".") {
			return true
		}
	}
	return false
}

// underKey returns the registered key that name lies below ("binds" for
// "binds.src"), if any.
func underKey(name string) (*Key, bool) {
	for i := range registry() {
		if strings.HasPrefix(name, registry()[i].Name+".") {
			return &registry()[i], true
		}
	}
	return nil, false
}
