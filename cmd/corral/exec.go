package main

import (
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/internal/termsafe"
	"github.com/corralhq/corral/sandbox"
)

type execOptions struct {
	runOptions
	interactive bool
	user        string
	create      bool
}

func newExecCmd(g *globalOptions) *cobra.Command {
	o := &execOptions{runOptions: runOptions{memoryMB: -1, cpuSeconds: -1, maxProcs: -1}}
	cmd := &cobra.Command{
		Use:   "exec --session NAME [-i] [--user USER] [--create] -- CMD [ARG...]",
		Short: "Run a long-lived program in a session's sandbox with its streams open",
		Long: `exec runs CMD (an argv, not a shell line) inside the sandbox of session NAME,
in the session's current directory with its variables: the same policy on
bwrap, the same container on docker. stdout and stderr pass through; with
-i stdin stays open too, so a host can drive a long-lived program (a
browser, a language server) this way. "corral exec --session NAME -i --" is
the stream prefix of every backend (sandbox.StreamBackend): append
"bash -c SCRIPT" as separate words.

The session must exist (a command ran in it: corral sessions lists it), as
docker exec needs a running container; --create makes it when it does not,
and records it once the program starts. A session exec refuses, or one whose
program never started, is not left behind. Nothing else of the session
changes: exec does not record a cwd or variables.
There is no timeout unless --timeout is given; the program ends with
corral exec (SIGINT, SIGTERM and SIGHUP are passed on; a second one ends the
sandbox). --user runs as another account where the backend can switch users
(docker: uid:gid or a user of the image); bwrap and local ignore it.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error { return o.exec(c, g, args) },
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.StringVar(&o.session, "session", "", "session whose sandbox to use (required)")
	f.BoolVarP(&o.interactive, "interactive", "i", false, "keep stdin open (otherwise the program reads /dev/null)")
	f.StringVar(&o.user, "user", "", "account to run as, where the backend can switch users (docker)")
	f.BoolVar(&o.create, "create", false, "make the session when it does not exist (otherwise exec refuses)")
	f.StringVar(&o.backend, "backend", "", "backend: "+registry.NamesText()+" (default: the backend setting, or the session's route)")
	f.IntVar(&o.memoryMB, "memory-mb", -1, "memory in MiB: of the whole command in a memory cgroup, else per process (RLIMIT_DATA); 0 disables; default: the session's")
	f.IntVar(&o.cpuSeconds, "cpu-seconds", -1, "CPU seconds per process (0 disables; default: the session's)")
	f.IntVar(&o.maxProcs, "max-procs", -1, "processes and threads (0 disables; default: the session's)")
	hideDefaults(f, "memory-mb", "cpu-seconds", "max-procs")
	f.Var(secondsFlag{&o.timeout}, "timeout", "end the program after this long: 90s, 5m or whole seconds (default: never)")
	_ = cmd.MarkFlagRequired("session")
	return cmd
}

func (o *execOptions) exec(c *cobra.Command, g *globalOptions, argv []string) error {
	g.joinContainers = true // on docker, the container of a running corral mcp
	h, err := g.openHost(&o.runOptions, newLogger(g))
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	defer h.Close()
	m := h.Manager()
	_, existed := m.Lookup(o.session)
	if !existed && !o.create {
		// Checked before the session is opened, which would make it.
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("no session %s (a session exists once a command ran in it): start it with `corral run --session %s -- true`, or pass --create", termsafe.Path(o.session), shellWord(o.session))}
	}
	made := !m.OnDisk(o.session)
	s, err := h.Session(o.session)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	var started atomic.Bool
	defer func() {
		if made && !started.Load() {
			// Made for this exec, whose program never started: no
			// half-made session stays (Remove refuses a session a
			// command of another corral runs in now).
			if _, ok := m.Lookup(o.session); !ok {
				_ = m.Remove(o.session)
			}
		}
	}()
	req, sp, _, err := s.SandboxRequest(argv)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	if sb, ok := sp.Backend.(sandbox.StreamBackend); !ok || !sb.SupportsStreams() {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("the %s backend cannot hold a long-lived program", sp.Backend.Name())}
	}
	if !existed {
		// --create: the session exists once its program started.
		next := req.OnStart
		req.OnStart = func(pid int) {
			started.Store(true)
			if err := s.Record(sp); err != nil {
				fmt.Fprintf(stderr, "corral: warning: the session could not be recorded: %v\n", err)
			}
			if next != nil {
				next(pid)
			}
		}
	}
	req.Stdout, req.Stderr = commandOutputs()
	if o.interactive {
		req.Stdin = os.Stdin
	}
	req.User = o.user
	req.Timeout = o.timeout
	req.Progress = progressLine
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM)
	defer signal.Stop(sigs)
	req.Signals = sigs
	res, err := sp.Backend.Run(c.Context(), req)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	return finish("warning", res.Warnings, res.TimedOut, req.Timeout, sandbox.LimitMessage(res, req.Limits), res.ExitCode)
}
