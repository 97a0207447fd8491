package inside

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/reaper"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/seccomp"
)

// drainGrace is how long the relay keeps reading the command's output
// after the command and its process group are gone: a process that left
// the group (a daemon) may hold the pipes open forever.
const drainGrace = 200 * time.Millisecond

// relayMain is `__corral-relay [--fds N] [--control] [--merged] -- ARGV...`. It runs
// ARGV in a new session with the relay's environment, and writes frames on
// stdout: KindStarted with the process group, then the command's stdout
// (KindStdout), stderr (KindStderr) and descriptors 3..3+N-1 (kinds 3...)
// as they come, and KindExit last. When the command exits, everything else
// it started is killed, whatever its session (runCommand's reaper; a
// sandbox on the bwrap backend ends with its command too). The relay's own
// exit status is the command's.
//
// With --control the relay's stdin is a stream of frames from corral:
// KindStdin and KindStdinEOF feed the command's stdin, KindSignal signals
// every process of it. The end of that stream means corral is gone (it
// exited or the connection to the engine broke): the command is killed, as
// --die-with-parent does on bwrap. Without --control the command reads
// the relay's stdin itself.
func relayMain(args []string) int {
	fs := flag.NewFlagSet(ModeRelay, flag.ContinueOnError)
	nfds := fs.Int("fds", 0, "extra output descriptors (3, 4, ...)")
	pidfile := fs.String("tty-pidfile", "", "terminal mode: write the pid here and exec ARGV")
	control := fs.Bool("control", false, "stdin is corral's control stream (stdin data, signals)")
	merged := fs.Bool("merged", false, "one pipe for the command's stdout and stderr, relayed as stdout")
	denyUnix := fs.Bool("deny-unix", false, "load corral's syscall filter with AF_UNIX sockets denied first")
	if err := fs.Parse(args); err != nil {
		return fail(ModeRelay, err)
	}
	argv := fs.Args()
	if len(argv) == 0 || *nfds < 0 || *nfds > 8 {
		return fail(ModeRelay, errors.New("usage: __corral-relay [--fds N | --tty-pidfile FILE] -- ARGV..."))
	}
	if *denyUnix {
		if err := seccomp.Install(seccomp.Options{DenyUnixSockets: true}); err != nil {
			return fail(ModeRelay, fmt.Errorf("loading the syscall filter: %w", err))
		}
	}
	if *pidfile != "" {
		return execTTY(*pidfile, argv)
	}
	becomeSubreaper()
	out := &frameWriter{w: os.Stdout}
	ex := run(argv, *nfds, *control, *merged, out)
	b, _ := json.Marshal(ex)
	if err := out.frame(KindExit, b); err != nil {
		return 125
	}
	return ex.Code
}

// frameWriter serializes frames from several goroutines.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) frame(kind byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return WriteFrame(f.w, kind, p)
}

// run starts argv and relays it to out; it returns the exit report.
func run(argv []string, nfds int, control, merged bool, out *frameWriter) Exit {
	stdin := os.Stdin
	var stdinW *os.File
	if control {
		r, w, err := os.Pipe()
		if err != nil {
			return Exit{Code: 125, Error: err.Error()}
		}
		stdin, stdinW = r, w
	}
	spec := command{Argv: argv, Env: os.Environ(), NFDs: nfds, Merged: merged, Stdin: stdin}
	return runCommand(spec, out.frame, func(pgid int, signal func(syscall.Signal)) {
		if control {
			stdin.Close() // the command has its copy
			go readControl(os.Stdin, stdinW, signal)
		}
	})
}

// command is one command for runCommand.
type command struct {
	Argv []string
	Env  []string // the whole environment; PATH in it finds Argv[0]
	Dir  string   // "" is the helper's own
	NFDs int      // extra output descriptors 3, 4, ...
	// Merged: stdout and stderr are one pipe, relayed as KindStdout, so
	// their order is the order the command wrote them.
	Merged bool
	// Stdin is the command's stdin (nil: /dev/null); runCommand does not
	// close it.
	Stdin *os.File
}

// runCommand starts c in a new session under corral's reaper
// (internal/reaper: a child subreaper of its own, so that every process
// the command starts stays its descendant whatever its session), reports
// its process group with KindStarted through emit, relays its output as
// frames through emit, calls started once it runs with a function that
// signals every process of the command, and returns its exit report once
// its first process has exited, every other one has been killed and
// reaped, and its output is drained.
func runCommand(c command, emit func(kind byte, p []byte) error, started func(pgid int, signal func(syscall.Signal))) Exit {
	path, err := lookPathIn(c.Argv[0], c.Env)
	if err != nil {
		// A path that does not exist is "not found" too (127, as a
		// shell says it); one that exists but cannot be run is 126.
		code := 127
		if !errors.Is(err, exec.ErrNotFound) && !errors.Is(err, fs.ErrNotExist) {
			code = 126
		}
		msg := fmt.Sprintf("%s: %v", c.Argv[0], err)
		_ = emit(KindStderr, []byte("corral: "+msg+"\n"))
		return Exit{Code: code, Error: msg}
	}
	exe, err := selfExe()
	if err != nil {
		return Exit{Code: 125, Error: err.Error()}
	}
	// Pipes for stdout, stderr and the extra descriptors: the read ends
	// stay here, the write ends go to the command.
	n := 2 + c.NFDs
	readers := make([]*os.File, n)
	writers := make([]*os.File, n)
	for i := range n {
		if i == 1 && c.Merged {
			continue // stderr shares stdout's pipe
		}
		r, w, err := os.Pipe()
		if err != nil {
			for k := range i {
				readers[k].Close()
				writers[k].Close()
			}
			return Exit{Code: 125, Error: err.Error()}
		}
		readers[i], writers[i] = r, w
	}
	if c.Merged {
		writers[1] = writers[0] // one descriptor: os/exec gives it as both 1 and 2
	}
	dir, moved := existingDir(c.Dir)
	if moved {
		// The session's directory is gone (deleted, or made in an earlier
		// pod or container whose workspace did not outlive it): start in
		// the nearest directory above it that exists, as bwrap does, and
		// say so; the session then records where the command ended.
		_ = emit(KindStderr, []byte(fmt.Sprintf("corral: %s no longer exists; starting in %s\n", c.Dir, dir)))
	}
	spec := reaper.Spec{
		CPUSeconds: reexec.CommandCPU(),
		Exe:        exe, Path: path, Argv: c.Argv, Env: c.Env, Dir: dir,
		Stdout: writers[0], Stderr: writers[1], ExtraFiles: writers[2:],
	}
	if c.Stdin != nil {
		spec.Stdin = c.Stdin // a nil *os.File would be a non-nil Reader
	}
	oomBefore, oomKnown := oomKills()
	// Registered before a sweep can see it (sweepOrphans).
	reapersMu.Lock()
	p, err := reaper.Start(spec)
	if err == nil {
		if reapers == nil {
			reapers = map[int]bool{}
		}
		reapers[p.HelperPid()] = true
	}
	reapersMu.Unlock()
	for _, w := range writers {
		if w != nil {
			w.Close()
		}
	}
	if err != nil {
		for _, r := range readers {
			if r != nil {
				r.Close()
			}
		}
		var se *reaper.StartError
		if !errors.As(err, &se) {
			// The reaper may have started the command before it was
			// killed: what it started was re-parented here.
			sweepOrphans()
			return Exit{Code: 125, Error: err.Error()}
		}
		msg := fmt.Sprintf("%s: %v", c.Argv[0], se.Msg)
		_ = emit(KindStderr, []byte("corral: "+msg+"\n"))
		code := 126
		if se.NotExist {
			code = 127 // the directory, or the program's interpreter
		}
		return Exit{Code: code, Error: msg}
	}
	pgid := p.Pid()
	_ = emit(KindStarted, []byte(strconv.Itoa(pgid)))
	if started != nil {
		started(pgid, func(sig syscall.Signal) {
			if p.Signal(sig) != nil {
				// The reaper is gone (killed): its session at least.
				KillSession(pgid, sig)
			}
		})
	}

	var wg sync.WaitGroup
	for i, r := range readers {
		if r == nil {
			continue // merged stderr
		}
		kind := byte(i + 1) // 1 stdout, 2 stderr, 3... extra descriptors
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for {
				k, err := r.Read(buf)
				if k > 0 {
					if emit(kind, buf[:k]) != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	ws, leftover, werr := p.Wait()
	reapersMu.Lock()
	delete(reapers, p.HelperPid())
	reapersMu.Unlock()
	if werr != nil {
		// The reaper did not see the command out (the command killed
		// it): end its session, and what was re-parented here.
		KillSession(pgid, syscall.SIGKILL)
		sweepOrphans()
	}
	// Everything of the command is gone, so its pipes end; a process
	// that got hold of one otherwise (another command's) must not hold
	// the report.
	deadline := time.Now().Add(drainGrace)
	for _, r := range readers {
		if r != nil {
			_ = r.SetReadDeadline(deadline)
		}
	}
	wg.Wait()
	for _, r := range readers {
		if r != nil {
			r.Close()
		}
	}

	ex := Exit{Code: 0, Leftover: leftover}
	switch {
	case werr != nil:
		ex.Code = 125
		ex.Error = werr.Error()
	case ws.Signaled():
		ex.Signal = int(ws.Signal())
		ex.Code = 128 + ex.Signal
	default:
		ex.Code = ws.ExitStatus()
	}
	if after, ok := oomKills(); ok && oomKnown {
		ex.OOMKnown = true
		ex.OOM = after > oomBefore
		ex.OOMKills = max(after-oomBefore, 0)
	}
	return ex
}

// selfExe is the helper's own executable, which serves the reaper's mode
// (corral's, or a test binary's that calls reexec.Init). A readlink of
// /proc/self/exe per command; nothing made at init.
func selfExe() (string, error) { return os.Executable() }

// lookPathIn finds name as a shell would with the PATH of env (not the
// helper's own): a name with a slash is taken as it is.
func lookPathIn(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		st, err := os.Stat(name)
		if err != nil {
			return "", err
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fs.ErrPermission
		}
		return name, nil
	}
	pathEnv := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for dir := range strings.SplitSeq(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// oomKills returns the number of processes the container's memory cgroup
// has killed: oom_kill in memory.events (cgroup v2, cgroup namespaces give
// the container its own at /sys/fs/cgroup) or in memory.oom_control (cgroup
// v1, Linux 4.13+).
func oomKills() (int64, bool) {
	for _, f := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err == nil {
					return n, true
				}
			}
		}
	}
	return 0, false
}

// execTTY is the terminal mode: on a terminal (docker exec with a TTY, where
// the exec'd process leads its own session with the terminal as its
// controlling one) the relay writes its pid, which is that session's id,
// to pidfile, so `__corral-kill SIG @pidfile` can end the session later,
// and replaces itself with argv. There are no frames: the terminal carries
// the bytes as they are.
func execTTY(pidfile string, argv []string) int {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral: %s: %v\n", argv[0], err)
		return 127
	}
	if err := os.MkdirAll(filepath.Dir(pidfile), 0o700); err != nil {
		return fail(ModeRelay, err)
	}
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return fail(ModeRelay, err)
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "corral: %s: %v\n", argv[0], err)
	return 126
}

// readControl reads corral's control frames until the stream ends, then
// kills the command (signal: every process of it). Stdin bytes are written by another
// goroutine, so a command that does not read its stdin delays signals only
// once 256 chunks are queued.
func readControl(r io.Reader, stdinW *os.File, signal func(syscall.Signal)) {
	chunks := make(chan []byte, 256)
	go func() {
		for c := range chunks {
			if c == nil {
				break
			}
			if _, err := stdinW.Write(c); err != nil {
				break
			}
		}
		stdinW.Close()
		for range chunks { // drain
		}
	}()
	closed := false
	closeStdin := func() {
		if !closed {
			closed = true
			chunks <- nil
			close(chunks)
		}
	}
	buf := make([]byte, MaxFrame)
	for {
		kind, p, err := ReadFrame(r, buf)
		if err != nil {
			closeStdin()
			// corral is gone: nothing will read the output or end the
			// command any more.
			signal(syscall.SIGKILL)
			return
		}
		switch kind {
		case KindStdin:
			if !closed {
				chunks <- append([]byte(nil), p...)
			}
		case KindStdinEOF:
			closeStdin()
		case KindSignal:
			if n, err := strconv.Atoi(string(p)); err == nil && n > 0 && n < 65 {
				signal(syscall.Signal(n))
			}
		}
	}
}

// existingDir returns dir when it is a directory, else its nearest
// ancestor that is one (moved true); "" stays "" (the helper's own).
func existingDir(dir string) (string, bool) {
	if dir == "" {
		return "", false
	}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d, d != filepath.Clean(dir)
		}
		if d == "/" {
			return "/", true
		}
	}
}
