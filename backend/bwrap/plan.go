package bwrap

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/corralhq/corral/internal/dircache"
	"github.com/corralhq/corral/internal/pathres"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/toolcache"
)

// mountKind is one bwrap mount operation.
type mountKind int

const (
	mRoBind    mountKind = iota // --ro-bind SRC DEST
	mBind                       // --bind SRC DEST
	mDevBind                    // --dev-bind SRC DEST (device nodes)
	mTmpfs                      // --perms MODE --tmpfs DEST
	mSymlink                    // --symlink SRC(target) DEST
	mRemountRO                  // --remount-ro DEST
	mDev                        // --dev DEST (a fresh /dev)
	mProc                       // --proc DEST (a private /proc)
)

// mount is one step of a plan. Steps are applied by bwrap in order, so a
// later step covers an earlier one at the same or a parent path.
type mount struct {
	Kind  mountKind
	Src   string
	Dest  string
	Perms uint32 // tmpfs mode bits as chmod(2) takes them (01777); 0 means bwrap's default (0755)
	Size  int64  // tmpfs size in bytes (--size); 0 means the kernel's default (half of RAM)
	// ViaFD marks a bind of a path inside a writable directory (a protected
	// path, a pin) that the backend binds from a descriptor where bwrap can
	// (Binary.BindFD); FD is that descriptor's number in bwrap, set just
	// before it starts (0: by path).
	ViaFD bool
	FD    int
}

// Host are the facts about the host a plan depends on, gathered once per
// sandbox by the backend.
type Host struct {
	// Home is the user's home directory (absolute, symlinks resolved), or ""
	// when there is none.
	Home string
	// UID is the real uid corral runs as.
	UID int
	// GitSystemConfig, set for a root caller, is a host file bound at
	// gitSystemConfigDest and named by GIT_CONFIG_SYSTEM: the system's git
	// settings (included) and safe.directory = * (see gitTrustAll).
	GitSystemConfig string
	// HiddenDirs are directories that must never be visible, whatever their
	// location: corral's own config and state directories.
	HiddenDirs []string
	// RunUserDir is the user's runtime directory (/run/user/UID), covered
	// by an empty tmpfs when it exists.
	RunUserDir string
	// MaskFiles are host files (sockets) replaced by EmptyFile wherever they
	// resolve to: the Docker and Podman sockets by default.
	MaskFiles []string
	// SecretFiles must never be readable or writable in a sandbox (the
	// settings file in use): a sandbox whose writable set holds one is
	// refused, and one that is visible reads as empty.
	SecretFiles []string
	// PinFiles are executables corral runs on the host (its own executable,
	// bwrap): where a sandbox could write them, they are bound read-only
	// onto themselves, so no command can replace them.
	PinFiles []string
	// EmptyFile is an empty, read-only regular file bound over files that
	// must read as empty (credential files, the Docker socket).
	EmptyFile string
	// view is the review layer's holder when the request has a LayerDir:
	// paths in the working directory are read as its mount namespace
	// shows them (Plan.inView).
	view *layerHolder
	// Secrets are the request's prepared secrets (stand-ins, trust
	// bundle); nil when it declares none. See SecretFacts.
	Secrets *SecretFacts
	// JavaMaxRAMMB is memory_mb where it is RLIMIT_DATA per process (no
	// memory cgroup holds the command), else 0: the command's JVMs are
	// told it (withJavaMaxRAM, memory.go).
	JavaMaxRAMMB int
	// Dirs keeps directory listings between the plans of one backend
	// (dircache): the home's, the credential stores' and the protected
	// paths' scans list through it. nil lists afresh.
	Dirs *dircache.Cache
	// NodeShim is a host directory (egress.WriteNodeShim) bound read-only
	// at egress.NodeShimDir in allowlist sandboxes; "" leaves
	// NODE_OPTIONS out of their environment, which would otherwise name
	// a missing file and stop every node.
	NodeShim string
}

// Plan is everything bwrap needs to build one sandbox.
type Plan struct {
	// LayerDir is the session's review layer (sandbox.Request.LayerDir):
	// bwrap starts in its holder's namespaces (layerhold_linux.go), where
	// Workdir is the overlay. Empty: the host's own working directory.
	LayerDir string
	view     *layerHolder
	// Mounts in the order bwrap applies them.
	Mounts []mount
	// Chdir is the directory the command starts in (absolute, resolved).
	Chdir string
	// Workdir is the effective working directory (resolved); Writable says
	// whether it is mounted read-write.
	Workdir  string
	Writable bool
	// ShareNet keeps the host network namespace.
	ShareNet bool
	// Egress is set under the allowlist profile: the sandbox gets no
	// network namespace of its own (no --unshare-net); bwrap must be
	// started inside the session's egress namespace, where corral's
	// forwarder listens on loopback (see egressNS in egressns.go), and the
	// command's environment points at it (egress.Env).
	Egress bool
	// DenyUnixSockets selects the filter variant that refuses new AF_UNIX
	// sockets (sandbox.Profile.DeniesUnixSockets).
	DenyUnixSockets bool
	// SeccompFD is bwrap's descriptor of the syscall filter (--seccomp),
	// set by the backend just before it starts bwrap; 0 means none (the
	// argv of Backend.Command).
	SeccompFD int
	// RunAs, when set (corral runs as root), is the host identity that
	// holds the sandbox instead of uid 0 (see runas.go); InsideUID and
	// InsideGID are the ids its processes see as their own (--uid, --gid),
	// the caller's, so that nothing changes for the command.
	RunAs                *sandbox.RunAs
	InsideUID, InsideGID int
	// TTY keeps the controlling terminal (no --new-session): only for a
	// pseudo-terminal corral allocated itself (sandbox.Request.TTY).
	TTY bool
	// Env is the command's environment.
	Env []string
	// EnvWithheld are the variables kept out of Env for their value (see
	// hostview.FilterEnvPolicy), for the log.
	EnvWithheld []hostview.EnvDrop
	// Warnings are non-fatal findings for the person.
	Warnings []string
	// Own are the session's own directories, read-write or not: the working
	// directory (unless it is the home directory, rebuilt entry by entry),
	// the scratch directory, the session's home and the tool cache. A RunAs identity holds
	// them as their owner does (idmapped, see runas.go), so a read-only
	// working directory under restricted reads as a writable one does.
	Own []string
	// Reach are host paths the command is pointed at outside the mounts
	// (the CA bundles of caBundleVars): a sandbox held by a RunAs identity
	// must be able to walk to them (see runas.go).
	Reach []string
	// Create and Links are the protected paths the backend looks after on
	// the host, outside the mounts (see protect.go): missing members of a
	// git directory to make before the sandbox starts (Mounts binds them
	// read-only), and symlinks on the way to protected paths to put back
	// after it if the command replaced them.
	Create, Links []protectItem
	// ProtectScanCut lists the writable directories whose scan for nested
	// protected paths stopped at its bounds (hostview.FindProtected).
	ProtectScanCut []string
	// ProtectScanErr is why a scan could not read all it had to (a full
	// descriptor table: hostview.FindProtectedErr), or nil; the command is
	// refused as for a cut scan, as a passing failure.
	ProtectScanErr error
	// protectRoots are the writable directories (directories only) the
	// protected paths were looked for in, protectPats the patterns, and
	// protectBefore the paths (as found) that existed, or were made, before
	// the sandbox: the check after the command moves out any other it finds.
	protectRoots  []protectRoot
	protectPats   []string
	protectBefore map[string]bool
}

// writableRootOf returns the writable mount that holds path (resolved), or "".
func (pl *Plan) writableRootOf(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		path = r
	}
	for _, m := range pl.Mounts {
		if (m.Kind == mBind || m.Kind == mDevBind) && within(path, m.Dest) {
			return m.Dest
		}
	}
	return ""
}

// maskSize is the size of the small writable tmpfs mounts that hide a
// directory or rebuild the home directory, so none of them can be used to
// fill the host's memory.
const maskSize = 1 << 20

// phases order the steps of a plan; within a phase, steps are sorted so a
// parent path is mounted before the paths below it.
const (
	phaseBase   = iota // root, /dev, /proc, /tmp, /run/user
	phaseTree          // working directory, binds, the rebuilt home directory
	phaseMask          // credential stores and files, corral's own dirs, sockets
	phaseReveal        // scratch directory, CA bundles bound back
	phaseSeal          // remount-ro of the tmpfs home and its nested dirs
)

type step struct {
	phase int
	m     mount
}

type planner struct {
	req    *sandbox.Request
	host   Host
	steps  []step
	warns  []string
	allow  map[string]bool // relative to home
	bound  []string        // targets bound from the host (ancestor-or-equal means visible)
	writes []string        // targets that are writable in the sandbox
	roDevs map[string]bool // device binds sealed read-only
	// bindSrc maps the destination of a read-write bind to its host source.
	bindSrc map[string]string

	credTargets []string // see credentialTargets
	reach       []string // see Plan.Reach
	// res resolves and stats host paths for this plan alone (pathres):
	// the plan is one instant of the host, so a prefix walked once (the
	// home, /run, the working directory) is not walked again.
	res *pathres.Resolver
}

// BuildPlan checks req against the sandbox policy and returns the mounts,
// working directory and environment of its sandbox. It reads the host's
// filesystem (the home directory listing, symlinks, bind sources) every time,
// so a change on the host shows in the next command, and a path swapped for a
// symlink between two commands is judged afresh. Within one plan, each
// path is looked at once (pathres: the plan is one instant of the host).
// (One answer is kept: as
// root, which credential stores exist in other people's homes, while stat(2)
// of every directory it depends on says nothing changed; see
// otherHomeCredentials.) Errors wrap
// sandbox.ErrPolicy or sandbox.ErrBadRequest and name the path.
func BuildPlan(req *sandbox.Request, host Host) (*Plan, error) {
	return buildPlan(req, host, pathres.New())
}

// buildPlan is BuildPlan resolving through res, which must be new (the
// plan is one instant of the host) or nil (every path resolved afresh:
// the tests' reference, checkedPlan).
func buildPlan(req *sandbox.Request, host Host, res *pathres.Resolver) (*Plan, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	profile := req.Profile
	if profile == "" {
		profile = sandbox.DefaultProfile
	}
	if _, err := sandbox.ParseProfile(string(profile)); err != nil {
		return nil, err
	}
	if len(req.Skills) > 0 {
		// Skills are read-only binds the home rules allow, as on every
		// backend (sandbox.SkillBinds).
		binds, allow := sandbox.SkillBinds(req, host.Home)
		r := *req
		r.Binds = append(slices.Clone(req.Binds), binds...)
		r.HomeAllow = append(slices.Clone(req.HomeAllow), allow...)
		req = &r
	}
	p := &planner{req: req, host: host, allow: map[string]bool{}, roDevs: map[string]bool{}, bindSrc: map[string]string{}, res: res}
	plan := &Plan{ShareNet: profile.HostNetwork(), TTY: req.TTY, Egress: profile == sandbox.ProfileAllowlist, DenyUnixSockets: profile.DeniesUnixSockets(), LayerDir: req.LayerDir, view: host.view}

	workdir, writable, err := p.workdir(profile)
	if err != nil {
		return nil, err
	}
	plan.Workdir, plan.Writable = workdir, writable

	p.base()
	binds, err := p.binds(workdir, writable)
	if err != nil {
		return nil, err
	}
	p.home(workdir, writable)
	if writable && workdir != host.Home {
		p.add(phaseTree, mount{Kind: mBind, Src: workdir, Dest: workdir})
		p.bound = append(p.bound, workdir)
		p.writes = append(p.writes, workdir)
	}
	for _, b := range binds {
		p.add(phaseTree, b)
		p.bound = append(p.bound, b.Dest)
		if b.Kind == mBind || b.Kind == mDevBind && !p.roDevs[b.Dest] {
			p.writes = append(p.writes, b.Dest)
			p.bindSrc[b.Dest] = b.Src
		}
	}
	p.masks()
	scratch, err := p.scratch(writable)
	if err != nil {
		return nil, err
	}
	sessionHome, err := p.sessionHome(profile)
	if err != nil {
		return nil, err
	}
	cache, err := p.toolCache(profile, scratch, sessionHome)
	if err != nil {
		return nil, err
	}
	if workdir != host.Home {
		plan.Own = append(plan.Own, workdir)
	}
	for _, d := range []string{scratch, sessionHome, cache} {
		if d != "" {
			plan.Own = append(plan.Own, d)
		}
	}
	if err := p.protect(scratch, sessionHome, cache, writable); err != nil {
		return nil, err
	}
	if err := p.protected(plan); err != nil {
		return nil, err
	}
	p.caBundles()
	plan.Chdir = p.chdir(workdir)
	set := []string{}
	if scratch != "" && writable {
		set = append(set, "TMPDIR="+scratch, "TMP="+scratch, "TEMP="+scratch)
	} else {
		// Under restricted the scratch directory is read-only: temporary
		// files (mktemp, go build, gcc, javac) go to the fresh /tmp.
		set = append(set, "TMPDIR=/tmp", "TMP=/tmp", "TEMP=/tmp")
	}
	if sessionHome != "" {
		set = append(set, "HOME="+sessionHome)
	}
	env := req.Env
	if plan.Egress {
		set = append(set, p.egressEnv()...)
	} else {
		// Proxy variables a session saved under allowlist lead nowhere here.
		env = egress.WithoutEnv(env)
	}
	if cache == "" {
		// Cache variables a session saved lead into corral's hidden
		// directories when this sandbox has no cache.
		env = toolcache.Strip(env, host.HiddenDirs)
	}
	env, secretSet, err := p.planSecrets(env)
	if err != nil {
		return nil, err
	}
	set = append(set, secretSet...)
	plan.Env, plan.EnvWithheld = hostview.FilterEnvPolicy(env, append(slices.Clone(hostview.DefaultEnvDeny), req.EnvDeny...), req.EnvAllow, set...)
	if cache != "" {
		// From the filtered environment: MAVEN_OPTS and GOPROXY are built
		// on the caller's values, which must not bring back what the
		// policy withheld.
		plan.Env = hostview.FilterEnv(plan.Env, nil, p.cacheEnv(cache, scratch, sessionHome, writable, plan.Env)...)
	} else if req.CacheDir != "" {
		// Restricted: the caches go to the fresh /tmp (tmpCache).
		plan.Env = hostview.FilterEnv(plan.Env, nil, p.tmpCacheEnv(scratch, sessionHome, plan.Env)...)
	}
	// Last: the secrets' JAVA_TOOL_OPTIONS is in by now.
	plan.Env = withJavaMaxRAM(plan.Env, host.JavaMaxRAMMB)
	if f := p.host.GitSystemConfig; f != "" {
		// A root caller's sandbox sees the host's root-owned files as the
		// overflow user (its user namespace maps only the run_as
		// identity), so git would call every repository outside the
		// working directory "dubious" (safe.directory, CVE-2022-24765)
		// where the host's git, run by root, trusts it. Trusting all
		// repositories inside the sandbox runs their settings in there
		// only: what could run on the host is the hand-back gate's. The
		// system file, not GIT_CONFIG_COUNT: git clears the latter for
		// the upload-pack of a local clone (local_repo_env).
		// At a path of the sandbox's own /dev (a fresh tmpfs): at its
		// host path it would show where corral's hidden state directory
		// lies.
		p.add(phaseReveal, mount{Kind: mRoBind, Src: f, Dest: gitSystemConfigDest})
		p.reach = append(p.reach, f)
		plan.Env = hostview.FilterEnv(plan.Env, nil, "GIT_CONFIG_SYSTEM="+gitSystemConfigDest)
	}
	plan.Mounts = p.ordered()
	plan.Warnings = p.warns
	plan.Reach = p.reach
	return plan, nil
}

// policyEnv is the environment the policy reads (see Request.PolicyEnv).
func (p *planner) policyEnv() []string {
	if p.req.PolicyEnv != nil {
		return p.req.PolicyEnv
	}
	return p.req.Env
}

func (p *planner) add(phase int, m mount) { p.steps = append(p.steps, step{phase, m}) }

// warn adds a warning for the person, once: the bind policy and the masks
// read the same credential stores and may find the same thing to say.
func (p *planner) warn(format string, args ...any) {
	if w := fmt.Sprintf(format, args...); !slices.Contains(p.warns, w) {
		p.warns = append(p.warns, w)
	}
}

// ordered sorts the steps by phase, then by path depth, keeping the order
// of insertion among equals, so every parent is mounted before its children.
func (p *planner) ordered() []mount {
	sort.SliceStable(p.steps, func(i, j int) bool {
		a, b := p.steps[i], p.steps[j]
		if a.phase != b.phase {
			return a.phase < b.phase
		}
		if a.phase == phaseSeal {
			// Seal children before parents: a read-only parent tmpfs would
			// otherwise not matter, but keep the order deterministic.
			return depth(a.m.Dest) > depth(b.m.Dest)
		}
		return depth(a.m.Dest) < depth(b.m.Dest)
	})
	// Drop repeated steps, and seals of a directory that is itself mounted
	// writable (a working directory of ~/.config must stay writable).
	writable := map[string]bool{}
	for _, w := range p.writes {
		writable[w] = true
	}
	seen := map[mount]bool{}
	out := make([]mount, 0, len(p.steps))
	for _, s := range p.steps {
		if seen[s.m] || s.m.Kind == mRemountRO && writable[s.m.Dest] {
			continue
		}
		seen[s.m] = true
		out = append(out, s.m)
	}
	return out
}

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// gitSystemConfigDest is where a root caller's sandbox sees
// Host.GitSystemConfig.
const gitSystemConfigDest = "/dev/.corral-gitconfig"

// base adds the fixed part of every sandbox: the host root read-only, a
// fresh /dev with a private /dev/shm, a private /proc, a fresh /tmp and an
// empty /run/user/UID.
func (p *planner) base() {
	p.add(phaseBase, mount{Kind: mRoBind, Src: "/", Dest: "/"})
	p.add(phaseBase, mount{Kind: mDev, Dest: "/dev"})
	p.add(phaseBase, mount{Kind: mProc, Dest: "/proc"})
	// The kernel's settings and triggers in /proc read-only, whoever holds
	// the sandbox: /proc/sys is judged by uid, not capability
	// (proc_sys_permission), so a sandbox holding host uid 0 could set
	// kernel.core_pattern. bwrap covers them only when it can write them
	// itself (bubblewrap.c, cover_proc_dirs).
	for _, q := range procCovers {
		if _, err := p.res.Lstat(q); err == nil {
			p.add(phaseBase, mount{Kind: mRoBind, Src: q, Dest: q})
		}
	}
	size := int64(p.req.TmpSizeMB) << 20
	if size <= 0 {
		size = 512 << 20
	}
	p.add(phaseBase, mount{Kind: mTmpfs, Dest: "/dev/shm", Perms: 0o1777, Size: size})
	p.add(phaseBase, mount{Kind: mTmpfs, Dest: "/tmp", Perms: 0o1777, Size: size})
	if run := p.host.RunUserDir; run != "" && p.res.IsDir(run) {
		p.add(phaseBase, mount{Kind: mTmpfs, Dest: run, Perms: 0o700, Size: maskSize})
	}
}

// egressEnv returns egress.Env for an allowlist sandbox and binds the
// Node preload's directory at egress.NodeShimDir, inside the sandbox's own
// /dev (see there why). Without the directory NODE_OPTIONS is left out:
// naming a missing file would stop every node from starting.
func (p *planner) egressEnv() []string {
	env := egress.Env()
	if d := p.host.NodeShim; d != "" && filepath.IsAbs(d) {
		p.add(phaseReveal, mount{Kind: mRoBind, Src: d, Dest: egress.NodeShimDir})
		return env
	}
	p.warn("allowlist: corral's Node preload is missing; Node before 22.21 and 24.5 will not send fetch and https through the proxy")
	return slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "NODE_OPTIONS=") })
}

// procCovers are the parts of /proc bound read-only over the sandbox's own:
// the kernel's settings, the magic SysRq trigger, interrupt affinity and
// bus devices (the list of bubblewrap and of the OCI runtime spec's
// readonlyPaths).
var procCovers = []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"}

// workdir applies the working-directory rules: a missing directory runs
// read-only in its nearest existing parent; / , corral's own directories and
// hidden paths are refused; the home directory itself is allowed with a
// warning (only its non-dot entries become writable).
func (p *planner) workdir(profile sandbox.Profile) (string, bool, error) {
	w := p.req.Workdir
	if w == "" || !filepath.IsAbs(w) {
		return "", false, fmt.Errorf("%w: working directory %q is not an absolute path", sandbox.ErrBadRequest, w)
	}
	w = filepath.Clean(w)
	writable := profile.Writable()
	resolved, err := p.res.EvalSymlinks(w)
	if err != nil {
		parent := p.nearestExisting(w)
		p.warn("working directory %s does not exist; running read-only in %s", w, parent)
		resolved, writable = parent, false
	}
	if st, err := p.res.Stat(resolved); err == nil && !st.IsDir() {
		return "", false, fmt.Errorf("%w: working directory %s is not a directory", sandbox.ErrPolicy, resolved)
	}
	if resolved == "/" {
		return "", false, fmt.Errorf("%w: working directory / is refused (it would make the whole host writable); choose a project directory with --cwd or `corral config set cwd DIR`", sandbox.ErrPolicy)
	}
	for _, h := range p.host.HiddenDirs {
		if within(resolved, h) || within(h, resolved) && resolved == h {
			return "", false, fmt.Errorf("%w: working directory %s is inside corral's own directory %s", sandbox.ErrPolicy, resolved, h)
		}
	}
	if p.hidden(resolved) {
		return "", false, fmt.Errorf("%w: working directory %s is a hidden path (a credential store or a dot entry of the home directory that is not allowed); add it to home_allow if it is safe to show", sandbox.ErrPolicy, resolved)
	}
	if resolved != w && err == nil {
		p.warn("working directory %s resolves through a symlink to %s; that is what the sandbox can write", w, resolved)
	}
	if writable {
		if sys := systemDir(resolved); sys != "" {
			return "", false, fmt.Errorf("%w: working directory %s is refused: it is (or lies in) %s, which no sandbox may write; choose a project directory with --cwd", sandbox.ErrPolicy, resolved, sys)
		}
		if rel, ok := relToHome(resolved, p.host.Home); ok && strings.HasPrefix(rel, ".") {
			p.warn("working directory %s is inside a dot entry of the home directory, which is always read-only in the sandbox; commands run there read-only", resolved)
			writable = false
		}
	}
	if resolved == p.host.Home && writable {
		p.warn("working directory is the home directory %s: only its existing non-dot entries are writable", resolved)
	}
	return resolved, writable, nil
}

// chdir picks where the command starts: req.Dir (or the working directory);
// a missing or hidden start directory falls back to the working directory.
func (p *planner) chdir(workdir string) string {
	d := p.req.Dir
	if d == "" || !filepath.IsAbs(d) {
		return workdir
	}
	if v := p.host.view; v.covers(filepath.Clean(d)) {
		// In the review layer: as it shows the directory (a directory the
		// session made exists only there); bwrap resolves it inside.
		r := filepath.Clean(d)
		for !p.res.IsDir(v.path(r)) && within(filepath.Dir(r), workdir) {
			r = filepath.Dir(r)
		}
		if r != filepath.Clean(d) {
			p.warn("directory %s does not exist; starting in %s", d, r)
		}
		return r
	}
	r, err := p.res.EvalSymlinks(filepath.Clean(d))
	switch {
	case err != nil:
		r = p.nearestExisting(filepath.Clean(d))
		p.warn("directory %s does not exist; starting in %s", d, r)
	case !p.res.IsDir(r):
		// Replaced by a file on the host after a cd into it: bwrap's
		// --chdir would fail every command of the session.
		r = p.nearestExisting(r)
		p.warn("%s is no longer a directory; starting in %s", d, r)
	}
	if p.hidden(r) {
		p.warn("directory %s is hidden in the sandbox; starting in %s", d, workdir)
		return workdir
	}
	return r
}

// hidden reports whether the resolved path r is invisible in the sandbox:
// inside a credential store, inside corral's directories, or inside a dot
// entry of the home directory that is neither allowed nor under an allowed
// nested directory.
func (p *planner) hidden(r string) bool {
	for _, h := range p.host.HiddenDirs {
		if within(r, h) {
			return true
		}
	}
	rel, ok := relToHome(r, p.host.Home)
	if !ok {
		return false
	}
	if isCredentialRel(rel) {
		return true
	}
	return !p.visibleRel(rel)
}

// visibleRel reports whether rel (relative to home) is shown by the home
// rules: non-dot top entries, allowed dot entries, allowed children of the
// nested directories.
func (p *planner) visibleRel(rel string) bool {
	p.loadAllow()
	parts := strings.Split(rel, "/")
	if !strings.HasPrefix(parts[0], ".") {
		return true
	}
	nestedChain := true
	for i := 1; i <= len(parts); i++ {
		prefix := strings.Join(parts[:i], "/")
		if p.allow[prefix] {
			return true // shown, or bound on its own below a hidden parent
		}
		if !isNestedDir(prefix) {
			nestedChain = false
		}
	}
	// .config, .local and .local/share themselves are shown (empty but
	// for their allowed children).
	return nestedChain
}

// allowedRel reports whether rel (relative to home) is an allowed entry or
// lies inside one; unlike visibleRel, the nested directories themselves
// (.config, .local, .local/share) do not count, as binding one whole would
// show its hidden children.
func (p *planner) allowedRel(rel string) bool {
	p.loadAllow()
	parts := strings.Split(rel, "/")
	for i := 1; i <= len(parts); i++ {
		if p.allow[strings.Join(parts[:i], "/")] {
			return true
		}
	}
	return false
}

// loadAllow fills the allowlist: shipped entries, PATH directories under
// home, and home_allow (credential stores refused with a warning).
func (p *planner) loadAllow() {
	if len(p.allow) > 0 {
		return
	}
	for _, a := range homeAllow {
		p.allow[a] = true
	}
	for _, a := range nestedAllow {
		p.allow[a] = true
	}
	if path, ok := hostview.LookupEnv(p.policyEnv(), "PATH"); ok {
		for _, d := range filepath.SplitList(path) {
			if !filepath.IsAbs(d) {
				continue
			}
			if rel, ok := relToHome(filepath.Clean(d), p.host.Home); ok && !isCredentialRel(rel) {
				p.allow[rel] = true
			}
		}
	}
	for _, a := range p.req.HomeAllow {
		a = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(a)), "./")
		switch {
		case a == "." || a == "" || filepath.IsAbs(a) || a == ".." || strings.HasPrefix(a, "../"):
			p.warn("home_allow entry %q ignored: it must be a path relative to the home directory", a)
		case isCredentialRel(a) || p.containsCredential(a):
			p.warn("home_allow entry %q ignored: it is or holds a credential store, which stays hidden", a)
		default:
			p.allow[a] = true
		}
	}
}

func (p *planner) containsCredential(rel string) bool {
	for _, c := range credentialStores {
		if strings.HasPrefix(c, rel+"/") {
			return true
		}
	}
	return false
}

// home rebuilds the home directory: a tmpfs over it, the non-dot entries
// bound back (read-write when the home directory is the working directory),
// allowed dot entries bound back read-only, symlinks recreated as symlinks,
// and the nested directories treated the same one level down.
func (p *planner) home(workdir string, writable bool) {
	home := p.host.Home
	if home == "" || home == "/" || !p.res.IsDir(home) {
		return
	}
	p.loadAllow()
	rwTop := writable && workdir == home
	p.rebuildDir(home, "", rwTop)
	// Allowed paths deeper than one level below a nested directory, or below
	// a hidden dot entry (PATH dirs like ~/.foo/bin, home_allow ".foo/x"):
	// bound on their own.
	rels := make([]string, 0, len(p.allow))
	for rel := range p.allow {
		rels = append(rels, rel)
	}
	sort.Strings(rels) // deterministic argv
	for _, rel := range rels {
		parts := strings.Split(rel, "/")
		parent := strings.Join(parts[:len(parts)-1], "/")
		if len(parts) == 1 || isNestedDir(parent) {
			continue
		}
		if p.visibleRel(parent) {
			continue // already shown through its parent
		}
		abs := filepath.Join(home, rel)
		if _, err := p.res.Lstat(abs); err == nil {
			p.addEntry(abs, false)
		}
	}
}

// rebuildDir puts a read-only tmpfs over dir (home or a nested dir) and binds
// back its visible entries.
func (p *planner) rebuildDir(dir, rel string, rwNonDot bool) {
	entries, err := p.res.ReadDir(dir, p.listDir)
	if err != nil {
		p.warn("cannot list %s (%v); it is hidden in the sandbox", dir, err)
	}
	mode := uint32(0o755)
	if st, err := p.res.Stat(dir); err == nil {
		mode = uint32(st.Mode().Perm())
	}
	p.add(phaseTree, mount{Kind: mTmpfs, Dest: dir, Perms: mode, Size: maskSize})
	p.add(phaseSeal, mount{Kind: mRemountRO, Dest: dir})
	for _, e := range entries {
		name := e.Name()
		crel := name
		if rel != "" {
			crel = rel + "/" + name
		}
		abs := filepath.Join(dir, name)
		if isCredentialRel(crel) {
			continue
		}
		if isNestedDir(crel) && e.Type()&fs.ModeSymlink == 0 && e.IsDir() {
			p.rebuildDir(abs, crel, false)
			continue
		}
		dot := strings.HasPrefix(name, ".")
		if rel == "" && !dot {
			p.addEntry(abs, rwNonDot)
			continue
		}
		if p.allow[crel] {
			p.addEntry(abs, false)
		}
	}
}

// listDir lists dir through Host.Dirs, its stamp from the plan's
// resolver (dircache.ReadDirWith).
func (p *planner) listDir(dir string) ([]fs.DirEntry, error) {
	return p.host.Dirs.ReadDirWith(dir, p.res.Stat)
}

// addEntry binds one host path back at its own place (a symlink is
// recreated as the same symlink).
func (p *planner) addEntry(abs string, rw bool) {
	st, err := p.res.Lstat(abs)
	if err != nil {
		return
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		if target, err := p.res.Readlink(abs); err == nil {
			p.add(phaseTree, mount{Kind: mSymlink, Src: target, Dest: abs})
		}
		return
	}
	kind := mRoBind
	if rw {
		kind = mBind
		p.writes = append(p.writes, abs)
	}
	p.add(phaseTree, mount{Kind: kind, Src: abs, Dest: abs})
	p.bound = append(p.bound, abs)
}

// visible reports whether host path q is reachable in the sandbox as built so
// far: outside home and not under a fresh tmpfs, or under a bound entry.
func (p *planner) visible(q string) bool {
	for _, b := range p.bound {
		if within(q, b) {
			return true
		}
	}
	if p.host.Home != "" && within(q, p.host.Home) {
		return false
	}
	for _, t := range []string{"/tmp", "/dev", "/proc", p.host.RunUserDir} {
		if t != "" && within(q, t) {
			return false
		}
	}
	return true
}

// masks hides what must never be read: credential stores and their symlink
// targets, credential files as empty files, corral's own directories, and
// Docker-style sockets. Parents of a mask inside a writable mount are pinned
// (bound onto themselves) so a command cannot rename them and unmask the
// path for the next command.
func (p *planner) masks() {
	hideDir := func(q string) {
		if p.visible(q) {
			p.pin(q)
			p.add(phaseMask, mount{Kind: mTmpfs, Dest: q, Perms: 0o700, Size: maskSize})
		}
	}
	hideFile := func(q string) {
		if p.visible(q) && p.host.EmptyFile != "" {
			p.pin(q)
			p.add(phaseMask, mount{Kind: mRoBind, Src: p.host.EmptyFile, Dest: q})
		}
	}
	hide := func(q string) {
		st, err := p.res.Stat(q) // follows symlinks: q is a resolved target
		if err != nil {
			return
		}
		if st.IsDir() {
			hideDir(q)
		} else {
			hideFile(q)
		}
	}
	// Credential stores and files where they are visible, and wherever
	// their symlinks (or symlinks inside them) lead.
	for _, q := range p.credentialTargets() {
		if p.visible(q) {
			hide(q)
		}
	}
	for _, d := range p.host.HiddenDirs {
		if t, err := p.res.EvalSymlinks(d); err == nil {
			hideDir(t)
		}
	}
	// Secrets of the system that only root can read, and, when corral runs
	// as root (who can read every home), the credential stores of the other
	// users' homes.
	for _, pat := range systemSecrets {
		matches, _ := p.res.Glob(pat)
		for _, m := range matches {
			if st, err := p.res.Lstat(m); err == nil && st.Mode().IsRegular() {
				hideFile(m)
			}
		}
	}
	if p.host.UID == 0 {
		// Which of them exist is kept between commands while their
		// directories stay as they were (otherHomeCredentials); where
		// they lead is looked at afresh.
		for _, abs := range otherHomeScan.otherHomeCredentials(p.host.Home) {
			hide(abs)
			if t, err := p.res.EvalSymlinks(abs); err == nil && t != abs {
				hide(t)
			}
		}
	}
	for _, s := range p.host.MaskFiles {
		if t, err := p.res.EvalSymlinks(s); err == nil {
			if st, err := p.res.Stat(t); err == nil && !st.IsDir() {
				hideFile(t)
			}
		}
	}
}

// systemSecrets are files, readable by root only, that read as empty in
// every sandbox (hostview.SystemSecrets).
var systemSecrets = hostview.SystemSecrets

// searchableByOthers reports whether dir and every directory above it can be
// entered by anyone (the "other" execute bit).
func searchableByOthers(res *pathres.Resolver, dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := res.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}

// otherHomes lists the home directories of people in the passwd database
// (uid 0 and uids from 1000, not nobody) other than home, that exist and
// are not / (hostview.PeopleHomes).
func otherHomes(home string) []string { return hostview.PeopleHomes(home) }

// pin binds onto themselves the directories between the writable mount that
// holds q and q's parent, so none of them can be renamed while the sandbox
// runs (rename(2) of a mount point fails with EBUSY).
func (p *planner) pin(q string) {
	for _, w := range p.writes {
		if !within(q, w) || q == w {
			continue
		}
		for d := filepath.Dir(q); within(d, w) && d != w; d = filepath.Dir(d) {
			p.add(phaseMask, mount{Kind: mBind, Src: d, Dest: d})
		}
	}
}

// scratch binds the session's scratch directory (read-only under
// restricted) and returns its path inside the sandbox.
func (p *planner) scratch(writable bool) (string, error) {
	s := p.req.ScratchDir
	if s == "" {
		return "", nil
	}
	if !filepath.IsAbs(s) {
		return "", fmt.Errorf("%w: scratch directory %q is not absolute", sandbox.ErrBadRequest, s)
	}
	r, err := p.res.EvalSymlinks(s)
	if err != nil || !p.res.IsDir(r) {
		return "", fmt.Errorf("%w: scratch directory %s is missing or not a directory", sandbox.ErrPolicy, s)
	}
	kind := mRoBind
	if writable {
		kind = mBind
	}
	p.add(phaseReveal, mount{Kind: kind, Src: r, Dest: r})
	return r, nil
}

// protect applies Host.SecretFiles (and the file sources of
// Host.Secrets, alike) and Host.PinFiles.
func (p *planner) protect(scratch, sessionHome, cache string, writable bool) error {
	roots := append([]string{}, p.writes...)
	if writable && scratch != "" {
		roots = append(roots, scratch)
	}
	if cache != "" {
		roots = append(roots, cache)
	}
	if sessionHome != "" && writable {
		roots = append(roots, sessionHome)
	}
	inWritable := func(q string) string {
		for _, w := range roots {
			if within(q, w) {
				return w
			}
		}
		return ""
	}
	resolve := func(f string) string {
		if r, err := p.res.EvalSymlinks(f); err == nil {
			return r
		}
		if r, err := p.res.EvalSymlinks(filepath.Dir(f)); err == nil {
			return filepath.Join(r, filepath.Base(f))
		}
		return filepath.Clean(f)
	}
	settings := len(p.host.SecretFiles)
	files := slices.Clone(p.host.SecretFiles)
	if p.host.Secrets != nil {
		files = append(files, p.host.Secrets.Files...)
	}
	for i, f := range files {
		if f == "" || !filepath.IsAbs(f) {
			continue
		}
		r := resolve(f)
		if w := inWritable(r); w != "" {
			if i >= settings {
				return fmt.Errorf("%w: the file %s that a secret is read from lies in %s, which the sandbox can write: a command could replace the value corral sends to the secret's hosts; keep it outside the writable directories", sandbox.ErrPolicy, r, w)
			}
			return fmt.Errorf("%w: the settings file %s lies in %s, which the sandbox can write: a command could change corral's own settings; keep the settings file elsewhere", sandbox.ErrPolicy, r, w)
		}
		if st, err := p.res.Stat(r); err == nil && st.Mode().IsRegular() && p.visible(r) && p.host.EmptyFile != "" {
			p.add(phaseReveal, mount{Kind: mRoBind, Src: p.host.EmptyFile, Dest: r})
		}
	}
	for _, f := range p.host.PinFiles {
		if f == "" || !filepath.IsAbs(f) {
			continue
		}
		r := resolve(f)
		if st, err := p.res.Stat(r); err == nil && st.Mode().IsRegular() && inWritable(r) != "" {
			p.add(phaseReveal, mount{Kind: mRoBind, Src: r, Dest: r})
		}
	}
	return nil
}

// sessionHome binds req.HomeDir (home_mode: session) and returns it.
func (p *planner) sessionHome(profile sandbox.Profile) (string, error) {
	h := p.req.HomeDir
	if h == "" {
		return "", nil
	}
	if !filepath.IsAbs(h) {
		return "", fmt.Errorf("%w: home directory %q is not absolute", sandbox.ErrBadRequest, h)
	}
	r, err := p.res.EvalSymlinks(h)
	if err != nil || !p.res.IsDir(r) {
		return "", fmt.Errorf("%w: session home directory %s is missing or not a directory", sandbox.ErrPolicy, h)
	}
	kind := mRoBind
	if profile.Writable() {
		kind = mBind
	}
	p.add(phaseReveal, mount{Kind: kind, Src: r, Dest: r})
	return r, nil
}

// caBundles binds back, read-only, a CA bundle named by one of caBundleVars
// that lies in a hidden path, so TLS keeps working. A bundle in a credential
// store or in corral's own directories, or one that is not a regular file (a
// directory for SSL_CERT_DIR), is skipped with a warning.
func (p *planner) caBundles() {
	// Most of the variables name one file (CURL_CA_BUNDLE, GIT_SSL_CAINFO,
	// NODE_EXTRA_CA_CERTS, ... all /etc/ssl/certs/ca-certificates.crt):
	// each path is resolved once.
	type resolved struct {
		path string
		st   fs.FileInfo
	}
	seen := map[string]*resolved{}
	for _, v := range caBundleVars {
		val, ok := hostview.LookupEnv(p.policyEnv(), v)
		if !ok || val == "" || !filepath.IsAbs(val) {
			continue
		}
		res, ok := seen[val]
		if !ok {
			if r, err := p.res.EvalSymlinks(val); err == nil {
				if st, err := p.res.Stat(r); err == nil {
					res = &resolved{r, st}
				}
			}
			seen[val] = res
		}
		if res == nil {
			continue
		}
		r, st := res.path, res.st
		wantDir := v == "SSL_CERT_DIR"
		if st.IsDir() != wantDir {
			p.warn("%s=%s ignored: not a %s", v, val, map[bool]string{true: "directory", false: "regular file"}[wantDir])
			continue
		}
		if !wantDir && !st.Mode().IsRegular() {
			continue
		}
		p.reach = append(p.reach, r)
		if !p.hidden(r) {
			continue
		}
		if wantDir && p.holdsHidden(r) {
			p.warn("%s=%s is not bound into the sandbox: the directory holds hidden paths", v, val)
			continue
		}
		rel, inHome := relToHome(r, p.host.Home)
		inCorral := false
		for _, h := range p.host.HiddenDirs {
			inCorral = inCorral || within(r, h)
		}
		if inCorral || inHome && isCredentialRel(rel) {
			p.warn("%s=%s is not bound into the sandbox: it lies in a credential store or in corral's own directory; move the bundle (for example to /usr/local/share/ca-certificates)", v, val)
			continue
		}
		p.add(phaseReveal, mount{Kind: mRoBind, Src: r, Dest: r})
	}
}

// binds judges the configured binds by the policy every backend shares
// (hostview.DecideBind, on facts read here: the homes of the caller and of
// the other people, credential stores and their targets, the sockets in
// each source) and turns the ones it mounts into bwrap steps: the bind in
// phaseTree, and what the home rules hide inside it (dot entries of any
// home, credential stores and files, corral's directories, engine sockets,
// system secrets) covered in phaseMask by an empty tmpfs or the empty file.
// Sources are resolved once and the resolved path is mounted, so a symlink
// changed later cannot redirect it. What is bwrap's own is checked here:
// a destination must exist on the read-only root unless it lies in a fresh
// tmpfs, and device nodes are dev-bound (sealed read-only when asked).
func (p *planner) binds(workdir string, writable bool) ([]mount, error) {
	if len(p.req.Binds) == 0 {
		return nil, nil
	}
	var writableRoots []string
	if writable {
		writableRoots = append(writableRoots, workdir)
		if w := filepath.Clean(p.req.Workdir); w != workdir {
			writableRoots = append(writableRoots, w)
		}
	}
	if p.req.ScratchDir != "" {
		writableRoots = append(writableRoots, filepath.Clean(p.req.ScratchDir))
	}
	for _, w := range sandbox.WritableRoots(p.req) {
		if w.Kind == sandbox.RootBind && filepath.IsAbs(w.Src) {
			if r, err := p.res.EvalSymlinks(w.Src); err == nil {
				writableRoots = append(writableRoots, r)
			}
		}
	}
	h := p.bindHost(writableRoots)
	var out []mount
	for _, b := range p.req.Binds {
		d, err := hostview.DecideBind(b, h, hostview.InspectBindSource(b, h))
		if err != nil {
			return nil, err
		}
		for _, w := range d.Warnings {
			p.warn("%s", w)
		}
		if !d.Mount {
			continue
		}
		if _, err := p.res.Lstat(d.Dest); err != nil && !underFreshTmpfs(d.Dest, p.host) {
			return nil, fmt.Errorf("%w: bind %s: the destination does not exist, and the host root is read-only in the sandbox; create it on the host, or choose a destination under /tmp", sandbox.ErrPolicy, describeBind(b))
		}
		kind := mBind
		if b.ReadOnly {
			kind = mRoBind
		}
		if d.Mode&fs.ModeDevice != 0 {
			kind = mDevBind
		}
		out = append(out, mount{Kind: kind, Src: d.Src, Dest: d.Dest})
		if kind == mDevBind && b.ReadOnly {
			p.add(phaseSeal, mount{Kind: mRemountRO, Dest: d.Dest})
			p.roDevs[d.Dest] = true
		}
		// The same steps masks() makes for what it finds visible, so the
		// two are one mount when both find a path.
		for _, q := range d.HideDirs {
			p.add(phaseMask, mount{Kind: mTmpfs, Dest: q, Perms: 0o700, Size: maskSize})
		}
		if len(d.EmptyFiles) > 0 && p.host.EmptyFile == "" {
			return nil, fmt.Errorf("%w: bind %s: %s must read as empty, and there is no empty file to bind over it", sandbox.ErrPolicy, describeBind(b), d.EmptyFiles[0])
		}
		for _, q := range d.EmptyFiles {
			p.add(phaseMask, mount{Kind: mRoBind, Src: p.host.EmptyFile, Dest: q})
		}
	}
	return out, nil
}

// peopleHomes lists the other people's home directories (the caller's,
// given, left out); a variable so tests can add homes of their own.
var peopleHomes = hostview.PeopleHomes

// bindHost gathers the facts the bind policy judges every bind of this
// sandbox by.
func (p *planner) bindHost(writableRoots []string) *hostview.BindHost {
	p.loadAllow()
	h := &hostview.BindHost{
		Home:          p.host.Home,
		OtherHomes:    peopleHomes(p.host.Home),
		HiddenDirs:    p.host.HiddenDirs,
		WritableRoots: writableRoots,
		HostRoot:      p.host.UID == 0,
		DeviceBinds:   true,
		Res:           p.res,
	}
	// The allowlist as the home rules have it (shipped entries, home_allow
	// less credential stores), PATH directories under home apart: they are
	// the caller's home's only.
	path := map[string]bool{}
	if v, ok := hostview.LookupEnv(p.policyEnv(), "PATH"); ok {
		for _, d := range filepath.SplitList(v) {
			if !filepath.IsAbs(d) {
				continue
			}
			if rel, ok := relToHome(filepath.Clean(d), p.host.Home); ok && !isCredentialRel(rel) {
				path[rel] = true
				h.AllowPaths = append(h.AllowPaths, filepath.Clean(d))
			}
		}
	}
	for rel := range p.allow {
		if !path[rel] || slices.Contains(homeAllow, rel) || slices.Contains(nestedAllow, rel) || slices.Contains(p.req.HomeAllow, rel) {
			h.Allow = append(h.Allow, rel)
		}
	}
	sort.Strings(h.Allow)
	for _, w := range hostview.GatherBindHost(h) {
		p.warn("%s", w)
	}
	for _, s := range p.host.MaskFiles {
		if t, err := p.res.EvalSymlinks(s); err == nil {
			h.MaskFiles = append(h.MaskFiles, t)
		}
	}
	return h
}

// systemDir returns the system tree r (resolved) falls under, or ""
// (hostview.SystemTree).
func systemDir(r string) string { return hostview.SystemTree(r) }

// underFreshTmpfs reports whether dest lies where the sandbox has a fresh
// tmpfs in which bwrap can create a mount point: /tmp, /dev/shm, the home
// directory (rebuilt on a tmpfs).
func underFreshTmpfs(dest string, h Host) bool {
	for _, t := range []string{"/tmp", "/dev/shm"} {
		if within(dest, t) && dest != t {
			return true
		}
	}
	return h.Home != "" && h.Home != "/" && within(dest, h.Home) && dest != h.Home
}

// holdsHidden reports whether directory r contains a hidden path: the home
// directory, a dot entry of it, a credential store or where one leads, or
// corral's own directories.
func (p *planner) holdsHidden(r string) bool {
	if p.host.Home != "" && within(p.host.Home, r) {
		return true
	}
	for _, h := range p.host.HiddenDirs {
		if within(h, r) {
			return true
		}
	}
	if rel, ok := relToHome(r, p.host.Home); ok && strings.HasPrefix(rel, ".") {
		return true // a dot entry: its hidden children are covered only in place
	}
	for _, t := range p.credentialTargets() {
		if within(t, r) {
			return true
		}
	}
	// Engine sockets (a bind of /run elsewhere would show docker.sock under
	// the new name) and the system's secrets (/etc elsewhere: /etc/shadow).
	for _, s := range p.host.MaskFiles {
		if t, err := p.res.EvalSymlinks(s); err == nil && within(t, r) {
			return true
		}
	}
	for _, pat := range systemSecrets {
		matches, _ := p.res.Glob(pat)
		for _, m := range matches {
			if within(m, r) {
				return true
			}
		}
	}
	return false
}

// credentialTargets returns the credential stores and files of the home
// directory that exist, and where their symlinks (and the symlinks inside
// the stores) lead (hostview.CredentialTargets). Computed once per plan.
func (p *planner) credentialTargets() []string {
	if p.credTargets != nil {
		return p.credTargets
	}
	t, warnings := hostview.CredentialTargetsIn(p.host.Home, p.host.Dirs, p.res)
	p.credTargets = append([]string{}, t...)
	for _, w := range warnings {
		p.warn("%s", w)
	}
	return p.credTargets
}

func describeBind(b sandbox.Bind) string {
	mode := "ro"
	if !b.ReadOnly {
		mode = "rw"
	}
	return fmt.Sprintf("%q -> %q (%s)", b.Src, b.Target(), mode)
}

// nearestExisting returns the nearest existing ancestor directory of q
// (resolved), or "/".
func (p *planner) nearestExisting(q string) string {
	for d := filepath.Dir(q); ; d = filepath.Dir(d) {
		if r, err := p.res.EvalSymlinks(d); err == nil && p.res.IsDir(r) {
			return r
		}
		if d == "/" {
			return "/"
		}
	}
}
