package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/agentclient"
	"github.com/corralhq/corral/backend/internal/scopes"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// Name is the backend's configuration name.
const Name = "kubernetes"

// Backend runs commands in pods with one set of Settings. It is a view of
// an Engine (Engine.Backend); it implements sandbox.Backend,
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

// Name implements sandbox.Backend: "kubernetes".
func (b *Backend) Name() string { return Name }

var _ sandbox.Traiter = (*Backend)(nil)

// Traits implements sandbox.Traiter: a pod of the session's own, whose
// workspace is its own volume.
func (b *Backend) Traits() sandbox.Traits {
	return sandbox.Traits{Where: "a pod on a Kubernetes cluster", OwnWorkspace: true}
}

// DefaultCwd implements sandbox.Backend: no preference (the workspace
// appears at the session's working directory).
func (b *Backend) DefaultCwd() string { return "" }

// Settings returns the settings of this view.
func (b *Backend) Settings() Settings { return b.st }

// Release implements sandbox.SessionBackend.
func (b *Backend) Release(name string) { b.e.Release(name) }

// SupportsStreams implements sandbox.StreamBackend.
func (b *Backend) SupportsStreams() bool { return true }

// HelperPath implements sandbox.Layout: corral's executable is copied to
// inside.Path.
func (b *Backend) HelperPath() string { return inside.Path }

// WritableRoots implements sandbox.Layout: the workspace (unless the
// profile is restricted: it is then mounted read-only) and /tmp.
func (b *Backend) WritableRoots(req *sandbox.Request) []string {
	var out []string
	if req.Profile.Writable() || req.Profile == "" {
		out = append(out, req.Workdir)
	}
	return append(out, "/tmp")
}

// keepFromHost are the host's variables passed on although they are the
// host's own (as on docker).
var keepFromHost = []string{"LANG", "LANGUAGE", "LC_*", "TZ", "TERM", "COLORTERM", "NO_COLOR"}

// env is the command's environment in the pod: req.Env without the
// variables that are the host's own (same name and value as in
// req.PolicyEnv) unless keepFromHost or env_allow names them, filtered by
// the environment policy of every backend (hostview.FilterEnvPolicy), with
// HOME and TMPDIR the pod's /tmp. The image's variables (PATH) apply
// where none is given.
func env(req *sandbox.Request) []string {
	host := map[string]bool{}
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
			continue
		}
		keep = append(keep, kv)
	}
	// A session that ran under allowlist saved the proxy variables: they
	// are set again per command under allowlist (Run), and must not
	// follow the session to another profile.
	keep = withoutProxyEnv(keep, req.Secrets)
	deny := append(slices.Clone(hostview.DefaultEnvDeny), req.EnvDeny...)
	out, _ := hostview.FilterEnvPolicy(keep, deny, req.EnvAllow, "HOME="+Home, "TMPDIR=/tmp", "TMP=/tmp", "TEMP=/tmp")
	return out
}

// refuse returns why req cannot run on this backend yet, or nil. Each
// refusal is fail-closed: what the backend cannot promise is not run.
func (b *Backend) refuse(req *sandbox.Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	switch {
	case len(req.ExtraFiles) > 8:
		return fmt.Errorf("%w: at most 8 extra descriptors", sandbox.ErrBadRequest)
	case req.LayerDir != "":
		return fmt.Errorf("%w: workspace_mode review is not available on the kubernetes backend; use workspace_mode direct", sandbox.ErrPolicy)
	case req.Profile == sandbox.ProfileAllowlist && b.e.opts.Egress == nil:
		return fmt.Errorf("%w: kubernetes backend: the allowlist profile and secrets need corral's proxies, and none were configured", sandbox.ErrUnavailable)
	case req.TTY:
		return fmt.Errorf("%w: kubernetes backend (preview): interactive shells (corral shell) are not built yet", sandbox.ErrUnavailable)
	case req.User != "":
		return fmt.Errorf("%w: kubernetes backend: every command runs as kubernetes.user; --user is not available", sandbox.ErrBadRequest)
	}
	return nil
}

// Run implements sandbox.Backend: req runs in the session's pod
// (req.Session), made on its first command, or in a pod of its own that is
// removed afterwards. req.ScratchDir, req.HomeDir and req.CacheDir are not
// mounted: /tmp (TMPDIR, HOME) is the pod's, kept between the commands of
// a session. Commands never get a terminal.
//
// A pod gone behind corral's back (evicted, deleted, its commands'
// container ended: podLoss) is replaced. A command that could not be sent
// to it runs in a new pod (once; a second lost pod fails as passing,
// sandbox.ErrTransient), whose result carries a note naming the cause and
// what was lost (lostNote). A command running when the pod went fails as
// sandbox.ErrMayHaveRun naming the cause, and the session's next command
// runs in a new pod with that note. A pod that looks usable but cannot be
// reached fails the command as passing and is kept, until a second
// command in a row cannot reach it either: that one runs in a new pod.
func (b *Backend) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	if err := b.refuse(req); err != nil {
		return nil, err
	}
	plan, err := planEgress(req, b.e.opts.SecretFilesDir)
	if err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		p, err := b.ensure(ctx, req, plan)
		if err != nil {
			return nil, err
		}
		res, again, err := b.runIn(ctx, req, plan, p)
		if !again {
			return res, err
		}
		if try == 2 {
			return nil, sandbox.Transient(fmt.Errorf("%w: kubernetes backend: %v; nothing was run, and the next command starts another pod", sandbox.ErrUnavailable, err))
		}
		b.e.log.Info("kubernetes.pod.replaced", "pod", p.name, "namespace", p.namespace, "session", req.Session, "error", err)
	}
}

// maxUnreachable is how many commands in a row may fail to reach a pod
// that looks usable before it is replaced (runIn): one failure may be the
// API server's or the network's for a moment, and replacing the pod
// loses its workspace.
const maxUnreachable = 2

// runIn runs req in p, ready for it (ensure). again reports that nothing
// was run because p is gone (Engine.lose has taken it out of the table):
// the caller runs req in a new pod; err then says why.
func (b *Backend) runIn(ctx context.Context, req *sandbox.Request, plan *egressPlan, p *podRef) (res *sandbox.Result, again bool, err error) {
	e := b.e
	// A pod of this command alone goes at its end.
	defer e.done(p)
	if p.agentDied() {
		// An earlier command's agent stream broke: one read says whether
		// the pod went with it (its next command would find out slowly).
		if why := e.lossOf(ctx, p, 0); why != "" {
			e.lose(p, why)
			return nil, true, fmt.Errorf("pod %s %s", p.name, why)
		}
	}
	// notSent is the outcome of a command that could not be sent to p
	// (cause): nothing ran.
	notSent := func(cause error) (*sandbox.Result, bool, error) {
		if ctx.Err() != nil {
			return nil, false, cause
		}
		if why := e.lossOf(ctx, p, lossSettle); why != "" {
			e.lose(p, why)
			return nil, true, fmt.Errorf("pod %s %s", p.name, why)
		}
		if p.unreachable.Add(1) >= maxUnreachable {
			e.lose(p, fmt.Sprintf("could not be reached by %d commands in a row, although the API server showed it running (last: %v)", maxUnreachable, cause))
			return nil, true, cause
		}
		e.log.Warn("kubernetes.pod.unreachable", "pod", p.name, "namespace", p.namespace, "error", cause)
		return nil, false, sandbox.Transient(cause)
	}
	if p.egress != nil {
		// Fail closed: without the tunnel the command does not run.
		if err := e.tunnelFor(ctx, p); err != nil {
			return notSent(err)
		}
	}
	a, err := e.agentFor(p)
	if err != nil {
		return notSent(err)
	}
	dir := req.Dir
	if dir == "" {
		dir = p.workspace
	}
	cmdEnv := env(req)
	if plan != nil {
		// Per command, never in the pod's spec: the proxy variables,
		// and with secrets the stand-ins and the bundle's variables set,
		// the real values' sources removed.
		set := proxyEnv(req.Secrets)
		var strip []string
		if plan.prep != nil {
			strip, set = plan.prep.Strip, append(set, plan.prep.Env...)
		}
		cmdEnv = hostview.FilterEnv(cmdEnv, strip, set...)
	}
	start := time.Now()
	s, err := a.Start(req, cmdEnv, dir)
	if err != nil {
		return notSent(err)
	}
	p.unreachable.Store(0)
	res, err = agentclient.Wait(ctx, req, s, start, agentclient.WaitOptions{
		KillGrace: e.opts.KillGrace,
		Fallback:  func(pgid int, sig syscall.Signal) { e.signalFallback(p, pgid, sig) },
		OOM:       func() bool { return e.oomKilled(p) },
		OOMLimit:  sandbox.LimitPodMemory,
		// The helper stopped answering: the pod is lost to its scope,
		// which gets a new one and a note.
		Stuck: func(why string) { e.lose(p, why) },
	})
	if res != nil {
		res.Warnings = append(res.Warnings, p.takeNotes()...)
	}
	if err != nil && !a.Alive() {
		// The command was sent: whatever became of the pod, it may have
		// run (err is sandbox.ErrMayHaveRun), so it is never sent again.
		// A pod that went takes its cause into the error and a note to
		// the session's next command; one still there keeps its
		// workspace, and the next command starts another agent in it.
		if why := e.lossOf(context.WithoutCancel(ctx), p, lossSettle); why != "" {
			e.lose(p, why)
			err = fmt.Errorf("kubernetes backend: pod %s %s (the session's next command runs in a new pod): %w", p.name, why, err)
		} else {
			e.log.Warn("kubernetes.agent.lost", "pod", p.name, "namespace", p.namespace, "error", err)
		}
	}
	return res, false, err
}

// oomKilled asks the API server whether the pod's commands' container
// (ContainerName) was killed for memory (its last state says OOMKilled):
// the helper reads the cgroup's count first (inside.Exit.OOMKnown), this
// is the fallback.
func (e *Engine) oomKilled(p *podRef) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pod corev1.Pod
	if err := p.cl.cs.get(ctx, p.namespace, resPods, p.name, &pod); err != nil {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ContainerName {
			continue // the helper container's memory is not the commands'
		}
		for _, st := range []corev1.ContainerState{cs.State, cs.LastTerminationState} {
			if st.Terminated != nil && st.Terminated.Reason == "OOMKilled" {
				return true
			}
		}
	}
	return false
}

// ensure returns the ready pod of req: the session's (or the shared one),
// made on first use (claimed from the warm pool when it has one); for
// req.Session == "" a new one of its own. The pod counts the command as
// holding it (Engine.done ends that, and removes a pod of one command).
// plan is the allowlist's (nil under other profiles).
func (b *Backend) ensure(ctx context.Context, req *sandbox.Request, plan *egressPlan) (*podRef, error) {
	e := b.e
	st := b.st
	p, err := st.check()
	if err != nil {
		return nil, err
	}
	ws, err := workspacePath(req.Workdir)
	if err != nil {
		return nil, err
	}
	helper, err := e.helperPath()
	if err != nil {
		return nil, err
	}
	sum, err := e.helperSum(helper)
	if err != nil {
		return nil, err
	}
	cl, ns, err := e.target(&st)
	if err != nil {
		return nil, err
	}
	denyNet := !req.Profile.HostNetwork() && req.Profile != ""
	denyUnix := req.Profile.DeniesUnixSockets()
	readOnly := !req.Profile.Writable()
	egressKey := ""
	if plan != nil {
		egressKey = plan.key
	}
	tmp := resource.MustParse("512Mi")
	if req.TmpSizeMB > 0 {
		tmp = *resource.NewQuantity(int64(req.TmpSizeMB)<<20, resource.BinarySI)
	}
	// The pool key leaves the allowlist plan out: a pool pod is the same
	// pod whatever the allowlist; its proxy and tunnel come at the claim.
	pk := poolKey(&st, ns, ws, tmp, denyNet, denyUnix, readOnly, sum)
	sp := &podSpec{cl: cl, ns: ns, st: st, p: p, profile: req.Profile, workspace: ws, tmp: tmp, readOnly: readOnly, denyUnix: denyUnix,
		hash: settingsHash(pk, &st, egressKey) + "-" + ns, helper: helper, helperSum: sum, key: pk}
	key := req.Session
	var annot string
	switch {
	case key == "":
	case st.Scope == ScopeShared:
		annot = "shared"
	default:
		annot = key
	}
	// Counted as held before the table is unlocked, so the idle watch
	// never removes a pod a command is about to use.
	home := st.Scope == ScopeCluster && key != ""
	l, ok := e.table.Acquire(key, scopes.KeyFor(key, st.Scope == ScopeShared, sp.hash), func() *podRef {
		name := randomName()
		if home {
			name = homePodName(key, sp.hash)
		}
		return &podRef{name: name, namespace: ns, cl: cl, workspace: ws, readOnly: readOnly, denyUnix: denyUnix,
			ready: make(chan struct{}), ephemeral: key == "", egress: plan, home: home}
	})
	if !ok {
		return nil, ErrClosed
	}
	ref := l.Handle
	for _, d := range l.Stale {
		// The session's pod of its previous settings stays until the
		// new one has its workspace (start: carryWorkspace).
		if l.Reset == nil {
			l.Reset = scopes.NewReset(req.Session, &reset{})
		}
		if r := l.Reset.Value; r.from == nil {
			r.from = d.Handle
			continue
		}
		e.remove(d.Handle, d.Why)
	}
	if !l.New {
		select {
		case <-ref.ready:
		case <-ctx.Done():
			e.done(ref)
			return nil, ctx.Err()
		}
		if ref.err != nil {
			e.done(ref)
		}
		return ref, ref.err
	}
	var rs *reset
	if l.Reset != nil {
		rs = l.Reset.Value
	}
	if rs != nil && rs.pvc != "" && st.Storage != StoragePVC {
		// A reset that followed the session from settings with a PVC
		// to an emptyDir: nothing will mount the PVC, and the note
		// says the workspace was reset.
		e.removeKept(&reset{pvc: rs.pvc, cl: rs.cl, ns: rs.ns})
		rs.pvc = ""
	}
	if st.WarmPool > 0 && !home {
		e.pool.keep(sp, st.WarmPool)
	}
	ref.err = b.start(ctx, ref, sp, annot, rs, req)
	if ref.err != nil {
		// The next command of its key tries again; the session's kept
		// workspace, and the note of what became of its old pod, stay
		// for that try.
		e.table.Retire(ref, "start failed", nil)
		switch {
		case e.table.Restore(l.Key, l.Reset):
			if rs.pvc != "" {
				ref.pvc = ""
			}
		case rs != nil:
			e.removeKept(&reset{from: rs.from})
		}
	}
	close(ref.ready)
	if ref.err != nil {
		e.done(ref)
		return nil, ref.err
	}
	switch {
	case p.idle > 0 && ref.home:
		// A home pod's idleness is every corral's, not this one's.
		go e.watchHome(ref, p.idle)
	case p.idle > 0 && !ref.ephemeral:
		go e.watchIdle(ref, p.idle)
	}
	return ref, nil
}

// start gives ref a ready pod of sp for session: a free one of the warm
// pool when there is one (and no kept workspace PVC to mount), else a new
// one (makePod). rs is the session's pod removed for idleness or lost, if
// any: its workspace PVC is mounted again, and the first result says what
// was reset (reset.note); or it holds the session's pod of its previous
// settings (reset.from), whose workspace is copied into the new pod
// (carryWorkspace; where it cannot be, the first result says why) before
// that pod is removed. On error the caller removes what was made.
func (b *Backend) start(ctx context.Context, ref *podRef, sp *podSpec, session string, rs *reset, req *sandbox.Request) error {
	if err := b.startPod(ctx, ref, sp, session, rs, req); err != nil {
		return err
	}
	if rs != nil && rs.from != nil {
		// The workspace of the session's pod of its previous settings
		// comes over before that pod goes.
		if note := b.e.carryWorkspace(ctx, rs.from, ref); note != "" {
			ref.notes = append(ref.notes, note)
		}
		b.e.remove(rs.from, scopes.WhySettings)
		rs.from = nil
	}
	return nil
}

// startPod is start's pod: claimed from the warm pool or made.
func (b *Backend) startPod(ctx context.Context, ref *podRef, sp *podSpec, session string, rs *reset, req *sandbox.Request) error {
	e := b.e
	if rs != nil {
		if n := rs.note(); n != "" {
			ref.notes = append(ref.notes, n)
		}
	}
	// A session's home pod has the name every corral finds it by: a free
	// pod of the pool, named at random, cannot be it.
	if sp.st.WarmPool > 0 && (rs == nil || rs.pvc == "") && !ref.home {
		t0 := time.Now()
		name, err := e.pool.take(ctx, sp, session, ref)
		if err != nil {
			// A cold start is still possible; the pool is an optimisation.
			e.log.Warn("kubernetes.pool.claim_failed", "key", sp.key, "error", err)
		}
		if name != "" {
			ref.name = name
			ref.policy = buildPolicy(sp.plan(name, "", ""), sp.profile) != nil
			if sp.st.Storage == StoragePVC {
				ref.pvc = claimName(name)
			}
			e.seccompNote(ref, &sp.st)
			e.pool.keep(sp, sp.st.WarmPool)
			if err := e.startEgress(ctx, ref, session); err != nil {
				return err
			}
			e.log.Info("kubernetes.pod.started", "pod", name, "namespace", sp.ns, "session", session,
				"from", "warm pool", "total", time.Since(t0).String(), "policy", ref.policy)
			return nil
		}
		e.log.Debug("kubernetes.pool.empty", "key", sp.key, "session", session)
	}
	who := e.self.String()
	if ref.home {
		// Not this corral's: cleanup must not remove it when this corral
		// is gone (decide keeps an object with no valid owner).
		who = HomeOwner
	}
	pl := sp.plan(ref.name, session, who)
	pl.home = ref.home
	if rs != nil && rs.pvc != "" {
		pl.claim, pl.existingClaim = rs.pvc, true
	}
	e.seccompNote(ref, &sp.st)
	return e.makePod(ctx, ref, sp, pl, req.Progress)
}

// idleNote is the note on the first result in a pod that replaced one
// removed after idle_timeout (pure).
func idleNote(idle time.Duration, pvcKept bool) string {
	if pvcKept {
		return fmt.Sprintf("this session's pod was removed after kubernetes.idle_timeout (%s) without a command; this command runs in a new pod with the same workspace volume (PVC); /tmp and background processes are gone", idle)
	}
	return fmt.Sprintf("this session's pod was removed after kubernetes.idle_timeout (%s) without a command; this command runs in a new pod: the workspace was reset (emptyDir) and /tmp and background processes are gone", idle)
}

// seccompNote notes (and logs) that the pod runs under RuntimeDefault.
func (e *Engine) seccompNote(ref *podRef, st *Settings) {
	if st.SeccompProfile != "" {
		return
	}
	ref.notes = append(ref.notes, "this pod runs under the container runtime's default seccomp profile (RuntimeDefault), not corral's own: install corral's profile on the nodes and set kubernetes.seccomp_profile")
	e.log.Info("kubernetes.seccomp.runtime_default", "pod", ref.name,
		"detail", "the pod runs under the container runtime's default seccomp profile; corral's own filter is added by its helper only for AF_UNIX sockets (workspace, restricted); install corral's profile on the nodes and set kubernetes.seccomp_profile")
}

// makePod makes pl's NetworkPolicy (first, so the pod never runs without
// it), PVC (unless pl.existingClaim) and pod, waits for the pod to be
// Ready and copies the helper in. On error the caller removes what was
// made (recorded in ref).
func (e *Engine) makePod(ctx context.Context, ref *podRef, sp *podSpec, pl podPlan, progress func(string)) error {
	cs := ref.cl.cs
	ctx, cancel := context.WithTimeout(ctx, e.opts.StartTimeout)
	defer cancel()
	t0 := time.Now()
	if progress != nil {
		progress("starting a pod in namespace " + pl.namespace)
	}
	// A home pod may have been made by another corral serving the same
	// session: the API server settles the race (one create succeeds, the
	// others get AlreadyExists and use what it made: createPod).
	if ref.home {
		pl.policyName = homePolicyName(pl.name)
	}
	np := buildPolicy(pl, sp.profile)
	if np != nil && !ref.home {
		if err := cs.create(ctx, pl.namespace, resPolicies, np, &networkingv1.NetworkPolicy{}); err != nil {
			return apiErr("creating the NetworkPolicy", err)
		}
		ref.policy = true
	}
	if sp.st.Storage == StoragePVC {
		if !pl.existingClaim {
			if err := cs.create(ctx, pl.namespace, resClaims, buildClaim(&sp.st, sp.p, pl), &corev1.PersistentVolumeClaim{}); err != nil {
				return apiErr("creating the workspace PVC", err)
			}
		}
		ref.pvc = pl.claim
	}
	made, uid, err := e.createPod(ctx, ref, buildPod(&sp.st, sp.p, pl))
	if err != nil {
		return err
	}
	ref.uid = uid
	if np != nil && made && ref.home {
		// A home pod's policy is made after it, owned by it (the
		// garbage collector removes it with this pod, never with a
		// later pod of the same name), and before any command runs in
		// it: the pod runs only sleep until its helper is uploaded, and
		// other corrals use it only once its maker says so.
		np.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pl.name, UID: uid}}
		if err := cs.create(ctx, pl.namespace, resPolicies, np, &networkingv1.NetworkPolicy{}); err != nil {
			return apiErr("creating the NetworkPolicy", err)
		}
		ref.policy = true
	}
	if !made {
		// Another corral made it: it is ready for commands once that
		// corral has uploaded and checked the helper and said so.
		if err := waitPodUntil(ctx, cs, pl.namespace, pl.name, func(pod *corev1.Pod) bool {
			return pod.UID == uid && podReady(pod) && pod.Annotations[AnnotationHelper] == sp.helperSum
		}); err != nil {
			// Its maker never said it was ready (lost while making it):
			// the next command makes it afresh.
			e.removeHome(ref, "not made ready in time by the corral that made it")
			return err
		}
		if err := e.startEgress(ctx, ref, pl.session); err != nil {
			return err
		}
		e.log.Info("kubernetes.pod.found", "pod", pl.name, "namespace", pl.namespace, "session", pl.session, "total", time.Since(t0).String())
		return nil
	}
	if err := waitReady(ctx, cs, pl.namespace, pl.name); err != nil {
		return err
	}
	ready := time.Since(t0)
	if err := e.uploadHelper(ctx, ref, sp.helper); err != nil {
		return err
	}
	if ref.home {
		if err := annotatePod(ctx, cs, pl.namespace, pl.name, AnnotationHelper, sp.helperSum); err != nil {
			return apiErr("marking the pod's helper ready", err)
		}
	}
	if err := e.startEgress(ctx, ref, pl.session); err != nil {
		return err
	}
	e.log.Info("kubernetes.pod.started", "pod", pl.name, "namespace", pl.namespace, "session", pl.session,
		"ready", ready.String(), "total", time.Since(t0).String(), "policy", ref.policy, "pool", pl.poolKey != "")
	return nil
}

// startEgress gives ref's pod, ready with the helper in it, the
// allowlist's proxy (leased from the pool for as long as the pod lives:
// remove releases it), the files its commands need (trust bundle, Node
// preload) and the tunnel to the proxy; nothing without an allowlist plan.
// A pod from the warm pool gets them at its claim, a new one after its
// helper upload. On error the caller removes the pod, which releases the
// lease.
func (e *Engine) startEgress(ctx context.Context, ref *podRef, session string) error {
	if ref.egress == nil {
		return nil
	}
	var secs []secrets.Secret
	if ref.egress.prep != nil {
		secs = ref.egress.prep.Secrets
	}
	who := session
	if who == "" {
		who = ref.name
	}
	srv, release, err := e.opts.Egress.Get(ref.egress.policy, who, secs...)
	if err != nil {
		return err
	}
	ref.tunMu.Lock()
	ref.proxy, ref.release = srv, release
	ref.tunMu.Unlock()
	if err := e.prepareEgress(ctx, ref); err != nil {
		return err
	}
	return e.tunnelFor(ctx, ref)
}

// watchIdle removes p once no command (background processes included)
// has run in it for idle (kubernetes.idle_timeout), keeping its workspace
// PVC for the session's next pod; it ends when p leaves the table.
func (e *Engine) watchIdle(p *podRef, idle time.Duration) {
	t := time.NewTicker(min(max(idle/4, 50*time.Millisecond), 30*time.Second))
	defer t.Stop()
	for {
		select {
		case <-e.quit:
			return
		case <-t.C:
		}
		var r *reset
		v, d := e.table.Idle(p, idle, func() *reset {
			// Under the table's lock: the PVC moves to the reset, so
			// the pod's removal leaves it.
			r = &reset{idle: idle, pvc: p.pvc, cl: p.cl, ns: p.namespace}
			p.pvc = ""
			return r
		})
		switch v {
		case scopes.Left:
			return
		case scopes.Busy:
			continue
		}
		pvc := ""
		if r != nil {
			pvc = r.pvc
		}
		e.log.Info("kubernetes.pod.idle", "pod", p.name, "namespace", p.namespace, "idle_timeout", idle.String(), "pvc_kept", pvc)
		if d != nil {
			e.remove(p, d.Why)
		}
		return
	}
}

// waitReady polls the pod until its Ready condition is true (a condition
// loop with ctx as its deadline), failing at once on a state it cannot
// leave: Failed or Succeeded, an image that cannot be pulled, a
// configuration the kubelet refuses.
func waitReady(ctx context.Context, cs *api, ns, name string) error {
	return waitPodUntil(ctx, cs, ns, name, podReady)
}

// waitPodUntil is waitReady until ok holds of the pod, not only Ready.
func waitPodUntil(ctx context.Context, cs *api, ns, name string, ok func(*corev1.Pod) bool) error {
	delay := 50 * time.Millisecond
	for {
		pod := &corev1.Pod{}
		if err := cs.get(ctx, ns, resPods, name, pod); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: kubernetes backend: pod %s was not ready in time: %v", sandbox.ErrUnavailable, name, ctx.Err())
			}
			return apiErr("reading the pod", err)
		}
		if msg := podStuck(pod); msg != "" {
			return fmt.Errorf("%w: kubernetes backend: pod %s cannot start: %s", sandbox.ErrUnavailable, name, msg)
		}
		if pod.DeletionTimestamp != nil {
			return fmt.Errorf("%w: kubernetes backend: pod %s is being deleted", sandbox.ErrUnavailable, name)
		}
		if ok(pod) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: kubernetes backend: pod %s was not ready in time (phase %s): %v", sandbox.ErrUnavailable, name, pod.Status.Phase, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

// podReady reports whether the pod's Ready condition is true.
func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stuckReasons are container waiting reasons a pod does not leave by
// itself (kubelet's images and kuberuntime packages).
var stuckReasons = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// podStuck returns why the pod will not become ready, or "". An
// unschedulable pod is waited for (the cluster may scale up) until the
// start deadline.
func podStuck(pod *corev1.Pod) string {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return fmt.Sprintf("phase %s: %s %s", pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && slices.Contains(stuckReasons, w.Reason) {
			return w.Reason + ": " + w.Message
		}
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("container %s ended (%s, exit %d): %s", cs.Name, t.Reason, t.ExitCode, t.Message)
		}
	}
	return ""
}
