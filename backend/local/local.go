// Package local is corral's backend without isolation: commands run directly
// on the host, as the user running corral. It exists for trusted use and for
// comparison; corral uses it only when it is named (--backend local or the
// backend setting), never as a fallback for an unavailable sandbox.
package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/reaper"
	"github.com/corralhq/corral/internal/waitloop"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
)

// Backend runs commands on the host. It is safe for concurrent use.
type Backend struct {
	log *slog.Logger
}

// New returns a local backend; logger may be nil.
func New(logger *slog.Logger) *Backend {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{log: logger}
}

// Name implements sandbox.Backend.
func (b *Backend) Name() string { return "local" }

var _ sandbox.Traiter = (*Backend)(nil)

// Traits implements sandbox.Traiter: no sandbox.
func (b *Backend) Traits() sandbox.Traits { return sandbox.Traits{Unsandboxed: true} }

// DefaultCwd implements sandbox.Backend.
func (b *Backend) DefaultCwd() string { return "" }

// Run implements sandbox.Backend. The command runs under corral's reaper
// (internal/reaper: a child subreaper of its own, a re-execution of
// corral's executable), in its own session: when its first process exits,
// or a timeout or cancellation kills it, every process it started is
// killed and reaped, those that left its session or process group
// (setsid, a double fork, a daemon) included. A program embedding corral
// whose main does not call reexec.Init gets the process group alone
// (local.no_reaper). Limits, binds, profiles and home rules do not apply:
// there is no sandbox. The environment policy does
// (hostview.FilterEnvPolicy with req.EnvDeny and req.EnvAllow).
func (b *Backend) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	if req.LayerDir != "" {
		return nil, fmt.Errorf("%w: workspace_mode review needs a sandbox: the local backend has none, so the command would write to %s itself; use the bwrap backend or workspace_mode direct", sandbox.ErrPolicy, req.Workdir)
	}
	if len(req.Secrets) > 0 {
		// No sandbox, no proxy: nothing could keep the real value from
		// the command or swap a stand-in for it.
		return nil, sandbox.NoSecretsBackendError(Name, req.Policy, registry.SecretCarriers())
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	dir := req.Dir
	if dir == "" {
		dir = req.Workdir
	}
	// The same environment policy as the sandboxes': no isolation does not
	// mean handing the command the secrets in corral's environment.
	env, withheld := hostview.FilterEnvPolicy(req.Env, append(slices.Clone(hostview.DefaultEnvDeny), req.EnvDeny...), req.EnvAllow)
	for _, d := range withheld {
		b.log.Info("local.env.withheld", "name", d.Name, "kind", d.Kind)
	}
	// Found with corral's own PATH, as exec.Command finds it.
	path := req.Argv[0]
	lookErr := error(nil)
	if lp := exec.Command(path); lp.Err == nil {
		path = lp.Path
	} else {
		lookErr = lp.Err
	}
	exe, exeErr := os.Executable()
	if lookErr != nil || exeErr != nil || !reexec.Initialized() {
		// Without the reaper (a program embedding corral whose main does
		// not call reexec.Init): the command's process group alone.
		if lookErr == nil {
			b.log.Warn("local.no_reaper", "reason", "reexec.Init was not called or the executable is unknown")
		}
		return b.runGroup(ctx, req, env, dir)
	}
	start := time.Now()
	p, err := reaper.Start(reaper.Spec{
		Exe: exe, Path: path, Argv: req.Argv, Env: env, Dir: dir,
		Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, ExtraFiles: req.ExtraFiles,
		// A process that got hold of a copy of a pipe some other way
		// must not hold the result.
		WaitDelay: 2 * time.Second,
	})
	if err != nil {
		return startFailure(err, path, dir), nil
	}
	if req.OnStart != nil {
		req.OnStart(p.HelperPid())
	}
	var (
		ws       syscall.WaitStatus
		leftover int
	)
	done := make(chan error, 1)
	go func() {
		var err error
		ws, leftover, err = p.Wait()
		done <- err
	}()
	// The reaper kills every process of the command, whatever its session;
	// it starts no process to do so.
	kill := func() { _ = p.Signal(syscall.SIGKILL) }
	// req.Signals is not read: this backend does not forward signals.
	out := waitloop.Wait(ctx, done, req.Timeout, nil, waitloop.Handlers{Timeout: kill, Cancel: kill})
	res := &sandbox.Result{Warnings: []string{"backend local: the command ran on the host without a sandbox"}, TimedOut: out.TimedOut}
	res.Duration = time.Since(start)
	if out.Err != nil {
		// The reaper was killed: its command's process group at least.
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		b.log.Warn("local.reaper_failed", "error", out.Err)
		res.ExitCode = sandbox.ExitSignalBase + int(syscall.SIGKILL)
		res.Warnings = append(res.Warnings, out.Err.Error())
		return res, nil
	}
	if leftover > 0 {
		b.log.Info("local.leftover_killed", "processes", leftover)
		if !out.TimedOut && ctx.Err() == nil {
			res.Warnings = append(res.Warnings, sandbox.LeftoverNote(leftover))
		}
	}
	res.ExitCode, res.Signal = waitloop.ExitOf(ws)
	return res, nil
}

// startFailure is the result of a command that could not be started: a
// path that does not exist is "not found" as well (127, as a shell
// reports it); one that exists but cannot be run, or a working directory
// that is gone, is 126.
func startFailure(err error, path, dir string) *sandbox.Result {
	code := sandbox.ExitCannotInvoke
	if errors.Is(err, exec.ErrNotFound) || missingPath(path, dir) {
		code = sandbox.ExitNotFound
	}
	return &sandbox.Result{ExitCode: code, Warnings: []string{err.Error()}}
}

// runGroup runs req without the reaper: in its own process group, which
// a timeout or cancellation kills (SIGKILL to the group); a process that
// left the group (setsid) is not found.
func (b *Backend) runGroup(ctx context.Context, req *sandbox.Request, env []string, dir string) (*sandbox.Result, error) {
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
	cmd.ExtraFiles = req.ExtraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A setsid'd grandchild can hold the output pipes open after the group
	// is killed; stop waiting for it after a grace period.
	cmd.WaitDelay = 2 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return startFailure(err, cmd.Path, cmd.Dir), nil
	}
	if req.OnStart != nil {
		req.OnStart(cmd.Process.Pid)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out := waitloop.Wait(ctx, done, req.Timeout, nil, waitloop.Handlers{Timeout: kill, Cancel: kill})
	res := &sandbox.Result{Warnings: []string{"backend local: the command ran on the host without a sandbox"}, TimedOut: out.TimedOut}
	res.Duration = time.Since(start)
	res.ExitCode, res.Signal = waitloop.ExitOf(cmd.ProcessState.Sys().(syscall.WaitStatus))
	return res, nil
}

// SupportsStreams implements sandbox.StreamBackend: a long-lived process
// runs on the host like any command.
func (b *Backend) SupportsStreams() bool { return true }

// missingPath reports whether the program at path (relative to dir when
// it is relative) does not exist: the start's ENOENT can be the working
// directory's too.
func missingPath(path, dir string) bool {
	if !filepath.IsAbs(path) && dir != "" {
		path = filepath.Join(dir, path)
	}
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}
