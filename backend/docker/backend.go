package docker

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/toolcache"
)

// Name is the backend's configuration name.
const Name = "docker"

// Backend runs commands in containers with one set of Settings. It is a
// view of an Engine (Engine.Backend); it implements sandbox.Backend,
// sandbox.SessionBackend, sandbox.StreamBackend and sandbox.Layout.
type Backend struct {
	e  *Engine
	st Settings
}

var (
	_ sandbox.SessionBackend = (*Backend)(nil)
	_ sandbox.StreamBackend  = (*Backend)(nil)
	_ sandbox.Layout         = (*Backend)(nil)
)

// Name implements sandbox.Backend: "docker".
func (b *Backend) Name() string { return Name }

var _ sandbox.Traiter = (*Backend)(nil)

// Traits implements sandbox.Traiter: a container of the session's own,
// with its tool caches in it.
func (b *Backend) Traits() sandbox.Traits {
	return sandbox.Traits{Where: "a container", CacheDir: CacheDir}
}

// DefaultCwd implements sandbox.Backend: docker.workdir when set, else no
// preference (the workspace appears at its own path).
func (b *Backend) DefaultCwd() string { return b.st.Workdir }

// Settings returns the settings of this view.
func (b *Backend) Settings() Settings { return b.st }

// Release implements sandbox.SessionBackend.
func (b *Backend) Release(name string) { b.e.Release(name) }

// SupportsStreams implements sandbox.StreamBackend: a process can run in a
// session's container with stdin and stdout open.
func (b *Backend) SupportsStreams() bool { return true }

// HelperPath implements sandbox.Layout: corral's executable is mounted at
// inside.Path.
func (b *Backend) HelperPath() string { return inside.Path }

// WritableRoots implements sandbox.Layout: of sandbox.WritableRoots, the
// workspace (where it appears in the container) and the read-write binds of
// the request; the writable binds of docker.binds; and /tmp. The scratch
// directory, session home and tool cache are the container's own /tmp.
func (b *Backend) WritableRoots(req *sandbox.Request) []string {
	var out []string
	var binds []sandbox.Bind
	for _, w := range sandbox.WritableRoots(req) {
		switch w.Kind {
		case sandbox.RootWorkdir:
			if ws, err := b.workspace(req); err == nil {
				out = append(out, ws.Target)
			}
		case sandbox.RootBind:
			binds = append(binds, sandbox.Bind{Src: w.Src, Dest: w.Path})
		}
	}
	for _, bd := range append(slices.Clone(b.st.Binds), binds...) {
		if bd.ReadOnly {
			continue
		}
		// At its own path, a bind appears at its resolved source
		// (hostview.DecideBind).
		dest := filepath.Clean(bd.Target())
		if dest == filepath.Clean(bd.Src) {
			if r, err := filepath.EvalSymlinks(dest); err == nil {
				dest = r
			}
		}
		out = append(out, dest)
	}
	if b.st.ReadOnly {
		out = append(out, "/tmp")
	}
	return out
}

// hostOnlyEnv are variables that describe the host rather than the
// command, dropped when their value is the host's own (see env).
var keepFromHost = []string{"LANG", "LANGUAGE", "LC_*", "TZ", "TERM", "COLORTERM", "NO_COLOR"}

// env is the command's environment in the container: req.Env without the
// variables that are the host's own (same name and value as in
// req.PolicyEnv: PATH, HOME, USER, SHELL and every other one corral
// inherited) unless env_allow or keepFromHost names them, then filtered by
// the environment policy of every backend (hostview.FilterEnvPolicy: names
// and values), which variables a session exported meet too. withheld lists
// the variables dropped for their value. The image's own variables (PATH)
// apply where none is given. HOME and TMPDIR are the container's, and so
// are the tool caches' variables when req.CacheDir is set (CacheDir).
func (b *Backend) env(req *sandbox.Request) (env []string, withheld []hostview.EnvDrop) {
	host := make(map[string]bool, len(req.PolicyEnv))
	policy := req.PolicyEnv
	if policy == nil {
		policy = req.Env
	}
	for _, kv := range policy {
		host[kv] = true
	}
	var keep []string
	for _, kv := range req.Env {
		name, _, _ := strings.Cut(kv, "=")
		if host[kv] && !hostview.EnvDenied(name, keepFromHost) && !hostview.EnvDenied(name, req.EnvAllow) {
			continue
		}
		if name == "HOSTNAME" {
			continue // the container's own (a session saves what it saw)
		}
		keep = append(keep, kv)
	}
	if req.Profile != sandbox.ProfileAllowlist {
		// A session that ran under allowlist saved the proxy variables.
		keep = egress.WithoutEnv(keep)
	}
	deny := append(slices.Clone(hostview.DefaultEnvDeny), req.EnvDeny...)
	env, withheld = hostview.FilterEnvPolicy(keep, deny, req.EnvAllow, "HOME="+Home, "TMPDIR=/tmp", "TMP=/tmp", "TEMP=/tmp")
	if req.CacheDir != "" {
		// The caches go to the container's CacheDir unless a variable
		// already points at a path the container can write: the image's
		// own values are not seen here, and an image's GOPATH=/go or
		// CARGO_HOME=/usr/local/cargo lies on its read-only root.
		roots := b.WritableRoots(req)
		keepPath := func(v string) bool {
			return slices.ContainsFunc(roots, func(w string) bool {
				return v == w || strings.HasPrefix(v, strings.TrimSuffix(w, "/")+"/")
			})
		}
		env = hostview.FilterEnv(env, nil, toolcache.Env(toolcache.Options{Root: CacheDir, Env: env, Keep: keepPath})...)
	}
	return env, withheld
}

// dirIn maps a host directory under the workspace to the container.
func dirIn(ws workspace, dir string) string {
	if dir == "" {
		return ws.Target
	}
	dir = filepath.Clean(dir)
	if rel, err := filepath.Rel(ws.Host, dir); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return filepath.Join(ws.Target, rel)
	}
	return dir
}

// Run implements sandbox.Backend: req runs in the session's container
// (req.Session), started on first use, or in a container of its own that
// is removed afterwards. req.ScratchDir, req.HomeDir and req.CacheDir are
// not mounted: /tmp (TMPDIR, HOME, the tool caches of CacheDir) is the
// container's, kept between the commands of a session. Commands never get a terminal, so isatty is false for stdin,
// stdout and stderr every time (stdin is a pipe or /dev/null); only
// req.TTY (corral shell) runs on a terminal of the engine's (see runTTY).
func (b *Backend) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if len(req.ExtraFiles) > 8 {
		return nil, fmt.Errorf("%w: at most 8 extra descriptors", sandbox.ErrBadRequest)
	}
	c, _, bindWarnings, sec, err := b.ensure(ctx, req)
	if err != nil {
		return nil, err
	}
	// A container of this command alone goes at its end.
	defer b.e.done(c)
	cli, err := b.e.client()
	if err != nil {
		return nil, err
	}
	env, withheld := b.env(req)
	if sec != nil {
		// Per command, never in the container's Env: the stand-ins and
		// the bundle variables set, the real values' sources removed.
		env = hostview.FilterEnv(env, sec.Strip, sec.Set...)
	}
	for _, d := range withheld {
		b.e.log.Info("docker.env.withheld", "container", c.name, "name", d.Name, "kind", d.Kind)
	}
	var res *sandbox.Result
	if req.TTY {
		res, err = b.runTTY(ctx, cli, c, req, env, dirIn(c.ws, req.Dir))
	} else {
		res, err = b.runCmd(ctx, cli, c, req, env, dirIn(c.ws, req.Dir))
	}
	// The notes reach the caller in the result's warnings (the CLI prints
	// them; the log says them at Info, not twice); without a result, the
	// log is all that says them.
	if notes := b.e.quarantine(c); res != nil {
		res.Warnings = append(append(bindWarnings, res.Warnings...), notes...)
	} else {
		for _, n := range notes {
			b.e.log.Warn("docker.protected.changed", "container", c.name, "message", n)
		}
	}
	return res, err
}
