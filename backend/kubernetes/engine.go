package kubernetes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/corralhq/corral/agentclient"
	"github.com/corralhq/corral/backend/internal/scopes"
	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/inside/tunnel"
	"github.com/corralhq/corral/internal/owner"
	"github.com/corralhq/corral/metrics"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
)

// Options configure an Engine.
type Options struct {
	// Helper is a statically linked corral executable on this machine,
	// copied into every pod (cmd/corral-helper, or corral's own); ""
	// means FindHelper's, else corral's own executable, which must then be
	// static (CGO_ENABLED=0).
	Helper string
	// FindHelper, when Helper is "", returns the helper's path, called
	// each time a pod is made or claimed (corral.Host passes its
	// helperbin.Locator's, which looks once per process); "" from it
	// means corral's own executable.
	FindHelper func() string
	// Logger receives the kubernetes.* events; nil discards them.
	Logger *slog.Logger
	// KillGrace is the time between SIGTERM and SIGKILL when a command is
	// cancelled or times out; zero means 2 s.
	KillGrace time.Duration
	// StartTimeout bounds a pod's start (scheduling, image pull, Ready);
	// zero means 3 minutes.
	StartTimeout time.Duration
	// Egress is the process's pool of allowlist proxies (and corral's CA,
	// for secrets); nil refuses the allowlist profile and secrets.
	Egress *egress.Pool
	// SecretFilesDir is where the stand-in copies of secrets' credential
	// files (sandbox.Secret.Files; secrets.CredentialFiles) are written
	// on corral's host before they are copied into a pod: <state
	// dir>/secretfiles, shared with the other backends. "" refuses
	// secrets with files.
	SecretFilesDir string
	// OneShot is set by a corral process that runs one command and exits
	// (`corral run`): it claims free pods of the warm pool (made by a
	// long-running corral) but does not refill it.
	OneShot bool
	// WrapTransport, when set, wraps the HTTP transport of every request
	// to the API server, exec streams included (rest.Config.Wrap): for
	// metrics and tracing; the benchmarks count API calls with it.
	WrapTransport transport.WrapperFunc
	// Metrics, when set, gets the engine's families: its API calls by
	// verb, resource and status class, its warm pool's claims and free
	// pods (metrics.go; docs/serve.md, "Metrics").
	Metrics *metrics.Registry
}

// Engine is the process-wide part of the kubernetes backend: the clients
// (one per kubeconfig and context) and the pods this process made.
// Backends for given settings are views of it (Engine.Backend). Safe for
// concurrent use.
type Engine struct {
	opts Options
	log  *slog.Logger
	self owner.ID

	pool    warmPool
	metrics *engineMetrics // nil: nothing counted

	// table holds the pods this process made, by scope (one-command, a
	// session's, shared), with the commands that hold them, and the
	// resets of sessions whose pod was removed for idleness or lost.
	table *scopes.Table[*podRef, *reset]

	mu      sync.Mutex
	clients map[string]*cluster
	sums    map[string]string // the helper's SHA-256 by path
	quit    chan struct{}     // closed by Close
}

// reset is a session (or shared) pod that is gone: removed by
// idle_timeout (idle), or lost behind corral's back (lost: podLoss's
// phrase; pod its name). The next command of its scope key starts a new
// pod and says so (note); pvc is the workspace PVC kept for it ("" under
// emptyDir). The table keeps it, with the sessions it is for.
//
// from is the session's pod of its previous settings (scopes'
// Lease.Stale), still running until the new pod has its workspace
// (carryWorkspace), then removed; kept here (scopes.NewReset) while a
// failed start is tried again, and removed with the reset's PVC when the
// session ends first (removeKept).
type reset struct {
	idle      time.Duration
	pod, lost string
	pvc       string
	cl        *cluster
	ns        string
	from      *podRef
}

// note is what the first result in the new pod says about the old one
// ("" for a reset that only carries a pod of other settings: its note,
// if any, is carryWorkspace's).
func (r *reset) note() string {
	switch {
	case r.lost != "":
		return lostNote(r.pod, r.lost, r.pvc != "")
	case r.idle > 0:
		return idleNote(r.idle, r.pvc != "")
	}
	return ""
}

// cluster is one kubeconfig's client.
type cluster struct {
	cfg       *rest.Config
	cs        *api
	namespace string // the context's namespace, or "default"
	err       error
}

// podRef is a pod this process made.
type podRef struct {
	name, namespace string
	cl              *cluster
	policy          bool   // a NetworkPolicy of the same name was made
	pvc             string // the workspace PVC, removed with the pod ("" for none)
	workspace       string
	readOnly        bool // the workspace is mounted read-only (restricted)
	denyUnix        bool
	ready           chan struct{}
	err             error
	ephemeral       bool
	// home is set for a session's home pod (ScopeCluster): named by
	// homePodName, shared with every corral serving the session, and
	// kept when this corral stops (Close).
	home bool
	// uid is a home pod's UID once made or found: its removal is
	// conditional on it (another corral may have made a pod of the same
	// name since), and a pod of its name with another UID is not it.
	uid     types.UID
	notes   []string // for the first command's result (under notesMu)
	notesMu sync.Mutex

	agentMu sync.Mutex
	agent   *agentclient.Conn
	stop    context.CancelFunc // ends the agent's exec

	// unreachable counts the commands in a row that could not be sent
	// to it while it looked usable (Backend.runIn).
	unreachable atomic.Int32

	// egress is the pod's allowlist plan (nil under other profiles);
	// proxy its server in the pool, held until remove calls release.
	egress  *egressPlan
	proxy   *netproxy.Server
	release func()
	tunMu   sync.Mutex
	tun     *tunnel.Host
	tunStop context.CancelFunc // ends the tunnel's exec
}

// agentDied reports whether p had an agent whose stream has ended.
func (p *podRef) agentDied() bool {
	p.agentMu.Lock()
	defer p.agentMu.Unlock()
	return p.agent != nil && !p.agent.Alive()
}

// takeNotes returns the pod's notes once.
func (p *podRef) takeNotes() []string {
	p.notesMu.Lock()
	defer p.notesMu.Unlock()
	n := p.notes
	p.notes = nil
	return n
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
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	routeKlog(l)
	e := &Engine{opts: opts, log: l, self: owner.Self(), clients: map[string]*cluster{},
		table: scopes.New[*podRef, *reset](nil), sums: map[string]string{}, quit: make(chan struct{})}
	e.pool = newCorralPool(e, !opts.OneShot)
	e.metrics = newEngineMetrics(opts.Metrics, e)
	return e
}

// ErrClosed is returned for commands after Engine.Close.
var ErrClosed = errors.New("kubernetes backend closed")

// Backend returns the backend that runs commands with settings st. Views
// share the engine's pods; a change of settings makes a new pod for the
// session's next command.
func (e *Engine) Backend(st Settings) *Backend {
	return &Backend{e: e, st: st}
}

// target returns the cluster of st (clusterFor) and the namespace its
// pods live in: kubernetes.namespace, else the kubeconfig context's.
func (e *Engine) target(st *Settings) (*cluster, string, error) {
	cl, err := e.clusterFor(st.Kubeconfig, st.Context)
	if err != nil {
		return nil, "", err
	}
	if st.Namespace != "" {
		return cl, st.Namespace, nil
	}
	return cl, cl.namespace, nil
}

// clusterFor returns the client of kubeconfig path and context ctxName:
// path "" means KUBECONFIG, else ~/.kube/config, else the in-cluster
// config (client-go's loading rules, clientcmd).
func (e *Engine) clusterFor(path, ctxName string) (*cluster, error) {
	key := path + "\x00" + ctxName
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.clients[key]; c != nil {
		return c, c.err
	}
	c := &cluster{}
	e.clients[key] = c
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: ctxName})
	cfg, err := cc.ClientConfig()
	if err != nil {
		c.err = fmt.Errorf("%w: kubernetes backend: no cluster configuration (%v); set kubernetes.kubeconfig or KUBECONFIG, or run corral in a pod", sandbox.ErrUnavailable, err)
		return c, c.err
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "corral"
	if e.opts.WrapTransport != nil {
		cfg.Wrap(e.opts.WrapTransport)
	}
	if e.metrics != nil {
		cfg.Wrap(e.metrics.wrap)
	}
	cs, err := newAPI(cfg)
	if err != nil {
		c.err = fmt.Errorf("%w: kubernetes backend: %v", sandbox.ErrUnavailable, err)
		return c, c.err
	}
	c.cfg, c.cs = cfg, cs
	c.namespace = "default"
	if ns, _, err := cc.Namespace(); err == nil && ns != "" {
		c.namespace = ns
	}
	return c, nil
}

// apiErr classifies an error of an API call: an unreachable API server
// means the backend is unavailable (nothing was run).
func apiErr(what string, err error) error {
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return fmt.Errorf("%w: kubernetes backend: %s: %v (corral needs to create, get, list and delete pods, pods/exec, networkpolicies and persistentvolumeclaims in the namespace, and to update pods for the warm pool)", sandbox.ErrUnavailable, what, err)
		}
		return fmt.Errorf("kubernetes backend: %s: %w", what, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("kubernetes backend: %s: the cluster had not answered when the command's time ran out or it was cancelled, so nothing was run: %w", what, err)
	}
	return fmt.Errorf("%w: kubernetes backend: %s: the API server is not reachable (%v); nothing was run", sandbox.ErrUnavailable, what, err)
}

// Release ends the session called name's use of its pod: a session pod is
// removed, a shared one when no session uses it any more. A workspace PVC
// kept for the session (a reset) goes too. A session's home pod
// (ScopeCluster) stays: this corral's end of the session is not the
// session's, which other corral processes may serve; this corral only
// ends its agent and tunnel there.
func (e *Engine) Release(name string) {
	drop, kept := e.table.Release(name)
	for _, d := range drop {
		if d.Handle.home {
			e.detach(d.Handle)
			continue
		}
		e.remove(d.Handle, d.Why)
	}
	for _, r := range kept {
		e.removeKept(r)
	}
}

// done ends a command's hold on p (ensure), removing p when that was the
// last hold of a pod nothing else keeps: one command's (lost or not),
// before done returns; one that failed to start, in the background, as
// such pods were removed before.
func (e *Engine) done(p *podRef) {
	d := e.table.Done(p)
	switch {
	case d == nil:
	case p.ephemeral && p.err == nil:
		e.remove(p, d.Why)
	default:
		go e.remove(p, d.Why)
	}
}

// removeKept deletes the workspace PVC kept for a session whose idle pod
// was removed, and the pod of its previous settings whose workspace was
// to be carried over (reset.from).
func (e *Engine) removeKept(r *reset) {
	if r.from != nil {
		e.remove(r.from, scopes.WhySettings)
		r.from = nil
	}
	if r.pvc == "" || r.cl == nil || r.cl.cs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.cl.cs.remove(ctx, r.ns, resClaims, r.pvc); err != nil && !apierrors.IsNotFound(err) {
		e.log.Warn("kubernetes.pvc.remove_failed", "pvc", r.pvc, "namespace", r.ns, "error", err)
	}
}

// Close removes every pod (with its NetworkPolicy and PVC) this process
// made, the warm pool's free pods it made included, and refuses further
// commands. Sessions' home pods (ScopeCluster) stay for the other corral
// processes that serve their sessions: this one only ends its agent and
// tunnel in them.
func (e *Engine) Close() error {
	all, kept, first := e.table.Close()
	if first {
		close(e.quit)
	}
	var wg sync.WaitGroup
	wg.Go(e.pool.close)
	for _, r := range kept {
		wg.Go(func() { e.removeKept(r) })
	}
	for _, d := range all {
		if d.Handle.home {
			wg.Go(func() { e.detach(d.Handle) })
			continue
		}
		wg.Go(func() { e.remove(d.Handle, d.Why) })
	}
	wg.Wait()
	return nil
}

// remove deletes p's pod, NetworkPolicy and PVC once p is ready (made or
// failed), ending this process's agent first. Deletion is immediate
// (grace 0): the pod's processes are the session's, and the session is
// over. A policy is deleted after its pod, so the pod never runs without.
func (e *Engine) remove(p *podRef, why string) {
	e.detach(p)
	if p.cl == nil || p.cl.cs == nil {
		return
	}
	if p.home {
		e.removeHome(p, why)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := deleteObjects(ctx, p.cl.cs, p.namespace, p.name, p.policy, p.pvc); err != nil {
		e.log.Warn("kubernetes.pod.remove_failed", "pod", p.name, "namespace", p.namespace, "error", err)
		return
	}
	e.log.Info("kubernetes.pod.removed", "pod", p.name, "namespace", p.namespace, "reason", why)
}

// detach ends this process's use of p once p is ready (made or failed):
// its agent (which kills the commands it runs), its tunnel and its lease
// of the allowlist's proxy; the pod stays.
func (e *Engine) detach(p *podRef) {
	<-p.ready
	p.agentMu.Lock()
	if p.agent != nil {
		p.agent.Close()
	}
	if p.stop != nil {
		p.stop()
	}
	p.agentMu.Unlock()
	p.tunMu.Lock()
	if p.tun != nil {
		p.tun.Close()
	}
	if p.tunStop != nil {
		p.tunStop()
	}
	if p.release != nil {
		p.release()
		p.release = nil
	}
	p.tunMu.Unlock()
}

// deleteObjects deletes pod name and, when set, its NetworkPolicy (of
// the same name) and its PVC pvc; objects already gone are no error.
func deleteObjects(ctx context.Context, cs *api, ns, name string, policy bool, pvc string) error {
	var errs []error
	if err := cs.remove(ctx, ns, resPods, name); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if pvc != "" {
		if err := cs.remove(ctx, ns, resClaims, pvc); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if policy {
		if err := cs.remove(ctx, ns, resPolicies, name); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ignoreNotFound is err, or nil when it says the object is gone.
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// claimName is the workspace PVC's name of pod name.
func claimName(pod string) string { return pod + "-ws" }

// randomName returns corral-<12 hex>.
func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return NamePrefix + hex.EncodeToString(b[:])
}

// settingsHash identifies what a session's pod is made of: everything its
// pool key (poolKey) holds (the settings that shape a pod, the namespace,
// the workspace path, /tmp's size, what the profile decides, the helper's
// SHA-256), so whatever would make another pool pod makes another session
// pod too; plus the settings a pool key leaves out (warm_pool,
// idle_timeout, scope) and the allowlist plan's key (egressPlan; "" for
// none). A session whose hash changes gets a new pod.
func settingsHash(poolKey string, st *Settings, egressKey string) string {
	b, _ := json.Marshal(struct {
		Pool   string
		S      *Settings
		Egress string
	}{poolKey, st, egressKey})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// helperSum returns the SHA-256 (hex) of the helper at path, read once
// per engine: part of the pool key, so a pool pod holds the helper its
// claimer would copy in.
func (e *Engine) helperSum(path string) (string, error) {
	e.mu.Lock()
	s, ok := e.sums[path]
	e.mu.Unlock()
	if ok {
		return s, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: kubernetes backend: reading corral's helper: %v", sandbox.ErrUnavailable, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%w: kubernetes backend: reading corral's helper: %v", sandbox.ErrUnavailable, err)
	}
	s = hex.EncodeToString(h.Sum(nil))
	e.mu.Lock()
	e.sums[path] = s
	e.mu.Unlock()
	return s, nil
}

var klogOnce sync.Once

// routeKlog sends what client-go logs through klog (to stderr, by
// default: "Copying stderr failed ... use of closed network connection"
// each time an exec stream ends, the streams' ping failures) to corral's
// logger at Debug, under the event kubernetes.client: they are the
// client's own noise about streams corral closed, not a user's business.
// klog's logger is process-wide, so the first engine's logger is used.
func routeKlog(l *slog.Logger) {
	klogOnce.Do(func() {
		klog.SetSlogLogger(slog.New(debugOnly{l.Handler()}))
	})
}

// debugOnly hands every record to h at Debug level.
type debugOnly struct{ h slog.Handler }

func (d debugOnly) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d debugOnly) Handle(ctx context.Context, r slog.Record) error {
	// logr's slog sink hands error records over without asking Enabled.
	if !d.h.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	r2 := slog.NewRecord(r.Time, slog.LevelDebug, "kubernetes.client", r.PC)
	r2.AddAttrs(slog.String("detail", r.Message))
	r.Attrs(func(a slog.Attr) bool { r2.AddAttrs(a); return true })
	return d.h.Handle(ctx, r2)
}

func (d debugOnly) WithAttrs(as []slog.Attr) slog.Handler { return debugOnly{d.h.WithAttrs(as)} }
func (d debugOnly) WithGroup(n string) slog.Handler       { return debugOnly{d.h.WithGroup(n)} }
