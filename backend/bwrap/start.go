package bwrap

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/seccomp"
)

// started is a bwrap that start has started, with what must outlive it
// until it has been waited for.
type started struct {
	cmd *exec.Cmd
	// statusR is the read end of bwrap's status pipe (--json-status-fd).
	statusR *os.File
	// tail is the end of the command's stderr, kept to tell a limit
	// failure apart (limitHit); nil when not kept.
	tail *tail.Buffer
	// cg is the command's memory cgroup, or nil (memoryCgroup).
	cg    *memCgroup
	lim   sandbox.Limits
	begin time.Time
	// undo releases what the start took, run last first by close.
	undo []func()
}

// close releases what start took: the supervisor of Unix sockets, the
// root caller's start thread, the memory cgroup, the descriptors.
func (s *started) close() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
	s.undo = nil
}

// bindFDCount is how many protected paths openBindFDs opens for plan: the
// mounts bound from a descriptor, where bin has --bind-fd.
func bindFDCount(plan *Plan, bin *Binary) int {
	if !bin.BindFD {
		return 0
	}
	n := 0
	for _, m := range plan.Mounts {
		if m.ViaFD {
			n++
		}
	}
	return n
}

// start starts bwrap for plan: the descriptors laid out (layoutFDs), the
// memory cgroup made, bwrap started under the ptrace gate (startGated) or,
// where the gate is refused, under prlimit(1) (startWithPrlimit), as a
// root caller's run_as identity from a thread of its own (startAs), and
// the supervisor of mediated Unix sockets started. Errors wrap
// sandbox.ErrUnavailable (logged: nothing was run) or sandbox.ErrPolicy, or
// say why bwrap could not be started; nothing is left behind then.
func (b *Backend) start(bin *Binary, plan *Plan, req *sandbox.Request, ens *egressNS) (_ *started, err error) {
	sb := &started{lim: req.Limits}
	defer func() {
		if err != nil {
			sb.close()
		}
	}()
	var helpers []*os.File
	sb.undo = append(sb.undo, func() {
		for _, f := range helpers {
			f.Close()
		}
	})
	command := req.Argv
	root := os.Getuid() == 0
	// A root caller's sandbox holds plan.RunAs, never host uid 0: bwrap
	// starts as that identity from a thread of its own in a mount namespace
	// prepared for it (enterHostView).
	ra := plan.RunAs
	// Under allowlist bwrap must start inside the session's egress
	// namespace: entered by the gate at bwrap's exec stop (joinNamespaces),
	// or, where the gate cannot do it, by nsenter(1) in front of bwrap; as
	// root, by the starting thread itself (setns(2) before the fork).
	var userns, netns *os.File
	joinedBy, nsenter := "", ""
	if ens != nil && ra != nil {
		joinedBy = joinedBySetns
	} else if ens != nil {
		gated := !bin.Setuid || root
		if canJoinByInjection && gated && !b.forceNsenter {
			userns, netns = ens.userns, ens.netns
			joinedBy = "ptrace gate"
		} else {
			joinedBy = "nsenter" // throughNsenter, once the descriptors are laid out
			if nsenter, err = nsenterLocate(); err != nil {
				return nil, b.unavailable(err)
			}
		}
	}
	// Under workspace_mode review the sandbox starts inside the session
	// layer's namespaces (layerhold_linux.go), entered by the gate at
	// bwrap's exec stop; where the gate cannot, the command does not run
	// (it would write to the host's files). Under allowlist too, the
	// network namespace is the holder's (ens is nil then): one user
	// namespace owns all three, so one join enters them.
	var mntns *os.File
	holder := plan.view
	if plan.LayerDir != "" {
		if holder == nil || ens != nil {
			return nil, fmt.Errorf("%w: a review layer without its holder, or with another network namespace", sandbox.ErrUnavailable)
		}
		userns, mntns = holder.userns, holder.mntns
		if plan.Egress {
			netns = holder.netns
			joinedBy = "ptrace gate"
		}
	}
	// Unix sockets are mediated (unixsock.go) where the gate can inject
	// calls into bwrap's sandbox child; elsewhere they stay refused.
	var med *connectMediation
	if plan.DenyUnixSockets && canJoinByInjection && !b.noFilter && !b.noUnixMediation && !(bin.Setuid && !root) {
		med = newConnectMediation()
	}
	var filter *os.File
	if !b.noFilter {
		f, err := b.filters.open(seccomp.Options{DenyUnixSockets: plan.DenyUnixSockets, MediatedUnixSockets: med != nil})
		if err != nil {
			return nil, b.unavailable(fmt.Errorf("%w: the syscall filter cannot be built, so the command does not run: %w", sandbox.ErrUnavailable, err))
		}
		filter = f
		helpers = append(helpers, f)
	}
	layout := layoutFDs(len(req.ExtraFiles), filter != nil, bindFDCount(plan, bin), userns != nil, mntns != nil, netns != nil)
	if filter != nil {
		plan.SeccompFD = layout.Seccomp
	}
	// Each descriptor has one owner, which closes it once: statusW this
	// function (bwrap holds its own copy once started, and the status
	// stream ends when bwrap's copies are gone), statusR and argsR the
	// started sandbox (close), argsW the writer below once it runs, else
	// close.
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating status pipe: %w", err)
	}
	defer statusW.Close()
	sb.statusR = statusR
	sb.undo = append(sb.undo, func() { statusR.Close() })
	argsR, argsW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating argument pipe: %w", err)
	}
	closeArgsW := sync.OnceFunc(func() { argsW.Close() })
	sb.undo = append(sb.undo, func() { argsR.Close() }, closeArgsW)
	// The arguments go through --args rather than the command line, so the
	// mount plan (hidden names, symlink targets) is not readable in
	// /proc/1/cmdline inside the sandbox, and no ARG_MAX limit applies.
	// Protected paths and their pins are bound from descriptors where bwrap
	// can, after the others; as root they are opened in the prepared mount
	// namespace, where the writable ones are idmapped.
	var bindFiles []*os.File
	sb.undo = append(sb.undo, func() {
		for _, f := range bindFiles {
			f.Close()
		}
	})
	var cmd *exec.Cmd
	lim := req.Limits
	cg := b.memoryCgroup(lim, bin, root)
	sb.cg = cg
	if cg != nil {
		// startAs's thread ends with the command (threadEntry).
		cg.byThread = ra != nil
	}
	sb.undo = append(sb.undo, func() { cg.remove(b.log, &b.cgroups) })
	launch := func() error {
		var err error
		bindFiles, err = openBindFDs(plan, bin, layout.FirstBind, holder)
		if err == nil && len(bindFiles) != layout.Binds {
			err = fmt.Errorf("opened %d protected paths' descriptors, laid out %d", len(bindFiles), layout.Binds)
		}
		if err != nil {
			return err
		}
		argv := Argv(plan, FeaturesFor(bin.Version), layout.Status, command)
		opts, command := argv[:len(argv)-len(command)-1], argv[len(argv)-len(command)-1:] // command starts at "--"
		go func() {
			var buf []byte
			for _, a := range opts {
				buf = append(append(buf, a...), 0)
			}
			_, _ = argsW.Write(buf)
			closeArgsW()
		}()
		cmd = exec.Command(bin.Path, append([]string{"--args", strconv.Itoa(layout.Args)}, command...)...)
		// bwrap runs on the host: it gets a fixed environment, never the
		// command's (which Argv sets inside with --setenv).
		cmd.Env = bwrapProcessEnv()
		cmd.Stdin, cmd.Stdout = req.Stdin, req.Stdout
		cmd.Stderr = req.Stderr
		if req.Limits.MemoryMB > 0 || req.Limits.MaxProcs > 0 {
			// Keep the end of stderr to tell a limit failure apart. A terminal
			// is passed through untouched so it stays a terminal.
			if f, ok := req.Stderr.(*os.File); !ok || !isTerminal(f) {
				sb.tail = &tail.Buffer{Size: 8 << 10}
				switch {
				case sandbox.SameWriter(req.Stdout, req.Stderr):
					// One writer for both keeps them one pipe, in the
					// order the command wrote them (the tail then holds
					// stdout too, which the limit messages tolerate).
					w := io.MultiWriter(req.Stderr, sb.tail)
					cmd.Stdout, cmd.Stderr = w, w
				case req.Stderr != nil:
					cmd.Stderr = io.MultiWriter(req.Stderr, sb.tail)
				default:
					cmd.Stderr = sb.tail
				}
			}
		}
		cmd.ExtraFiles = layout.files(req.ExtraFiles, statusW, argsR, filter, bindFiles, userns, mntns, netns)
		if joinedBy == "nsenter" {
			throughNsenter(cmd, ens, nsenter)
		}
		var join *nsJoin
		if netns != nil || mntns != nil {
			// Closed in bwrap by the gate once it has entered the
			// namespaces.
			join = &nsJoin{UserFD: layout.UserNS, MntFD: layout.MntNS, NetFD: layout.NetNS, KeepCaps: mntns != nil}
		}
		// Once the sandbox is dead nothing may hold its output pipes open; do
		// not wait for stray writers beyond this.
		cmd.WaitDelay = b.opts.KillGrace
		// Own process group, so a terminal's ^C reaches corral, which forwards
		// it; Pdeathsig ends bwrap, and with it the sandbox, if corral dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if req.TTY {
			// A new session whose controlling terminal is corral's own pty
			// (descriptor 0 in the child).
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
		}

		// RLIMIT_NPROC holds for any uid but root's (kernel/fork.c exempts
		// INIT_USER), and no sandbox holds root's: a root caller's is held
		// by its RunAs identity (bwrap is started by a thread that holds
		// it, see startAs), so the gate sets it for every caller.
		gateLim := lim
		sb.begin = time.Now()
		if bin.Setuid && !root {
			return b.startWithPrlimit(cmd, gateLim) // never with a layer: layerFor refuses a setuid bwrap
		}
		if b.noGate {
			err = fmt.Errorf("%w: turned off for a test", errGateUnavailable)
		} else {
			err = startGated(cmd, gateLim, join, cg, med, b.log)
		}
		if !errors.Is(err, errGateUnavailable) {
			return err
		}
		b.log.Warn("bwrap.gate.unavailable", "error", err)
		if mntns != nil {
			// Without the gate nothing moves bwrap into the layer: it
			// would build the sandbox over the host's own files.
			return fmt.Errorf("%w: workspace_mode review needs the ptrace gate, which is refused here (%v); allow ptrace of corral's children, or use workspace_mode direct", sandbox.ErrUnavailable, err)
		}
		if lim.MaxProcs > 0 {
			// prlimit(1) would count every process of the uid on the
			// machine (the user namespace does not exist yet): refuse
			// rather than run without the limit.
			return fmt.Errorf("%w: max_procs=%d cannot be enforced: the ptrace gate that sets it inside the sandbox is refused here (%v: Yama ptrace_scope 3, a seccomp policy, or corral itself being traced); allow ptrace of corral's children, or set max_procs to 0 to run without a process limit", sandbox.ErrUnavailable, lim.MaxProcs, err)
		}
		cmd = rebuild(cmd)
		if med != nil {
			// No gate, no mediation: the filter that refuses AF_UNIX
			// sockets outright takes the mediated one's place.
			strict, serr := b.filters.open(seccomp.Options{DenyUnixSockets: plan.DenyUnixSockets})
			if serr != nil {
				return fmt.Errorf("%w: the syscall filter cannot be built, so the command does not run: %w", sandbox.ErrUnavailable, serr)
			}
			helpers = append(helpers, strict)
			cmd.ExtraFiles[layout.Seccomp-3] = strict
			filter, med = strict, nil
		}
		if filter != nil {
			_, _ = filter.Seek(0, io.SeekStart) // bwrap reads it from the offset
		}
		if join != nil {
			// No gate to enter the namespaces: nsenter does. They are the
			// last descriptors, so dropping them moves no other.
			first := layout.NetNS
			if layout.UserNS >= 0 {
				first = layout.UserNS
			}
			cmd.ExtraFiles = cmd.ExtraFiles[:first-3]
			nsenter, nerr := nsenterLocate()
			if nerr != nil {
				return nerr
			}
			throughNsenter(cmd, ens, nsenter)
			joinedBy = "nsenter"
		}
		return b.startWithPrlimit(cmd, gateLim)
	}
	if ra != nil {
		var release func()
		release, err = b.startAs(plan, *ra, ens, launch)
		sb.undo = append(sb.undo, release)
	} else {
		err = launch()
	}
	if errors.Is(err, sandbox.ErrUnavailable) {
		return nil, b.unavailable(err)
	}
	if err != nil {
		return nil, fmt.Errorf("starting bwrap: %w", err)
	}
	sb.cmd = cmd
	if joinedBy != "" {
		b.joinedBy.Store(joinedBy)
	}
	if med != nil && med.listener >= 0 {
		sup, err := startUnixSupervisor(med.listener, med.diag, ra, b.log)
		if err != nil {
			// The sandbox must not run with sockets nobody checks.
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, b.unavailable(fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err))
		}
		// Stopped once the command is over (close runs after wait); every
		// task holding the filter is gone by then.
		sb.undo = append(sb.undo, sup.stop)
	}
	b.log.Debug("bwrap.sandbox.started", "pid", cmd.Process.Pid, "workdir", plan.Workdir, "writable", plan.Writable, "share_net", plan.ShareNet, "egress", plan.Egress, "seccomp", plan.SeccompFD > 0)
	return sb, nil
}
