package forward

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	_ "github.com/corralhq/corral/internal/linuxonly" // Linux alone: say so elsewhere
)

// Exit statuses, the same as corral's CLI uses (package sandbox documents
// them; they follow docker run and POSIX shells). They are repeated here so
// that the forwarder, which runs inside the sandbox, depends on nothing
// but this package.
const (
	exitForwarderError = 125 // the forwarder or trampoline itself failed
	exitCannotInvoke   = 126 // CMD exists but cannot be executed
	exitNotFound       = 127 // CMD is not found
	exitSignalBase     = 128 // plus N for a command killed by signal N
)

// Mode arguments of corral's own executable. Package egress registers both
// with reexec, which main dispatches before anything else (before
// flag parsing, before starting goroutines that matter).
const (
	// ForwarderArg selects [ForwarderMain]. The sandbox is started with
	// argv "/path/to/corral ForwarderArg --http ... -- CMD ARGS...".
	ForwarderArg = "__corral-net-forward"

	// TrampolineArg selects [TrampolineMain]. ForwarderMain starts its
	// command as "/proc/self/exe TrampolineArg -- CMD ARGS...".
	TrampolineArg = "__corral-net-exec"
)

// selfExe is the forwarder's own executable, used to start the
// trampoline. /proc/self/exe names the running binary even if its path was
// replaced or is not visible under the same name.
const selfExe = "/proc/self/exe"

// forwardedSignals are passed on from the forwarder to its command.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// ForwarderMain is the entry point of the forwarder mode of corral's
// executable, run inside the sandbox. args are the arguments after
// [ForwarderArg]:
//
//	--http ADDR=SOCKET    relay loopback TCP ADDR to the Unix socket SOCKET
//	--socks ADDR=SOCKET   the same, for the SOCKS5 socket
//	--ready-fd N          after listening, write one line per listener,
//	                      "http 127.0.0.1:3128", to file descriptor N and
//	                      close it (useful with port 0)
//	--pass-fds N          pass descriptors 3 to 3+N-1 on to the command at
//	                      the same numbers (a caller's os/exec ExtraFiles,
//	                      such as a session's state pipe; the caller must
//	                      have opened all of them); default 0, at most 64
//	-- CMD ARGS...        the command to run
//	--serve               run no command: relay until standard input reaches
//	                      end of file (the caller's end of a pipe closes,
//	                      also when the caller dies) or SIGINT, SIGTERM or
//	                      SIGHUP arrives, then exit 0. For a long-lived
//	                      holder of a network namespace that commands join
//	                      (package backend/bwrap); --pass-fds and a command
//	                      are refused with it
//
// --http and --socks may be given more than once or not at all; both only
// name the relay in --ready-fd lines, the relaying is the same ([Forward]).
// ADDR must be a loopback address.
//
// It makes the process non-dumpable (prctl PR_SET_DUMPABLE 0), so the
// command, running as the same user, can neither ptrace it nor open its
// /proc/PID/mem, environ or fd entries. It marks every inherited file
// descriptor above 2 close-on-exec, starts the listeners, then runs the
// command through the trampoline ([TrampolineMain]) with the same
// standard input, output, error and environment, and only those three
// descriptors plus the --pass-fds ones. SIGINT, SIGTERM, SIGHUP and SIGQUIT received by the
// forwarder are sent on to the command. The command is killed (SIGKILL) if
// the forwarder dies. When the command ends, the listeners and every
// relayed connection are closed.
//
// It returns the exit status for os.Exit: the command's status, 128+N if
// the command was killed by signal N, 126 or 127 from the trampoline when
// CMD cannot be run or is not found, and 125 when the forwarder itself
// fails (bad arguments, a listener that cannot be opened). Errors are
// written to standard error prefixed "corral-net:".
func ForwarderMain(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "corral-net: "+format+"\n", a...)
		return exitForwarderError
	}
	fs := flag.NewFlagSet("corral-net", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var relays []relaySpec
	fs.Func("http", "relay `ADDR=SOCKET` (HTTP proxy)", relayFlag("http", &relays))
	fs.Func("socks", "relay `ADDR=SOCKET` (SOCKS5 proxy)", relayFlag("socks", &relays))
	readyFD := fs.Int("ready-fd", -1, "write the listening addresses to file descriptor `N`, then close it")
	passFDs := fs.Int("pass-fds", 0, "pass descriptors 3 to 3+`N`-1 on to the command")
	serve := fs.Bool("serve", false, "run no command: relay until standard input ends or a signal arrives")
	if err := fs.Parse(args); err != nil {
		return exitForwarderError
	}
	cmdArgs := fs.Args()
	if *serve && (len(cmdArgs) > 0 || *passFDs > 0) {
		return fail("--serve runs no command: drop the command and --pass-fds")
	}
	if *readyFD >= 0 && *readyFD < 3 {
		return fail("--ready-fd %d: standard input, output and error belong to the command", *readyFD)
	}
	if *passFDs < 0 || *passFDs > 64 {
		return fail("--pass-fds %d: want 0 to 64", *passFDs)
	}
	if *readyFD >= 3 && *readyFD < 3+*passFDs {
		return fail("--ready-fd %d is one of the --pass-fds descriptors", *readyFD)
	}
	if len(cmdArgs) == 0 && !*serve {
		return fail("no command given (usage: --http ADDR=SOCKET ... -- CMD ARGS..., or --serve)")
	}

	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail("prctl(PR_SET_DUMPABLE): %v", err)
	}
	if err := closeExecFrom(3); err != nil {
		return fail("marking inherited descriptors close-on-exec: %v", err)
	}
	passed := make([]*os.File, *passFDs)
	for i := range passed {
		fd := 3 + i
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return fail("--pass-fds: descriptor %d: %v", fd, err)
		}
		passed[i] = os.NewFile(uintptr(fd), fmt.Sprintf("fd%d", fd))
	}

	fwds := make([]*Forwarder, 0, len(relays))
	closeAll := func() {
		for _, f := range fwds {
			_ = f.Close()
		}
	}
	for _, r := range relays {
		f, err := ListenForward(r.addr, r.socket)
		if err != nil {
			closeAll()
			return fail("%s relay: %v", r.name, err)
		}
		fwds = append(fwds, f)
	}
	if *readyFD >= 0 {
		if err := writeReady(*readyFD, relays, fwds); err != nil {
			closeAll()
			return fail("--ready-fd %d: %v", *readyFD, err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	var serving sync.WaitGroup
	for _, f := range fwds {
		serving.Go(func() { _ = f.Serve(ctx) })
	}
	stopRelays := func() {
		cancel()
		serving.Wait()
	}

	if *serve {
		return serveUntilEOF(stopRelays)
	}

	// Pdeathsig is delivered when the thread that started the child ends,
	// so that thread must stay ours until the child has been waited for.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	cmd := exec.Command(selfExe, append([]string{TrampolineArg, "--"}, cmdArgs...)...)
	cmd.Args[0] = cmdArgs[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = passed
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Start()
	for _, f := range passed {
		// The command has its copies; ours must not hold a pipe open.
		_ = f.Close()
	}
	if err != nil {
		stopRelays()
		fmt.Fprintf(os.Stderr, "corral-net: starting %s: %v\n", cmdArgs[0], err)
		return exitCannotInvoke
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var waitErr error
loop:
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case waitErr = <-waited:
			break loop
		}
	}
	stopRelays()
	return exitStatus(cmd.ProcessState, waitErr)
}

// serveUntilEOF is ForwarderMain's --serve mode once the relays run: it
// returns 0 after standard input reaches end of file (or fails) or one of
// SIGINT, SIGTERM, SIGHUP arrives, having stopped the relays.
func serveUntilEOF(stopRelays func()) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-sigs:
	}
	stopRelays()
	return 0
}

// exitStatus turns the end of the command into a status for os.Exit.
func exitStatus(ps *os.ProcessState, err error) int {
	if ps == nil {
		fmt.Fprintf(os.Stderr, "corral-net: waiting for the command: %v\n", err)
		return exitForwarderError
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ps.ExitCode()
}

// relaySpec is one --http or --socks flag.
type relaySpec struct {
	name, addr, socket string
}

func relayFlag(name string, out *[]relaySpec) func(string) error {
	return func(v string) error {
		addr, socket, ok := strings.Cut(v, "=")
		if !ok || addr == "" || socket == "" {
			return fmt.Errorf("want ADDR=SOCKET, got %q", v)
		}
		*out = append(*out, relaySpec{name: name, addr: addr, socket: socket})
		return nil
	}
}

// writeReady writes "NAME ADDR" lines to descriptor fd and closes it.
func writeReady(fd int, relays []relaySpec, fwds []*Forwarder) error {
	f := os.NewFile(uintptr(fd), "ready-fd")
	if f == nil {
		return errors.New("invalid descriptor")
	}
	var b strings.Builder
	for i, r := range relays {
		fmt.Fprintf(&b, "%s %s\n", r.name, fwds[i].Addr())
	}
	_, err := io.WriteString(f, b.String())
	return errors.Join(err, f.Close())
}

// closeExecFrom sets FD_CLOEXEC on every descriptor >= from, so that
// descriptors the forwarder inherited (from bwrap or its caller) do not
// leak into the command (compare runc's CVE-2024-21626 fix). It uses
// close_range(2) with CLOSE_RANGE_CLOEXEC (Linux 5.11) and falls back to
// walking /proc/self/fd.
func closeExecFrom(from int) error {
	if err := unix.CloseRange(uint(from), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < from {
			continue
		}
		// The descriptor of the directory listing itself is closed by
		// now; EBADF for it is expected.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return err
		}
	}
	return nil
}

// TrampolineMain is the entry point of the trampoline mode of corral's
// executable: the short-lived process between the forwarder and the
// sandboxed command. args are the arguments after [TrampolineArg]: an
// optional "--", then CMD and its arguments.
//
// It looks CMD up in the PATH of its environment (as a shell would; a name
// containing '/' is used as is), then calls install, if not nil, and then
// replaces itself with CMD by execve(2), keeping the environment. install
// is where corral applies restrictions meant for the command but not for
// the forwarder, such as a seccomp filter refusing new AF_UNIX sockets:
// because the trampoline is a separate process started after the
// forwarder's listeners, nothing install does reaches the forwarder, which
// keeps dialling the proxy sockets. TrampolineMain locks itself to one OS
// thread, so a filter that install attaches to the calling thread (seccomp
// without SECCOMP_FILTER_FLAG_TSYNC, PR_SET_NO_NEW_PRIVS) is the one
// execve carries into CMD.
//
// It returns only on failure, with the status for os.Exit: 127 if CMD is
// not found, 126 if it cannot be executed, 125 if install fails (the
// command is then not run at all) or no command is given. Errors are
// written to standard error prefixed "corral-net:".
func TrampolineMain(args []string, install func() error) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "corral-net: trampoline: no command given")
		return exitForwarderError
	}
	runtime.LockOSThread()
	path := args[0]
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil && !errors.Is(err, exec.ErrDot) {
			fmt.Fprintf(os.Stderr, "corral-net: %s: command not found\n", path)
			return exitNotFound
		}
		path = p
	}
	if install != nil {
		if err := install(); err != nil {
			fmt.Fprintf(os.Stderr, "corral-net: restricting the command: %v\n", err)
			return exitForwarderError
		}
	}
	err := syscall.Exec(path, args, os.Environ())
	fmt.Fprintf(os.Stderr, "corral-net: %s: %v\n", args[0], err)
	if errors.Is(err, syscall.ENOENT) {
		return exitNotFound
	}
	return exitCannotInvoke
}
