package sandbox

// Policy is what a command may do: the settings that decide its sandbox's
// writable set, visible paths, environment, limits and network. It is one
// type shared by a Request (one command), a session's Spec (every command
// of a session, package session) and the file server (package sandboxfs),
// so that the settings are copied once, as a whole, from the settings file
// to the command. The zero value is the default profile with no limits and
// no working directory (a Request needs one).
type Policy struct {
	// Workdir is the working directory: the one directory tree the command
	// may write under the workspace and network profiles. Absolute, required.
	Workdir string
	// Profile selects write and network access.
	Profile Profile
	// Limits are the per-command resource limits.
	Limits Limits
	// Binds are extra mounts.
	Binds []Bind
	// EnvDeny adds name patterns to DefaultEnvDeny; EnvAllow lets matching
	// names through anyway, also when their value carries a credential
	// (settings env_deny, env_allow; see FilterEnvPolicy).
	EnvDeny, EnvAllow []string
	// TmpSizeMB is the size of the fresh /tmp and of /dev/shm, in MiB; 0
	// means 512.
	TmpSizeMB int
	// Skills are directories of agent skills outside the working directory
	// (absolute, resolved, existing: ~/.agents/skills and the like), shown
	// read-only at their host paths on every backend, so the scripts a
	// skill tells the model to run are found (see SkillBinds).
	Skills []string
	// HomeAllow lists extra dot entries of the home directory to show
	// read-only, relative to the home directory (".zz-tool", ".config/nvim").
	HomeAllow []string
	// NetworkAllow and NetworkDeny are the host allowlist of the allowlist
	// profile (settings network.allow and network.deny, or a route's
	// allow and deny): entries as netproxy.ValidatePattern takes them
	// ("example.com", "*.example.com" for strict subdomains, an IP
	// address), compared without regard to case, deny checked first, any
	// other host refused. Ignored under the other profiles. Under
	// allowlist with an empty NetworkAllow every host is refused.
	NetworkAllow, NetworkDeny []string
	// Secrets are credentials the command uses through stand-ins (setting
	// secrets, or a route's secrets; see Secret). Only the allowlist
	// profile can carry them (CheckSecrets); their hosts are allowed
	// egress on top of NetworkAllow.
	Secrets []Secret
	// Protected lists the protected-path patterns (see DefaultProtected and
	// MatchProtected): paths relative to the top of each writable directory
	// (the working directory, read-write binds; not the scratch directory
	// nor HomeDir) that stay read-only although they lie in it, because
	// programs on the host run them later (.git/hooks, .git/config, shell
	// start-up files, editor and agent settings). Nil means
	// DefaultProtected; an empty, non-nil list protects nothing. Under
	// restricted the working directory is read-only anyway.
	Protected []string
}

// RootKind says why a path is writable in a sandbox (see WritableRoots).
type RootKind string

// The kinds of writable roots.
const (
	// RootWorkdir is the working directory (Policy.Workdir).
	RootWorkdir RootKind = "workdir"
	// RootScratch is the session's scratch directory (Request.ScratchDir).
	RootScratch RootKind = "scratch"
	// RootHome is the session's own home directory (Request.HomeDir,
	// home_mode: session).
	RootHome RootKind = "home"
	// RootCache is corral's tool cache directory (Request.CacheDir).
	RootCache RootKind = "cache"
	// RootBind is a read-write bind (Policy.Binds).
	RootBind RootKind = "bind"
)

// WritableRoot is one path tree a command may write.
type WritableRoot struct {
	// Path is where it appears in the sandbox: the host path for every
	// kind but RootBind, whose Path is the bind's target (Bind.Target).
	Path string
	// Src is the host path: the bind's source for RootBind, else Path.
	Src string
	// Kind says why it is writable.
	Kind RootKind
}

// WritableRoots returns what commands of req may write, as the profiles
// define it (see Profile): under every profile but restricted, the working
// directory, the scratch directory, the session home and the tool cache;
// under every profile, read-write binds (a bind the person asked to be
// read-write stays so under restricted, as the backends mount it). Empty
// paths are left out; nothing is resolved and nothing on the host is read,
// so callers resolve symlinks (and a backend maps host paths into its
// sandbox) themselves. The planner of the bwrap backend, the docker
// backend's sandbox.Layout and the file server (package sandboxfs) all
// ask this function; the backends may narrow the set further (bwrap keeps a
// working directory that is an ancestor of the home directory read-only,
// and protected paths stay read-only inside it).
func WritableRoots(req *Request) []WritableRoot {
	var out []WritableRoot
	if req.Profile.Writable() || req.Profile == "" {
		for _, r := range []struct {
			p string
			k RootKind
		}{{req.Workdir, RootWorkdir}, {req.ScratchDir, RootScratch}, {req.HomeDir, RootHome}, {req.CacheDir, RootCache}} {
			if r.p != "" {
				out = append(out, WritableRoot{Path: r.p, Src: r.p, Kind: r.k})
			}
		}
	}
	for _, b := range req.Binds {
		if !b.ReadOnly && b.Src != "" {
			out = append(out, WritableRoot{Path: b.Target(), Src: b.Src, Kind: RootBind})
		}
	}
	return out
}
