package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/sandbox"
)

// Warm pool labels and values (kubernetes.warm_pool). A pool pod is made
// with LabelPool PoolWarming, turned PoolFree once it is Ready and holds
// the verified helper, and PoolClaimed when a session takes it.
const (
	// LabelPool is the pool state of a pod made for the warm pool.
	LabelPool = "corral.io/pool"
	// LabelPoolKey is the pool key (poolKey) of such a pod: only a
	// session whose pod would be made the same way claims it.
	LabelPoolKey = "corral.io/pool-key"
	// AnnotationMaker is the engine that made a pool pod (random per
	// Engine), so an engine removes only its own free pods when it
	// closes, and counts its own warming ones.
	AnnotationMaker = "corral.io/pool-maker"
	// LeasePrefix starts the name of the Lease of a pool key
	// (LeasePrefix + poolKey): the corral that holds it refills that pool
	// (lease.go).
	LeasePrefix = "corral-pool-"

	PoolWarming = "warming"
	PoolFree    = "free"
	PoolClaimed = "claimed"
)

// podSpec is everything a pod of a session is made of, for a cold start
// and for the warm pool alike (buildPod, buildPolicy, buildClaim).
type podSpec struct {
	cl        *cluster
	ns        string
	st        Settings
	p         *parsed
	profile   sandbox.Profile
	workspace string
	tmp       resource.Quantity
	readOnly  bool
	denyUnix  bool
	hash      string // AnnotationSettings
	key       string // poolKey
	helper    string // the helper's path on this machine
	helperSum string // its SHA-256, hex (AnnotationHelper)
}

// plan returns the podPlan of a pod named name of sp for session and
// owner.
func (sp *podSpec) plan(name, session, owner string) podPlan {
	return podPlan{name: name, namespace: sp.ns, session: session, owner: owner, hash: sp.hash,
		workspace: sp.workspace, claim: claimName(name), tmp: sp.tmp, readOnly: sp.readOnly}
}

// warmPool hands out ready pods. It is the seam where the agent-sandbox
// CRDs (SandboxWarmPool, SandboxClaim of agents.x-k8s.io) can later
// replace corral's own pool (corralPool): "give me a ready pod of key K".
type warmPool interface {
	// take claims a free pod of sp.key for session, owned by this corral
	// from then on, and returns its name; "" when none is free. The pod
	// is Ready and holds the verified helper. ref (the session's pod, not
	// yet named) gets the pod's agent when the pool started one.
	take(ctx context.Context, sp *podSpec, session string, ref *podRef) (string, error)
	// keep asks for n free pods of sp.key, made in the background.
	keep(sp *podSpec, n int)
	// close stops refilling and removes the free pods this pool made.
	close()
}

// poolKey identifies what makes pods differ (pure): the settings but those
// that do not shape a pod (warm_pool, idle_timeout, scope), the namespace,
// the workspace path, the size of /tmp, what the profile decides (network
// policy, AF_UNIX filter, read-only workspace) and the helper's SHA-256.
// 16 hex digits, a valid label value.
func poolKey(st *Settings, ns, workspace string, tmp resource.Quantity, denyNet, denyUnix, readOnly bool, helperSum string) string {
	s := *st
	s.WarmPool, s.IdleTimeout, s.Scope = 0, "", ""
	b, _ := json.Marshal(struct {
		S                           Settings
		NS, W, Tmp, Helper          string
		DenyNet, DenyUnix, ReadOnly bool
	}{s, ns, workspace, tmp.String(), helperSum, denyNet, denyUnix, readOnly})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// toMake is how many pods a refill makes (pure): up to n, counting those
// already free or warming.
func toMake(n, have int) int { return max(0, n-have) }

// claimable returns the pods of items a session may claim (pure): free,
// Ready, not being deleted.
func claimable(items []corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range items {
		p := &items[i]
		if p.Labels[LabelPool] == PoolFree && p.DeletionTimestamp == nil && podReady(p) {
			out = append(out, p)
		}
	}
	return out
}

// claimedPod returns the update that claims free pod for session and
// owner, with settings hash (pure): a copy labelled PoolClaimed with the
// session's annotations as a pod made for it would have, keeping the resourceVersion read, so the API server
// accepts it only if nobody changed the pod since (optimistic
// concurrency: a second claimer gets 409 Conflict).
func claimedPod(pod *corev1.Pod, session, owner, hash string) *corev1.Pod {
	c := pod.DeepCopy()
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Labels[LabelPool] = PoolClaimed
	c.Annotations[AnnotationSession] = session
	c.Annotations[AnnotationOwner] = owner
	c.Annotations[AnnotationSettings] = hash
	return c
}

// ownPoolPod reports whether pod is a free or warming pod that maker
// made (pure).
func ownPoolPod(pod *corev1.Pod, maker string) bool {
	s := pod.Labels[LabelPool]
	return (s == PoolFree || s == PoolWarming) && pod.Annotations[AnnotationMaker] == maker && pod.DeletionTimestamp == nil
}

// corralPool is corral's own warm pool: pods labelled free in the
// namespace, claimed by an update with the resourceVersion read.
type corralPool struct {
	e      *Engine
	maker  string
	refill bool // false: take only (a one-shot corral)
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	keys    map[string]*poolState
	ticking bool
	// electors campaign for each key's Lease: only the holder refills,
	// so corrals sharing a namespace keep one pool of n, not n each.
	electors map[string]*elector
	// ready are the pods this pool made and turned free, by pool key,
	// each with the resourceVersion of that update and its agent
	// started: take claims these first, by an update with that
	// resourceVersion (no list), and hands their agent over, so a claim
	// waits for neither a list nor an exec's handshake and the agent's
	// start.
	ready map[string][]*readyPod
}

// readyPod is a free pod this pool made (corralPool.ready).
type readyPod struct {
	pod *corev1.Pod // as the update that made it free returned it
	ref *podRef     // its agent (podRef.agent), started
}

// drop ends the agent this pool started in r's pod.
func (r *readyPod) drop() {
	r.ref.agentMu.Lock()
	defer r.ref.agentMu.Unlock()
	if r.ref.agent != nil {
		r.ref.agent.Close()
	}
	if r.ref.stop != nil {
		r.ref.stop()
	}
	r.ref.agent, r.ref.stop = nil, nil
}

// handTo moves r's agent to ref.
func (r *readyPod) handTo(ref *podRef) {
	r.ref.agentMu.Lock()
	a, stop := r.ref.agent, r.ref.stop
	r.ref.agent, r.ref.stop = nil, nil
	r.ref.agentMu.Unlock()
	ref.agentMu.Lock()
	defer ref.agentMu.Unlock()
	if ref.stop != nil {
		ref.stop()
	}
	ref.agent, ref.stop = a, stop
}

// recheck is how often a long-running pool's refiller counts its free
// pods again: another corral's claims take them without telling it (a
// list of one key's pods per key each time, by the Lease's holder only).
const recheck = 10 * time.Second

// poolState is the refill state of one pool key.
type poolState struct {
	sp             *podSpec
	n              int
	running, again bool
}

func newCorralPool(e *Engine, refill bool) *corralPool {
	ctx, cancel := context.WithCancel(context.Background())
	return &corralPool{e: e, maker: randomName()[len(NamePrefix):], refill: refill, ctx: ctx, cancel: cancel,
		keys: map[string]*poolState{}, ready: map[string][]*readyPod{}, electors: map[string]*elector{}}
}

// take implements warmPool.
func (pl *corralPool) take(ctx context.Context, sp *podSpec, session string, ref *podRef) (string, error) {
	// This pool's own free pods first: an update with the
	// resourceVersion it made them free with (a pod changed since, by a
	// claim of another corral or the kubelet, is a conflict: dropped,
	// and the list below sees it as it is).
	for {
		r := pl.popReady(sp.key)
		if r == nil {
			break
		}
		var out corev1.Pod
		err := sp.cl.cs.update(ctx, sp.ns, resPods, r.pod.Name, claimedPod(r.pod, session, pl.e.self.String(), sp.hash), &out)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			pl.e.log.Debug("kubernetes.pool.claim_conflict", "pod", r.pod.Name, "error", err)
			r.drop()
			continue
		}
		if err != nil {
			// Not claimed, and the pod may still be free: the list
			// below may find it again, without the agent.
			r.drop()
			pl.e.metrics.claim("error")
			return "", apiErr("claiming a warm pod", err)
		}
		pl.e.metrics.claim("claimed")
		r.handTo(ref)
		pl.e.log.Info("kubernetes.pool.claimed", "pod", r.pod.Name, "namespace", sp.ns, "session", session, "key", sp.key, "agent", true)
		return r.pod.Name, nil
	}
	var list corev1.PodList
	sel := LabelPool + "=" + PoolFree + "," + LabelPoolKey + "=" + sp.key
	if err := sp.cl.cs.list(ctx, sp.ns, resPods, sel, &list); err != nil {
		pl.e.metrics.claim("error")
		return "", apiErr("listing the warm pool", err)
	}
	free := claimable(list.Items)
	// Claimers start at different pods, so concurrent claims rarely meet.
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	for _, p := range free {
		var out corev1.Pod
		err := sp.cl.cs.update(ctx, sp.ns, resPods, p.Name, claimedPod(p, session, pl.e.self.String(), sp.hash), &out)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			pl.e.log.Debug("kubernetes.pool.claim_conflict", "pod", p.Name, "error", err)
			continue
		}
		if err != nil {
			pl.e.metrics.claim("error")
			return "", apiErr("claiming a warm pod", err)
		}
		pl.e.metrics.claim("claimed")
		r := pl.takeReady(sp.key, p.Name)
		if r != nil {
			r.handTo(ref)
		}
		pl.e.log.Info("kubernetes.pool.claimed", "pod", p.Name, "namespace", sp.ns, "session", session, "key", sp.key, "agent", r != nil)
		return p.Name, nil
	}
	pl.e.metrics.claim("empty")
	return "", nil
}

// popReady takes one of this pool's free pods of key out of ready; nil
// when it has none.
func (pl *corralPool) popReady(key string) *readyPod {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	rs := pl.ready[key]
	if len(rs) == 0 {
		return nil
	}
	r := rs[len(rs)-1]
	pl.ready[key] = rs[:len(rs)-1]
	return r
}

// readyCount is how many free pods this pool holds in ready, every key.
func (pl *corralPool) readyCount() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	n := 0
	for _, rs := range pl.ready {
		n += len(rs)
	}
	return n
}

// takeReady takes pod name of key out of ready; nil when it is not
// there.
func (pl *corralPool) takeReady(key, name string) *readyPod {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	rs := pl.ready[key]
	for i, r := range rs {
		if r.pod.Name == name {
			pl.ready[key] = append(rs[:i:i], rs[i+1:]...)
			return r
		}
	}
	return nil
}

// keep implements warmPool: the pool of sp.key is refilled to n in the
// background (one refill at a time per key; a request during a refill
// runs another after it).
func (pl *corralPool) keep(sp *podSpec, n int) {
	if !pl.refill || n <= 0 {
		return
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.ctx.Err() != nil {
		return
	}
	ps := pl.keys[sp.key]
	if ps == nil {
		ps = &poolState{}
		pl.keys[sp.key] = ps
	}
	ps.sp, ps.n = sp, n
	if pl.electors[sp.key] == nil {
		el := &elector{cs: sp.cl.cs, ns: sp.ns, name: LeasePrefix + sp.key, me: pl.e.self.String() + "/" + pl.maker,
			log: func(msg string, args ...any) { pl.e.log.Info(msg, args...) }}
		el.onLead = func() {
			pl.mu.Lock()
			sp, n := ps.sp, ps.n
			pl.mu.Unlock()
			pl.keep(sp, n)
		}
		pl.electors[sp.key] = el
		pl.wg.Add(1)
		go func() { defer pl.wg.Done(); el.run(pl.ctx) }()
	}
	if !pl.ticking {
		pl.ticking = true
		pl.wg.Add(1)
		go pl.tick()
	}
	if ps.running {
		ps.again = true
		return
	}
	ps.running = true
	pl.wg.Add(1)
	go pl.run(ps)
}

// tick refills every key every recheck until the pool closes.
func (pl *corralPool) tick() {
	defer pl.wg.Done()
	t := time.NewTicker(recheck)
	defer t.Stop()
	for {
		select {
		case <-pl.ctx.Done():
			return
		case <-t.C:
		}
		pl.mu.Lock()
		var all []*poolState
		for _, ps := range pl.keys {
			all = append(all, ps)
		}
		pl.mu.Unlock()
		for _, ps := range all {
			pl.mu.Lock()
			sp, n := ps.sp, ps.n
			pl.mu.Unlock()
			pl.keep(sp, n)
		}
	}
}

// run refills ps until no more refills were asked for.
func (pl *corralPool) run(ps *poolState) {
	defer pl.wg.Done()
	for {
		pl.mu.Lock()
		sp, n := ps.sp, ps.n
		ps.again = false
		el := pl.electors[sp.key]
		pl.mu.Unlock()
		if el != nil && !el.leading() {
			// Another corral holds the key's Lease and refills; this
			// one's elector calls keep again if it takes the Lease.
			pl.mu.Lock()
			ps.running = false
			pl.mu.Unlock()
			return
		}
		have, err := pl.count(sp)
		if err != nil {
			pl.e.log.Warn("kubernetes.pool.refill_failed", "key", sp.key, "error", err)
		} else if m := toMake(n, have); m > 0 {
			pl.e.log.Info("kubernetes.pool.refill", "key", sp.key, "namespace", sp.ns, "have", have, "making", m)
			var wg sync.WaitGroup
			for range m {
				wg.Add(1)
				go func() { defer wg.Done(); pl.make(sp) }()
			}
			wg.Wait()
		}
		pl.mu.Lock()
		if !ps.again || pl.ctx.Err() != nil {
			ps.running = false
			pl.mu.Unlock()
			return
		}
		pl.mu.Unlock()
	}
}

// count returns how many pods of sp.key the pool has (poolHave), and
// removes those whose maker abandoned them while warming.
func (pl *corralPool) count(sp *podSpec) (int, error) {
	ctx, cancel := context.WithTimeout(pl.ctx, 30*time.Second)
	defer cancel()
	var list corev1.PodList
	if err := sp.cl.cs.list(ctx, sp.ns, resPods, LabelPoolKey+"="+sp.key, &list); err != nil {
		return 0, err
	}
	have, abandoned := poolHave(list.Items, pl.maker, time.Now(), 2*pl.e.opts.StartTimeout)
	for _, p := range abandoned {
		pl.removePoolPod(ctx, sp, p, "warm pod abandoned while warming")
	}
	return have, nil
}

// poolHave counts the pods of one pool key in items for the refiller
// whose maker id is maker, at now (pure): free pods, whoever made them
// (the pool is the key's, not a corral's: one refiller holds its Lease),
// this maker's warming ones, and another's warming ones younger than
// abandonAfter. Older warming pods of another maker were abandoned (their
// corral went, or lost the Lease and failed) and are returned for
// removal. Pods being deleted and claimed pods are not counted.
func poolHave(items []corev1.Pod, maker string, now time.Time, abandonAfter time.Duration) (have int, abandoned []*corev1.Pod) {
	for i := range items {
		p := &items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		switch p.Labels[LabelPool] {
		case PoolFree:
			have++
		case PoolWarming:
			if p.Annotations[AnnotationMaker] == maker || now.Sub(p.CreationTimestamp.Time) < abandonAfter {
				have++
			} else {
				abandoned = append(abandoned, p)
			}
		}
	}
	return have, abandoned
}

// removePoolPod deletes pool pod p (with its UID and resourceVersion as
// preconditions: a pod claimed or changed since it was listed stays) and
// its policy and PVC.
func (pl *corralPool) removePoolPod(ctx context.Context, sp *podSpec, p *corev1.Pod, reason string) {
	pre := &metav1.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}
	if err := sp.cl.cs.removeIf(ctx, sp.ns, resPods, p.Name, pre); err != nil {
		if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			pl.e.log.Warn("kubernetes.pool.remove_failed", "pod", p.Name, "error", err)
		}
		return
	}
	pvc := ""
	if sp.st.Storage == StoragePVC {
		pvc = claimName(p.Name)
	}
	if err := deleteObjects(ctx, sp.cl.cs, sp.ns, p.Name, buildPolicy(sp.plan(p.Name, "", ""), sp.profile) != nil, pvc); err != nil {
		pl.e.log.Warn("kubernetes.pool.remove_failed", "pod", p.Name, "error", err)
	}
	pl.e.log.Info("kubernetes.pod.removed", "pod", p.Name, "namespace", sp.ns, "reason", reason)
}

// make makes one pool pod of sp: as a session's (makePod), labelled
// warming until it is Ready with the helper verified, then free.
func (pl *corralPool) make(sp *podSpec) {
	e := pl.e
	name := randomName()
	ref := &podRef{name: name, namespace: sp.ns, cl: sp.cl, workspace: sp.workspace, denyUnix: sp.denyUnix, ready: make(chan struct{})}
	plan := sp.plan(name, "", e.self.String())
	plan.poolKey, plan.maker = sp.key, pl.maker
	t0 := time.Now()
	err := e.makePod(pl.ctx, ref, sp, plan, nil)
	var free *corev1.Pod
	if err == nil {
		free, err = pl.markFree(sp, name)
	}
	close(ref.ready)
	if err != nil {
		e.log.Warn("kubernetes.pool.make_failed", "pod", name, "key", sp.key, "error", err)
		e.remove(ref, "warm pod failed")
		return
	}
	// Its agent now, so that a claim finds it running (agentFor starts
	// the exec and returns; a claim that finds it ended starts another).
	if _, err := e.agentFor(ref); err == nil {
		r := &readyPod{pod: free, ref: ref}
		pl.mu.Lock()
		if pl.ctx.Err() == nil {
			pl.ready[sp.key] = append(pl.ready[sp.key], r)
			r = nil
		}
		pl.mu.Unlock()
		if r != nil {
			r.drop()
		}
	}
	e.log.Info("kubernetes.pool.ready", "pod", name, "key", sp.key, "duration", time.Since(t0).String())
}

// markFree turns warming pod name free (an update with the
// resourceVersion read, tried again when the kubelet's status updates
// came between) and returns the pod as that update left it.
func (pl *corralPool) markFree(sp *podSpec, name string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(pl.ctx, 30*time.Second)
	defer cancel()
	for try := 0; ; try++ {
		var pod corev1.Pod
		if err := sp.cl.cs.get(ctx, sp.ns, resPods, name, &pod); err != nil {
			return nil, err
		}
		if pod.Labels[LabelPool] != PoolWarming {
			return nil, fmt.Errorf("pod %s is %q, not %s", name, pod.Labels[LabelPool], PoolWarming)
		}
		pod.Labels[LabelPool] = PoolFree
		var out corev1.Pod
		err := sp.cl.cs.update(ctx, sp.ns, resPods, name, &pod, &out)
		if err == nil {
			return &out, nil
		}
		if !apierrors.IsConflict(err) || try >= 10 {
			return nil, err
		}
	}
}

// close implements warmPool: refills stop (a pod being made is removed
// by its maker), then the free pods this pool made are deleted, each with
// its resourceVersion as a precondition so a pod another corral claimed
// meanwhile stays.
func (pl *corralPool) close() {
	pl.mu.Lock()
	pl.cancel()
	var specs []*podSpec
	for _, ps := range pl.keys {
		specs = append(specs, ps.sp)
	}
	ready := pl.ready
	pl.ready = map[string][]*readyPod{}
	pl.mu.Unlock()
	for _, rs := range ready {
		for _, r := range rs {
			r.drop()
		}
	}
	pl.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, sp := range specs {
		var list corev1.PodList
		if err := sp.cl.cs.list(ctx, sp.ns, resPods, LabelPoolKey+"="+sp.key, &list); err != nil {
			pl.e.log.Warn("kubernetes.pool.remove_failed", "key", sp.key, "error", err)
			continue
		}
		for i := range list.Items {
			if p := &list.Items[i]; ownPoolPod(p, pl.maker) {
				pl.removePoolPod(ctx, sp, p, "warm pool closed")
			}
		}
	}
}
