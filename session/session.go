package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/portfwd"
	"github.com/corralhq/corral/sandbox"
)

// Session is one named shell-like context. Its foreground commands run one
// after another; it is safe for concurrent use.
type Session struct {
	name string
	dir  string
	m    *Manager

	mu sync.Mutex // serializes foreground commands within the process

	pmu      sync.Mutex
	procs    map[string]*Process
	nextID   int
	closed   bool
	attached map[string]io.Closer
	// releasers are the session backends (docker) the session's commands
	// ran on, told when the session closes (sandbox.SessionBackend).
	releasers map[string]sandbox.SessionBackend
	// forwards are the session's port forwards (ForwardPort), closed with
	// it.
	forwards []*portfwd.Forward
	// fwdMu makes autoForward's look for an existing forward and its
	// start of a new one one step.
	fwdMu sync.Mutex
	// stateMemo and metaMemo keep state.json and meta.json as last read
	// (readJSONMemo).
	stateMemo memo[State]
	metaMemo  memo[Meta]
}

// Name returns the session's name.
func (s *Session) Name() string { return s.name }

// Dir returns the session's directory under corral's state directory.
func (s *Session) Dir() string { return s.dir }

// ScratchDir returns the session's scratch directory (TMPDIR inside the
// sandbox; kept between commands).
func (s *Session) ScratchDir() string { return filepath.Join(s.dir, "scratch") }

// Spec returns how the session's commands run now (the resolver's answer,
// as each command gets it), without reading the session's state. Errors
// are the resolver's.
func (s *Session) Spec() (*Spec, error) { return s.m.spec(s.name) }

// LayerDir returns the session's review layer (package layer), used when
// its Spec has Review set.
func (s *Session) LayerDir() string { return filepath.Join(s.dir, "layer") }

// CacheDir returns the session's own tool cache directory (tool_caches:
// session; Spec.SessionCache), beside the scratch directory rather than in
// it: a command could replace a directory inside its scratch directory with
// a symlink, and the next command would bind what it points at.
func (s *Session) CacheDir() string { return filepath.Join(s.dir, "cache") }

// NonInteractiveEnv are set in a new session unless the caller's
// environment sets them, so that pagers, editors, credential prompts and
// package installers never wait for a person. A command can change them
// with export like any variable.
var NonInteractiveEnv = []string{
	"PAGER=cat", "GIT_PAGER=cat", "GIT_EDITOR=true", "GIT_TERMINAL_PROMPT=0",
	"DEBIAN_FRONTEND=noninteractive",
}

// ExecRequest is one foreground command.
type ExecRequest struct {
	// Command is a shell command line, run by bash in the sandbox.
	Command string
	// Timeout ends the command's whole sandbox; zero means the Spec's.
	Timeout time.Duration
	// Stdin is the command's standard input; nil means /dev/null, so a
	// command that reads stdin never hangs.
	Stdin []byte
	// StdinReader, when set, is used instead of Stdin (the CLI passes its
	// own standard input).
	StdinReader io.Reader
	// Workdir, when set, is where this one command starts (absolute, or
	// relative to the session's cwd); the session's cwd still follows any
	// cd the command makes.
	Workdir string
	// Stdout and Stderr, when set, receive the output as it comes (the
	// CLI); otherwise it is captured, interleaved in order, for the result.
	Stdout, Stderr io.Writer
	// Signals, when set, carries a person's ^C to the command (see
	// sandbox.Request.Signals). One that comes while the command still
	// waits for its turn ends it there, without running
	// (*WaitCancelledError).
	Signals <-chan os.Signal
	// Progress, when set, receives reports of slow preparation (an image
	// pull, a container start; see sandbox.Request.Progress).
	Progress func(msg string)
	// Spec, when set, is the session's Spec as its caller resolved it for
	// this command (the MCP server, which read the approval policy and
	// the default timeout from it): the command runs under it, and the
	// settings are not resolved again. Nil resolves them.
	Spec *Spec
}

// ExecResult is what became of a foreground command.
type ExecResult struct {
	// ExitCode is the shell's exit status (128+N for signal N), or
	// sandbox.ExitTimedOut (124) when the timeout ended it
	// (sandbox.ExitStatus).
	ExitCode int
	// PipeStatus is the status of each member of the command's last
	// pipeline (bash's PIPESTATUS), when the shell got that far.
	PipeStatus []int
	// Output is the interleaved stdout and stderr (empty when streamed).
	Output Output
	// Duration is the wall-clock time the command ran.
	Duration time.Duration
	// TimedOut is set when the timeout ended the command; Timeout is the
	// limit that applied.
	TimedOut bool
	Timeout  time.Duration
	// Cwd is the session's directory after the command.
	Cwd string
	// LimitHit names a resource limit that ended the command ("cpu",
	// "memory", "procs"); LimitMessage says it in words.
	LimitHit, LimitMessage string
	// Notes are things to tell the caller (a vanished cwd, a skipped bind).
	Notes []string
	// Denials say, for a command that failed, how it hit the sandbox's
	// wall as its output shows (hostview.ExplainDenials): at most three.
	Denials []hostview.Denial
}

// startMagic is written by the wrapper as soon as the shell runs.
const startMagic = "corral-started\x00"

// noDirMagic is written by the wrapper instead of startMagic when the
// directory a command was asked to start in (ExecRequest.Workdir, $2)
// cannot be entered in the sandbox: the command is not run. The backends
// start a sandbox whose directory is gone in its nearest parent, which
// suits the session's own cwd (removed behind it) but not a directory
// the caller named: a mistyped workdir ran `rm *.txt` one level up.
const noDirMagic = "corral-nodir"

// stateMagic starts what the wrapper writes on the state descriptor.
const stateMagic = "corral-state-2"

// maxStatePipe is how much of the state pipe (cwd, exported variables,
// pipe status) a command's shell may write, in bytes; a larger state is
// drained and not kept.
const maxStatePipe = 8 << 20

// wrapper is the bash program every foreground command runs in. $1 is the
// command line. Descriptor 3 is a pipe to corral: on exit the shell writes
// its status, the last pipeline's statuses and its cwd there,
// NUL-separated, then its exported variables as `declare -px` prints them
// (parseDeclared; a NUL after them when declare failed, `enable -n
// declare`, which makes the record unreadable rather than empty), using
// builtins only: one builtin, where a loop over every variable's name
// cost 1.3 ms of a 9.6 ms session command. It runs with LC_ALL=C for that
// builtin alone (the exported LC_ALL is printed as it is): in a locale
// whose multibyte characters may end in a backslash byte (GBK, Big5,
// Shift JIS; a command can bring one with LOCPATH) bash quotes by
// character, and a value ending in such a character read, byte by byte,
// as an escaped quote, so the record failed to parse and the command's
// state was lost. A read-only LC_ALL, which the assignment would abort
// on, is left as it is. The
// command line is run by eval with one more line appended that records
// PIPESTATUS. Needs bash 4.4 or later. It is one line:
// bash numbers an error's line in the eval'd text from the eval's own line
// ("bash: line 3: x: command not found" for the command's third line), so
// the eval must stand on line 1 for the numbers to be the command's.
const wrapper = `__corral_cmd=$1 __corral_dir=$2; builtin set --; ` +
	`builtin exec {__corral_fd}>&3 3>&-; ` +
	restoreStartEnv +
	`[[ $__corral_dir == "~" || $__corral_dir == "~/"* ]] && __corral_dir=$HOME${__corral_dir:1}; ` +
	`if [[ -n $__corral_dir ]] && ! builtin cd -- "$__corral_dir" 2>/dev/null; then builtin printf '` + noDirMagic + `\0' >&"$__corral_fd"; builtin exit 126; fi; ` +
	`builtin printf 'corral-started\0' >&"$__corral_fd"; ` +
	`__corral_save() { ` +
	`builtin local s=$?; ` +
	`{ builtin printf '\0` + stateMagic + `\0%s\0%s\0%s\0' "$s" "${__corral_ps-}" "$PWD"; ` +
	`if [[ ${LC_ALL@a} == *r* ]]; then builtin declare -px; else LC_ALL=C builtin declare -px; fi || builtin printf '\0'; ` +
	`} >&"$__corral_fd" 2>/dev/null; ` +
	`builtin return $s; }; ` +
	`builtin trap __corral_save EXIT; ` +
	`builtin eval "$__corral_cmd"$'\n''__corral_ps="${PIPESTATUS[*]}" __corral_rc=$?'; ` +
	`builtin exit "${__corral_rc:-$?}"`

// startEnvPrefix renames, in the environment a session's shell starts
// with, the variables that act on that shell itself before its first
// line (shieldStartEnv); restoreStartEnv, the wrapper's first step, puts
// them back under their own names, so the command and its children see
// them as they were exported.
const startEnvPrefix = "__corral_env_"

// restoreStartEnv exports each variable renamed by shieldStartEnv under
// its own name, without forking (${!prefix@} lists the names).
const restoreStartEnv = `for __corral_n in ${!` + startEnvPrefix + `@}; do ` +
	`builtin export "${__corral_n#` + startEnvPrefix + `}=${!__corral_n}"; builtin unset "$__corral_n"; done; ` +
	`builtin unset __corral_n; `

// startsShell reports whether the variable called name acts on a shell
// before the wrapper's first line runs: the dynamic loader's (LD_*: ld.so(8),
// GLIBC_TUNABLES) and bash's start-up files and compatibility level (bash(1),
// INVOCATION: BASH_ENV, ENV; BASH_COMPAT). A command that exported one
// (LD_PRELOAD of a library that exits, BASH_ENV naming a script that
// does) stopped the session's every later shell before it could save a
// change, and so wedged the session for good.
func startsShell(name string) bool {
	switch name {
	case "BASH_ENV", "ENV", "BASH_COMPAT", "GLIBC_TUNABLES":
		return true
	}
	return strings.HasPrefix(name, "LD_")
}

// shieldStartEnv returns env with the variables startsShell names renamed
// to startEnvPrefix+NAME, for a shell that runs the wrapper (which
// restores them), unless the policy's environment rules withhold them
// (DefaultEnvDeny and EnvDeny name them, EnvAllow does not): those stay
// as they are, for the backend to withhold under their own names
// (hostview.FilterEnvPolicy).
func shieldStartEnv(env []string, pol sandbox.Policy) []string {
	deny, allow := append(slices.Clone(hostview.DefaultEnvDeny), pol.EnvDeny...), pol.EnvAllow
	var out []string
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !startsShell(name) || hostview.EnvDenied(name, deny) && !hostview.EnvDenied(name, allow) {
			continue
		}
		if out == nil {
			out = slices.Clone(env)
		}
		out[i] = startEnvPrefix + kv
	}
	if out == nil {
		return env
	}
	return out
}

// bashArgv returns the argv that runs script with argument arg. $0 is
// "bash", as in a plain `bash -c`: bash then prints a command's errors as
// "bash: x: command not found", where another $0 adds the line of
// corral's wrapper ("corral: line 12: ..."), which is not the user's.
func bashArgv(script string, args ...string) []string {
	return append([]string{"/bin/bash", "--noprofile", "--norc", "-c", script, "bash"}, args...)
}

// Exec runs req.Command in a new sandbox with the session's cwd and
// environment, and records the cwd and environment it leaves behind. A
// non-zero exit is a result, not an error: errors mean the command could
// not be run (policy refusal, bad request). The session's foreground
// commands run one at a time; one that waits for its turn ends at once,
// without running, when ctx ends or a signal comes on req.Signals: the
// error is then a *WaitCancelledError (ErrCancelledWaiting).
func (s *Session) Exec(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	if strings.IndexByte(req.Command, 0) >= 0 {
		return nil, fmt.Errorf("%w: the command contains a NUL byte", sandbox.ErrBadRequest)
	}
	if strings.TrimSpace(req.Command) == "" {
		return nil, fmt.Errorf("%w: empty command", sandbox.ErrBadRequest)
	}
	sp, err := s.m.specFor(s.name, req.Spec)
	if err != nil {
		return nil, err
	}
	// One foreground command at a time: in this process, then across
	// processes; a command called off while it waits never runs.
	release, err := s.takeTurn(ctx, req.Signals)
	if err != nil {
		return nil, err
	}
	defer release()

	// A session whose home is its sandbox (sandbox.TurnBackend) takes its
	// turn there too, across corral processes on any machine, and its
	// state comes from there.
	turn, err := s.sandboxTurn(ctx, sp, req.Command)
	if err != nil {
		return nil, err
	}
	var st *State
	if turn != nil {
		defer func() { s.endTurn(turn, st) }()
	}
	st, err = s.loadStateFrom(sp, turn)
	if err != nil {
		return nil, err
	}
	moved := st.notes
	if turn != nil && turn.Interrupted != "" {
		moved = append(moved, interruptedNote(turn.Interrupted))
		s.m.log.Warn("session.turn.interrupted", "session", s.name, "marker", turn.Interrupted)
	}
	if st.moved {
		moved = append(moved, "the working directory changed to "+sp.Workdir+"; the session starts there")
	}
	dir := st.Cwd
	if req.Workdir != "" {
		dir = req.Workdir
		if !filepath.IsAbs(dir) && !strings.HasPrefix(dir, "~") {
			dir = filepath.Join(st.Cwd, dir)
		}
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = sp.Timeout
	}
	stateR, stateW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating state pipe: %w", err)
	}
	defer stateR.Close()
	stateC := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(stateR, maxStatePipe))
		if len(b) == maxStatePipe {
			// A state past the limit: drain the rest so the wrapper does
			// not block on a full pipe. (Below it, ReadAll stopped at the
			// end; a copy would only take a 32 KiB buffer per command.)
			_, _ = io.Copy(io.Discard, stateR)
		}
		stateC <- b
	}()

	// A directory the caller named must be the one the command runs in
	// (the wrapper checks it in the sandbox).
	want := ""
	if req.Workdir != "" {
		want = dir
	}
	sreq := s.request(sp, st, dir, bashArgv(wrapper, req.Command, want), timeout)
	sreq.Env = shieldStartEnv(sreq.Env, sp.Policy)
	var began atomic.Bool
	sreq.ExtraFiles = []*os.File{stateW}
	sreq.Signals = req.Signals
	sreq.Progress = req.Progress
	var capt *capture
	// The end of the output, for the reasons a failed command hit the
	// sandbox's wall.
	last := &tail.Buffer{}
	if sandbox.SameWriter(req.Stdout, req.Stderr) {
		// One writer stays one writer (one pipe: the order written).
		w := teeTo(req.Stdout, last)
		sreq.Stdout, sreq.Stderr = w, w
	} else if req.Stdout != nil || req.Stderr != nil {
		sreq.Stdout, sreq.Stderr = teeTo(req.Stdout, last), teeTo(req.Stderr, last)
	} else {
		limit := sp.OutputLimit
		if limit <= 0 {
			limit = 64 << 10
		}
		capt = newCapture(limit)
		sreq.Stdout, sreq.Stderr = capt, capt
	}
	switch {
	case req.StdinReader != nil:
		sreq.Stdin = req.StdinReader
	case req.Stdin != nil:
		sreq.Stdin = bytes.NewReader(req.Stdin)
	}
	sreq.OnStart = onStarted(sreq.OnStart, &began)
	res, runErr := sp.Backend.Run(ctx, sreq)
	stateW.Close()
	raw := <-stateC
	stateTooLarge := len(raw) >= maxStatePipe
	if runErr != nil {
		err := mayHaveRun(runErr, began.Load() || bytes.HasPrefix(raw, []byte(startMagic)))
		if capt != nil && errors.Is(err, sandbox.ErrMayHaveRun) {
			// What it wrote before the sandbox was lost is kept with
			// the error (a killed docker container dropped it).
			if o := capt.result(); o.Text != "" {
				return nil, &OutputError{Err: err, Output: o.Text}
			}
		}
		return nil, err
	}
	out := &ExecResult{
		ExitCode: sandbox.ExitStatus(res), Duration: res.Duration, TimedOut: res.TimedOut, Timeout: timeout,
		LimitHit: res.LimitHit, LimitMessage: sandbox.LimitMessage(res, sp.Limits),
		Notes: append(moved, res.Warnings...), Cwd: st.Cwd,
	}
	if capt != nil {
		out.Output = capt.result()
		last.Write([]byte(out.Output.Text))
	}
	if res.ExitCode != 0 && !res.TimedOut {
		out.Denials = hostview.ExplainDenials(last.String(), hostview.DenialContextFor(sreq, sp.Backend, sandbox.TraitsOf(sp.Backend).HostPaths))
	}
	if bytes.HasPrefix(raw, []byte(noDirMagic+"\x00")) {
		return nil, fmt.Errorf("%w: the directory %s does not exist in the sandbox, or cannot be entered; nothing was run", sandbox.ErrBadRequest, dir)
	}
	started := bytes.HasPrefix(raw, []byte(startMagic))
	raw = bytes.TrimPrefix(raw, []byte(startMagic))
	if !started && !res.TimedOut && ctx.Err() == nil && res.Signal > 0 {
		// A signal (a person's ^C, which the backend passes on) ended
		// the sandbox before the shell began: the shell writes
		// startMagic before anything of the command, and all it wrote is
		// in raw, so nothing of the command ran.
		s.m.log.Info("session.start.signalled", "session", s.name, "signal", res.Signal)
		return nil, &WaitCancelledError{Signal: syscall.Signal(res.Signal), AtStart: true}
	}
	if !started && !res.TimedOut && ctx.Err() == nil {
		// The shell never ran: bwrap failed while building the sandbox
		// (its message is in the output).
		msg := strings.TrimSpace(out.Output.Text)
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", res.ExitCode)
		}
		return nil, fmt.Errorf("%w: the sandbox could not be set up: %s", sandbox.ErrUnavailable, msg)
	}
	if next, ps, notes, ok := parseState(raw); ok {
		out.PipeStatus = ps
		out.Notes = append(out.Notes, notes...)
		before := *st
		if req.Workdir == "" || next.Cwd != filepath.Clean(dir) {
			st.Cwd = next.Cwd
		}
		st.Env = next.Env
		st.Workdir = sp.Workdir
		if st.clean && st.Cwd == before.Cwd && st.Workdir == before.Workdir && slices.Equal(st.Env, before.Env) {
			// What the file holds already (most commands): no encoding, no
			// write; meta.json's last use is still recorded.
			if err := s.saveMeta(sp); err != nil {
				s.m.log.Warn("session.meta.save_failed", "session", s.name, "error", err)
			}
		} else if err := s.saveState(st, sp); err != nil {
			// The command ran: say so, with what was not kept.
			s.m.log.Warn("session.state.save_failed", "session", s.name, "error", err)
			out.Notes = append(out.Notes, fmt.Sprintf("the command ran, but the session's cwd and variables could not be saved (%v): the next command starts as this one did", err))
		}
	} else {
		if !res.TimedOut && ctx.Err() == nil {
			if stateTooLarge {
				out.Notes = append(out.Notes, fmt.Sprintf("the shell's exported variables came to more than %d MiB, more than a session keeps; cwd and variables are unchanged (unset or shorten the large ones)", maxStatePipe>>20))
			} else {
				out.Notes = append(out.Notes, "the shell ended without saving its state (killed, or the command replaced the shell with exec); cwd and variables are unchanged")
			}
		}
		// It ran all the same (timed out, killed): the session is
		// listed from now on (Meta.Ran).
		if err := s.saveMeta(sp); err != nil {
			s.m.log.Warn("session.meta.save_failed", "session", s.name, "error", err)
		}
	}
	out.Cwd = st.Cwd
	return out, nil
}

// OutputError is Exec's error for a command that may have run
// (sandbox.ErrMayHaveRun) and wrote output before its sandbox was lost:
// Output is what it wrote (cut to the output limit as a result's is), so
// that nothing it produced is dropped without a note.
type OutputError struct {
	Err    error
	Output string
}

func (e *OutputError) Error() string { return e.Err.Error() }
func (e *OutputError) Unwrap() error { return e.Err }

// request builds the sandbox request for argv in the session.
func (s *Session) request(sp *Spec, st *State, dir string, argv []string, timeout time.Duration) *sandbox.Request {
	policy := sp.Env
	if policy == nil {
		policy = os.Environ()
	}
	r := &sandbox.Request{
		Argv:       argv,
		Env:        st.Env,
		PolicyEnv:  policy,
		Policy:     sp.Policy,
		Dir:        dir,
		ScratchDir: s.ScratchDir(),
		Timeout:    timeout,
		Session:    s.name,
	}
	if sb, ok := sp.Backend.(sandbox.SessionBackend); ok {
		s.pmu.Lock()
		if s.releasers == nil {
			s.releasers = map[string]sandbox.SessionBackend{}
		}
		s.releasers[sb.Name()] = sb
		s.pmu.Unlock()
	}
	if sp.SessionHome {
		home := filepath.Join(s.dir, "home")
		_ = os.MkdirAll(home, 0o700)
		r.HomeDir = home
	}
	if sp.Review {
		r.LayerDir = s.LayerDir()
	}
	switch {
	case sp.SessionCache:
		r.CacheDir = s.CacheDir()
	case sp.CacheDir != "":
		r.CacheDir = sp.CacheDir
	}
	if r.CacheDir != "" {
		// A failure shows when the backend looks for it.
		_ = os.MkdirAll(r.CacheDir, 0o700)
	}
	return r
}

// loadState reads the session's state, or makes the initial one.
func (s *Session) loadState(sp *Spec) (*State, error) { return s.loadStateFrom(sp, nil) }

// loadStateFrom is loadState from the state saved in the session's
// sandbox when turn has one (its home: sandbox.TurnBackend), else from
// the session's directory, which is then a cache of it (the first
// command in a new pod, a state there that cannot be read).
func (s *Session) loadStateFrom(sp *Spec, turn *sandbox.SessionTurn) (*State, error) {
	var st State
	path := filepath.Join(s.dir, "state.json")
	var raw []byte
	var err error
	var early []string
	if turn != nil && turn.State != nil {
		raw = turn.State
		if jerr := json.Unmarshal(raw, &st); jerr != nil {
			err = fmt.Errorf("%w: the state saved in the session's sandbox: %w", errDamaged, jerr)
		}
	} else {
		if turn != nil && turn.StateError != "" {
			early = append(early, fmt.Sprintf("the session's state saved in its sandbox could not be read (%s); this command starts from this corral's copy", trimNote(turn.StateError)))
		}
		raw, err = readJSONMemo(&s.stateMemo, path, &st, cloneState)
	}
	if err == nil && filepath.IsAbs(st.Cwd) {
		st.saved = raw
		if turn != nil && turn.State != nil {
			// The host's copy is not these bytes: a change is written
			// to it too (saveState).
			st.saved = nil
		}
		cleanCwd := st.Cwd == filepath.Clean(st.Cwd)
		st.Cwd = filepath.Clean(st.Cwd)
		// The same bounds as when it was saved: a state file written by
		// hand or another version must not wedge the session (a variable
		// execve(2) refuses fails every command).
		read := len(st.Env)
		st.Env, st.notes = keepEnv(st.Env)
		st.notes = append(early, st.notes...)
		// Moved to another working directory (the cwd setting or --cwd
		// changed): start there, keeping the variables.
		if st.Workdir != "" && sp.Workdir != "" && st.Workdir != sp.Workdir {
			st.Cwd, st.Workdir = sp.Workdir, sp.Workdir
			st.moved = true
		}
		// The file holds exactly this state only if nothing was dropped
		// or moved, and the cwd was already clean.
		st.clean = len(st.Env) == read && !st.moved && cleanCwd
		if st.saved == nil && st.clean {
			// From the sandbox: this corral's copy is written too when
			// it differs, for a pod that starts afresh (lost, idle).
			var host State
			hraw, _ := readJSONMemo(&s.stateMemo, path, &host, cloneState)
			st.clean = bytes.Equal(hraw, raw)
		}
		return &st, nil
	}
	notes := early
	switch {
	case err == nil, errors.Is(err, os.ErrNotExist):
	case errors.Is(err, errDamaged) && turn != nil && turn.State != nil:
		// The sandbox's copy is replaced at the end of this turn; the
		// host's file is not the damaged one.
		s.m.log.Warn("session.state.damaged", "session", s.name, "error", err, "where", "sandbox")
		notes = append(notes, fmt.Sprintf("the session's state saved in its sandbox was damaged (%v); the session starts afresh in %s", err, orWorkdir(sp.Workdir)))
	case errors.Is(err, errDamaged):
		// Kept aside for a person to look at, never read again; an
		// earlier damaged copy is kept too.
		aside := path + ".damaged"
		for i := 1; i < 1000; i++ {
			if _, err := os.Lstat(aside); errors.Is(err, os.ErrNotExist) {
				break
			}
			aside = fmt.Sprintf("%s.damaged.%d", path, i)
		}
		if rerr := os.Rename(path, aside); rerr != nil {
			return nil, fmt.Errorf("%w: %w; and it could not be moved aside: %w", ErrStateUnreadable, err, rerr)
		}
		s.m.log.Warn("session.state.damaged", "session", s.name, "error", err, "moved_to", aside)
		notes = append(notes, fmt.Sprintf("the session's saved state was damaged (%v); it was moved to %s and the session starts afresh in %s", err, aside, orWorkdir(sp.Workdir)))
	default:
		return nil, fmt.Errorf("%w: %w", ErrStateUnreadable, err)
	}
	st = State{notes: notes}
	env := sp.Env
	if env == nil {
		env = os.Environ()
	}
	st.Env = hostview.FilterEnv(env, nil)
	for _, kv := range NonInteractiveEnv {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := hostview.LookupEnv(st.Env, k); !ok {
			st.Env = append(st.Env, kv)
		}
	}
	st.Cwd, st.Workdir = sp.Workdir, sp.Workdir
	if st.Cwd == "" {
		st.Cwd = sp.Backend.DefaultCwd()
	}
	return &st, nil
}

func (s *Session) saveState(st *State, sp *Spec) error {
	if err := writeState(filepath.Join(s.dir, "state.json"), st); err != nil {
		return fmt.Errorf("saving session state: %w", err)
	}
	return s.saveMeta(sp)
}

// Record records in the session's metadata that a program started in its
// sandbox now, on sp's backend (see saveMeta), so that the session is
// listed (Info.Listed) although none of its shell commands ran: corral exec
// --create, which makes the session, records it once its program starts.
// Errors are the metadata's write's.
func (s *Session) Record(sp *Spec) error { return s.saveMeta(sp) }

// saveMeta records in meta.json that the session ran a command (in the
// foreground or the background) now, with sp's backend, profile and
// working directory, for corral sessions list.
func (s *Session) saveMeta(sp *Spec) error {
	var meta Meta
	_, _ = readJSONMemo(&s.metaMemo, filepath.Join(s.dir, "meta.json"), &meta, func(m Meta) Meta { return m })
	if meta.Name == "" {
		meta = Meta{Name: s.name, Created: time.Now()}
	}
	tr := sandbox.TraitsOf(sp.Backend)
	fresh := time.Since(meta.LastUsed) < time.Minute
	if fresh && meta.Backend == sp.Backend.Name() && meta.Profile == string(sp.Profile) && meta.Workdir == sp.Workdir &&
		meta.Unsandboxed == tr.Unsandboxed && meta.HostPaths == tr.HostPaths {
		return nil // last-used is kept to the minute; spare a write per command
	}
	meta.LastUsed = time.Now()
	meta.Unsandboxed, meta.HostPaths = tr.Unsandboxed, tr.HostPaths
	meta.Backend = sp.Backend.Name()
	meta.Profile = string(sp.Profile)
	meta.Workdir = sp.Workdir
	return writeJSON(filepath.Join(s.dir, "meta.json"), meta)
}

// cloneState copies st's variables, which loadState's caller changes.
func cloneState(st State) State {
	st.Env = slices.Clone(st.Env)
	st.notes = slices.Clone(st.notes)
	return st
}

// dropEnv reports whether name is a shell-managed variable that must not
// carry over.
func dropEnv(name string) bool { return name == "_" || name == "SHLVL" || name == "PWD" }

// shellOptsEnv reports whether name is one of bash's read-only option
// variables (bash(1), SHELLOPTS, BASHOPTS): exported, a shell starts with
// the options it lists (noexec: it runs nothing, so the session could
// never save again), and it cannot be put back after the start as
// startsShell's are. It is not kept, with a note.
func shellOptsEnv(name string) bool { return name == "SHELLOPTS" || name == "BASHOPTS" }

// Bounds of the saved environment: larger variables could not be passed to
// the next command (execve(2) refuses a string over MAX_ARG_STRLEN, 128 KiB)
// and would wedge the session.
const (
	maxVarBytes = 64 << 10
	maxEnvBytes = 1 << 20
)

// parseState parses what the wrapper wrote on the state descriptor. It is
// data from inside the sandbox: the last record is taken (a command can
// write a forged one earlier, not after the shell's own), and only an
// absolute cwd and variables with valid names (no exported functions,
// BASH_FUNC_*) within the size bounds are kept; the notes say what was
// dropped.
func parseState(b []byte) (st State, pipe []int, notes []string, ok bool) {
	// The wrapper's record starts with a NUL, so a cwd or a command's
	// output that merely holds the magic ("/x/corral-state-2") is not one.
	i := bytes.LastIndex(b, []byte("\x00"+stateMagic+"\x00"))
	if i < 0 {
		return st, nil, nil, false
	}
	i++
	fields := strings.SplitN(string(b[i:]), "\x00", 5)
	if len(fields) < 5 {
		return st, nil, nil, false
	}
	for _, f := range strings.Fields(fields[2]) {
		n, err := strconv.Atoi(f)
		if err != nil {
			pipe = nil
			break
		}
		pipe = append(pipe, n)
	}
	st.Cwd = fields[3]
	if !filepath.IsAbs(st.Cwd) {
		return st, nil, nil, false
	}
	st.Cwd = filepath.Clean(st.Cwd)
	env, ok := parseDeclared(fields[4])
	if !ok {
		return st, nil, nil, false
	}
	st.Env, notes = keepEnv(env)
	return st, pipe, notes, true
}

// keepEnv returns the variables of env ("KEY=value") that carry over to
// the next command: valid names, not shell-managed ones, within
// maxVarBytes each and maxEnvBytes in all; notes say what was dropped
// for size.
func keepEnv(env []string) (kept, notes []string) {
	total := 0
	for _, kv := range env {
		name, _, found := strings.Cut(kv, "=")
		if !found || dropEnv(name) || !validName(name) {
			continue
		}
		if shellOptsEnv(name) {
			notes = append(notes, fmt.Sprintf("variable %s was not kept for the next command: bash takes its options from it at start-up, before the session's own shell runs (set them in each command instead)", name))
			continue
		}
		if len(kv) > maxVarBytes {
			notes = append(notes, fmt.Sprintf("variable %s (%d bytes) was not kept for the next command: variables over %d bytes are dropped", name, len(kv), maxVarBytes))
			continue
		}
		if total+len(kv) > maxEnvBytes {
			notes = append(notes, fmt.Sprintf("variable %s was not kept: the exported variables exceed %d bytes in all", name, maxEnvBytes))
			continue
		}
		total += len(kv)
		kept = append(kept, kv)
	}
	return kept, notes
}

// orWorkdir names the working directory, or says there is none.
func orWorkdir(w string) string {
	if w == "" {
		return "the backend's default directory"
	}
	return w
}

// validName reports whether name is a shell variable name
// ([A-Za-z_][A-Za-z0-9_]*).
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// State returns the session's current directory and environment (from its
// saved state, or the initial ones).
func (s *Session) State() (*State, error) {
	sp, err := s.m.spec(s.name)
	if err != nil {
		return nil, err
	}
	return s.loadState(sp)
}

func (s *Session) isClosed() bool {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return s.closed
}

// SandboxRequest returns the sandbox request the session would use now to
// run argv (its spec, cwd, environment, scratch directory), with the spec
// and state it came from, for tools that run a program of their own in the
// session's sandbox (package sandboxfs). The request has no timeout.
func (s *Session) SandboxRequest(argv []string) (*sandbox.Request, *Spec, *State, error) {
	sp, err := s.m.spec(s.name)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := s.loadState(sp)
	if err != nil {
		return nil, nil, nil, err
	}
	return s.request(sp, st, st.Cwd, argv, 0), sp, st, nil
}

// Attach returns the value stored under key, making it with mk on first
// use; it is closed when the session closes. Tools keep per-session helpers
// (a file server) this way.
func (s *Session) Attach(key string, mk func() (io.Closer, error)) (io.Closer, error) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if c, ok := s.attached[key]; ok {
		return c, nil
	}
	c, err := mk()
	if err != nil {
		return nil, err
	}
	if s.attached == nil {
		s.attached = map[string]io.Closer{}
	}
	s.attached[key] = c
	return c, nil
}

// Helper returns the executable that serves corral's helper modes in the
// session's sandboxes (the file server of package sandboxfs), symlinks
// resolved: the Manager's Options.Helper, else corral's own executable.
// Errors: corral's own executable cannot be found.
func (s *Session) Helper() (string, error) {
	exe := ""
	if s.m.opts.Helper != nil {
		exe = s.m.opts.Helper()
	}
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return "", err
		}
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return exe, nil
}

// ExecPrefix returns an argv that runs whatever follows it inside the
// session's sandbox, with the session's cwd and variables, its stdin held
// open when interactive is set and its stdout and stderr passed through:
// `corral exec --session NAME [-i] [--user USER] --create --`. A host appends a
// command ("bash", "-c", script, as separate words) to start a long-lived
// process (a browser, a language server) in the same sandbox as the
// session's commands; on docker, in the same container. user names the
// account to run as where the backend can switch (docker: uid:gid or a
// name in the image); other backends ignore it. It returns nil when the
// session's backend cannot hold such processes (sandbox.StreamBackend) or
// the settings cannot be read. The reference interface (exec_prefix)
// returns a list, never one string; so does this.
func (s *Session) ExecPrefix(user string, interactive bool) []string {
	sp, err := s.m.spec(s.name)
	if err != nil {
		return nil
	}
	if sb, ok := sp.Backend.(sandbox.StreamBackend); !ok || !sb.SupportsStreams() {
		return nil
	}
	argv := append([]string(nil), s.m.opts.Command...)
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil
		}
		argv = []string{exe}
	}
	argv = append(argv, "exec", "--session", s.name)
	if interactive {
		argv = append(argv, "-i")
	}
	if user != "" {
		argv = append(argv, "--user", user)
	}
	// The host opened the session, which may not have run a command yet:
	// corral exec refuses a session that does not exist unless told to
	// make it.
	return append(argv, "--create", "--")
}

// teeTo returns w with everything written to it also written to t; nil
// stays nil.
func teeTo(w io.Writer, t io.Writer) io.Writer {
	if w == nil {
		return nil
	}
	return io.MultiWriter(w, t)
}

// onStarted returns an OnStart that sets began and then calls next (if
// any).
func onStarted(next func(int), began *atomic.Bool) func(int) {
	return func(pid int) {
		began.Store(true)
		if next != nil {
			next(pid)
		}
	}
}

// mayHaveRun holds the rule that a command that may have run is never
// reported as not run: once the backend said the command was started
// (sandbox.Request.OnStart) or the session's shell said it began, a failed
// Run is sandbox.ErrMayHaveRun, unless the backend knows the command never
// started (sandbox.ErrNotStarted, sandbox.ErrHostChanged) or the caller
// ended it (its context's error: the front ends say it was ended). A
// run that succeeded (nil) stays nil: background commands pass every
// outcome through here.
func mayHaveRun(err error, began bool) error {
	if err == nil || !began || errors.Is(err, sandbox.ErrMayHaveRun) || errors.Is(err, sandbox.ErrNotStarted) || errors.Is(err, sandbox.ErrHostChanged) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return sandbox.MayHaveRun(fmt.Errorf("the command was started, but corral lost track of it (%w); it may have run, in part or whole: look at its effects before running it again", err))
}

// maxMarkerCommand bounds how much of a command line the running marker
// in a session's sandbox records (inside.MaxTurnMarker bounds the whole).
const maxMarkerCommand = 1000

// sandboxTurn takes the session's turn in its sandbox when sp's backend
// keeps it there (sandbox.TurnBackend), recording command as running;
// nil when it does not. Called off by ctx it is a *WaitCancelledError:
// nothing was run.
func (s *Session) sandboxTurn(ctx context.Context, sp *Spec, command string) (*sandbox.SessionTurn, error) {
	tb, ok := sp.Backend.(sandbox.TurnBackend)
	if !ok {
		return nil, nil
	}
	dir := sp.Workdir
	if dir == "" {
		dir = sp.Backend.DefaultCwd()
	}
	// The request finds (or starts) the session's sandbox as its command
	// will; its command and variables are not used.
	pre := s.request(sp, &State{Cwd: dir}, dir, bashArgv(wrapper, "true"), 0)
	if len(command) > maxMarkerCommand {
		command = command[:maxMarkerCommand] + "..."
	}
	host, _ := os.Hostname()
	marker := fmt.Sprintf("started %s by corral pid %d on %s: %s", time.Now().UTC().Format(time.RFC3339), os.Getpid(), host, command)
	turn, err := tb.Turn(ctx, pre, marker)
	if err != nil {
		if ctx.Err() != nil {
			s.m.log.Info("session.lock.cancelled", "session", s.name, "cause", fmt.Sprint(context.Cause(ctx)), "where", "sandbox")
			return nil, &WaitCancelledError{Cause: context.Cause(ctx)}
		}
		return nil, err
	}
	return turn, nil
}

// endTurn ends a turn taken in the session's sandbox, saving st there
// when it differs from what the turn found (nil st: nothing to save).
func (s *Session) endTurn(turn *sandbox.SessionTurn, st *State) {
	var save []byte
	if st != nil {
		if b, err := encodeJSON(st); err == nil && !bytes.Equal(b, turn.State) {
			save = b
		}
	}
	turn.End(save)
}

// interruptedNote is the note of a command that held the session's turn
// in its sandbox when the corral running it was lost (pure). marker is
// from the sandbox: made printable and bounded.
func interruptedNote(marker string) string {
	return "the session's previous command was cut off when the corral running it was lost (killed, or its machine or connection gone); it may have run, in part or whole, and its exit status is unknown: look at its effects before running it again (" + trimNote(marker) + ")"
}

// trimNote is s from a sandbox, made printable and cut to a line's worth.
func trimNote(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxMarkerCommand+200 {
		s = s[:maxMarkerCommand+200] + "..."
	}
	return s
}
