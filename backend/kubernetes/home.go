package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/corralhq/corral/agentclient"
	"github.com/corralhq/corral/sandbox"
)

// A session's home pod (ScopeCluster, issue 29: any replica serves any
// session). Every corral process that serves session S with the same
// settings computes the same pod name (homePodName) and creates the pod;
// the API server lets one create succeed, and the others, answered
// AlreadyExists, wait until it is Ready and the corral that made it has
// said its helper is checked (AnnotationHelper). The session's turn, its
// saved state and the marker of its running command live in the pod
// (HomeDir; Backend.Turn over the agent, inside/turn.go), so whichever
// corral runs the session's next command finds them there.

// HomeOwner is AnnotationOwner of a home pod and its objects: no corral
// process owns them (they outlive the one that made them), so `corral
// cleanup` keeps them (it removes only a dead corral's objects) and the
// session's end (Release) or a person removes them.
const HomeOwner = "session-home"

// AnnotationHelper is set on a home pod, to the helper's SHA-256 (hex),
// by the corral that made the pod once it has copied the helper in and
// checked it: another corral uses the pod only then.
const AnnotationHelper = "corral.io/helper-sha256"

// HomeDir is the session's directory in its home pod (inside.TurnRequest):
// on the pod's own writable volume NetDir, which commands do not see as
// their home or workspace. Every process in the pod runs as the pod's
// user, so a command can change it: what is read from it is hostile input
// (package session parses the state as it does its own file).
var HomeDir = NetDir + "/session"

// homePodName is the name of session's home pod for the settings hash
// (pure): the same for every corral with the same settings, another for
// other settings (whose pod a change of settings replaces as for
// ScopeSession), never a name randomName makes (NamePrefix + "h" + 20
// hex digits, where randomName's are 12).
func homePodName(session, hash string) string {
	// Length-prefixed: a session's name may hold any byte.
	h := sha256.Sum256(fmt.Appendf(nil, "%d:%s%s", len(session), session, hash))
	return NamePrefix + "h" + hex.EncodeToString(h[:10])
}

// createPod creates pod. made is false when ref is a home pod that
// exists already (another corral made it; it is used as it is). A home
// pod still being deleted (its session's pod was lost or removed) is
// waited for until it is gone, then made again. Errors are the API
// server's (apiErr) or ctx's end.
func (e *Engine) createPod(ctx context.Context, ref *podRef, pod *corev1.Pod) (made bool, uid types.UID, err error) {
	cs := ref.cl.cs
	delay := 50 * time.Millisecond
	for {
		var out corev1.Pod
		err := cs.create(ctx, pod.Namespace, resPods, pod, &out)
		if err == nil {
			return true, out.UID, nil
		}
		if !ref.home || !apierrors.IsAlreadyExists(err) {
			return false, "", apiErr("creating the pod", err)
		}
		var cur corev1.Pod
		if err := cs.get(ctx, pod.Namespace, resPods, pod.Name, &cur); err != nil {
			if apierrors.IsNotFound(err) {
				continue // gone between the create and the read
			}
			return false, "", apiErr("reading the session's pod", err)
		}
		if cur.DeletionTimestamp == nil {
			if cur.Annotations[AnnotationSettings] != pod.Annotations[AnnotationSettings] || cur.Annotations[AnnotationSession] != pod.Annotations[AnnotationSession] {
				return false, "", fmt.Errorf("%w: kubernetes backend: pod %s exists but is not this session's pod of these settings (annotations %s=%q, %s=%q)", sandbox.ErrUnavailable, pod.Name,
					AnnotationSession, cur.Annotations[AnnotationSession], AnnotationSettings, cur.Annotations[AnnotationSettings])
			}
			return false, cur.UID, nil
		}
		e.log.Info("kubernetes.pod.wait_gone", "pod", pod.Name, "namespace", pod.Namespace)
		select {
		case <-ctx.Done():
			return false, "", fmt.Errorf("%w: kubernetes backend: the session's earlier pod %s was still being deleted: %v", sandbox.ErrUnavailable, pod.Name, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

// annotatePod sets annotation key to value on the pod, carrying the
// resourceVersion it read (optimistic concurrency: a write that lost a
// race to another is refused with Conflict, and read and made again).
func annotatePod(ctx context.Context, cs *api, ns, name, key, value string) error {
	for {
		var pod corev1.Pod
		if err := cs.get(ctx, ns, resPods, name, &pod); err != nil {
			return err
		}
		if pod.Annotations[key] == value {
			return nil
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[key] = value
		err := cs.update(ctx, ns, resPods, name, &pod, &corev1.Pod{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

var _ sandbox.TurnBackend = (*Backend)(nil)

// Turn implements sandbox.TurnBackend: under ScopeCluster, the turn of
// req.Session is taken in its home pod (found or made as Run does) by
// this corral's agent there (agentclient.Conn.Turn): flock(2) on a file
// of HomeDir, which the agent holds until End and which goes with it if
// this corral is lost. Other scopes, and commands of no session, return
// nil: their turn and state are the host's.
func (b *Backend) Turn(ctx context.Context, req *sandbox.Request, marker string) (*sandbox.SessionTurn, error) {
	if b.st.Scope != ScopeCluster || req.Session == "" {
		return nil, nil
	}
	if err := b.refuse(req); err != nil {
		return nil, err
	}
	plan, err := planEgress(req, b.e.opts.SecretFilesDir)
	if err != nil {
		return nil, err
	}
	e := b.e
	var (
		p *podRef
		t *agentclient.Turn
	)
	for try := 1; ; try++ {
		p, err = b.ensure(ctx, req, plan)
		if err != nil {
			return nil, err
		}
		var a *agentclient.Conn
		if a, err = e.agentFor(p); err == nil {
			if t, err = a.Turn(ctx, HomeDir, marker); err == nil {
				break
			}
		}
		e.done(p)
		if ctx.Err() != nil || !errors.Is(err, sandbox.ErrUnavailable) || try == 2 {
			return nil, err
		}
		// The turn could not be asked for (nothing was run): the pod may
		// be gone (removed for idleness by another corral, lost), and
		// the session's next pod is made or found; else another agent
		// is started in it.
		if why := e.lossOf(ctx, p, 0); why != "" {
			e.lose(p, why)
		}
		e.log.Info("kubernetes.turn.retry", "pod", p.name, "namespace", p.namespace, "session", req.Session, "error", err)
	}
	// The pod is held (ensure) until the turn ends: neither idleness
	// nor the session's end removes it under the command.
	return &sandbox.SessionTurn{State: t.State, StateError: t.StateError, Interrupted: t.Interrupted,
		End: func(state []byte) {
			t.End(state, func(err error) {
				if err != nil {
					e.log.Warn("kubernetes.turn.save_failed", "pod", p.name, "namespace", p.namespace, "session", req.Session, "error", err)
				}
			})
			e.done(p)
		}}, nil
}

// AnnotationUsed is set on a home pod by each corral that runs commands
// in it, at most once a watch period (homeTick), to a value of its own
// (its owner id and its clock's time): the pod's idleness is every
// corral's, and a corral sees another's use as a change of this value.
const AnnotationUsed = "corral.io/used"

// homeTick is how often a home pod's watch looks (watchHome): a quarter
// of the idle timeout, between 50 ms and 30 s, as watchIdle's.
func homeTick(idle time.Duration) time.Duration {
	return min(max(idle/4, 50*time.Millisecond), 30*time.Second)
}

// homeVerdict says what a home pod's watch does at a tick (pure):
// mark the pod used (this corral ran a command in it since its last
// mark, or runs one now), remove it (its AnnotationUsed value has not
// changed for idle by this corral's clock, and this corral does not use
// it), or nothing. The rule is client-go leader election's for a Lease
// (k8s.io/client-go/tools/leaderelection: a record is judged by when
// this candidate saw it change, never by another machine's clock), so
// the machines' clocks need not agree.
func homeVerdict(usedHere bool, unchangedFor, idle time.Duration) string {
	switch {
	case usedHere:
		return "mark"
	case unchangedFor >= idle:
		return "remove"
	}
	return ""
}

// watchHome removes home pod p once no corral has run a command in it,
// and no background process of the session runs in it, for idle
// (kubernetes.idle_timeout), and marks it used (AnnotationUsed) while
// this corral does. It goes on after this corral's session ended
// (Release), until the pod is gone or the engine closes. Every update
// carries the resourceVersion read (optimistic concurrency), and the
// removal is conditional on it: another corral's mark in between keeps
// the pod.
func (e *Engine) watchHome(p *podRef, idle time.Duration) {
	t := time.NewTicker(homeTick(idle))
	defer t.Stop()
	cs := p.cl.cs
	var seen string
	seenAt := time.Now()
	marked := time.Time{}
	var uid types.UID
	for {
		select {
		case <-e.quit:
			return
		case <-t.C:
		}
		busy, last, ok := e.table.Use(p)
		usedHere := ok && (busy || last.After(marked))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var pod corev1.Pod
		err := cs.get(ctx, p.namespace, resPods, p.name, &pod)
		switch {
		case apierrors.IsNotFound(err):
			cancel()
			return
		case err != nil:
			cancel()
			e.log.Warn("kubernetes.home.watch_failed", "pod", p.name, "namespace", p.namespace, "error", err)
			continue
		}
		if uid == "" {
			uid = pod.UID
		}
		if pod.UID != uid {
			// Made again (the session's pod was lost): its own watch
			// is that pod's.
			cancel()
			return
		}
		if v := pod.Annotations[AnnotationUsed]; v != seen {
			seen, seenAt = v, time.Now()
		}
		verdict := homeVerdict(usedHere, time.Since(seenAt), idle)
		if verdict == "remove" {
			// A background process kept in the pod (bg.go) is use of
			// it, although no corral runs a command there.
			switch running, err := e.homeBackgroundRuns(ctx, p); {
			case err != nil:
				e.log.Warn("kubernetes.home.background_unknown", "pod", p.name, "namespace", p.namespace, "error", err)
				verdict = "" // asked again at the next tick
			case running:
				e.log.Info("kubernetes.home.background_running", "pod", p.name, "namespace", p.namespace, "idle_timeout", idle.String())
				verdict = "mark"
			}
		}
		switch verdict {
		case "mark":
			now := time.Now()
			v := e.self.String() + " " + now.UTC().Format(time.RFC3339Nano)
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[AnnotationUsed] = v
			if err := cs.update(ctx, p.namespace, resPods, p.name, &pod, &corev1.Pod{}); err == nil {
				seen, seenAt, marked = v, now, now
			} else if !apierrors.IsConflict(err) {
				e.log.Warn("kubernetes.home.mark_failed", "pod", p.name, "namespace", p.namespace, "error", err)
			}
			// On a conflict another corral wrote it: the next tick reads
			// and marks again.
		case "remove":
			rv := pod.ResourceVersion
			err := cs.removeIf(ctx, p.namespace, resPods, p.name, &metav1.Preconditions{ResourceVersion: &rv})
			switch {
			case apierrors.IsConflict(err):
				// Marked by another corral since it was read: kept.
			case err != nil && !apierrors.IsNotFound(err):
				e.log.Warn("kubernetes.pod.remove_failed", "pod", p.name, "namespace", p.namespace, "error", err)
			default:
				e.log.Info("kubernetes.pod.idle", "pod", p.name, "namespace", p.namespace, "idle_timeout", idle.String(), "home", true)
				if ok {
					// This corral's next command of the session starts
					// the pod again, saying so.
					if _, d := e.table.Idle(p, 0, func() *reset { return &reset{idle: idle, cl: p.cl, ns: p.namespace} }); d != nil {
						e.detach(p)
					}
				}
				// Its NetworkPolicy goes after it: the garbage collector
				// removes it, its owner gone (ownPolicy).
				cancel()
				return
			}
		}
		cancel()
	}
}

// homePolicyName names the NetworkPolicy of one making of home pod pod:
// the pod's name and a random suffix, so that the policy of a removed
// pod, until the garbage collector removes it, never stands in the way
// of the policy of a new pod of the same name.
func homePolicyName(pod string) string { return pod + "-" + randomName()[len(NamePrefix):] }

// removeHome deletes home pod p, only if it is still the pod this corral
// made or found (a precondition on its UID: another corral may have
// made a pod of the same name since, which stays). Its NetworkPolicy
// goes with it (its owner reference).
func (e *Engine) removeHome(p *podRef, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if p.uid == "" {
		return // never made or found: nothing of it is this corral's
	}
	uid := p.uid
	err := p.cl.cs.removeIf(ctx, p.namespace, resPods, p.name, &metav1.Preconditions{UID: &uid})
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		e.log.Info("kubernetes.pod.remove_skipped", "pod", p.name, "namespace", p.namespace, "reason", why, "detail", "already gone, or another pod of its name")
	case err != nil:
		e.log.Warn("kubernetes.pod.remove_failed", "pod", p.name, "namespace", p.namespace, "error", err)
	default:
		e.log.Info("kubernetes.pod.removed", "pod", p.name, "namespace", p.namespace, "reason", why, "home", true)
	}
}
