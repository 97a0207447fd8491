package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/rmtree"
	"github.com/corralhq/corral/internal/startdir"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
	"github.com/corralhq/corral/toolcache"
)

type runOptions struct {
	backend    string
	profile    string
	cwd        string
	binds      []string
	memoryMB   int
	cpuSeconds int
	maxProcs   int
	timeout    time.Duration
	dryRun     bool
	session    string
}

func newRunCmd(g *globalOptions) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Run a command in a new sandbox",
		Long: `Run CMD in a new sandbox. stdin, stdout and stderr are passed through (a
terminal stays a terminal) and corral exits with CMD's status, or 128+N when
CMD died of signal N. corral's own failures exit with 125.

--bind takes SRC[:DEST][:rw]; write a colon inside a path as \: (a SRC that
exists as given is taken whole). Binds are read-only unless :rw is given.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if o.session != "" {
				return o.runSession(c, g, args)
			}
			return o.run(c, g, args)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.StringVar(&o.session, "session", "", "run in the named session: the words are joined with spaces (a word with white space stays one word) and run by the session's shell, so its own cd and export carry over")
	f.StringVar(&o.backend, "backend", "", "backend: "+registry.NamesText()+" (default: the backend setting, or the route of --session)")
	f.StringVar(&o.profile, "profile", "", "restricted, workspace, allowlist or network (default: the profile setting)")
	f.StringVar(&o.cwd, "cwd", "", "working directory, the one writable tree (default: the cwd setting, else the current directory)")
	f.StringArrayVar(&o.binds, "bind", nil, "extra bind mount SRC[:DEST][:rw] (repeatable)")
	f.IntVar(&o.memoryMB, "memory-mb", -1, "memory in MiB: of the whole command in a memory cgroup, else per process (RLIMIT_DATA); 0 disables (default: the memory_mb setting)")
	f.IntVar(&o.cpuSeconds, "cpu-seconds", -1, "CPU seconds per process (RLIMIT_CPU; 0 disables) (default: the cpu_seconds setting)")
	f.IntVar(&o.maxProcs, "max-procs", -1, "processes and threads (0 disables) (default: the max_procs setting)")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the bwrap command line (one argument per line) instead of running it")
	f.Var(secondsFlag{&o.timeout}, "timeout", "end the whole sandbox after this long: 90s, 5m or whole seconds (default: the timeout setting)")
	hideDefaults(f, "memory-mb", "cpu-seconds", "max-procs", "timeout")
	return cmd
}

func (o *runOptions) run(c *cobra.Command, g *globalOptions, args []string) error {
	h, err := g.openHost(o, newLogger(g))
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	defer h.Close()
	cmd, err := h.Command(args)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	st, req, be := cmd.Settings, cmd.Request, cmd.Backend
	req.Stdin = os.Stdin
	req.Stdout, req.Stderr = commandOutputs()
	ctx := c.Context()
	if o.dryRun {
		dr, ok := be.(registry.DryRunner)
		if !ok {
			return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("--dry-run needs a backend whose sandbox is a command line (bwrap is); %s is not", be.Name())}
		}
		argv, warns, err := dr.DryRun(ctx, req)
		if err != nil {
			return &exitError{Code: sandbox.ExitCorralError, Err: err}
		}
		for _, w := range warns {
			fmt.Fprintf(stderr, "corral: warning: %s\n", w)
		}
		for _, a := range argv {
			fmt.Println(a)
		}
		return nil
	}
	// ^C reaches corral (bwrap has its own process group); the backend
	// passes the first signal on to the command and ends the whole sandbox
	// on the second.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM)
	defer signal.Stop(sigs)
	req.Signals = sigs

	// A scratch directory for this one command (TMPDIR), removed after it;
	// sessions keep theirs between commands. Its name carries corral's pid,
	// so `corral cleanup` can remove it when corral was killed.
	scratch, err := os.MkdirTemp(ensureDir(filepath.Join(h.StateDir(), "scratch")), fmt.Sprintf("run-%d-", os.Getpid()))
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("creating the scratch directory: %w", err)}
	}
	defer rmtree.RemoveAll(scratch) // a module cache there is read-only
	req.ScratchDir = scratch
	if st.HomeMode == config.HomeModeSession {
		req.HomeDir = ensureDir(filepath.Join(h.StateDir(), "homes", "default"))
	}
	switch st.ToolCaches {
	case config.ToolCachesShared:
		req.CacheDir = ensureDir(toolcache.Dir(h.StateDir()))
	case config.ToolCachesSession:
		// A session of one command: beside its scratch directory (not in
		// it, see session.Session.CacheDir), named so that `corral
		// cleanup` removes it when corral was killed.
		cache, err := os.MkdirTemp(filepath.Dir(scratch), fmt.Sprintf("run-%d-cache-", os.Getpid()))
		if err != nil {
			return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("creating the tool cache directory: %w", err)}
		}
		// rmtree: Go's module cache is read-only.
		defer rmtree.RemoveAll(cache)
		req.CacheDir = cache
	}

	req.Progress = progressLine
	// The end of stderr, for the reasons a failed command hit the
	// sandbox's wall; a terminal is passed through untouched so it stays
	// one (and then there are no reasons).
	var last *tail.Buffer
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		last = &tail.Buffer{}
		if sandbox.SameWriter(req.Stdout, req.Stderr) {
			// Still one writer (one pipe, in order); the tail holds
			// stdout too, which the reasons tolerate.
			w := io.MultiWriter(req.Stdout, last)
			req.Stdout, req.Stderr = w, w
		} else {
			req.Stderr = io.MultiWriter(os.Stderr, last)
		}
	}
	res, err := be.Run(ctx, req)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	var denials []hostview.Denial
	if last != nil && res.ExitCode != 0 && !res.TimedOut {
		denials = hostview.ExplainDenials(last.String(), hostview.DenialContextFor(req, be, sandbox.TraitsOf(be).HostPaths))
	}
	return finish("warning", res.Warnings, res.TimedOut, req.Timeout, sandbox.LimitMessage(res, req.Limits), res.ExitCode, denials...)
}

// override applies the flags to the settings of a command (Host
// Options.Override): they win over the settings and the session's route.
// Errors name the flag.
func (o *runOptions) override(st *config.Settings) error {
	if o.profile != "" {
		p, err := sandbox.ParseProfile(o.profile)
		if err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
		st.Profile = p
	}
	if o.cwd != "" {
		st.Cwd = o.cwd
	}
	for _, x := range []struct {
		flag string
		v    int
		dst  *int
	}{{"--memory-mb", o.memoryMB, &st.MemoryMB}, {"--cpu-seconds", o.cpuSeconds, &st.CPUSeconds}, {"--max-procs", o.maxProcs, &st.MaxProcs}} {
		if x.v < -1 {
			return fmt.Errorf("%s: %d is negative (0 disables the limit)", x.flag, x.v)
		}
		if x.v >= 0 {
			*x.dst = x.v
		}
	}
	binds := slices.Clone(st.Binds) // never the cached settings' array
	for _, s := range o.binds {
		b, err := parseBindFlag(s)
		if err != nil {
			return err
		}
		binds = append(binds, b)
	}
	st.Binds = binds
	if o.timeout < 0 {
		return fmt.Errorf("--timeout: %s is negative", o.timeout)
	}
	if o.timeout > 0 {
		st.Timeout = o.timeout
	}
	timeoutAdvice = adviceForTimeout(st, o.timeout > 0)
	if o.backend != "" {
		st.Backend = o.backend
	}
	return nil
}

// parseBindFlag parses SRC[:DEST][:rw|:ro]; "\:" is a literal colon, and a
// SRC that exists on the host as written is taken whole.
func parseBindFlag(s string) (sandbox.Bind, error) {
	b := sandbox.Bind{ReadOnly: true}
	if s == "" {
		return b, fmt.Errorf("--bind: empty value; want SRC[:DEST][:rw]")
	}
	if abs, err := startdir.Abs(s); err != nil {
		return b, err
	} else if _, err := os.Lstat(abs); err == nil {
		b.Src = abs
		return b, nil
	}
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == ':':
			cur.WriteByte(':')
			i++
		case s[i] == ':':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	parts = append(parts, cur.String())
	if n := len(parts); n > 1 && (parts[n-1] == "rw" || parts[n-1] == "ro") {
		b.ReadOnly = parts[n-1] == "ro"
		parts = parts[:n-1]
	}
	if parts[0] == "" {
		return b, fmt.Errorf("--bind %q: SRC is empty; want SRC[:DEST][:rw]", s)
	}
	switch len(parts) {
	case 1:
		b.Src = parts[0]
	case 2:
		b.Src, b.Dest = parts[0], parts[1]
	default:
		return b, fmt.Errorf("--bind %q: want SRC[:DEST][:rw] (write a colon inside a path as \\:)", s)
	}
	if !filepath.IsAbs(b.Src) {
		abs, err := startdir.Abs(b.Src)
		if err != nil {
			return b, err
		}
		b.Src = abs
	}
	if b.Dest != "" && !filepath.IsAbs(b.Dest) {
		return b, fmt.Errorf("--bind %q: DEST must be an absolute path", s)
	}
	return b, nil
}

// sessionLine is the shell line corral run --session gives the session's
// shell for the words after "--": one word is the line itself ('pwd; echo
// $A'); several are joined with spaces, as ssh joins them, so that an
// operator given as a word ('&&', '|') or a $VAR reaches the session's
// shell, except that a word holding white space, or an empty one, stays one
// word (quoted). Joined bare, `sh -c 'cd sub && export X=1'` became the line
// "sh -c cd sub && export X=1": the child sh ran "cd" alone and the
// session's own shell ran the export, so the variable carried over and the
// directory did not, where a child's cd and exports never reach its parent.
func sessionLine(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = w
		if w == "" || strings.ContainsAny(w, " \t\n\r\v\f") {
			out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// runSession runs the words in the named session (sessionLine).
func (o *runOptions) runSession(c *cobra.Command, g *globalOptions, words []string) error {
	if o.dryRun {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("--dry-run does not combine with --session")}
	}
	h, err := g.openHost(o, newLogger(g))
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	defer h.Close()
	s, err := h.Session(o.session)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM)
	defer signal.Stop(sigs)
	cout, cerr := commandOutputs()
	res, err := s.Exec(c.Context(), session.ExecRequest{
		Command: sessionLine(words), Timeout: o.timeout,
		StdinReader: os.Stdin, Stdout: cout, Stderr: cerr, Signals: sigs, Progress: progressLine,
	})
	if sig, ok := signalOf(err); ok {
		// Queued behind the session's running command and ended by a
		// signal before its turn: nothing ran, and corral ends as a
		// shell's command killed by that signal would (130, 143).
		return &exitError{Code: sandbox.ExitSignalBase + int(sig), Err: err}
	}
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	return finish("note", res.Notes, res.TimedOut, res.Timeout, res.LimitMessage, res.ExitCode, res.Denials...)
}

// progressLine prints a report of slow preparation (an image pull) on
// stderr.
func progressLine(msg string) { fmt.Fprintf(stderr, "corral: %s\n", msg) }

// finish tells the person what became of a command (notes, an unavailable
// sandbox, a timeout, a limit) on stderr and returns corral's exit status:
// 125 when nothing could run, 124 on timeout, else the command's own.
func finish(kind string, notes []string, timedOut bool, timeout time.Duration, limitMsg string, code int, denials ...hostview.Denial) error {
	for _, n := range notes {
		fmt.Fprintf(stderr, "corral: %s: %s\n", kind, n)
	}
	if timedOut {
		fmt.Fprintf(stderr, "corral: the command timed out after %s and its whole sandbox was ended; %s\n", timeout, timeoutAdvice)
		return &exitError{Code: sandbox.ExitTimedOut}
	}
	if limitMsg != "" {
		fmt.Fprintln(stderr, limitMsg)
	}
	for _, d := range denials {
		fmt.Fprintln(stderr, d.Message)
	}
	if code != 0 {
		return &exitError{Code: code}
	}
	return nil
}

// timeoutAdvice is how a timed-out command's timeout is raised, for the
// settings of this command (adviceForTimeout).
var timeoutAdvice = "raise the timeout with --timeout or `corral config set timeout 10m`"

// adviceForTimeout names where the timeout came from, so that the advice
// works: a CORRAL_TIMEOUT overrides the file, which `corral config set`
// would change in vain.
func adviceForTimeout(st *config.Settings, flag bool) string {
	if flag {
		return "raise --timeout"
	}
	switch src, where := st.Source("timeout"); src {
	case config.SourceEnv:
		return fmt.Sprintf("raise it with --timeout or in %s (which overrides the settings file)", where)
	case config.SourceRoute:
		return "raise it with --timeout or in the route of this session (the routes setting)"
	}
	return "raise it with --timeout or `corral config set timeout 10m`"
}
