package bwrap

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/waitloop"
	"github.com/corralhq/corral/sandbox"
)

// wait waits for the bwrap that start started (waitloop.Wait, shared with
// backend/local), ending the whole sandbox on a timeout or ctx's end and
// passing a person's first signal on to the command, and reports the
// result: the command's status, or, for a sandbox that was never built, an
// error wrapping sandbox.ErrUnavailable or a startFailure (the host's
// mounts changed; Run retries).
func (b *Backend) wait(ctx context.Context, bin *Binary, req *sandbox.Request, sb *started) (*sandbox.Result, error) {
	cmd := sb.cmd
	pidC := make(chan int, 1)
	stc := make(chan status, 1)
	go func() { stc <- readStatus(sb.statusR, pidC) }()
	// exited is set, under reapMu, once bwrap has exited and before it is
	// reaped: from then on its pid, and the pids it reported, may be
	// another process's, and kill must not use them.
	var reapMu sync.Mutex
	exited := false
	done := make(chan error, 1)
	go func() {
		waitExited(cmd.Process.Pid)
		reapMu.Lock()
		exited = true
		reapMu.Unlock()
		done <- cmd.Wait()
	}()

	outer := cmd.Process.Pid
	// The sandbox's pid 1 as bwrap reports it, and a pidfd of it opened
	// while bwrap (its parent) is alive, so it is that process and no
	// other; both under reapMu.
	childPid, initFD := 0, -1
	defer func() {
		reapMu.Lock()
		if initFD >= 0 {
			_ = unix.Close(initFD)
			initFD = -1
		}
		reapMu.Unlock()
	}()
	pid1 := func() int {
		reapMu.Lock()
		defer reapMu.Unlock()
		return childPid
	}
	waited := make(chan struct{})
	defer close(waited)
	go func() {
		select {
		case pid := <-pidC:
			reapMu.Lock()
			defer reapMu.Unlock()
			childPid = pid
			if !exited {
				if fd, err := unix.PidfdOpen(pid, 0); err == nil {
					initFD = fd
				}
			}
		case <-waited:
		}
	}()
	kill := func() {
		reapMu.Lock()
		defer reapMu.Unlock()
		// SIGKILL to the sandbox's pid 1 ends its whole pid namespace
		// (pid_namespaces(7)). Killing bwrap alone relies on
		// --die-with-parent, which a sandbox still being set up has not
		// armed yet; so kill pid 1 directly, every child bwrap has, and
		// bwrap itself, as long as their pids are theirs.
		if initFD >= 0 {
			_ = unix.PidfdSendSignal(initFD, unix.SIGKILL, nil, 0)
		}
		if exited {
			return
		}
		for _, c := range childrenOf(outer) {
			_ = unix.Kill(c, unix.SIGKILL)
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
	var graces []*time.Timer // SIGKILL after the SIGTERM of a timeout
	defer func() {
		for _, t := range graces {
			if t != nil {
				t.Stop()
			}
		}
	}()
	// live runs f while bwrap has not exited: signals to the pids it
	// reported then reach the sandbox, not a process that took the pid.
	live := func(f func()) {
		reapMu.Lock()
		defer reapMu.Unlock()
		if !exited {
			f()
		}
	}
	end := func() { graces = append(graces, b.terminate(pid1(), kill, live)) }
	// early is the person's signal that came before the command existed
	// and so ended the sandbox (Handlers.Signal), or 0.
	var early syscall.Signal
	out := waitloop.Wait(ctx, done, req.Timeout, req.Signals, waitloop.Handlers{
		Timeout: end,
		Cancel:  end,
		// A person's ^C or kill: pass it on to the command the first
		// time; end the whole sandbox the second time. One that comes
		// before the command exists (bwrap has not reported pid 1, or
		// pid 1 has not forked the command yet, so no process would take
		// it and the command would then run as if nothing came) ends the
		// sandbox at once, and the command is reported as ended by that
		// signal, not by corral's SIGKILL.
		Signal: func(sig os.Signal, n int) {
			if s, ok := sig.(syscall.Signal); ok && n == 1 {
				reached := false
				live(func() {
					// Pid 1 as bwrap reported it, or, when that report
					// is not read yet (the reader is a goroutine, and
					// under load the command's output can come first),
					// as /proc says: bwrap's child. Whether the command
					// exists is then the kernel's answer (pid 1 has a
					// child), never the order two readers ran in.
					cands := []int{childPid}
					if childPid == 0 {
						cands = childrenOf(outer)
					}
					for _, p := range cands {
						if p > 0 && len(childrenOf(p)) > 0 {
							signalCommand(p, s)
							reached = true
							return
						}
					}
				})
				if reached {
					return
				}
				early = s
			}
			kill() // the second one, or one the command was not there for: at once
		},
	})
	timedOut, cancelled := out.TimedOut, out.Cancelled
	// bwrap is reaped, so everything it wrote to the status pipe is in the
	// pipe: stop the reader's wait for the end of the stream (which other
	// holders of the write end could delay: children that concurrent starts
	// have forked but not yet executed) and let it read what is left. The
	// status is then complete, whatever the timing.
	if err := sb.statusR.SetReadDeadline(time.Now()); err != nil {
		b.log.Warn("bwrap.status.no_deadline", "pid", outer, "error", err)
	}
	st := <-stc
	res := &sandbox.Result{Duration: time.Since(sb.begin), TimedOut: timedOut}
	ps := cmd.ProcessState
	if ps == nil {
		// bwrap ran, and with it maybe the command.
		return nil, sandbox.MayHaveRun(fmt.Errorf("waiting for bwrap: %w", out.Err))
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		res.CPUTime = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	ws := ps.Sys().(syscall.WaitStatus)
	res.ExitCode, res.Signal = waitloop.ExitOf(ws)
	if !ws.Signaled() && res.ExitCode > sandbox.ExitSignalBase && res.ExitCode < sandbox.ExitSignalBase+65 && st.exitCode != nil {
		// The command (not bwrap) was killed by a signal: bwrap exits
		// with the shell's 128+N for it.
		res.Signal = res.ExitCode - sandbox.ExitSignalBase
	}
	if early != 0 && res.ExitCode == sandbox.ExitSignalBase+int(syscall.SIGKILL) && !timedOut && !cancelled {
		// The SIGKILL was corral's answer to the person's signal: report
		// that signal, as a shell whose command it ended would (130, 143).
		res.Signal, res.ExitCode = int(early), sandbox.ExitSignalBase+int(early)
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s came while the sandbox was being made, so the command was ended before it could take the signal; it may have partly run", unix.SignalName(early)))
	}
	// Did the command start? Decided from facts, never from timing:
	// bubblewrap writes child-pid before the sandbox's pid 1 may go on,
	// and exit-code only when the command has been executed (its setup
	// finished), just before it exits with the command's status; when it
	// fails itself, it exits 1 without an exit-code. An exit of bwrap's own
	// (not a signal from corral), not 0, without exit-code, is a command
	// that never started.
	if ws.Exited() && res.ExitCode != 0 && st.exitCode == nil && !timedOut && !cancelled {
		if line := hostChangedLine(bwrapLinesOf(req)); line != "" {
			// The machine can sandbox unless a fresh probe says
			// otherwise (one that fails the same way does not).
			diag := Diagnose(context.Background(), bin, "")
			if diag.Ready() || diag.hostChanged() {
				return nil, &startFailure{line: line}
			}
			return nil, sandbox.NotStarted(b.unavailable(fmt.Errorf("%w: bwrap could not build the sandbox (%s); %s", sandbox.ErrUnavailable, line, diag.Summary())))
		}
		if st.childPid == 0 {
			// bwrap failed before it made the sandbox's pid 1: find out
			// why and name the fix.
			diag := Diagnose(context.Background(), bin, "")
			return nil, sandbox.NotStarted(b.unavailable(fmt.Errorf("%w: bwrap could not build the sandbox (exit status %d); %s", sandbox.ErrUnavailable, res.ExitCode, diag.Summary())))
		}
		// The sandbox's setup failed, or the command could not be
		// executed ("bwrap: execvp ..."): bwrap's message is on stderr and
		// its status is the result.
		b.log.Info("bwrap.sandbox.not_started", "exit_code", res.ExitCode, "child_pid", st.childPid)
	}
	lim, cg := sb.lim, sb.cg
	res.LimitHit = limitHit(res, memoryPerProcess(lim, cg), sb.tail)
	if cg.inside() {
		// Read whatever the status: a parent that outlives its killed
		// children exits 0, and the agent must still learn why they died.
		if n := cg.oomKills(); n > 0 {
			res.MemoryKills = n
			if res.ExitCode != 0 && !timedOut {
				res.LimitHit = sandbox.LimitCommandMemory
			}
			b.log.Info("bwrap.memcg.oom_kill", "kills", n, "memory_mb", lim.MemoryMB, "exit_code", res.ExitCode)
		}
	}
	b.log.Info("bwrap.sandbox.exited", "exit_code", res.ExitCode, "duration_ms", res.Duration.Milliseconds(), "timed_out", timedOut, "limit", res.LimitHit)
	return res, nil
}
