package docker

import (
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/agentclient"
	"github.com/corralhq/corral/backend/internal/scopes"
	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/internal/owner"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/seccomp"
)

// Options configure an Engine.
type Options struct {
	// Helper is a statically linked corral executable as the Docker daemon
	// sees it, mounted read-only in every container (cmd/corral-helper,
	// or corral's own); "" means FindHelper's, else corral's own
	// executable, which must then be static (CGO_ENABLED=0).
	Helper string
	// FindHelper, when Helper is "", returns the helper's path, called
	// each time a container is made (corral.Host passes its
	// helperbin.Locator's, which looks once per process); "" from it
	// means corral's own executable.
	FindHelper func() string
	// Logger receives the docker.* events; nil discards them.
	Logger *slog.Logger
	// KillGrace is the time between SIGTERM and SIGKILL when a command is
	// cancelled or times out; zero means 2 s.
	KillGrace time.Duration
	// Join lets this process run commands in a live container of another
	// corral process with the same session and settings (corral exec next
	// to corral mcp) instead of starting its own; whichever of them ends
	// last removes it.
	Join bool
	// QuarantineDir is where protected paths that appear in a workspace
	// after its container started are moved, after the command that made
	// them (<state dir>/quarantine); "" removes them instead.
	QuarantineDir string
	// Egress provides the allowlist profile's proxies (shared with the
	// bwrap backend); nil refuses that profile.
	Egress *egress.Pool
	// ClientOpts replace the client's options (tests); nil means
	// client.FromEnv with API version negotiation, at the address
	// resolveHost chooses from DOCKER_HOST, Host and the usual sockets.
	ClientOpts []client.Opt
	// Host is the docker.host setting this engine was made for: the
	// engine's address unless DOCKER_HOST is set; "" searches the usual
	// sockets (resolveHost).
	Host string
	// HiddenDirs are corral's own directories (config, state, the
	// helper's cache): a bind of or in one is ignored, and one inside a
	// bind is covered.
	HiddenDirs []string
	// EmptyFile is an empty, read-only regular file on the daemon's host,
	// bound read-only over the files a bind must show as empty (credential
	// files, other people's dot files); corral passes <state dir>/empty,
	// the bwrap backend's mask file, and makes it when missing. "" means
	// /dev/null, which every daemon's host has (it reads as empty, a
	// character device).
	EmptyFile string
	// TrustDir is where the trust bundles of containers with secrets are
	// written (<state dir>/trust, as the bwrap backend's): files of public
	// certificates only, bound read-only into containers, so a directory
	// on the daemon's host; its subdirectory node holds the Node preload
	// of allowlist containers (egress.WriteNodeShim). "" refuses secrets
	// and leaves allowlist containers without the preload.
	TrustDir string
	// SecretFilesDir is where the substituted copies of secrets'
	// credential files (sandbox.Secret.Files; secrets.CredentialFiles)
	// are written: <state dir>/secretfiles, shared with the bwrap
	// backend, on the daemon's host (bound read-only into containers);
	// they hold stand-ins, never a real value. "" refuses secrets with
	// files.
	SecretFilesDir string
	// ProfileDir is where the seccomp profile is written as a file for a
	// Podman engine, which takes a path where Docker takes the JSON
	// (podman.go): <state dir>/seccomp, on the engine's host, where no
	// sandbox writes. "" refuses Podman engines; Docker's never need it.
	ProfileDir string
	// ReviewDir is where, on Podman, review mode's read-only overlays
	// (a protected directory both the layer and the host's tree hold)
	// keep a throwaway upper directory each (podmanVolumes: Podman
	// chowns a volume's root at its first mount, which a lower-only
	// overlay refuses): <state dir>/podman-review, on the engine's host,
	// where no sandbox writes. "" refuses such a container on Podman;
	// Docker's never need it.
	ReviewDir string
}

// Engine is the process-wide part of the docker backend: the Engine API
// client and the containers this process started or joined. Backends for
// given settings are views of it (Engine.Backend). Safe for concurrent use.
type Engine struct {
	opts Options
	log  *slog.Logger
	self owner.ID

	cliOnce sync.Once
	made    atomic.Bool // a container was created (removeOwn has work)
	cli     *client.Client
	cliErr  error

	// flavorMu guards flavorKnown and flavorVal: what the engine is
	// (Engine.flavor), asked once.
	flavorMu    sync.Mutex
	flavorKnown bool
	flavorVal   Flavor

	// table holds the containers this process uses, by scope (one-command,
	// a session's, shared), with the commands that hold them.
	table *scopes.Table[*ctr, struct{}]

	mu sync.Mutex // guards bundles

	// peopleHomes lists the other people's homes for the bind policy
	// (hostview.PeopleHomes; tests add homes of their own).
	peopleHomes func(exclude string) []string
	emptyOnce   sync.Once
	emptyErr    error
	// bundles are the images' system trust bundles, by image ID
	// (imageBundle); under mu.
	bundles map[string]imageTrust
	// holds is whether an image holds a path, by image ID and path
	// (imageHolds: rootless Podman's review mode).
	holds map[string]bool
}

// ctr is a container this process uses.
type ctr struct {
	id, name  string
	key       string // LabelKey
	hash      string
	owned     bool // this process removes it
	ephemeral bool // one command's; removed after it
	user      string
	ws        workspace
	ready     chan struct{}
	err       error

	// protected are the protected paths bound read-only in the container
	// (relative to the workspace); patterns the patterns they came from.
	// Others that appear are quarantined after each command (quarantine.go).
	protected, patterns []string
	// wroteBack holds, by the path's name relative to the workspace, the
	// SHA-256 of the git configuration corral wrote back after moving a
	// command's out (handback.WriteBackGitConfigContent): the next check
	// leaves that file alone while it is unchanged, not taking corral's
	// own file for a command's (it was moved and noted twice). Under
	// wroteBackMu: commands of one container end, and are checked, side
	// by side.
	wroteBackMu sync.Mutex
	wroteBack   map[string][32]byte
	// egress is the network allowlist (profile allowlist), or nil;
	// releaseEgress gives its proxy back when the container goes.
	egress        *egressSpec
	releaseEgress func()
	// denyUnix: commands get the syscall filter with AF_UNIX sockets
	// denied on top of the container's profile (workspace and allowlist).
	denyUnix bool

	// review is the session's layer (workspace_mode review), or nil;
	// view is then /proc/PID of the container's init process, through
	// which corral sees the overlay (viewRoot).
	review *reviewSpec
	view   string

	agentMu sync.Mutex
	agent   *agentclient.Conn // this process's helper in the container (agent.go)

	// startedAt is the engine's State.StartedAt when corral started it
	// ("" when joined or unknown): a later value is a restart.
	startedAt string
}

// restartedOutside says how c was changed behind corral's back ("" when
// it was not): removed, stopped, or restarted (`docker restart`, a daemon
// restart with a restart policy). It asks the engine only when c's agent
// died, which every stop or restart causes, so a healthy session pays
// nothing.
func (e *Engine) restartedOutside(ctx context.Context, c *ctr) string {
	c.agentMu.Lock()
	a := c.agent
	c.agentMu.Unlock()
	if a == nil || a.Alive() {
		return ""
	}
	cli, err := e.client()
	if err != nil {
		return ""
	}
	r, err := cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
		return "was removed outside corral"
	case err != nil || r.Container.State == nil:
		return ""
	case !r.Container.State.Running:
		return fmt.Sprintf("was stopped outside corral (%s)", r.Container.State.Status)
	case c.startedAt != "" && r.Container.State.StartedAt != c.startedAt:
		return "was restarted outside corral (at " + r.Container.State.StartedAt + ")"
	}
	return ""
}

// NewEngine returns an engine; nothing is contacted until the first command.
func NewEngine(opts Options) *Engine {
	l := opts.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	if opts.KillGrace == 0 {
		opts.KillGrace = 2 * time.Second
	}
	return &Engine{opts: opts, log: l, self: owner.Self(), table: scopes.New[*ctr, struct{}](nil), peopleHomes: hostview.PeopleHomes}
}

// ErrClosed is returned for commands after Engine.Close.
var ErrClosed = errors.New("docker backend closed")

// client returns the Engine API client, made on first use.
func (e *Engine) client() (*client.Client, error) {
	e.cliOnce.Do(func() {
		opts := e.opts.ClientOpts
		if opts == nil {
			// DOCKER_HOST, docker.host, else Docker's socket or
			// Podman's usual ones.
			h := e.address()
			e.log.Debug("docker.host", "host", h.Addr, "from", h.From)
			opts = []client.Opt{client.FromEnv, client.WithHost(h.Addr), client.WithAPIVersionNegotiation()}
		}
		e.cli, e.cliErr = client.New(opts...)
		if e.cliErr != nil {
			e.cliErr = fmt.Errorf("%w: docker backend: %v; check DOCKER_HOST and docker.host", sandbox.ErrUnavailable, e.cliErr)
		}
	})
	return e.cli, e.cliErr
}

// address is the engine's address and where it came from: DOCKER_HOST,
// docker.host (Options.Host), or the socket search (resolveHost).
func (e *Engine) address() HostChoice { return chooseHost(e.opts.Host) }

// unavailable wraps an error reaching the engine with the fix.
func (e *Engine) unavailable(err error) error {
	host := e.address().Addr
	return fmt.Errorf("%w: docker backend: the Docker engine at %s is not reachable (%v); %s; nothing was run", sandbox.ErrUnavailable, host, err, reachFix(err))
}

// reachFix says how to reach an engine that err (a failed connection)
// did not: when its socket refused this user, how to be let in (and what
// the docker group grants) first; then how to start one or name another.
func reachFix(err error) string {
	fix := "start the engine (`sudo systemctl start docker`, or `sudo dockerd &` where systemd is not running), or point DOCKER_HOST or docker.host at a running engine (Podman: unix://$XDG_RUNTIME_DIR/podman/podman.sock rootless, unix:///run/podman/podman.sock rootful)"
	if errors.Is(err, fs.ErrPermission) || strings.Contains(strings.ToLower(err.Error()), "permission denied") {
		fix = "its socket refuses this user: add the user to the docker group (`sudo usermod -aG docker $USER`, then log in again or run `newgrp docker`; the docker group is root-equivalent: its members can run any container as root with the host's files mounted), or run rootless Docker or Podman as this user and point DOCKER_HOST or docker.host at its socket (Podman: unix://$XDG_RUNTIME_DIR/podman/podman.sock), or run corral as a user that can reach the engine; if the engine is not running, start it (`sudo systemctl start docker`)"
	}
	return fix
}

// engineErr classifies an error of an Engine API call: a connection
// failure means the engine is unavailable. A call cut short by its context
// (the command's timeout or cancellation, while a busy engine was still
// making the container) is named as that, wrapping the context's error:
// the engine answered before, and may again.
func (e *Engine) engineErr(what string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return e.unavailable(err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("docker backend: %s: the engine had not answered when the command's time ran out or it was cancelled, so nothing was run: %w", what, err)
	}
	return fmt.Errorf("docker backend: %s: %w", what, err)
}

// helperPath returns the executable to mount as inside.Path.
func (e *Engine) helperPath() (string, error) {
	p := e.opts.Helper
	if p == "" && e.opts.FindHelper != nil {
		p = e.opts.FindHelper()
	}
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("%w: docker backend: finding corral's executable: %v", sandbox.ErrUnavailable, err)
		}
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		p = exe
	}
	if err := checkStatic(p); err != nil {
		return "", err
	}
	return p, nil
}

var staticCache sync.Map // path+mtime -> error

// checkStatic refuses an executable that needs a dynamic loader: the image
// may have no C library, or another one.
func checkStatic(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%w: docker backend: corral's helper %s: %v", sandbox.ErrUnavailable, p, err)
	}
	key := fmt.Sprintf("%s|%d|%d", p, st.ModTime().UnixNano(), st.Size())
	if v, ok := staticCache.Load(key); ok {
		if v == nil {
			return nil
		}
		return v.(error)
	}
	var res error
	f, err := elf.Open(p)
	if err != nil {
		res = fmt.Errorf("%w: docker backend: corral's helper %s is not an ELF executable: %v", sandbox.ErrUnavailable, p, err)
	} else {
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				res = fmt.Errorf("%w: docker backend: %s is dynamically linked, and the image may lack its C library; build corral statically: CGO_ENABLED=0 go build -o corral ./cmd/corral", sandbox.ErrUnavailable, p)
			}
		}
		f.Close()
	}
	if res == nil {
		staticCache.Store(key, nil)
	} else {
		staticCache.Store(key, res)
	}
	return res
}

var (
	profileOnce              sync.Once
	profileJSON, profileDeny string
	profileErr               error
)

// filter returns the syscall filter for commands of profile: the Docker
// seccomp profile corral builds (seccomp.DockerProfile) for every
// container, with AF_UNIX sockets denied by the helpers under workspace
// and allowlist. Fails closed: an error means no container starts.
func (e *Engine) filter(profile sandbox.Profile) (*filterSpec, error) {
	profileOnce.Do(func() {
		var b, d []byte
		if b, profileErr = seccomp.DockerProfile(seccomp.Options{}); profileErr == nil {
			d, profileErr = seccomp.DockerProfile(seccomp.Options{DenyUnixSockets: true})
		}
		profileJSON, profileDeny = string(b), string(d)
	})
	if profileErr != nil {
		return nil, fmt.Errorf("%w: docker backend: building the seccomp profile: %v", sandbox.ErrUnavailable, profileErr)
	}
	f := &filterSpec{profile: profileJSON, denyUnix: profile.DeniesUnixSockets()}
	if f.denyUnix && profile != sandbox.ProfileAllowlist {
		// The whole container, its init and pause process included, so no
		// process a command could write code into can make a Unix socket.
		// Under allowlist the forwarder (the main process) needs them: the
		// helpers add the denial for commands only.
		f.profile = profileDeny
	}
	return f, nil
}

// Backend returns the backend that runs commands with settings st. Views
// share the engine's containers; settings are read per command, so a change
// of settings makes a new container for the next command.
func (e *Engine) Backend(st Settings) *Backend {
	return &Backend{e: e, st: st}
}

// Release ends the session called name's use of its container: a session
// container is removed, a shared one when no session uses it any more.
func (e *Engine) Release(name string) {
	drops, _ := e.table.Release(name)
	for _, d := range drops {
		e.remove(d.Handle, d.Why)
	}
}

// done ends a command's hold on c (ensure), removing c when that was the
// last hold of a container nothing else keeps: one command's, or one
// that failed to start.
func (e *Engine) done(c *ctr) {
	if d := e.table.Done(c); d != nil {
		e.remove(d.Handle, d.Why)
	}
}

// Close removes every container this process started and refuses further
// commands. Containers it joined (another corral's) are left alone.
func (e *Engine) Close() error {
	all, _, _ := e.table.Close()
	var wg sync.WaitGroup
	for _, d := range all {
		wg.Go(func() { e.remove(d.Handle, d.Why) })
	}
	wg.Wait()
	e.removeOwn()
	if e.cli != nil {
		return e.cli.Close()
	}
	return nil
}

// remove force-removes c, once it is ready, when this process is the last
// corral to use it: it started it, or joined it and its starter is gone;
// and no other corral's agent runs in it. It gives the allowlist proxy back.
func (e *Engine) remove(c *ctr, why string) {
	<-c.ready
	if c.releaseEgress != nil {
		defer c.releaseEgress()
	}
	if c.err != nil || c.id == "" {
		return
	}
	cli, err := e.client()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !c.owned && !c.ephemeral {
		// Joined: remove it only when its starter is gone.
		r, err := cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
		if err != nil || r.Container.Config == nil {
			return
		}
		if o, ok := owner.Parse(r.Container.Config.Labels[LabelOwner]); !ok || o.State(e.self) != owner.Dead {
			return
		}
	}
	// What a process that outlived its command made is checked once more;
	// no result carries these notes, so the log says them.
	for _, n := range e.quarantine(c) {
		e.log.Warn("docker.protected.changed", "container", c.name, "message", n)
	}
	if !c.ephemeral && e.othersInside(ctx, cli, c) {
		e.log.Info("docker.container.kept", "container", c.name, "key", c.key, "reason", "another corral runs commands in it")
		return
	}
	// The removal gets its own time: on a busy engine the checks above
	// must not use it up.
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if _, err := cli.ContainerRemove(rctx, c.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		e.log.Warn("docker.container.remove_failed", "container", c.name, "error", err)
		return
	}
	e.log.Info("docker.container.removed", "container", c.name, "key", c.key, "reason", why)
	e.removeVolumesOf(rctx, cli, c.name, why)
}

// removeStopped force-removes c when this process owns it and it is not
// running (stopped by a daemon restart, killed): remove's checks exec in
// the container, which a stopped one refuses, and which fail back here.
func (e *Engine) removeStopped(c *ctr) {
	if !c.owned || c.id == "" {
		return
	}
	cli, err := e.client()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
	if err != nil || r.Container.State == nil || r.Container.State.Running {
		return // gone already, or running: Close's sweep takes it
	}
	if _, err := cli.ContainerRemove(ctx, c.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		e.log.Warn("docker.container.remove_failed", "container", c.name, "error", err)
		return
	}
	if c.releaseEgress != nil {
		c.releaseEgress()
	}
	e.log.Info("docker.container.removed", "container", c.name, "key", c.key, "reason", "stopped outside corral")
	e.removeVolumesOf(ctx, cli, c.name, "stopped outside corral")
}

// removeOwn force-removes every container labelled as this process's
// (LabelOwner) that is not running: those its table no longer holds
// (stopped, killed by a daemon restart, dead) must not outlive it. A
// running one went through remove, which keeps it only for another corral
// that joined it.
func (e *Engine) removeOwn() {
	if e.cli == nil || !e.made.Load() {
		return // it made none: nothing to ask an engine it may not reach
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := client.Filters{}.Add("label", LabelEnv+"=1", LabelOwner+"="+e.self.String())
	res, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		e.log.Warn("docker.container.sweep_failed", "error", err)
		return
	}
	for _, s := range res.Items {
		if s.State == "running" {
			// remove judged it (kept for another corral that joined it,
			// which removes it at its end): the sweep is for the
			// stopped and dead that left the table.
			continue
		}
		if _, err := e.cli.ContainerRemove(ctx, s.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			e.log.Warn("docker.container.remove_failed", "container", s.ID[:12], "error", err)
			continue
		}
		e.log.Info("docker.container.removed", "container", s.ID[:12], "key", s.Labels[LabelKey], "reason", "corral stopped; it had left the table ("+string(s.State)+")")
		if len(s.Names) > 0 {
			e.removeVolumesOf(ctx, e.cli, strings.TrimPrefix(s.Names[0], "/"), "corral stopped")
		}
	}
}

// othersInside reports whether an agent other than this process's runs in
// c (another corral joined it). Unsure (the exec fails) counts as no.
func (e *Engine) othersInside(ctx context.Context, cli *client.Client, c *ctr) bool {
	c.agentMu.Lock()
	a := c.agent
	c.agentMu.Unlock()
	// Every agent this process started, the current one and any whose
	// stream broke but which is still ending, is its own, not another
	// corral's (agentFor marks them with --owner).
	argv := []string{inside.Path, inside.ModeAgents, "--except-owner", e.self.String()}
	if a != nil {
		pid := a.PID()
		a.Close()
		if pid > 0 {
			argv = append(argv, "--except", strconv.Itoa(pid))
		}
	}
	// An agent whose corral just went away takes a moment to end: ask
	// again a few times before calling the container in use.
	for try := 0; ; try++ {
		var out strings.Builder
		code, err := e.simpleExec(ctx, cli, c, argv, &out, io.Discard)
		if err != nil || code != 0 {
			return false
		}
		if n, _ := strconv.Atoi(strings.TrimSpace(out.String())); n == 0 {
			return false
		}
		if try == 3 {
			return true
		}
		select {
		case <-ctx.Done():
			return true
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// randomName returns corral-<12 hex>.
func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return NamePrefix + hex.EncodeToString(b[:])
}
