package bwrap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/dircache"
	"github.com/corralhq/corral/internal/pathres"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/forkfds"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/layer"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// Review mode (workspace_mode: review) puts a session's working directory
// behind a copy-on-write layer (package layer). bwrap 0.8 (Debian 12) has
// no --overlay, so corral mounts the overlay itself:
//
//   - One overlay per session, not per command: overlayfs forbids two
//     mounts sharing an upper directory (Documentation/filesystems/
//     overlayfs.rst, "Sharing and copying layers"), and a session's
//     background processes and its next command run at the same time.
//   - It lives in a mount namespace of its own, held by a small process of
//     corral's (the holder, layerHoldMain) in a user namespace where the
//     caller is uid 0: since Linux 5.11 overlayfs can be mounted there
//     (with the userxattr option: its markers are user.overlay.* xattrs),
//     so no privilege is needed, and nothing is mounted on the host.
//   - Every command's bwrap enters the holder's user and mount namespaces
//     at its exec stop (the ptrace gate's joinNamespaces, as the allowlist's
//     egress namespace is entered), then builds its sandbox as always: the
//     working directory it binds is the overlay. In that user namespace the
//     caller is uid 0, so bwrap is told the command's ids (--uid, --gid).
//   - A copy of the tree (with reflinks where the filesystem has them) was
//     the other design: it costs a walk of the project per session and
//     doubles the disk on ext4; the overlay costs one mount, and only what
//     the session changes is copied (copy-up).
//
// Under the allowlist profile the session's network namespace is the
// holder's too: the holder is started in a new network namespace as well
// (CLONE_NEWNET beside CLONE_NEWUSER|CLONE_NEWNS, so its own user namespace
// owns it), brings its loopback up, and corral's forwarder is started into
// it (startEgressNS with the holder, the one place that starts forwarders).
// A command's bwrap then enters user, mount and network namespaces of one
// owner at its exec stop. The other way, giving the egress pool's network
// namespace to the holder's user namespace, cannot work as they are made:
// setns(2) into a network namespace needs CAP_SYS_ADMIN in the user
// namespace that owns it, a process gets that only by joining that owner
// (user_namespaces(7)), and a process is in one user namespace at a time;
// the pool's namespace is owned by its bwrap's, which also depends on the
// session's proxy server (policy, secrets), not on the layer. Every holder
// makes its network namespace, allowlist or not: a later command of the
// session may change the profile, and a holder cannot be replaced while
// background processes hold its overlay (overlayfs forbids a second mount
// on the same upper directory). Commands of other profiles do not enter it.
//
// What a command can reach does not change: the holder's mount namespace
// is a copy of the host's, so every mask, bind and protected path is
// applied by bwrap as before; the holder runs nothing but corral's code
// and is in no sandbox's pid namespace. The holder ends when corral closes
// its standard input (Backend.Close, a new layer generation after apply
// or discard, the session's release) or dies.

// layerHoldArg is the re-exec mode of the holder: argv is
// [exe, layerHoldArg, lower, upper, work].
const layerHoldArg = "__corral-layer-hold"

func init() { reexec.RegisterHost(layerHoldArg, layerHoldMain) }

// layerReadyTimeout bounds the holder's start (one exec and one mount).
const layerReadyTimeout = 15 * time.Second

// layerHoldMain mounts the overlay of args (lower, upper, work) on lower in
// its own mount namespace, brings up loopback, says "ok PID" on standard
// output ("ok PID MESSAGE" when loopback stays down, "error: ..." when the
// overlay cannot be mounted), and waits for standard input to end. With a
// first argument "--userns" it first starts itself again in new user,
// mount and network namespaces (holderCloneflags) where its ids are 0, and
// waits for that copy: a root caller's
// holder is started by a thread holding run_as's identity, whose process
// is not dumpable (prctl(2) PR_SET_DUMPABLE, reset by the change of
// credentials), and so is a corral that holds a secret's value
// (secrets.ProtectProcess), so neither can write a child's uid map
// (/proc/PID/uid_map is root's then); a freshly executed process is
// dumpable and can.
func layerHoldMain(args []string) int {
	if len(args) == 4 && args[0] == "--userns" {
		// By /proc/self/exe: run_as may have no way to its path.
		cmd := exec.Command("/proc/self/exe", append([]string{layerHoldArg}, args[1:]...)...)
		cmd.Env = []string{}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  holderCloneflags,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
			Pdeathsig:   syscall.SIGKILL,
		}
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			fmt.Println("error:", err)
			return 1
		}
		return 0
	}
	if len(args) != 3 {
		fmt.Println("error: want [--userns] LOWER UPPER WORK")
		return 2
	}
	if err := mountOverlay(args[0], args[1], args[2]); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	// Only the allowlist needs loopback: a failure is told, not fatal, so
	// review mode under other profiles works where lo cannot be brought
	// up (nested in some containers bwrap itself fails to).
	if err := loopbackUp(); err != nil {
		fmt.Println("ok", os.Getpid(), err)
	} else {
		fmt.Println("ok", os.Getpid())
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// holderCloneflags are the namespaces a holder is started in: user (the
// caller is uid 0 there), mount (the overlay) and network (the allowlist's,
// see the comment at the top).
const holderCloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET

// loopbackUp brings up lo, the only interface of a new network namespace,
// which starts down (network_namespaces(7)); the forwarder listens on
// 127.0.0.1 there. SIOCSIFFLAGS takes CAP_NET_ADMIN in the user namespace
// that owns the network namespace (netdevice(7)), which the holder, uid 0
// of that namespace, has.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up loopback: SIOCGIFFLAGS: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up loopback: SIOCSIFFLAGS: %w", err)
	}
	return nil
}

// mountOverlay mounts an overlay of lower (lower layer), upper and work
// on lower, with the new mount API so that no character of the paths
// needs escaping (fsconfig(2) takes each option whole; "lowerdir+" adds
// one layer, Linux 6.8; older kernels get "lowerdir", refused for a path
// that holds the separators ':' ',' or '\').
func mountOverlay(lower, upper, work string) error {
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen(overlay): %w (overlayfs in a user namespace needs Linux 5.11)", err)
	}
	defer unix.Close(fd)
	if err := unix.FsconfigSetString(fd, "lowerdir+", lower); err != nil {
		if strings.ContainsAny(lower, ":,\\") {
			return fmt.Errorf("the working directory's path %q holds a character overlayfs options cannot carry on this kernel", lower)
		}
		if err := unix.FsconfigSetString(fd, "lowerdir", lower); err != nil {
			return fmt.Errorf("overlay lowerdir %s: %w", lower, err)
		}
	}
	for _, o := range [][2]string{{"upperdir", upper}, {"workdir", work}} {
		if err := unix.FsconfigSetString(fd, o[0], o[1]); err != nil {
			return fmt.Errorf("overlay %s %s: %w", o[0], o[1], err)
		}
	}
	if err := unix.FsconfigSetFlag(fd, "userxattr"); err != nil {
		return fmt.Errorf("overlay userxattr: %w", err)
	}
	if err := unix.FsconfigCreate(fd); err != nil {
		return fmt.Errorf("mounting the overlay of %s: %w", lower, err)
	}
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsmount: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, lower, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching the overlay at %s: %w", lower, err)
	}
	return nil
}

// layerHolder is one session layer's holder process and its namespaces.
type layerHolder struct {
	gen    int64 // the layer generation it was built at
	lower  string
	ra     sandbox.RunAs // a root caller's run_as identity, or the zero value
	pid    int           // the process in the namespaces
	cmd    *exec.Cmd
	life   *os.File // corral's end of the holder's standard input
	userns *os.File
	mntns  *os.File
	netns  *os.File // the session's network namespace under allowlist
	netErr string   // why its loopback is down, or ""
	// root is the holder's root directory (/proc/PID/root, O_PATH): paths
	// in the layer's view are opened beneath it (openInView).
	root *os.File
	done chan struct{}

	refs  int  // commands starting with it (layerHolders.mu)
	stale bool // replaced: closed when refs drops to 0
	hs    *layerHolders

	// fwdMu guards fwd and fwdSrv: the forwarder in netns and the proxy
	// server it relays to (forwardTo).
	fwdMu  sync.Mutex
	fwd    *egressNS
	fwdSrv *netproxy.Server
	closed bool
}

// alive reports whether the holder process still runs.
func (h *layerHolder) alive() bool {
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// release ends one command's use of h.
func (h *layerHolder) release() {
	h.hs.mu.Lock()
	h.refs--
	closeNow := h.stale && h.refs == 0
	h.hs.mu.Unlock()
	if closeNow {
		h.close()
	}
}

// close ends the holder and its forwarder and closes its descriptors.
func (h *layerHolder) close() {
	h.fwdMu.Lock()
	h.closed = true
	if h.fwd != nil {
		_ = h.fwd.Close()
		h.fwd, h.fwdSrv = nil, nil
	}
	h.fwdMu.Unlock()
	h.life.Close()
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.done
	}
	for _, f := range []*os.File{h.userns, h.mntns, h.netns, h.root} {
		if f != nil {
			f.Close()
		}
	}
}

// layerHolders are a Backend's holders, by layer directory.
type layerHolders struct {
	mu sync.Mutex
	m  map[string]*layerHolder
}

// closeAll ends every holder (Backend.Close): now those no command
// holds, the others at their last release, as a replaced one is
// (layerFor). A command starting passes the holder's namespace
// descriptors to its bwrap without a lock; closed under it, their numbers
// could be another session's files by the time it forks.
func (hs *layerHolders) closeAll() {
	hs.mu.Lock()
	var idle []*layerHolder
	for k, h := range hs.m {
		delete(hs.m, k)
		h.stale = true
		if h.refs == 0 {
			idle = append(idle, h)
		}
	}
	hs.mu.Unlock()
	for _, h := range idle {
		h.close()
	}
}

// layerFor returns the holder of req.LayerDir, with a reference the
// caller releases (layerHolder.release) once the command is over: the one
// kept, or a new one when there is none, it died, or the layer's
// generation moved on (an apply or discard changed the directories under
// it). Errors wrap sandbox.ErrUnavailable or sandbox.ErrPolicy and say why
// the command does not run.
//
// For a root caller, a new holder's mount namespace is made from the host
// view (enterHostView: the directories run_as cannot enter covered, the
// writable ones idmapped to it) of first, the command's plan without the
// layer, and the holder holds run_as's identity, so the overlay's files are
// run_as's, as the working directory's are in its idmapped mount. first is
// called only when a holder is started.
func (b *Backend) layerFor(bin *Binary, req *sandbox.Request, first func() (*Plan, error)) (*layerHolder, error) {
	if req.Profile == sandbox.ProfileRestricted {
		return nil, fmt.Errorf("%w: workspace_mode review has nothing to review under the restricted profile (the working directory is read-only); use workspace", sandbox.ErrPolicy)
	}
	if !canJoinByInjection {
		return nil, fmt.Errorf("%w: workspace_mode review needs system call injection by the ptrace gate, which this architecture lacks", sandbox.ErrUnavailable)
	}
	if !bin.BindFD {
		return nil, fmt.Errorf("%w: workspace_mode review needs a bwrap with --bind-fd (%s has none): protected paths in the layer are bound from descriptors", sandbox.ErrUnavailable, bin.Path)
	}
	if bin.Setuid {
		return nil, fmt.Errorf("%w: workspace_mode review needs a bwrap that is not setuid (%s is), so the command does not run", sandbox.ErrUnavailable, bin.Path)
	}
	lower, err := filepath.EvalSymlinks(req.Workdir)
	if err != nil {
		return nil, fmt.Errorf("%w: the working directory %s: %v", sandbox.ErrPolicy, req.Workdir, err)
	}
	var ra sandbox.RunAs // the zero value: not root
	if os.Getuid() == 0 {
		if ra, err = b.runAs(lower); err != nil {
			return nil, err
		}
	}
	l := layer.New(req.LayerDir, lower)
	// Read every command: an apply or discard in another process raises it.
	gen, err := l.Generation()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the layer's generation: %w", sandbox.ErrUnavailable, err)
	}
	hs := &b.layers
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if h := hs.m[l.Dir]; h != nil {
		if h.alive() && h.gen == gen && h.lower == l.Lower && h.ra == ra {
			h.refs++
			return h, nil
		}
		delete(hs.m, l.Dir)
		h.stale = true
		if h.refs == 0 {
			go h.close()
		}
	}
	// A new holder: the layer made (or checked to lie over lower) first.
	if err := l.Ensure(); err != nil {
		if sandbox.IsTransient(err) {
			// A full table (EMFILE) says nothing of the layer: retry.
			return nil, sandbox.Transient(fmt.Errorf("the session's layer: %w", err))
		}
		return nil, fmt.Errorf("%w: the session's layer: %v", sandbox.ErrPolicy, err)
	}
	var h *layerHolder
	if os.Getuid() == 0 {
		plan, perr := first()
		if perr != nil {
			return nil, perr
		}
		reach, rerr := b.secretsReach()
		if rerr != nil {
			return nil, rerr
		}
		h, err = startRootLayerHolder(l, gen, plan, ra, reach...)
	} else {
		// Once corral holds a secret's value it is not dumpable
		// (secrets.ProtectProcess), and cannot write a child's uid map:
		// the holder then starts in two stages, as a root caller's does.
		dumpable, derr := secrets.Dumpable()
		h, err = startLayerHolder(l, gen, derr != nil || !dumpable)
	}
	if err != nil {
		return nil, err
	}
	h.hs = hs
	h.refs = 1
	if hs.m == nil {
		hs.m = map[string]*layerHolder{}
	}
	hs.m[l.Dir] = h
	b.log.Info("bwrap.layer.mounted", "layer", l.Dir, "workdir", l.Lower, "generation", gen, "pid", h.pid)
	return h, nil
}

// secretsReach returns what a root caller's holder view must reach beyond
// the first command's plan, so that a later command of the session that
// declares secrets finds what its plan binds (planSecrets) in the layer's
// view, which is a copy of the host's mounts made once per holder: corral's
// executable (the git credential helper) and the directory of the trust
// bundles (Backend.prepareSecrets), made here (a bound directory shows
// files written into it later). The directory becomes 0711: run_as, whose
// bwrap binds the bundle from it, enters it by the bundle's name without
// being able to list it; a bundle holds public certificates only.
func (b *Backend) secretsReach() ([]string, error) {
	var reach []string
	if exe := b.helperExecutable(); exe != "" {
		reach = append(reach, exe)
	}
	if b.opts.StateDir == "" {
		return reach, nil
	}
	d := filepath.Join(b.opts.StateDir, "trust")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, fmt.Errorf("%w: the secrets' trust bundle directory: %v", sandbox.ErrUnavailable, err)
	}
	if err := os.Chmod(d, 0o711); err != nil {
		return nil, fmt.Errorf("%w: the secrets' trust bundle directory: %v", sandbox.ErrUnavailable, err)
	}
	// The credential files' copies (Secret.Files): 0711 for the same
	// reason; each copy in it is 0600 and owned by the identity that
	// binds it (ownSecretCopies).
	f := b.secretFilesDir()
	if err := os.MkdirAll(f, 0o700); err != nil {
		return nil, fmt.Errorf("%w: the secrets' credential file directory: %v", sandbox.ErrUnavailable, err)
	}
	if err := os.Chmod(f, 0o711); err != nil {
		return nil, fmt.Errorf("%w: the secrets' credential file directory: %v", sandbox.ErrUnavailable, err)
	}
	return append(reach, d, f), nil
}

// startRootLayerHolder starts the holder of l for a root caller whose
// sandboxes hold ra: from a thread in the host view of plan (with the
// layer's directories and the paths of reach reachable), holding ra's
// identity, in two stages (layerHoldMain's --userns). The layer's
// directories are given to ra.
func startRootLayerHolder(l *layer.Layer, gen int64, plan *Plan, ra sandbox.RunAs, reach ...string) (*layerHolder, error) {
	for _, d := range []string{l.Dir, l.Upper(), l.Work()} {
		if err := os.Lchown(d, ra.UID, ra.GID); err != nil {
			return nil, fmt.Errorf("%w: giving the layer to %s: %v", sandbox.ErrUnavailable, ra, err)
		}
	}
	view := *plan
	view.Reach = append(append(slices.Clone(plan.Reach), l.Upper(), l.Work()), reach...)
	type res struct {
		h   *layerHolder
		err error
	}
	got := make(chan res, 1)
	onThrowawayThread(func() {
		if err := enterHostView(&view, ra, &idmaps); err != nil {
			got <- res{err: err}
			return
		}
		if err := dropThreadCreds(ra); err != nil {
			got <- res{err: fmt.Errorf("%w: taking the identity %s: %v", sandbox.ErrUnavailable, ra, err)}
			return
		}
		h, err := startLayerHolder(l, gen, true)
		got <- res{h, err}
	})
	r := <-got
	if r.h != nil {
		r.h.ra = ra
	}
	return r.h, r.err
}

// startLayerHolder starts the holder of l: corral's executable in new
// user and mount namespaces, the caller mapped to uid 0 (user_namespaces(7):
// an unprivileged process may map its own ids), mounting the overlay. exe,
// twoStage starts it first without namespaces, from a root caller's thread
// holding run_as or a process that is not dumpable (see layerHoldMain).
func startLayerHolder(l *layer.Layer, gen int64, twoStage bool) (*layerHolder, error) {
	// format may wrap its cause (%w): a full descriptor table (EMFILE)
	// stays in the chain, where sandbox.IsTransient finds it.
	unavailable := func(format string, a ...any) error {
		return fmt.Errorf("%w: the session's review layer could not be mounted, so the command does not run: %w", sandbox.ErrUnavailable, fmt.Errorf(format, a...))
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, unavailable("%w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, unavailable("%w", err)
	}
	defer outR.Close()
	cmd := exec.Command("/proc/self/exe", layerHoldArg, l.Lower, l.Upper(), l.Work())
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  holderCloneflags,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Setpgid:     true,
	}
	if twoStage {
		cmd = exec.Command("/proc/self/exe", layerHoldArg, "--userns", l.Lower, l.Upper(), l.Work())
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	cmd.Env = []string{}
	cmd.Stdin, cmd.Stdout = lifeR, outW
	stderr := &tail.Buffer{}
	cmd.Stderr = stderr
	err = forkfds.Start(cmd)
	lifeR.Close()
	outW.Close()
	if err != nil {
		lifeW.Close()
		if sandbox.IsTransient(err) {
			// A full table, not a kernel that refuses the namespaces.
			return nil, unavailable("starting the holder: %w", err)
		}
		return nil, unavailable("starting the holder: %w (unprivileged user namespaces may be disabled)", err)
	}
	h := &layerHolder{gen: gen, lower: l.Lower, cmd: cmd, life: lifeW, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(h.done)
	}()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(outR).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	var got string
	select {
	case got = <-line:
	case <-time.After(layerReadyTimeout):
		h.close()
		return nil, unavailable("the holder did not mount the overlay within %s", layerReadyTimeout)
	}
	f := strings.SplitN(got, " ", 3)
	if len(f) < 2 || f[0] != "ok" {
		h.close()
		if got == "" {
			got = strings.TrimSpace(stderr.String())
		}
		return nil, unavailable("%s", strings.TrimPrefix(got, "error: "))
	}
	// The mounting process: the holder itself, or the copy it started.
	if len(f) == 3 {
		h.netErr = f[2]
	}
	h.pid, err = strconv.Atoi(f[1])
	if err != nil || !twoStage && h.pid != cmd.Process.Pid {
		h.close()
		return nil, unavailable("the holder said %q", got)
	}
	pid := strconv.Itoa(h.pid)
	for _, o := range []struct {
		dst  **os.File
		path string
		flag int
	}{
		{&h.userns, "/proc/" + pid + "/ns/user", os.O_RDONLY},
		{&h.mntns, "/proc/" + pid + "/ns/mnt", os.O_RDONLY},
		{&h.netns, "/proc/" + pid + "/ns/net", os.O_RDONLY},
		{&h.root, "/proc/" + pid + "/root", unix.O_PATH | unix.O_DIRECTORY},
	} {
		f, err := os.OpenFile(o.path, o.flag|unix.O_CLOEXEC, 0)
		if err != nil {
			h.close()
			return nil, unavailable("opening the holder's %s: %w", filepath.Base(o.path), err)
		}
		*o.dst = f
	}
	return h, nil
}

// covers reports whether path (absolute, clean) lies in the layer's
// working directory, where the holder's view differs from the host's; a
// nil h covers nothing.
func (h *layerHolder) covers(path string) bool { return h != nil && within(path, h.lower) }

// path returns path as corral reads it from the host to see what the
// layer shows: through the holder's root (/proc/PID/root, proc(5)) when h
// covers it, else path itself. Absolute symlinks met on the way still
// resolve against corral's own root; callers use it for lstat-like reads,
// and open what they act on with openInView.
func (h *layerHolder) path(path string) string {
	if !h.covers(path) {
		return path
	}
	return "/proc/" + strconv.Itoa(h.pid) + "/root" + path
}

// findProtected is hostview.FindProtectedIn of root as view shows it,
// with the paths it reports given as on the host; a layer's directories
// are listed afresh, the host's through dirs.
func findProtected(root string, pats []string, view *layerHolder, dirs *dircache.Cache, res *pathres.Resolver) ([]hostview.ProtectedPath, bool, error) {
	if !view.covers(root) {
		return hostview.FindProtectedIn(root, pats, dirs, res)
	}
	found, cut, err := hostview.FindProtectedIn(view.path(root), pats, nil, res)
	for i := range found {
		found[i].Path = filepath.Join(root, filepath.FromSlash(found[i].Rel))
	}
	return found, cut, err
}

// openInView opens path (absolute) as the layer's mount namespace shows
// it, beneath the holder's root, following no symlink on the way
// (openat2(2) RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS, Linux 5.6): the paths a
// plan binds from descriptors are real ones, so a symlink anywhere on the
// way means the tree changed under the plan.
func (h *layerHolder) openInView(path string, flags int) (int, error) {
	rel := strings.TrimPrefix(filepath.Clean(path), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(int(h.root.Fd()), rel, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("a symlink appeared on the way to %s", path)
	}
	return fd, err
}

// forwardTo makes sure corral's forwarder runs in h's network namespace,
// relaying to srv (the session's proxy server, leased by the caller for
// the command): the one running is kept while it lives and serves srv;
// one that serves another server (the session's policy or secrets
// changed; the namespace has one pair of ports) or died is ended, and a
// new one started (Backend.startEgressNS). Commands of the session still
// running then reach the proxy through the new one. Errors wrap
// sandbox.ErrUnavailable: the command must not run.
func (h *layerHolder) forwardTo(b *Backend, bin *Binary, srv *netproxy.Server, session string) error {
	h.fwdMu.Lock()
	defer h.fwdMu.Unlock()
	if h.closed {
		return fmt.Errorf("%w: the session's review layer was closed while the command started", sandbox.ErrUnavailable)
	}
	if h.fwd != nil && h.fwdSrv == srv && h.fwd.Alive() {
		return nil
	}
	if h.netErr != "" {
		return fmt.Errorf("%w: the allowlist profile's network namespace (the review layer's) has no loopback, so the command does not run: %s", sandbox.ErrUnavailable, h.netErr)
	}
	if h.fwd != nil {
		_ = h.fwd.Close()
		h.fwd, h.fwdSrv = nil, nil
	}
	e, err := b.startEgressNS(bin, srv, session, h)
	if err != nil {
		return err
	}
	h.fwd, h.fwdSrv = e, srv
	return nil
}
