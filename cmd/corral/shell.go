package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/toolcache"
)

func newShellCmd(g *globalOptions) *cobra.Command {
	o := &runOptions{memoryMB: -1, cpuSeconds: -1, maxProcs: -1}
	cmd := &cobra.Command{
		Use:   "shell [--session NAME]",
		Short: "An interactive shell for a person, in the sandbox a session's agent gets",
		Long: `shell starts bash on a pseudo-terminal inside the same sandbox an agent of
the session gets (profile, limits, binds, scratch directory), starting in
the session's current directory with its variables. Job control works: the
terminal is corral's own pseudo-terminal, so nothing in the sandbox can
inject input into yours. What you cd or export here does not change the
session. Limits default to none for a person (--memory-mb etc. set them).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return o.shell(c, g) },
	}
	f := cmd.Flags()
	f.StringVar(&o.session, "session", "", "session whose sandbox and state to use (default: a fresh sandbox)")
	f.StringVar(&o.profile, "profile", "", "restricted, workspace, allowlist or network")
	f.StringVar(&o.cwd, "cwd", "", "working directory")
	f.StringVar(&o.backend, "backend", "", "backend: "+registry.NamesText())
	f.IntVar(&o.memoryMB, "memory-mb", 0, "memory in MiB: of the whole shell in a memory cgroup, else per process (RLIMIT_DATA); 0: no limit")
	f.IntVar(&o.cpuSeconds, "cpu-seconds", 0, "CPU seconds per process (0: no limit)")
	f.IntVar(&o.maxProcs, "max-procs", -1, "processes and threads (default: the max_procs setting)")
	hideDefaults(f, "max-procs")
	return cmd
}

func (o *runOptions) shell(c *cobra.Command, g *globalOptions) error {
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return &exitError{Code: sandbox.ExitCorralError, Err: errors.New("corral shell needs a terminal on stdin; use `corral run --session NAME -- CMD` from scripts")}
	}
	h, err := g.openHost(o, newLogger(g))
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	defer h.Close()
	// The settings without a route, as for corral run; the session only
	// lends its cwd, variables and scratch directory.
	cmd, err := h.Command([]string{"/bin/bash", "-i"})
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	req, st := cmd.Request, cmd.Settings
	req.PolicyEnv, req.TTY, req.Timeout = req.Env, true, 0
	if st.ToolCaches == config.ToolCachesShared {
		req.CacheDir = ensureDir(toolcache.Dir(h.StateDir()))
	}
	if o.session != "" {
		s, err := h.Session(o.session)
		if err != nil {
			return &exitError{Code: sandbox.ExitCorralError, Err: err}
		}
		stt, err := s.State()
		if err != nil {
			return &exitError{Code: sandbox.ExitCorralError, Err: err}
		}
		req.Env, req.Dir, req.ScratchDir, req.Session = stt.Env, stt.Cwd, s.ScratchDir(), o.session
		if st.ToolCaches == config.ToolCachesSession {
			req.CacheDir = ensureDir(s.CacheDir())
		}
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("allocating a pseudo-terminal: %w", err)}
	}
	defer ptmx.Close()
	_ = pty.InheritSize(os.Stdin, ptmx)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for range winch {
			_ = pty.InheritSize(os.Stdin, ptmx)
		}
	}()
	req.Stdin, req.Stdout, req.Stderr = tty, tty, tty
	old, err := term.MakeRaw(int(os.Stdin.Fd()))
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("setting the terminal to raw mode: %w", err)}
	}
	defer term.Restore(int(os.Stdin.Fd()), old)
	go func() { _, _ = io.Copy(ptmx, os.Stdin) }()
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(os.Stdout, ptmx); close(copied) }()
	res, err := cmd.Backend.Run(c.Context(), req)
	tty.Close()
	select {
	case <-copied:
	case <-time.After(2 * time.Second): // a reader of the terminal lingers
	}
	term.Restore(int(os.Stdin.Fd()), old)
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: err}
	}
	if res.ExitCode != 0 {
		return &exitError{Code: res.ExitCode}
	}
	return nil
}
