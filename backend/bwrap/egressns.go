package bwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/internal/forkfds"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/seccomp"
)

// egressAttachment is the name under which the bwrap backend keeps its
// [egressNS] with a session's proxy server (egress.Pool.Attach).
const egressAttachment = "bwrap.netns"

// egressReadyTimeout bounds the start of an egress namespace: bwrap, then
// corral's forwarder listening on its two ports.
const egressReadyTimeout = 15 * time.Second

// egressNS is the network namespace that the allowlist commands of one
// session (and policy) share, and the long-lived sandbox that holds it: a
// bwrap with its own user, pid and network namespace whose only process
// is corral's forwarder (netproxy.ForwarderMain --serve), listening on
// 127.0.0.1:3128 (HTTP proxy) and 127.0.0.1:1080 (SOCKS5) of that
// namespace and relaying each connection to the host-side proxy's Unix
// sockets (egress.Pool).
//
// Each command's bwrap then starts inside that network namespace instead
// of unsharing a fresh one, so a command costs no Go process: the
// forwarder starts once per session, not once per command. The limits gate
// moves bwrap into the namespace at its exec stop (joinNamespaces), which
// costs no process at all; where it cannot, nsenter(1) in front of bwrap
// does (joinArgv), at the price of one more execve. The command's sandbox keeps its own user, pid,
// mount, ipc and uts namespaces and gets the strict syscall filter
// (AF_UNIX sockets denied) from bwrap, on its pid 1 too; the forwarder,
// which needs its Unix sockets, lives in another pid and mount namespace,
// so no command can signal, trace or write into it (/proc/PID/mem). The
// proxy's socket directory is not in the commands' sandboxes at all.
//
// What the commands of the session share is loopback: a server one of
// them starts on 127.0.0.1 is reachable by the others (as in a container
// per session). Sessions never share a namespace.
//
// The holder ends when its server closes (the pool closes attachments),
// when corral ends (bwrap --die-with-parent, and the forwarder's standard
// input, a pipe whose other end only corral holds, reaches end of file),
// or when it fails; Alive then reports false and the next command starts
// a new one.
//
// The namespace descriptors are shared by the session's commands, which
// pass them to bwrap (ExtraFiles), name them to nsenter(1) by number
// (joinArgv) or setns(2) into them (startAs), all without a lock; and the
// pool closes a holder that died (egress.Pool.Attach) while other commands
// may be starting with it. So each command holds a reference (acquire,
// release) from before it first reads them until its bwrap is reaped, and
// Close ends the holder at once but leaves the descriptors to the last
// reference: closed under a command starting, their numbers could be
// taken by another session's files in between, and its bwrap would enter
// that session's namespace, or fail with "bad file descriptor".
type egressNS struct {
	log    *slog.Logger
	cmd    *exec.Cmd
	life   *os.File // corral's end of the forwarder's standard input
	netns  *os.File // the namespace the commands join
	userns *os.File // its owning user namespace; nil when joining as root
	done   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	pidfd   int  // the sandbox's pid 1 (pidfd_open(2)), or -1; under mu
	refs    int  // commands holding the descriptors (acquire)
	closing bool // Close was called: the last release closes them
}

// startEgressNS starts the holder for srv's sockets with bwrap bin and
// waits until the forwarder listens. With into (a review layer's holder,
// see layerhold_linux.go) the sandbox makes no network namespace: the
// limits gate moves bwrap into into's at its exec stop (joinNamespaces;
// into's user namespace first unless corral runs as root, as for a
// command), and the forwarder listens there; the result's netns and
// userns are then nil (the commands enter into's). Errors wrap
// sandbox.ErrUnavailable and say why (so the command does not run: the
// profile fails closed).
//
// A start that failed because the host's mounts changed under bwrap (its
// recursive read-only bind of / met a Docker layer being unmounted:
// hostChangedLine) is tried again, maxStartAttempts times in all, as Run
// does for a command's sandbox.
func (b *Backend) startEgressNS(bin *Binary, srv *netproxy.Server, session string, into *layerHolder) (*egressNS, error) {
	for attempt := 1; ; attempt++ {
		var changed string
		e, err := b.startEgressNSOnce(bin, srv, session, into, &changed)
		if err == nil || changed == "" {
			return e, err
		}
		if attempt == maxStartAttempts {
			// Not "cannot sandbox": the host changed, every time.
			return nil, (&startFailure{line: changed}).final(attempt)
		}
		b.log.Info("bwrap.egress.retry", "session", session, "attempt", attempt, "bwrap", changed)
	}
}

// startEgressNSOnce is one attempt of startEgressNS; when it fails because
// the host's mounts changed under bwrap, it sets *changed to bwrap's line.
func (b *Backend) startEgressNSOnce(bin *Binary, srv *netproxy.Server, session string, into *layerHolder, changed *string) (*egressNS, error) {
	// format may wrap its cause (%w): a full descriptor table (EMFILE)
	// stays in the chain, where sandbox.IsTransient finds it.
	unavailable := func(format string, a ...any) error {
		return fmt.Errorf("%w: the allowlist profile's network namespace could not be set up, so the command does not run: %w", sandbox.ErrUnavailable, fmt.Errorf(format, a...))
	}
	// The forwarder (and the trampoline it starts) is the helper
	// executable, handed over as a descriptor; corral's own when there is
	// none.
	exePath := "/proc/self/exe"
	if p := b.helperExecutable(); p != "" {
		exePath = p
	}
	exe, err := os.Open(exePath)
	if err != nil {
		return nil, unavailable("opening corral's helper executable for the forwarder: %w", err)
	}
	defer exe.Close()
	filter, err := seccomp.File(seccomp.Options{})
	if err != nil {
		return nil, unavailable("the syscall filter cannot be built: %w", err)
	}
	defer filter.Close()
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, unavailable("%w", err)
	}
	defer infoR.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		infoW.Close()
		return nil, unavailable("%w", err)
	}
	defer readyR.Close()
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		infoW.Close()
		readyW.Close()
		return nil, unavailable("%w", err)
	}
	// Descriptors in the sandbox: 3 info, 4 seccomp, 5 exe, 6 ready.
	sockDir := filepath.Dir(srv.HTTPSocket())
	argv := []string{
		"--die-with-parent", "--new-session",
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--cap-drop", "ALL",
		"--clearenv", "--setenv", "PATH", "/usr/sbin:/usr/bin:/sbin:/bin",
		"--info-fd", "3",
		"--seccomp", "4",
		// Corral's own code only: the host's files read-only (a test
		// binary may be linked dynamically), its own /proc for the
		// executable's descriptor. No --dev: devpts would make bwrap add
		// a second user namespace below the one that owns the network
		// namespace, and joining that one would not give the right to
		// enter the network namespace (setns(2)).
		"--ro-bind", "/", "/",
		"--proc", "/proc",
	}
	if into == nil {
		argv = append(argv, "--unshare-net")
	}
	// As every sandbox's: the kernel's settings read-only (the holder runs
	// as corral's own user, root included; see procCovers).
	for _, q := range procCovers {
		if _, err := os.Lstat(q); err == nil {
			argv = append(argv, "--ro-bind", q, q)
		}
	}
	argv = append(argv, "--")
	argv = append(argv, egress.ServeArgv("/proc/self/fd/5", sockDir, 6)...)
	cmd := exec.Command(bin.Path, argv...)
	cmd.Env = bwrapProcessEnv()
	cmd.Stdin = lifeR
	stderr := &tail.Buffer{}
	cmd.Stderr = stderr
	cmd.ExtraFiles = []*os.File{infoW, filter, exe, readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if into != nil {
		// 7 the user namespace (not as root), then the network namespace;
		// the gate closes both in bwrap once it has entered them. bwrap
		// keeps the capabilities the join gave it, as a review command's
		// does (nsJoin.KeepCaps): without CAP_SETUID there, bwrap as uid 0
		// cannot write its sandbox's uid map (EPERM, measured); the
		// forwarder gets none (--cap-drop ALL).
		join := nsJoin{UserFD: -1, MntFD: -1, NetFD: 7}
		if os.Geteuid() != 0 {
			join.UserFD, join.NetFD, join.KeepCaps = 7, 8, true
			cmd.ExtraFiles = append(cmd.ExtraFiles, into.userns)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, into.netns)
		err = startGated(cmd, sandbox.Limits{}, &join, nil, nil, b.log)
	} else {
		// Through the gate too, though it sets no limit: it holds the
		// holder's sandbox child from its birth until that child's
		// parent-death signal is armed, so a corral killed meanwhile
		// leaves no child blocked for ever on a dead bwrap (see
		// exitKillOptions); the forwarder's end of file on its standard
		// input ends it only once it runs. Where the gate is refused,
		// bwrap arms the signal itself after its mounts, as before.
		err = errGateUnavailable
		if !b.noGate {
			err = startGated(cmd, sandbox.Limits{}, nil, nil, nil, b.log)
		}
		if errors.Is(err, errGateUnavailable) {
			cmd = rebuild(cmd)
			err = forkfds.Start(cmd)
		}
	}
	infoW.Close()
	readyW.Close()
	lifeR.Close()
	if err != nil {
		lifeW.Close()
		return nil, unavailable("starting bwrap: %w", err)
	}
	e := &egressNS{log: b.log, cmd: cmd, life: lifeW, pidfd: -1, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(e.done)
	}()
	fail := func(err error) (*egressNS, error) {
		e.Close()
		if t := stderr.String(); t != "" {
			err = fmt.Errorf("%w (bwrap said: %s)", err, t)
			*changed = hostChangedLine(strings.Split(t, "\n"))
		}
		return nil, err
	}

	// bwrap's --info-fd: {"child-pid": N} once the sandbox's pid 1 exists.
	type result struct {
		pid   int
		ready string
		err   error
	}
	got := make(chan result, 1)
	go func() {
		var info struct {
			ChildPid int `json:"child-pid"`
		}
		if err := json.NewDecoder(infoR).Decode(&info); err != nil || info.ChildPid <= 0 {
			got <- result{err: fmt.Errorf("bwrap reported no sandbox process (%v)", err)}
			return
		}
		ready, _ := io.ReadAll(readyR)
		got <- result{pid: info.ChildPid, ready: string(ready)}
	}()
	var r result
	select {
	case r = <-got:
	case <-time.After(egressReadyTimeout):
		return fail(unavailable("the forwarder did not start within %s", egressReadyTimeout))
	}
	if r.err != nil {
		return fail(unavailable("%v", r.err))
	}
	if r.ready == "" {
		return fail(unavailable("the forwarder ended before it listened"))
	}
	// The sandbox's pid 1 ends as soon as the forwarder does; bwrap
	// outside notices a moment later. Alive asks pid 1.
	if fd, err := unix.PidfdOpen(r.pid, 0); err == nil {
		e.pidfd = fd
	}
	if into == nil {
		if err := e.openNamespaces(r.pid); err != nil {
			return fail(unavailable("%w", err))
		}
	}
	select {
	case <-e.done:
		return fail(unavailable("the sandbox ended while it was being set up"))
	default:
	}
	b.log.Debug("bwrap.egress.started", "session", session, "pid", cmd.Process.Pid, "sandbox_pid", r.pid, "dir", sockDir, "layer", into != nil)
	return e, nil
}

// openNamespaces opens the network namespace of the holder's pid 1 (pid,
// as this process sees it) and, unless corral runs as root, the user
// namespace that owns it (ioctl NS_GET_USERNS, ioctl_ns(2)): entering a
// network namespace takes CAP_SYS_ADMIN both in the caller's own user
// namespace and in the namespace's owner (setns(2)), which an unprivileged
// caller has only after it joined that owner, as the user who made it.
// The namespace must not be corral's own: a pid that died and was reused
// must never lead a command onto the host's network.
func (e *egressNS) openNamespaces(pid int) error {
	netns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return fmt.Errorf("opening the sandbox's network namespace: %w", err)
	}
	var own, got unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &own); err != nil {
		netns.Close()
		return fmt.Errorf("reading corral's network namespace: %w", err)
	}
	if err := unix.Fstat(int(netns.Fd()), &got); err != nil {
		netns.Close()
		return fmt.Errorf("reading the sandbox's network namespace: %w", err)
	}
	if got.Ino == own.Ino && got.Dev == own.Dev {
		netns.Close()
		return errors.New("the sandbox process is in corral's own network namespace (it ended and its pid was reused)")
	}
	e.netns = netns
	if os.Geteuid() == 0 {
		return nil
	}
	fd, err := unix.IoctlRetInt(int(netns.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		return fmt.Errorf("finding the user namespace that owns the sandbox's network namespace (NS_GET_USERNS): %w", err)
	}
	unix.CloseOnExec(fd)
	e.userns = os.NewFile(uintptr(fd), "userns")
	return nil
}

// joinArgv returns the argv prefix that runs the next program inside the
// holder's network namespace:
//
//	nsenter [--user=/proc/PID/fd/U --preserve-credentials] --net=/proc/PID/fd/N --
//
// where PID is corral's own process and U, N are its descriptors of the
// namespaces (so no pid of the holder can be reused in between, and no
// namespace descriptor is inherited into the sandbox). The user namespace
// is joined first (nsenter(1) enters it before the others when that gives
// the rights to enter them), keeping the caller's uid, gid and groups.
func (e *egressNS) joinArgv(nsenter string) []string {
	self := "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/"
	argv := []string{nsenter}
	if e.userns != nil {
		argv = append(argv, "--user="+self+strconv.Itoa(int(e.userns.Fd())), "--preserve-credentials")
	}
	return append(argv, "--net="+self+strconv.Itoa(int(e.netns.Fd())), "--")
}

// joinFDArgv returns the argv prefix that runs the next program inside
// the holder's network namespace from descriptors the caller passes at
// first, first+1 (the user namespace, when there is one, then the network
// namespace: files' order), which bash closes before it executes the
// program:
//
//	nsenter [--user=/proc/self/fd/U --preserve-credentials] --net=/proc/self/fd/N -- \
//	  bash --noprofile --norc -c 'exec U<&- N<&-; exec "$0" "$@"'
//
// bash rather than sh: dash, Debian's sh, takes only descriptors 0 to 9
// in a redirection, and these may be higher.
func (e *egressNS) joinFDArgv(nsenter, bash string, first int) []string {
	argv := []string{nsenter}
	closes := ""
	fd := first
	if e.userns != nil {
		argv = append(argv, "--user=/proc/self/fd/"+strconv.Itoa(fd), "--preserve-credentials")
		closes += strconv.Itoa(fd) + "<&- "
		fd++
	}
	argv = append(argv, "--net=/proc/self/fd/"+strconv.Itoa(fd), "--")
	closes += strconv.Itoa(fd) + "<&-"
	return append(argv, bash, "--noprofile", "--norc", "-c", `exec `+closes+`; exec "$0" "$@"`)
}

// files returns the namespace descriptors a bwrap must have to enter the
// namespace itself (joinNamespaces): the owning user namespace first when
// there is one, then the network namespace.
func (e *egressNS) files() []*os.File {
	if e.userns != nil {
		return []*os.File{e.userns, e.netns}
	}
	return []*os.File{e.netns}
}

// acquire takes a command's reference on the namespace descriptors, which
// stay open until its release; false when the holder is closed already
// (the caller asks the pool again, which starts a new one).
func (e *egressNS) acquire() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return false
	}
	e.refs++
	return true
}

// release drops a reference acquire took; the last one after Close
// closes the descriptors.
func (e *egressNS) release() {
	e.mu.Lock()
	e.refs--
	last := e.closing && e.refs == 0
	e.mu.Unlock()
	if last {
		e.closeFiles()
	}
}

// Alive reports whether the holder still runs (egress.Pool.Attach starts a
// new one when not); a closed one does not.
func (e *egressNS) Alive() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return false
	}
	select {
	case <-e.done:
		return false
	default:
	}
	if e.pidfd >= 0 {
		// A pidfd polls readable once its process has ended (pidfd_open(2)).
		fds := []unix.PollFd{{Fd: int32(e.pidfd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			return false
		}
	}
	return true
}

// Close ends the holder: its forwarder's standard input is closed, then
// the whole sandbox is killed (SIGKILL to bwrap's process group; with
// --unshare-pid its pid 1 takes the rest). The namespace descriptors are
// closed now when no command holds them, else by the last release.
// Commands still running in the namespace lose the proxy. It always
// returns nil (it is an io.Closer for egress.Pool).
func (e *egressNS) Close() error {
	e.once.Do(func() {
		e.mu.Lock()
		e.closing = true
		unused := e.refs == 0
		e.mu.Unlock()
		_ = e.life.Close()
		select {
		case <-e.done:
		case <-time.After(500 * time.Millisecond):
			_ = unix.Kill(-e.cmd.Process.Pid, unix.SIGKILL)
			_ = e.cmd.Process.Kill()
			<-e.done
		}
		e.mu.Lock()
		if e.pidfd >= 0 {
			_ = unix.Close(e.pidfd)
			e.pidfd = -1
		}
		e.mu.Unlock()
		if unused {
			e.closeFiles()
		}
		e.log.Debug("bwrap.egress.stopped", "pid", e.cmd.Process.Pid)
	})
	return nil
}

// closeFiles closes the namespace descriptors, once no command holds
// them (Close, release).
func (e *egressNS) closeFiles() {
	if e.netns != nil {
		_ = e.netns.Close()
	}
	if e.userns != nil {
		_ = e.userns.Close()
	}
}

// CheckEgress runs `true` under the allowlist profile (nothing allowed) in
// a session of its own and a fresh working directory under dir ("": the
// system temporary directory), so the whole path is tried: the proxy, the
// holder of the network namespace and a command entering it. It returns how
// that command entered the namespace ("ptrace gate" or "nsenter"; as root
// joinedBySetns) and nil,
// or the error that keeps allowlist commands from running (wrapping
// sandbox.ErrUnavailable). The backend's egress pool is used: give it one
// that closes servers at once (egress.Options.Linger < 0) when nothing
// should stay behind.
func (b *Backend) CheckEgress(ctx context.Context, dir string) (string, error) {
	if err := b.checkRun(ctx, dir, sandbox.ProfileAllowlist, sandbox.Limits{}); err != nil {
		return "", err
	}
	how, _ := b.joinedBy.Load().(string)
	return how, nil
}

// CheckCommand runs `true` under the workspace profile with limits lim in
// a fresh working directory under dir ("": the system temporary
// directory): whether commands with those limits run here at all (a
// max_procs that cannot be enforced, for one, refuses every command). It
// returns nil or the error, wrapping sandbox.ErrUnavailable or
// sandbox.ErrPolicy.
func (b *Backend) CheckCommand(ctx context.Context, dir string, lim sandbox.Limits) error {
	return b.checkRun(ctx, dir, sandbox.ProfileWorkspace, lim)
}

// checkRun runs `true` under profile and lim in a fresh directory under
// dir and turns every way it can fail into an error.
func (b *Backend) checkRun(ctx context.Context, dir string, profile sandbox.Profile, lim sandbox.Limits) error {
	work, err := os.MkdirTemp(dir, "corral-check-")
	if err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	defer os.RemoveAll(work)
	var out bytes.Buffer
	res, err := b.Run(ctx, &sandbox.Request{
		Argv: []string{"/bin/sh", "-c", "exec true"}, Env: []string{"PATH=/usr/bin:/bin"},
		Policy: sandbox.Policy{Workdir: work, Profile: profile, Limits: lim}, Session: "corral-check", Stdout: &out, Stderr: &out, Timeout: 30 * time.Second,
	})
	switch {
	case err != nil:
		return err
	case res.ExitCode != 0:
		return fmt.Errorf("%w: a %s command exited %d: %s", sandbox.ErrUnavailable, profile, res.ExitCode, strings.TrimSpace(out.String()))
	}
	return nil
}
