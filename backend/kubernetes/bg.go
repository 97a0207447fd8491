package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/corralhq/corral/agentclient"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/sandbox"
)

// A session's background processes under ScopeCluster live in its home
// pod (inside/bg.go): started detached by this corral's agent there, so
// they outlive this corral, and their record, output and status kept in
// HomeDir/bg, where any corral serving the session reads them through
// its own agent. They end with the pod (the session's end, its idle
// removal, its loss).

var _ sandbox.BackgroundBackend = (*Backend)(nil)

// BackgroundHome implements sandbox.BackgroundBackend: under
// ScopeCluster the session's background processes are its home pod's.
func (b *Backend) BackgroundHome() bool { return b.st.Scope == ScopeCluster }

// inHome runs fn with req.Session's home pod (found or made as Run does)
// and this corral's agent in it; egress also sets up the pod's tunnel
// for a command that needs the network. A pod that cannot be reached is
// looked at once, and the session's next pod tried, as Turn does.
func (b *Backend) inHome(ctx context.Context, req *sandbox.Request, egress bool, fn func(p *podRef, a *agentclient.Conn, plan *egressPlan) error) error {
	if b.st.Scope != ScopeCluster || req.Session == "" {
		return fmt.Errorf("%w: kubernetes backend: background processes are kept in the pod only under scope cluster, for a session", sandbox.ErrBadRequest)
	}
	if err := b.refuse(req); err != nil {
		return err
	}
	plan, err := planEgress(req, b.e.opts.SecretFilesDir)
	if err != nil {
		return err
	}
	e := b.e
	for try := 1; ; try++ {
		p, err := b.ensure(ctx, req, plan)
		if err != nil {
			return err
		}
		var a *agentclient.Conn
		if egress && p.egress != nil {
			err = e.tunnelFor(ctx, p)
		}
		if err == nil {
			a, err = e.agentFor(p)
		}
		if err == nil {
			err = fn(p, a, plan)
			e.done(p)
			return err
		}
		e.done(p)
		if ctx.Err() != nil || !errors.Is(err, sandbox.ErrUnavailable) || try == 2 {
			return err
		}
		if why := e.lossOf(ctx, p, 0); why != "" {
			e.lose(p, why)
		}
	}
}

// StartBackground implements sandbox.BackgroundBackend: the keeper
// (inside.ModeBgKeep) is started detached by this corral's agent in the
// home pod, with the command's environment as a foreground command of the
// session gets it (runIn).
func (b *Backend) StartBackground(ctx context.Context, req *sandbox.Request, id, command, corral string, timeout time.Duration) (*sandbox.BackgroundInfo, error) {
	if !inside.ValidBgID(id) || len(req.Argv) == 0 {
		return nil, fmt.Errorf("%w: kubernetes backend: bad background process id %q or empty command", sandbox.ErrBadRequest, id)
	}
	var info *sandbox.BackgroundInfo
	err := b.inHome(ctx, req, true, func(p *podRef, a *agentclient.Conn, plan *egressPlan) error {
		dir := req.Dir
		if dir == "" {
			dir = p.workspace
		}
		cmdEnv := env(req)
		if plan != nil {
			set := proxyEnv(req.Secrets)
			var strip []string
			if plan.prep != nil {
				strip, set = plan.prep.Strip, append(set, plan.prep.Env...)
			}
			cmdEnv = hostview.FilterEnv(cmdEnv, strip, set...)
		}
		if len(command) > inside.MaxBgCommand {
			command = command[:inside.MaxBgCommand]
		}
		argv := append([]string{inside.Path, inside.ModeBgKeep, "--dir", HomeDir, "--id", id,
			"--timeout", strconv.FormatInt(timeout.Milliseconds(), 10), "--corral", corral, "--command", command, "--"}, req.Argv...)
		out, err := a.Call(ctx, inside.Start{Argv: argv, Env: cmdEnv, Dir: dir, Detach: true}, 64<<10)
		if err != nil {
			return fmt.Errorf("%w: kubernetes backend: starting background process %s in pod %s: %v", sandbox.ErrUnavailable, id, p.name, err)
		}
		var r inside.BgRecord
		if err := json.Unmarshal(out, &r); err != nil {
			return fmt.Errorf("%w: kubernetes backend: the keeper of %s in pod %s answered %q", sandbox.ErrUnavailable, id, p.name, trimOut(out))
		}
		if r.Error != "" && r.PGID == 0 && r.Started.IsZero() {
			return fmt.Errorf("%w: kubernetes backend: background process %s: %s", sandbox.ErrBadRequest, id, r.Error)
		}
		info = &sandbox.BackgroundInfo{ID: id, Command: r.Command, Corral: r.Corral, Started: r.Started}
		e := b.e
		e.log.Info("kubernetes.background.started", "pod", p.name, "namespace", p.namespace, "session", req.Session, "id", id, "pgid", r.PGID)
		return nil
	})
	return info, err
}

// BackgroundOutput implements sandbox.BackgroundBackend.
func (b *Backend) BackgroundOutput(ctx context.Context, req *sandbox.Request, id string, offset int64, max int) (*sandbox.BackgroundChunk, error) {
	if !inside.ValidBgID(id) || offset < 0 || max <= 0 {
		return nil, fmt.Errorf("%w: no background process %q in session %q", sandbox.ErrBadRequest, id, req.Session)
	}
	max = min(max, inside.MaxBgRead)
	var c inside.BgChunk
	if err := b.bgCall(ctx, req, &c, "read", id, strconv.FormatInt(offset, 10), strconv.Itoa(max)); err != nil {
		return nil, err
	}
	if c.NotFound {
		return nil, fmt.Errorf("%w: no background process %q in session %q", sandbox.ErrBadRequest, id, req.Session)
	}
	if c.Error != "" {
		return nil, fmt.Errorf("%w: kubernetes backend: reading background process %s: %s", sandbox.ErrUnavailable, id, trimOut([]byte(c.Error)))
	}
	return checkChunk(&c, offset, max)
}

// checkChunk turns the pod's answer to a read at offset of at most max
// bytes into a chunk, refusing one that does not fit it (pure).
func checkChunk(c *inside.BgChunk, offset int64, max int) (*sandbox.BackgroundChunk, error) {
	if len(c.Data) > max || c.Size < 0 || c.Size > inside.MaxBgOutput+4096 || (len(c.Data) > 0 && offset+int64(len(c.Data)) > c.Size) {
		return nil, fmt.Errorf("%w: kubernetes backend: the pod's answer does not fit the read (%d bytes at %d of %d)", sandbox.ErrUnavailable, len(c.Data), offset, c.Size)
	}
	return &sandbox.BackgroundChunk{Data: c.Data, Offset: offset, Size: c.Size, Exit: bgExit(c.Status)}, nil
}

// KillBackground implements sandbox.BackgroundBackend: the keeper is
// told to end the process's whole tree (inside.ModeBg kill), and the
// answer comes once its status is written.
func (b *Backend) KillBackground(ctx context.Context, req *sandbox.Request, id string) (*sandbox.BackgroundExit, error) {
	if !inside.ValidBgID(id) {
		return nil, fmt.Errorf("%w: no background process %q in session %q", sandbox.ErrBadRequest, id, req.Session)
	}
	var k inside.BgKill
	if err := b.bgCall(ctx, req, &k, "kill", id); err != nil {
		return nil, err
	}
	switch {
	case k.NotFound:
		return nil, fmt.Errorf("%w: no background process %q in session %q", sandbox.ErrBadRequest, id, req.Session)
	case k.Error != "":
		return nil, fmt.Errorf("%w: kubernetes backend: killing background process %s: %s", sandbox.ErrUnavailable, id, trimOut([]byte(k.Error)))
	case k.Status == nil:
		return nil, fmt.Errorf("%w: kubernetes backend: killing background process %s: no status", sandbox.ErrUnavailable, id)
	}
	b.e.log.Info("kubernetes.background.killed", "session", req.Session, "id", id, "already_ended", k.Ended)
	return bgExit(k.Status), nil
}

// ListBackground implements sandbox.BackgroundBackend.
func (b *Backend) ListBackground(ctx context.Context, req *sandbox.Request) ([]sandbox.BackgroundInfo, error) {
	var l inside.BgList
	if err := b.bgCall(ctx, req, &l, "list"); err != nil {
		return nil, err
	}
	if l.Error != "" {
		return nil, fmt.Errorf("%w: kubernetes backend: listing background processes: %s", sandbox.ErrUnavailable, trimOut([]byte(l.Error)))
	}
	out := make([]sandbox.BackgroundInfo, 0, len(l.Procs))
	for _, p := range l.Procs {
		if !inside.ValidBgID(p.ID) {
			continue
		}
		out = append(out, sandbox.BackgroundInfo{ID: p.ID, Command: trimCommand(p.Command), Corral: trimCommand(p.Corral), Started: p.Started,
			Bytes: max(p.Bytes, 0), Exit: bgExit(p.Status), Problem: trimCommand(p.Problem)})
	}
	return out, nil
}

// SavedState implements sandbox.BackgroundBackend (inside.ModeBg state).
func (b *Backend) SavedState(ctx context.Context, req *sandbox.Request) ([]byte, string, error) {
	var st inside.BgState
	if err := b.bgCall(ctx, req, &st, "state"); err != nil {
		return nil, "", err
	}
	switch {
	case st.Error != "":
		return nil, trimOut([]byte(st.Error)), nil
	case len(st.State) > inside.MaxTurnState:
		return nil, fmt.Sprintf("the saved state is over %d bytes", inside.MaxTurnState), nil
	case !st.Has:
		return nil, "", nil
	}
	if st.State == nil {
		st.State = []byte{}
	}
	return st.State, "", nil
}

// bgCall runs inside.ModeBg op with args in the home pod and decodes its
// answer into v.
func (b *Backend) bgCall(ctx context.Context, req *sandbox.Request, v any, op string, args ...string) error {
	return b.inHome(ctx, req, false, func(p *podRef, a *agentclient.Conn, _ *egressPlan) error {
		argv := append([]string{inside.Path, inside.ModeBg, op, HomeDir}, args...)
		// A read's data is JSON-encoded (base64: 4/3), the rest small.
		out, err := a.Call(ctx, inside.Start{Argv: argv, Dir: "/"}, bgAnswerMax(op))
		if err != nil {
			return fmt.Errorf("%w: kubernetes backend: background processes in pod %s: %v", sandbox.ErrUnavailable, p.name, err)
		}
		if err := json.Unmarshal(out, v); err != nil {
			return fmt.Errorf("%w: kubernetes backend: background processes in pod %s: the answer %q", sandbox.ErrUnavailable, p.name, trimOut(out))
		}
		return nil
	})
}

// bgExit is the pod's status as the sandbox package says it (pure): the
// code as sandbox.ExitStatus gives it (124 when the timeout ended it).
func bgExit(st *inside.BgStatus) *sandbox.BackgroundExit {
	if st == nil {
		return nil
	}
	code := st.Code
	if st.TimedOut {
		code = sandbox.ExitTimedOut
	}
	return &sandbox.BackgroundExit{Code: code, TimedOut: st.TimedOut, Killed: st.Killed, Error: trimCommand(st.Error),
		Dropped: max(st.Dropped, 0), Ended: st.Ended}
}

// trimCommand bounds a string from the pod (inside.MaxBgCommand bytes).
func trimCommand(s string) string {
	if len(s) > inside.MaxBgCommand {
		return s[:inside.MaxBgCommand] + "..."
	}
	return s
}

// trimOut is at most 200 bytes of an answer from the pod, for an error.
func trimOut(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// homeBackgroundRuns reports whether a background process of the
// session runs in home pod p (asked through this corral's agent there):
// the pod is then in use (watchHome).
func (e *Engine) homeBackgroundRuns(ctx context.Context, p *podRef) (bool, error) {
	a, err := e.agentFor(p)
	if err != nil {
		return false, err
	}
	out, err := a.Call(ctx, inside.Start{Argv: []string{inside.Path, inside.ModeBg, "list", HomeDir}, Dir: "/"}, 256<<10)
	if err != nil {
		return false, err
	}
	var l inside.BgList
	if err := json.Unmarshal(out, &l); err != nil || l.Error != "" {
		return false, fmt.Errorf("listing background processes: %q", trimOut(out))
	}
	for _, in := range l.Procs {
		if in.Status == nil {
			return true, nil
		}
	}
	return false, nil
}

// bgAnswerMax bounds the answer of inside.ModeBg op (pure): a read's
// data and a state are JSON-encoded (base64: 4/3 of their size).
func bgAnswerMax(op string) int {
	if op == "state" {
		return 2*inside.MaxTurnState + 4<<10
	}
	return 2*inside.MaxBgRead + 256<<10
}
