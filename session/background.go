package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// Limits of background output, per process.
const (
	// bgMemory is how much output is kept in memory before it spills to
	// a file in the session's bg directory; past bgFileCap the oldest
	// bytes beyond the file are dropped and only the newest bgMemory bytes
	// are kept.
	bgMemory  = 256 << 10
	bgFileCap = 64 << 20
	// bgChunk is the most one Output call returns.
	bgChunk = 64 << 10
	// bgGrace is how long a finished process's output stays readable after
	// it was read to the end; bgMaxFinished bounds how many finished
	// processes are kept at all.
	bgGrace       = 10 * time.Minute
	bgMaxFinished = 64
)

// StartRequest is a background command.
type StartRequest struct {
	// Command is a shell command line run by bash in the sandbox.
	Command string
	// Workdir, when set, is where it starts (absolute, or relative to the
	// session's cwd).
	Workdir string
	// Timeout ends it; zero means it runs until it exits or is killed.
	Timeout time.Duration
	// Spec, when set, is the session's Spec as its caller resolved it for
	// this command (see ExecRequest.Spec); nil resolves it.
	Spec *Spec
}

// Process is a background command of a session.
type Process struct {
	// ID names the process within its session ("bg-1").
	ID string
	// Command is what was started.
	Command string
	// Started is when it started.
	Started time.Time

	cancel context.CancelFunc
	done   chan struct{}
	out    *spool

	mu       sync.Mutex
	result   *sandbox.Result
	err      error
	ended    time.Time
	readDone time.Time // when the output was first read to the end after exit
	hostPID  int       // the sandbox's outermost host process, once started (recordSandbox)
}

// Chunk is what Output returns.
type Chunk struct {
	// Data is the output from Offset to Next, as valid UTF-8.
	Data string
	// Offset is where Data starts; it is past the requested offset when
	// older bytes were dropped (Skipped says how many).
	Offset, Next, Skipped int64
	// SkippedReason says why the Skipped bytes were dropped: output past
	// 64 MiB, or the disk holding corral's session state full or nearly
	// so (a reserve of max(16 MiB, 5% of that filesystem) is kept free).
	SkippedReason string
	// Running is false once the process has exited; ExitCode is then its
	// status (128+N for signal N, 124 when its timeout ended it:
	// sandbox.ExitStatus).
	Running  bool
	ExitCode int
	// TimedOut, LimitHit and Error describe how it ended, when it did.
	TimedOut bool
	LimitHit string
	Error    string
	// InvalidUTF8 is set when bytes that are not UTF-8 were replaced.
	InvalidUTF8 bool
	// MayHaveRun is set with Error when the process was started and
	// corral lost track of it (sandbox.ErrMayHaveRun): it may have run,
	// in part or whole; when unset, Error means it never started.
	MayHaveRun bool
}

// ProcessInfo describes a background process for List.
type ProcessInfo struct {
	ID       string    `json:"id"`
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Running  bool      `json:"running"`
	ExitCode int       `json:"exit_code"`
	Bytes    int64     `json:"bytes"`
}

// bgWrapper runs a background command ($1) in the directory $2 names, when
// it names one (as the foreground wrapper does), and else where the
// sandbox starts.
const bgWrapper = `__corral_dir=$2; ` + restoreStartEnv +
	`[[ $__corral_dir == "~" || $__corral_dir == "~/"* ]] && __corral_dir=$HOME${__corral_dir:1}; ` +
	`if [[ -n $__corral_dir ]] && ! builtin cd -- "$__corral_dir" 2>/dev/null; then ` +
	`builtin printf 'corral: the directory %s does not exist in the sandbox, or cannot be entered; nothing was run\n' "$__corral_dir" >&2; builtin exit 126; fi; ` +
	`builtin unset __corral_dir; builtin eval "$1"`

// Start runs req.Command in its own sandbox in the background and returns
// at once. The process lives until it exits, is killed, or the session (or
// the process holding the Manager) ends; with bwrap, the sandbox dies with
// corral even on SIGKILL (bwrap's --die-with-parent and Pdeathsig). Where
// the session's sandbox keeps its background processes
// (sandbox.BackgroundBackend: kubernetes scope cluster) it runs there
// instead, detached: it outlives this corral and its Session, any corral
// serving the session reads and kills it, it ends with the sandbox, and
// the Process returned has no Done (ask Output).
func (s *Session) Start(req StartRequest) (*Process, error) {
	if strings.TrimSpace(req.Command) == "" || strings.IndexByte(req.Command, 0) >= 0 {
		return nil, fmt.Errorf("%w: empty command or NUL byte in it", sandbox.ErrBadRequest)
	}
	sp, err := s.m.specFor(s.name, req.Spec)
	if err != nil {
		return nil, err
	}
	st, err := s.startState(sp)
	if err != nil {
		return nil, err
	}
	dir := st.Cwd
	if req.Workdir != "" {
		dir = req.Workdir
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(st.Cwd, dir)
		}
	}
	if bb := homeBackground(sp); bb != nil {
		return s.startHome(bb, sp, st, dir, req)
	}
	s.pmu.Lock()
	if s.closed {
		s.pmu.Unlock()
		return nil, ErrClosed
	}
	s.reapLocked()
	s.nextID++
	id := fmt.Sprintf("bg-%d", s.nextID)
	s.pmu.Unlock()

	// Held shared until the sandbox exists: corral apply (LockDir) waits
	// for it, then sees the process among the layer's users.
	releaseStart, err := lockShared(filepath.Join(s.dir, startLockName))
	if err != nil {
		return nil, err
	}
	started := sync.OnceFunc(releaseStart)
	ctx, cancel := context.WithCancel(context.Background())
	p := &Process{ID: id, Command: req.Command, Started: time.Now(), cancel: cancel, done: make(chan struct{}),
		out: newSpool(filepath.Join(s.dir, "bg", id+".log"))}
	// Background commands do not change the session's cwd or variables.
	// A directory the caller named must be the one the command runs in:
	// the backends start one that is gone in its nearest parent.
	want := ""
	if req.Workdir != "" {
		want = dir
	}
	sreq := s.request(sp, st, dir, bashArgv(bgWrapper, req.Command, want), req.Timeout)
	sreq.Env = shieldStartEnv(sreq.Env, sp.Policy)
	sreq.Stdout, sreq.Stderr = p.out, p.out
	sreq.OnStart = func(pid int) {
		s.recordSandbox(p, pid)
		started()
	}
	s.pmu.Lock()
	s.procs[id] = p
	s.pmu.Unlock()
	var began atomic.Bool
	sreq.OnStart = onStarted(sreq.OnStart, &began)
	go func() {
		res, err := sp.Backend.Run(ctx, sreq)
		err = mayHaveRun(err, began.Load())
		started()
		_ = os.Remove(s.sandboxFile(id))
		p.mu.Lock()
		p.result, p.err, p.ended = res, err, time.Now()
		p.mu.Unlock()
		close(p.done)
		code := -1
		if res != nil {
			code = sandbox.ExitStatus(res)
		}
		s.m.log.Info("session.background.exited", "session", s.name, "id", id, "exit_code", code)
	}()
	s.m.log.Info("session.background.started", "session", s.name, "id", id)
	// Listed with its backend, profile and working directory even when
	// it runs nothing in the foreground (corral sessions list).
	if err := s.saveMeta(sp); err != nil {
		s.m.log.Warn("session.meta.save_failed", "session", s.name, "error", err)
	}
	if len(sp.Ports) > 0 && !sp.Profile.HostNetwork() {
		if pb, ok := sp.Backend.(sandbox.PortBackend); ok {
			go s.autoForwardBackend(p, sp.Ports, pb, sreq)
		} else {
			go s.autoForward(p, sp.Ports)
		}
	}
	return p, nil
}

// Output returns the output of background process id from byte offset on
// (at most 64 KiB; call again from Next for more), and whether it still
// runs. A process that has ended is reported as ended on the first poll
// after it ended; its output stays readable until read to the end and then
// for a grace period.
func (s *Session) Output(id string, offset int64) (*Chunk, error) {
	p, err := s.proc(id)
	if err != nil {
		if sp, bb := s.homeSpec(); bb != nil {
			return s.outputHome(bb, sp, id, offset)
		}
		return nil, err
	}
	// Decide "running" before reading, so the data of an ended process is
	// complete when it is reported as ended.
	var running bool
	select {
	case <-p.done:
	default:
		running = true
	}
	r := p.out.chunk(offset, bgChunk, running)
	text, invalid, _ := sanitize(r.data)
	c := &Chunk{Data: text, Offset: r.start, Next: r.next, Skipped: r.skipped, SkippedReason: r.reason, Running: running, InvalidUTF8: invalid}
	if !running {
		p.mu.Lock()
		if p.result != nil {
			c.ExitCode, c.TimedOut, c.LimitHit = sandbox.ExitStatus(p.result), p.result.TimedOut, p.result.LimitHit
		}
		if p.err != nil {
			c.Error, c.ExitCode = p.err.Error(), sandbox.ExitCorralError
			c.MayHaveRun = errors.Is(p.err, sandbox.ErrMayHaveRun)
		}
		if r.next >= p.out.size() && p.readDone.IsZero() {
			p.readDone = time.Now()
		}
		p.mu.Unlock()
	}
	return c, nil
}

// Done is closed once the process has ended; never for a process kept in
// the session's sandbox (Start).
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill ends background process id and its whole process tree (the
// sandbox's pid namespace) and waits until it is gone, so a port it held is
// free when Kill returns.
func (s *Session) Kill(id string) error {
	p, err := s.proc(id)
	if err != nil {
		if sp, bb := s.homeSpec(); bb != nil {
			return s.killHome(bb, sp, id)
		}
		return err
	}
	p.cancel()
	<-p.done
	return nil
}

// List returns the session's background processes, oldest first: this
// corral's, and those kept in the session's sandbox when it is the
// session's home (sandbox.BackgroundBackend; one that cannot be listed
// is left out, with a session.background.list_failed event).
func (s *Session) List() []ProcessInfo {
	out := s.listHome()
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.reapLocked()
	for _, p := range s.procs {
		in := ProcessInfo{ID: p.ID, Command: p.Command, Started: p.Started, Running: true, Bytes: p.out.size()}
		select {
		case <-p.done:
			in.Running = false
			p.mu.Lock()
			if p.result != nil {
				in.ExitCode = sandbox.ExitStatus(p.result)
			}
			p.mu.Unlock()
		default:
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// Close kills every background process of the session that this corral
// holds and waits for them (those kept in the session's sandbox stay).
// The session's state stays on disk; a closed Session refuses new work.
func (s *Session) Close() {
	s.pmu.Lock()
	s.closed = true
	procs := make([]*Process, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	attached := s.attached
	s.attached = nil
	forwards := s.forwards
	s.forwards = nil
	s.pmu.Unlock()
	// Forwards first: they end with the session, before their targets.
	for _, f := range forwards {
		_ = f.Close()
	}
	for _, c := range attached {
		_ = c.Close()
	}
	for _, p := range procs {
		p.cancel()
	}
	for _, p := range procs {
		<-p.done
		p.out.remove()
	}
	s.pmu.Lock()
	rel := s.releasers
	s.releasers = nil
	s.pmu.Unlock()
	for _, b := range rel {
		b.Release(s.name)
	}
}

func (s *Session) proc(id string) (*Process, error) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	p, ok := s.procs[id]
	if !ok {
		return nil, fmt.Errorf("%w: no background process %q in session %q (it may have been cleaned up after its output was read)", sandbox.ErrBadRequest, id, s.name)
	}
	return p, nil
}

// reapLocked forgets finished processes whose output was read to the end
// more than bgGrace ago, and the oldest finished ones beyond bgMaxFinished.
func (s *Session) reapLocked() {
	var finished []*Process
	for id, p := range s.procs {
		select {
		case <-p.done:
		default:
			continue
		}
		p.mu.Lock()
		expired := !p.readDone.IsZero() && time.Since(p.readDone) > bgGrace
		p.mu.Unlock()
		if expired {
			delete(s.procs, id)
			p.out.remove()
			continue
		}
		finished = append(finished, p)
	}
	if len(finished) > bgMaxFinished {
		sort.Slice(finished, func(i, j int) bool { return finished[i].ended.Before(finished[j].ended) })
		for _, p := range finished[:len(finished)-bgMaxFinished] {
			delete(s.procs, p.ID)
			p.out.remove()
		}
	}
}
