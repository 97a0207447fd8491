package agentclient

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/sandbox"
)

// Command is a running command: on an agent (Stream), or in an exec of
// its own through inside.ModeRelay (the docker backend's relay).
type Command interface {
	// StartedC delivers the command's process group once it runs.
	StartedC() <-chan int
	// FinishedC is closed when the command's output and report are in.
	FinishedC() <-chan struct{}
	// Signal signals every process of the command, whatever its session
	// (the reaper it runs under finds them).
	Signal(sig syscall.Signal) error
	// Result is the exit report, or why there is none.
	Result() (*inside.Exit, error)
}

// WaitOptions are what Wait needs of the backend.
type WaitOptions struct {
	// KillGrace is the time between SIGTERM and SIGKILL.
	KillGrace time.Duration
	// Fallback signals process group pgid by other means (a helper process
	// of its own) when the command's stream is stuck; nil: none.
	Fallback func(pgid int, sig syscall.Signal)
	// OOM reports whether the sandbox's memory limit killed a process,
	// asked when the command died of SIGKILL that corral did not send and
	// the helper could not read the cgroup's count; nil: unknown.
	OOM func() bool
	// OOMLimit is the Result.LimitHit of a memory kill
	// (sandbox.LimitContainerMemory).
	OOMLimit string
	// Stuck ends the whole sandbox (the container, the pod) when the
	// command has not ended StuckAfter after its SIGKILL: corral's helper
	// in it no longer answers (a command stopped it with SIGSTOP, or it
	// hangs), so nothing else will end what it runs. nil: Wait goes on
	// waiting.
	Stuck func(why string)
	// StuckAfter is that time; zero means DefaultStuckAfter.
	StuckAfter time.Duration
}

// DefaultStuckAfter is how long Wait waits for a killed command's report
// before it calls WaitOptions.Stuck: a SIGKILL takes effect at once, and
// its report is one frame on a live stream, so this is only a bound on
// a helper that stopped answering, with room for a machine under load.
const DefaultStuckAfter = 30 * time.Second

// Wait waits for s, ending its process group on ctx cancellation, the
// request's timeout or a second signal of req.Signals: SIGTERM, then
// SIGKILL after the grace time. Signals travel on the command's stream (so
// ending a command needs no new process in the sandbox: a fork bomb that
// holds every pid cannot stop it); when that stream is stuck,
// o.Fallback sends them. start is when the command was started.
func Wait(ctx context.Context, req *sandbox.Request, s Command, start time.Time, o WaitOptions) (*sandbox.Result, error) {
	var timeoutC <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	var (
		timedOut, killing bool
		pgid              int
		graceC, stuckC    <-chan time.Time
	)
	started := s.StartedC()
	send := func(sig syscall.Signal) {
		if s.Signal(sig) != nil && pgid != 0 && o.Fallback != nil {
			o.Fallback(pgid, sig)
		}
	}
	kill := func() {
		if !killing {
			killing = true
			send(syscall.SIGTERM)
			graceC = time.After(o.KillGrace)
		}
	}
	sigs := req.Signals
	ctxDone := ctx.Done()
	signalled := 0
wait:
	for {
		select {
		case <-s.FinishedC():
			break wait
		case pgid = <-started:
			started = nil
			if req.OnStart != nil {
				req.OnStart(0) // the agent runs it; no host process of ours
			}
		case <-timeoutC:
			timedOut = true
			timeoutC = nil
			kill()
		case <-ctxDone:
			ctxDone = nil
			kill()
		case <-graceC:
			graceC = nil
			send(syscall.SIGKILL)
			if o.Stuck != nil {
				after := o.StuckAfter
				if after <= 0 {
					after = DefaultStuckAfter
				}
				stuckC = time.After(after)
			}
		case <-stuckC:
			why := "corral's helper in the sandbox did not report the command's end after it was killed (stopped or hung), so the whole sandbox was ended"
			o.Stuck(why)
			return nil, fmt.Errorf("%w: %s", sandbox.ErrMayHaveRun, why)
		case sg := <-sigs:
			signalled++
			if ss, ok := sg.(syscall.Signal); ok && signalled == 1 {
				send(ss)
				continue
			}
			sigs = nil
			kill()
		}
	}
	ex, err := s.Result()
	if err != nil {
		return nil, err
	}
	res := &sandbox.Result{Duration: time.Since(start), TimedOut: timedOut, ExitCode: ex.Code, Signal: ex.Signal}
	if ex.Leftover > 0 && !killing {
		res.Warnings = append(res.Warnings, sandbox.LeftoverNote(ex.Leftover))
	}
	switch {
	case killing:
		// corral ended it (timeout, cancel): not the memory limit.
	case ex.OOM:
		// Whatever the top process's status: a shell that outlives its
		// killed children exits 137 or 0 by itself, and the agent must
		// still learn why they died (as bwrap's memory cgroup reports).
		res.MemoryKills, res.MemoryLimit = max(int(ex.OOMKills), 1), o.OOMLimit
		if res.ExitCode != 0 && !timedOut {
			res.LimitHit = o.OOMLimit
		}
	case ex.Signal == int(syscall.SIGKILL) && !ex.OOMKnown && o.OOM != nil && o.OOM():
		res.LimitHit = o.OOMLimit
	}
	return res, nil
}
