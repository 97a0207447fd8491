// Package reaper runs one command under a helper process of its own that
// is a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER, as containerd's
// shim and `tini -s` are): every process the command starts, whatever its
// session or process group (setsid, a double fork, a daemon), stays a
// descendant of the helper, because an orphan is re-parented to its
// nearest subreaper ancestor. So when the command ends, by its first
// process exiting or by a kill, the helper finds all of them in /proc and
// kills and reaps them: nothing of a command runs on after it, as nothing
// runs on after a bwrap sandbox whose pid namespace died with its command.
//
// The helper is a mode of corral's own executable (Mode, registered with
// reexec): the docker and kubernetes backends' agent and relay run every
// command through it in the container or pod (package inside), and the
// local backend on the host. It passes the command its standard
// descriptors and extra ones as they are, so output goes straight from the
// command to its reader, and talks to its starter over two pipes of its
// own: signals in, the command's pid and its exit status out.
package reaper

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/procfs"
	"github.com/corralhq/corral/reexec"
)

// Mode is the helper mode: `__corral-reap [--cpu SECONDS] --fds N --path PROGRAM -- ARGV...`,
// with the command's stdin, stdout and stderr as its own, its N extra
// descriptors at 3..3+N-1, the control pipe (signals in) at 3+N and the
// report pipe (JSON lines out) at 4+N. Start starts it.
const Mode = "__corral-reap"

func init() {
	// Its blocking calls are few (wait4, the control pipe's read, /proc):
	// fewer threads than the agent's, since every command has a reaper
	// and each thread counts against the sandbox's pids limit.
	reexec.Register(Mode, func(args []string) int { Harden(4, time.Millisecond); return reapMain(args) })
}

// report is one line of the report pipe: first the command's pid, or why
// it could not be started; last its exit status.
type report struct {
	Pid int `json:"pid,omitempty"`
	// StartError is why the program could not be started; NotExist
	// says that a path it needs does not exist (a shell's 127, else 126).
	StartError string `json:"start_error,omitempty"`
	NotExist   bool   `json:"not_exist,omitempty"`
	// Done is set on the last line: the command's first process exited
	// with Status, and every other process of the command is gone.
	Done   bool `json:"done,omitempty"`
	Status int  `json:"status,omitempty"` // a wait(2) status
	// Killed is how many processes were still running when the first
	// one ended, and were killed.
	Killed int `json:"killed,omitempty"`
}

// reapMain is Mode.
func reapMain(args []string) int {
	fl := flag.NewFlagSet(Mode, flag.ContinueOnError)
	nfds := fl.Int("fds", 0, "extra descriptors (3, 4, ...)")
	cpu := fl.Uint64("cpu", 0, "the command's RLIMIT_CPU, in seconds: soft, and hard a second more (Spec.CPUSeconds)")
	path := fl.String("path", "", "the program to run")
	if err := fl.Parse(args); err != nil || *path == "" || len(fl.Args()) == 0 || *nfds < 0 || *nfds > 64 {
		fmt.Fprintf(os.Stderr, "corral %s: usage: %s --fds N --path PROGRAM -- ARGV...\n", Mode, Mode)
		return 125
	}
	ctl := os.NewFile(uintptr(3+*nfds), "control")
	rep := os.NewFile(uintptr(4+*nfds), "report")
	if ctl == nil || rep == nil {
		return 125
	}
	// The command must not inherit them: it could forge a report or
	// keep the control pipe from ending.
	syscall.CloseOnExec(3 + *nfds)
	syscall.CloseOnExec(4 + *nfds)
	enc := json.NewEncoder(rep)
	// The command's $PPID is the reaper: a script's `kill $PPID` must not
	// end it and set the command's processes loose. Caught, not ignored:
	// an ignored signal would stay ignored in the command after exec.
	caught := make(chan os.Signal, 8)
	signal.Notify(caught, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM)
	go func() {
		for range caught {
		}
	}()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		_ = enc.Encode(report{StartError: "becoming a child subreaper: " + err.Error()})
		return 125
	}
	extra := make([]*os.File, *nfds)
	for i := range extra {
		extra[i] = os.NewFile(uintptr(3+i), "fd"+strconv.Itoa(3+i))
	}
	if *cpu > 0 {
		// The command inherits it and cannot raise it again; the
		// reaper's own CPU time is a few milliseconds.
		if err := setCPU(*cpu); err != nil {
			_ = enc.Encode(report{StartError: "holding the command's CPU time limit: " + err.Error()})
			return 125
		}
	}
	cmd := &exec.Cmd{
		Path: *path, Args: fl.Args(), Env: os.Environ(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: extra,
		// Its own session and process group, as a terminal's job would
		// have: the command's pid names both.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		_ = enc.Encode(report{StartError: err.Error(), NotExist: errors.Is(err, fs.ErrNotExist)})
		return 0
	}
	pid := cmd.Process.Pid
	// The command has its copies: the helper's own would keep its output
	// pipes from ending when the command's last process has gone.
	if null, err := os.Open(os.DevNull); err == nil {
		for fd := 0; fd < 3; fd++ {
			_ = unix.Dup2(int(null.Fd()), fd)
		}
		null.Close()
	}
	for _, f := range extra {
		f.Close()
	}
	_ = enc.Encode(report{Pid: pid})

	self := os.Getpid()
	var mu sync.Mutex // one signalling of the tree at a time
	go func() {
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			if n, err := strconv.Atoi(sc.Text()); err == nil && n > 0 && n < 65 {
				mu.Lock()
				signalTree(self, syscall.Signal(n))
				mu.Unlock()
			}
		}
		// The starter is gone (corral, the agent): nothing will end the
		// command or read its output any more.
		mu.Lock()
		signalTree(self, syscall.SIGKILL)
		mu.Unlock()
	}()
	// Reap every child, orphans re-parented here included (a zombie would
	// hold a pid of the sandbox's limit), until the command's first
	// process has exited.
	var status syscall.WaitStatus
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			// ECHILD: cannot be before the command's exit; be safe.
			break
		}
		if wpid == pid {
			status = ws
			break
		}
	}
	cmd.Process.Release()
	mu.Lock()
	killed := killAll(self)
	_ = enc.Encode(report{Done: true, Status: int(status), Killed: killed})
	return 0
}

// setCPU sets this process's RLIMIT_CPU to secs (soft) and secs+1
// (hard), never above the hard limit it has: SIGXCPU at secs, SIGKILL a
// second later (setrlimit(2)).
func setCPU(secs uint64) error {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_CPU, &r); err != nil {
		return err
	}
	h := cpuLimit(r, secs)
	return unix.Setrlimit(unix.RLIMIT_CPU, &h)
}

// cpuLimit is the RLIMIT_CPU to set for secs seconds where r holds: soft
// secs and hard secs+1, each at most r's hard limit (an unprivileged
// process cannot raise it). Pure.
func cpuLimit(r unix.Rlimit, secs uint64) unix.Rlimit {
	return unix.Rlimit{Cur: min(secs, r.Max), Max: min(secs+1, r.Max)}
}

// signalTree sends sig to every descendant of root.
func signalTree(root int, sig syscall.Signal) int {
	n := 0
	for _, p := range Descendants(root, Scan()) {
		if SignalProc(p, sig) {
			n++
		}
	}
	return n
}

// SignalProc sends sig to p if the process now at p.Pid is p (same start
// time): through a pidfd (pidfd_open(2), Linux 5.3), so a pid reused
// between the check and the signal cannot be hit. It reports whether the
// signal was sent.
func SignalProc(p Proc, sig syscall.Signal) bool {
	fd, err := unix.PidfdOpen(p.Pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false // gone
		}
		// No pidfds (an old kernel, or a seccomp profile that refuses
		// them: ENOSYS, EPERM): the check and the kill race a reuse of
		// the pid within microseconds.
		if st, ok := procfs.StartTime(p.Pid); !ok || st != p.Start {
			return false
		}
		return unix.Kill(p.Pid, sig) == nil
	}
	defer unix.Close(fd)
	if st, ok := procfs.StartTime(p.Pid); !ok || st != p.Start {
		return false
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}

// killAll kills every descendant of root (root being a child subreaper,
// that is every process its command started and has not ended) and reaps
// them, until root has no child left: a process forked while the kill
// went on is found by the next pass. It returns how many processes it
// killed in its first pass.
func killAll(root int) int {
	first := -1
	for {
		// No child left: as a subreaper, no descendant either.
		if !reapReady() {
			break
		}
		n := signalTree(root, syscall.SIGKILL)
		if first < 0 {
			first = n
		}
		if n == 0 {
			// Children that are ending already, or that /proc did not
			// show this time.
			time.Sleep(2 * time.Millisecond)
			continue
		}
		// One of those killed ends soon; reapReady takes the rest.
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); errors.Is(err, syscall.ECHILD) {
			break
		}
	}
	return max(first, 0)
}

// reapReady reaps every child that has exited and reports whether a
// child is left.
func reapReady() bool {
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return false // ECHILD
		case wpid == 0:
			return true // children, none exited yet
		}
	}
}

// Harden readies a long-lived helper for the commands it runs, which
// share its uid: it makes itself non-dumpable (prctl(2) PR_SET_DUMPABLE
// 0), so they can neither ptrace it nor open its /proc/PID/fd, mem or
// environ (a write to its pipes would forge what it reports); and it
// makes the Go runtime start the given number of OS threads up front, each
// blocked for hold at once (a thread the runtime then keeps and reuses),
// so that a command that exhausts the sandbox's pids limit does not leave
// the helper unable to make the thread a blocking call needs (the runtime
// cannot go on without it). hold delays the helper's start by as much.
func Harden(threads int, hold time.Duration) {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := unix.Timespec{Nsec: int64(hold)}
			_ = unix.Nanosleep(&ts, nil) // a blocking call: a thread of its own
		}()
	}
	wg.Wait()
}

// Spec is a command to run under the reaper.
type Spec struct {
	// Exe is an executable that serves Mode: corral's own
	// (os.Executable), or a test binary that calls reexec.Init.
	Exe string
	// Path is the program, resolved; Argv its arguments, Argv[0] first.
	Path string
	Argv []string
	// Env is the command's whole environment (the helper's too); Dir its
	// working directory ("" is the caller's).
	Env []string
	// CPUSeconds, when above 0, is the command's RLIMIT_CPU, set by the
	// helper before the command runs: soft at CPUSeconds, hard a second
	// more, from this value and never from the limits the starter holds
	// (reexec.CommandCPU gives it in a container whose helpers hold a
	// per-process CPU limit; a command may have raised the starter's
	// soft one).
	CPUSeconds uint64
	Dir        string
	// Stdin, Stdout, Stderr and ExtraFiles are the command's, as
	// exec.Cmd takes them (a non-file is copied through a pipe).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	ExtraFiles     []*os.File
	// WaitDelay is exec.Cmd's: how long Wait waits for the copying of a
	// non-file Stdout or Stderr once the helper has exited.
	WaitDelay time.Duration
}

// StartError is a command the reaper could not start (exec(2) failed:
// the program or its interpreter is missing, or cannot be run).
type StartError struct {
	Msg      string
	NotExist bool
}

func (e *StartError) Error() string { return e.Msg }

// Command is a command running under the reaper.
type Command struct {
	cmd    *exec.Cmd
	ctl    *os.File
	rep    *bufio.Reader
	repF   *os.File
	pid    int
	ctlMu  sync.Mutex
	waited bool
}

// Start starts s's helper and, through it, the command, and returns once
// the command runs; a command that could not be started is a
// *StartError (its helper has then exited). The helper kills the command
// when its control pipe ends: when the caller's process goes, however it
// goes.
func Start(s Spec) (*Command, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	args := []string{s.Exe, Mode}
	if s.CPUSeconds > 0 {
		args = append(args, "--cpu", strconv.FormatUint(s.CPUSeconds, 10))
	}
	args = append(args, "--fds", strconv.Itoa(len(s.ExtraFiles)), "--path", s.Path, "--")
	cmd := &exec.Cmd{
		Path: s.Exe, Args: append(args, s.Argv...), Env: s.Env, Dir: s.Dir,
		Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr,
		ExtraFiles: append(append([]*os.File(nil), s.ExtraFiles...), ctlR, repW),
		WaitDelay:  s.WaitDelay,
	}
	err = cmd.Start()
	ctlR.Close()
	repW.Close()
	if err != nil {
		ctlW.Close()
		repR.Close()
		return nil, fmt.Errorf("starting corral's reaper: %w", err)
	}
	p := &Command{cmd: cmd, ctl: ctlW, rep: bufio.NewReader(repR), repF: repR}
	r, err := p.next()
	switch {
	case err != nil:
		p.abandon()
		return nil, fmt.Errorf("corral's reaper: %w", err)
	case r.StartError != "":
		p.abandon()
		return nil, &StartError{Msg: r.StartError, NotExist: r.NotExist}
	}
	p.pid = r.Pid
	return p, nil
}

// next reads one report line.
func (p *Command) next() (report, error) {
	var r report
	line, err := p.rep.ReadBytes('\n')
	if err != nil {
		if err == io.EOF {
			err = errors.New("it ended without a report")
		}
		return r, err
	}
	return r, json.Unmarshal(line, &r)
}

// abandon ends a helper that will not be waited for.
func (p *Command) abandon() {
	p.ctl.Close()
	_ = p.cmd.Wait()
	p.repF.Close()
}

// Pid is the command's pid, which is also its session's and process
// group's id.
func (p *Command) Pid() int { return p.pid }

// HelperPid is the helper's pid: the outermost process of the command.
func (p *Command) HelperPid() int { return p.cmd.Process.Pid }

// Signal sends sig to every process of the command, whatever its session
// or process group. It only asks the helper: it starts no process, so it
// works when the command holds every pid the sandbox may have.
func (p *Command) Signal(sig syscall.Signal) error {
	p.ctlMu.Lock()
	defer p.ctlMu.Unlock()
	_, err := fmt.Fprintf(p.ctl, "%d\n", int(sig))
	return err
}

// Wait waits until the command's first process has exited and every
// other process of the command has been killed and reaped, and returns
// the first one's wait status and how many others had to be killed. An
// error says the helper itself failed (it was killed): the command's
// processes may then live on.
func (p *Command) Wait() (status syscall.WaitStatus, killed int, err error) {
	r, rerr := p.next()
	p.ctlMu.Lock()
	p.ctl.Close()
	p.ctlMu.Unlock()
	werr := p.cmd.Wait()
	p.repF.Close()
	if rerr == nil && !r.Done {
		rerr = errors.New("a report out of order")
	}
	if rerr != nil {
		if werr != nil {
			rerr = fmt.Errorf("%w (%v)", rerr, werr)
		}
		return 0, 0, fmt.Errorf("corral's reaper: %w", rerr)
	}
	return syscall.WaitStatus(r.Status), r.Killed, nil
}
