package bwrap

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/forkfds"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/seccomp"
)

// exitKillOptions are the ptrace options the gate holds bwrap with from
// its exec stop on: PTRACE_O_EXITKILL, under which the kernel sends
// SIGKILL to every tracee of a tracer that exits (ptrace(2), since Linux
// 3.8; kernel/ptrace.c, exit_ptrace), corral's tracing thread included
// when corral is killed with -9. The option is part of the tracee's
// ptrace flags, which a child traced from its birth (PTRACE_O_TRACECLONE)
// inherits (kernel/fork.c, ptrace_init_task), so the sandbox's child has
// it too from its first instant. It closes the window in which nothing
// else ends that child: from its birth until armParentDeath has armed its
// parent-death signal, the gate holds it stopped; a corral killed then
// took bwrap with it (its own parent-death signal), and left the child
// stopped for ever, or, when the gate's wait had taken its stop, let go to
// block in bwrap's eventfd for a parent that was gone (issue 27). Once the
// gate has detached a process, its parent-death signal holds instead.
const exitKillOptions = unix.PTRACE_O_EXITKILL

// errGateUnavailable means the ptrace gate cannot be used here (a setuid
// bwrap, or ptrace refused by Yama or a seccomp policy); the caller falls
// back to the prlimit(1) wrapper.
var errGateUnavailable = errors.New("ptrace gate unavailable")

// startGated starts cmd (bwrap) so that it executes no instruction before
// its limits are in place:
//
//  1. the child is started with PTRACE_TRACEME (SysProcAttr.Ptrace) and so
//     stops right after execve(2), before bwrap's first instruction;
//  2. when cg is given, it is moved into that memory cgroup, which bounds
//     the whole command (memCgroup.enter), unless it was born inside
//     (memCgroup.enterThread, cgroup v1); without one, or if the move
//     fails, memory_mb becomes RLIMIT_DATA (dataLimit, memory.go: what each
//     process makes writable, never RLIMIT_AS, which counts reservations);
//     it and RLIMIT_CPU are set on it with prlimit(2);
//  3. when lim.MaxProcs > 0 it is followed to its first fork or clone, which is
//     bwrap's sandbox child, already inside the new user namespace, and
//     RLIMIT_NPROC is set on that child. Since Linux 5.14 the process count
//     behind RLIMIT_NPROC is kept per user namespace (kernel/ucount.c), and
//     the ceiling an outer namespace applies is the creator's limit when the
//     namespace was made; setting the limit after the namespace exists
//     counts only the sandbox's processes, so a user running many processes
//     elsewhere can still start a sandbox;
//  4. when join is set (the allowlist profile), it is moved into the
//     session's egress namespace first (joinNamespaces; before step 3, so
//     the sandbox's user namespace is made below the joined one);
//  5. when med is not nil (a profile whose Unix sockets are mediated), the
//     same child gets the connect(2) notification filter and corral takes
//     its listener and a sock_diag socket of the sandbox's network
//     namespace into med (armConnectMediation, see unixsock.go); the
//     caller serves them. A failure kills bwrap: its main filter then
//     allows Unix sockets that nobody would check;
//  6. it is detached and runs on.
//
// From its exec stop until it is detached, bwrap is traced with
// PTRACE_O_EXITKILL (exitKillOptions), and so is its sandbox child from
// its birth: a corral killed at any instant of the start takes both with
// it; after the detach, their parent-death signals do (Go's Pdeathsig for
// bwrap, armParentDeath for the child).
//
// The calling goroutine is locked to its thread for the duration, as
// ptrace(2) requests must come from the tracing thread. A bwrap that exits
// before it forks is left unreaped for cmd.Wait.
func startGated(cmd *exec.Cmd, lim sandbox.Limits, join *nsJoin, cg *memCgroup, med *connectMediation, log *slog.Logger) error {
	if med != nil && !canJoinByInjection {
		return fmt.Errorf("connect(2) mediation needs system call injection, which this architecture lacks")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	joinSandboxKeyring(log)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	// Where it can, bwrap is born inside its memory cgroup (enterThread),
	// which is much cheaper than moving it in at the exec stop.
	leave, born := cg.enterThread(log)
	err := forkfds.Start(cmd)
	if born {
		leave()
	}
	if err != nil {
		if errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("%w: %v", errGateUnavailable, err)
		}
		return err
	}
	pid := cmd.Process.Pid
	fail := func(err error) error {
		_ = unix.Kill(pid, unix.SIGKILL)
		_ = unix.PtraceDetach(pid)
		_ = cmd.Wait()
		return err
	}
	// The exec stop.
	exited, err := waitStop(pid)
	if err != nil {
		return fail(fmt.Errorf("waiting for bwrap to stop at exec: %w", err))
	}
	if exited {
		return nil
	}
	// From here until the detach, a corral that dies takes bwrap and the
	// sandbox's child with it, whatever instant it dies at (see
	// exitKillOptions).
	if err := unix.PtraceSetOptions(pid, exitKillOptions); err != nil {
		return fail(fmt.Errorf("ptrace options: %w", err))
	}
	data := dataLimit(lim.MemoryMB)
	if born {
		cg.bornInside()
		data = 0
	} else if cg.enter(pid, log) {
		data = 0 // the cgroup bounds the whole command instead
	}
	if err := setLimit(pid, unix.RLIMIT_DATA, data); err != nil {
		return fail(err)
	}
	if lim.CPUSeconds > 0 {
		// SIGXCPU at the soft limit, SIGKILL one second later (setrlimit(2)).
		r := unix.Rlimit{Cur: uint64(lim.CPUSeconds), Max: uint64(lim.CPUSeconds) + 1}
		if err := unix.Prlimit(pid, unix.RLIMIT_CPU, &r, nil); err != nil {
			return fail(fmt.Errorf("setting RLIMIT_CPU: %w", err))
		}
	}
	if join != nil {
		if err := joinNamespaces(pid, *join); err != nil {
			return fail(fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err))
		}
	}
	if lim.MaxProcs <= 0 && !canJoinByInjection {
		if err := unix.PtraceDetach(pid); err != nil {
			return fail(fmt.Errorf("detaching from bwrap: %w", err))
		}
		return nil
	}
	opts := exitKillOptions | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK | unix.PTRACE_O_TRACECLONE
	if err := unix.PtraceSetOptions(pid, opts); err != nil {
		return fail(fmt.Errorf("ptrace options: %w", err))
	}
	sig := 0
	for {
		if err := unix.PtraceCont(pid, sig); err != nil {
			return fail(fmt.Errorf("resuming bwrap: %w", err))
		}
		sig = 0
		exited, ws, err := waitEvent(pid)
		if err != nil {
			return fail(fmt.Errorf("waiting for bwrap: %w", err))
		}
		if exited {
			return nil // bwrap failed before forking; cmd.Wait reports it
		}
		switch ws.TrapCause() {
		case unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK, unix.PTRACE_EVENT_CLONE:
			msg, err := unix.PtraceGetEventMsg(pid)
			if err != nil {
				return fail(fmt.Errorf("reading bwrap's new child: %w", err))
			}
			child := int(msg)
			// The new child starts traced and stopped (SIGSTOP).
			if _, _, err := waitEvent(child); err != nil {
				return fail(fmt.Errorf("waiting for bwrap's child: %w", err))
			}
			if canJoinByInjection {
				l, d, err := armChild(child, pid, med != nil)
				if err != nil {
					_ = unix.Kill(child, unix.SIGKILL)
					_ = unix.PtraceDetach(child)
					return fail(err)
				}
				if med != nil {
					med.listener, med.diag = l, d
				}
			}
			var lerr error
			if lim.MaxProcs > 0 {
				r := unix.Rlimit{Cur: uint64(lim.MaxProcs), Max: uint64(lim.MaxProcs)}
				lerr = unix.Prlimit(child, unix.RLIMIT_NPROC, &r, nil)
			}
			_ = unix.PtraceDetach(child)
			if lerr != nil {
				med.close()
				return fail(fmt.Errorf("setting RLIMIT_NPROC on the sandbox: %w", lerr))
			}
			if err := unix.PtraceDetach(pid); err != nil {
				med.close()
				return fail(fmt.Errorf("detaching from bwrap: %w", err))
			}
			return nil
		}
		if ws.Stopped() && ws.StopSignal() != unix.SIGTRAP {
			sig = int(ws.StopSignal()) // a signal for bwrap: deliver it
		}
	}
}

// sandboxKeyringName names the session keyrings joinSandboxKeyring makes:
// random per corral process, so no other process can guess it. Drawn at
// first use, not at init: every helper process runs corral's inits.
var sandboxKeyringName = sync.OnceValue(func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "corral-sandbox-" + hex.EncodeToString(b[:])
})

// keyringsMade counts the session keyrings joinSandboxKeyring has made.
var keyringsMade atomic.Int64

// joinSandboxKeyring gives the calling thread, and so the sandbox it is
// about to fork, a session keyring of corral's own in place of the
// caller's (keyctl(2) KEYCTL_JOIN_SESSION_KEYRING, under a name known only
// to this process), so the keys in the caller's session keyring (Kerberos
// tickets, ecryptfs and filesystem keys) cannot be reached from inside.
// (Inside, seccomp denies keyctl, add_key and request_key as well.)
// Keyrings live in a thread's credentials, so this touches neither
// corral's other threads nor the caller's session.
//
// A thread that already has such a keyring keeps it: one made per command
// counted against the user's key quota (/proc/sys/kernel/keys/maxkeys,
// 200 for a user) until the kernel's key collector freed it, and a quick
// series of commands ran out of it (EDQUOT), which then failed the user's
// own add_key(2) calls as well. Failure is logged: the sandbox then shares
// the caller's session keyring.
func joinSandboxKeyring(log *slog.Logger) {
	if id, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false); err == nil {
		// KEYCTL_DESCRIBE: "type;uid;gid;perm;description".
		if d, err := unix.KeyctlString(unix.KEYCTL_DESCRIBE, id); err == nil && strings.HasSuffix(d, ";"+sandboxKeyringName()) {
			return
		}
	}
	if _, err := unix.KeyctlJoinSessionKeyring(sandboxKeyringName()); err != nil {
		if log != nil {
			log.Warn("bwrap.keyring.unavailable", "error", err)
		}
		return
	}
	keyringsMade.Add(1)
}

// waitStop waits for the exec stop of a child started with PTRACE_TRACEME.
func waitStop(pid int) (exited bool, err error) {
	exited, _, err = waitEvent(pid)
	return exited, err
}

// waitEvent waits for the next state change of traced process pid. An exit
// is only peeked at (WNOWAIT), so the process stays a zombie for its real
// parent's wait; a stop is consumed and returned.
func waitEvent(pid int) (exited bool, ws unix.WaitStatus, err error) {
	var info unix.Siginfo
	for {
		err = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT|unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, 0, err
		}
		break
	}
	// si_code (siginfo_t, <asm-generic/siginfo.h>): CLD_EXITED=1,
	// CLD_KILLED=2, CLD_DUMPED=3 are exits; CLD_TRAPPED=4 and CLD_STOPPED=5
	// are stops.
	if code := info.Code; code == 1 || code == 2 || code == 3 {
		return true, 0, nil
	}
	for {
		_, err = unix.Wait4(pid, &ws, unix.WALL, nil)
		if !errors.Is(err, unix.EINTR) {
			return false, ws, err
		}
	}
}

// setLimit sets resource (unix.RLIMIT_*) of process pid to value, soft
// and hard; 0 leaves it as it is.
func setLimit(pid, resource int, value uint64) error {
	if value == 0 {
		return nil
	}
	r := unix.Rlimit{Cur: value, Max: value}
	if err := unix.Prlimit(pid, resource, &r, nil); err != nil {
		return fmt.Errorf("setting rlimit %d: %w", resource, err)
	}
	return nil
}

func mib(n int) uint64 {
	if n <= 0 {
		return 0
	}
	return uint64(n) << 20
}

// armChild prepares child, bwrap's sandbox child stopped at its birth
// (see startGated), in one batch of system calls executed in it
// (injection.batch: one resume instead of one per call):
//
//   - prctl(PR_SET_PDEATHSIG, SIGKILL), so that it dies with bwrap from its
//     first instruction. bwrap arms the same signal itself only late, after
//     the sandbox's mounts (do_init); a bwrap killed before that (corral
//     killed with -9, and bwrap with it through its own parent-death
//     signal) left the child running with nobody to end it, the command
//     included (bubblewrap issue #633). (A corral killed while the gate
//     holds the child takes it along by PTRACE_O_EXITKILL, exitKillOptions;
//     the signal armed here covers bwrap's death after the gate has let
//     both go.) The batch is followed by a look at its parent, bwrap,
//     corral's own child (inside its pid namespace getppid(2) says 0): a
//     child whose parent died before the signal was armed is killed by the
//     caller (the signal fires only for a death after it is set);
//   - when mediate is set (a profile whose Unix sockets are mediated,
//     unixsock.go): seccomp(2) SECCOMP_SET_MODE_FILTER with
//     SECCOMP_FILTER_FLAG_NEW_LISTENER and seccomp.ConnectNotifyBPF, and
//     socket(AF_NETLINK, SOCK_RAW|SOCK_CLOEXEC, NETLINK_SOCK_DIAG), whose
//     descriptors are taken into corral with pidfd_getfd(2) (listener and
//     diag) and closed in the child by a second batch: the listener never
//     stays in the sandbox. The child holds CAP_SYS_ADMIN in its new user
//     namespace, which the kernel accepts instead of no_new_privs
//     (seccomp(2)). The filter and its arguments are written below the
//     child's stack pointer (injection.scratch), dead stack it overwrites
//     on its own.
//
// On error nothing is left open in corral and the caller kills the child;
// the mediation's failures wrap sandbox.ErrUnavailable (the sandbox must
// not run with sockets nobody checks). listener and diag are -1 without
// mediate.
func armChild(child, parent int, mediate bool) (listener, diag int, err error) {
	listener, diag = -1, -1
	var prog []byte
	if mediate {
		if prog, err = seccomp.ConnectNotifyBPF(); err != nil {
			return -1, -1, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
		}
	}
	in, err := startInjection(child)
	if err != nil {
		return -1, -1, err
	}
	mediation := func(what string, e error) error {
		return fmt.Errorf("%w: setting up the sandbox's connect(2) mediation: %s: %w", sandbox.ErrUnavailable, what, e)
	}
	err = func() error {
		calls := [][]uintptr{{unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL)}}
		if mediate {
			// struct sock_fprog { unsigned short len; struct sock_filter
			// *filter; } with the filter right after it.
			addr := in.scratch()
			buf := make([]byte, 16, 16+len(prog))
			binary.NativeEndian.PutUint16(buf, uint16(len(prog)/8))
			binary.NativeEndian.PutUint64(buf[8:], uint64(addr+16))
			buf = append(buf, prog...)
			if err := in.write(addr, buf); err != nil {
				return mediation("writing the filter", err)
			}
			calls = append(calls,
				[]uintptr{unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, addr},
				[]uintptr{unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW | unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG})
		}
		res, errs, err := in.batch(calls...)
		if err != nil {
			return err
		}
		if errs[0] != nil {
			return fmt.Errorf("arming the sandbox's parent-death signal: %w", errs[0])
		}
		// parent (bwrap) is this process's child: while it has not exited,
		// it is child's parent (a process is reparented only when its
		// parent dies).
		ended, err := childExited(parent)
		if err != nil {
			// Not a sign that bwrap ended: said as it is.
			err = fmt.Errorf("looking at bwrap while its sandbox was being set up: %w", err)
		} else if ended {
			err = fmt.Errorf("bwrap ended while its sandbox was being set up")
		}
		if !mediate {
			return err
		}
		// What the batch opened in the child is closed there whatever
		// else happened.
		var opened []int
		if errs[1] == nil {
			opened = append(opened, int(res[1]))
		} else {
			err = errors.Join(err, mediation("seccomp(SECCOMP_FILTER_FLAG_NEW_LISTENER)", errs[1]))
		}
		if errs[2] == nil {
			opened = append(opened, int(res[2]))
		} else if !errors.Is(errs[2], errBatchNotRun) {
			err = errors.Join(err, mediation("socket(NETLINK_SOCK_DIAG)", errs[2]))
		}
		if err == nil {
			err = func() error {
				pidfd, err := unix.PidfdOpen(child, 0)
				if err != nil {
					return mediation("pidfd_open", err)
				}
				defer unix.Close(pidfd)
				if listener, err = unix.PidfdGetfd(pidfd, int(res[1]), 0); err != nil {
					return mediation("pidfd_getfd(listener)", err)
				}
				if diag, err = unix.PidfdGetfd(pidfd, int(res[2]), 0); err != nil {
					return mediation("pidfd_getfd(sock_diag)", err)
				}
				return nil
			}()
		}
		if len(opened) > 0 {
			closes := make([][]uintptr, len(opened))
			for i, fd := range opened {
				closes[i] = []uintptr{unix.SYS_CLOSE, uintptr(fd)}
			}
			_, cerrs, cerr := in.batch(closes...)
			err = errors.Join(err, cerr)
			for _, e := range cerrs {
				if e != nil {
					err = errors.Join(err, mediation("close", e))
				}
			}
		}
		return err
	}()
	if err = errors.Join(err, in.finish()); err != nil {
		closeFDs(listener, diag)
		return -1, -1, err
	}
	return listener, diag, nil
}

// childExited reports whether pid, a child of this process, has exited
// (or was already collected: ECHILD), leaving its exit status to the wait
// that owns it (waitid(2) WNOWAIT; WNOHANG leaves si_signo 0 when nothing
// is waitable). /proc/PID/stat said the same at 70 µs a read
// (do_task_stat), on every command.
func childExited(pid int) (bool, error) {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if errors.Is(err, unix.ECHILD) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return info.Signo != 0, nil
}

// connectMediation receives, from startGated, the descriptors of a
// sandbox's connect(2) mediation: the seccomp listener and the sock_diag
// socket, both -1 until armed.
type connectMediation struct {
	listener, diag int
}

func newConnectMediation() *connectMediation { return &connectMediation{listener: -1, diag: -1} }

// close closes what was armed; safe on nil.
func (m *connectMediation) close() {
	if m == nil {
		return
	}
	closeFDs(m.listener, m.diag)
	m.listener, m.diag = -1, -1
}
