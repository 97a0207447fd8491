package kubernetes

import (
	"context"
	"errors"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Leader election over a coordination.k8s.io/v1 Lease, so that of several
// corrals sharing a namespace (the replicas of `corral serve` in a
// cluster, deploy/) one refills each warm pool key.
//
// The protocol is client-go's (k8s.io/client-go/tools/leaderelection with
// a LeaseLock): a candidate takes the Lease when none exists, when its
// holder released it (holderIdentity empty), or when the record has not
// changed for leaseDuration by the candidate's own clock (the time it last
// saw the record change, never the holder's renewTime, so clocks need not
// agree); the holder renews it every retryPeriod and counts itself leader
// only while its last renewal is younger than renewDeadline; every write
// is an update with the resourceVersion read, so two candidates never both
// win. It is written here on corral's own api rather than imported:
// client-go's leaderelection links the typed clientset, which registers
// every API group at package initialisation (measured 2026-12-04: +24.3 MB
// of executable, 42.7 to 67.0 MB, and 10,943 to 21,599 init allocations,
// paid by every start of corral's executable).

// The Lease timing, client-go's and kube-controller-manager's defaults
// (--leader-elect-lease-duration, -renew-deadline, -retry-period).
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// resLeases is the Lease resource of coordination.k8s.io/v1 (api.coord).
const resLeases = "leases"

// leaseStep is what a candidate does with the Lease it read.
type leaseStep int

const (
	// leaseWait: another holder's record is live; follow.
	leaseWait leaseStep = iota
	// leaseCreate: no Lease exists; create it, held.
	leaseCreate
	// leaseRenew: this candidate holds it; renew.
	leaseRenew
	// leaseTake: released or expired; take it over.
	leaseTake
)

// leaseSeen is a candidate's memory of a Lease record: its
// resourceVersion and when the candidate first saw that version, by its
// own clock.
type leaseSeen struct {
	version string
	at      time.Time
}

// decideLease returns what candidate me does with lease l (nil: none
// exists) at now, given what it saw before, and what it has seen now
// (pure). A record unchanged for leaseDuration since it was first seen
// has expired, whatever its renewTime says.
func decideLease(l *coordv1.Lease, me string, seen leaseSeen, now time.Time) (leaseStep, leaseSeen) {
	if l == nil {
		return leaseCreate, leaseSeen{}
	}
	if l.ResourceVersion != seen.version {
		seen = leaseSeen{version: l.ResourceVersion, at: now}
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	switch {
	case holder == me:
		return leaseRenew, seen
	case holder == "":
		return leaseTake, seen
	}
	d := leaseDuration
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if now.Sub(seen.at) > d {
		return leaseTake, seen
	}
	return leaseWait, seen
}

// heldLease returns the Lease to write for step (leaseCreate, leaseRenew
// or leaseTake) by me at now (pure): from l (nil for leaseCreate), with
// me as holder, renewTime now, acquireTime now and one more transition
// when the holder changes; name, namespace and labels for a new one.
func heldLease(l *coordv1.Lease, step leaseStep, me, name, ns string, now time.Time) *coordv1.Lease {
	out := &coordv1.Lease{}
	if l != nil {
		out = l.DeepCopy()
	} else {
		out.Name, out.Namespace = name, ns
		out.Labels = map[string]string{LabelManaged: "true"}
	}
	secs := int32(leaseDuration / time.Second)
	t := metav1.NewMicroTime(now)
	out.Spec.HolderIdentity = &me
	out.Spec.LeaseDurationSeconds = &secs
	out.Spec.RenewTime = &t
	if step != leaseRenew {
		out.Spec.AcquireTime = &t
		if step == leaseTake {
			n := int32(0)
			if out.Spec.LeaseTransitions != nil {
				n = *out.Spec.LeaseTransitions
			}
			n++
			out.Spec.LeaseTransitions = &n
		}
	}
	return out
}

// releasedLease returns l as its holder leaves it (pure): no holder, and
// a duration of one second, so that another candidate takes it at its
// next try (client-go's ReleaseOnCancel).
func releasedLease(l *coordv1.Lease, now time.Time) *coordv1.Lease {
	out := l.DeepCopy()
	one := int32(1)
	t := metav1.NewMicroTime(now)
	out.Spec.HolderIdentity = nil
	out.Spec.LeaseDurationSeconds = &one
	out.Spec.RenewTime = &t
	return out
}

// elector campaigns for one Lease until its context ends, then releases
// it if held.
type elector struct {
	cs       *api
	ns, name string
	me       string
	// onLead is called (in the elector's goroutine) each time this
	// candidate becomes leader.
	onLead func()
	log    func(msg string, args ...any)

	mu        sync.Mutex
	renewed   time.Time // the last successful create, renew or take
	seen      leaseSeen
	forbidden bool // no permission on Leases: leads alone (see lead)
}

// leading reports whether this candidate holds the Lease: its last
// write succeeded less than renewDeadline ago, or the API refused it any
// access to Leases (then every corral refills, as before Leases: one
// corral alone, the common case, keeps its pool).
func (el *elector) leading() bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.forbidden || (!el.renewed.IsZero() && time.Since(el.renewed) < renewDeadline)
}

// run campaigns every retryPeriod until ctx ends, then releases the
// Lease if it holds it.
func (el *elector) run(ctx context.Context) {
	t := time.NewTicker(retryPeriod)
	defer t.Stop()
	for {
		was := el.leading()
		el.try(ctx)
		if now := el.leading(); now && !was {
			el.log("kubernetes.lease.leading", "lease", el.name, "namespace", el.ns)
			if el.onLead != nil {
				el.onLead()
			}
		} else if was && !now {
			el.log("kubernetes.lease.lost", "lease", el.name, "namespace", el.ns)
		}
		select {
		case <-ctx.Done():
			el.release()
			return
		case <-t.C:
		}
	}
}

// try reads the Lease and writes it when decideLease says so.
func (el *elector) try(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, renewDeadline)
	defer cancel()
	var cur coordv1.Lease
	var l *coordv1.Lease
	err := el.cs.get(ctx, el.ns, resLeases, el.name, &cur)
	switch {
	case err == nil:
		l = &cur
	case apierrors.IsNotFound(err):
	default:
		el.failed(err)
		return
	}
	now := time.Now()
	el.mu.Lock()
	step, seen := decideLease(l, el.me, el.seen, now)
	el.seen = seen
	el.mu.Unlock()
	if step == leaseWait {
		return
	}
	var out coordv1.Lease
	w := heldLease(l, step, el.me, el.name, el.ns, now)
	if step == leaseCreate {
		err = el.cs.create(ctx, el.ns, resLeases, w, &out)
	} else {
		err = el.cs.update(ctx, el.ns, resLeases, el.name, w, &out)
	}
	if err != nil {
		// A conflict (another candidate wrote first) or AlreadyExists:
		// the next try reads the winner's record.
		el.failed(err)
		return
	}
	el.mu.Lock()
	el.renewed, el.forbidden = now, false
	el.seen = leaseSeen{version: out.ResourceVersion, at: now}
	el.mu.Unlock()
}

// failed notes an error of a try: a refusal of access to Leases makes
// this candidate lead alone (logged once); anything else only ends its
// lead when renewDeadline passes without a renewal.
func (el *elector) failed(err error) {
	if apierrors.IsForbidden(err) {
		el.mu.Lock()
		first := !el.forbidden
		el.forbidden = true
		el.mu.Unlock()
		if first {
			el.log("kubernetes.lease.forbidden", "lease", el.name, "namespace", el.ns, "error", err.Error(),
				"fix", "grant get, create and update on leases (coordination.k8s.io) in the namespace (deploy/base/role.yaml): without them every corral refills its own warm pool")
		}
		return
	}
	if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !errors.Is(err, context.Canceled) {
		el.log("kubernetes.lease.failed", "lease", el.name, "namespace", el.ns, "error", err.Error())
	}
}

// release gives the Lease up if this candidate holds it, so another takes
// it at once rather than after leaseDuration.
func (el *elector) release() {
	el.mu.Lock()
	held := !el.renewed.IsZero()
	el.renewed = time.Time{}
	el.mu.Unlock()
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var cur coordv1.Lease
	if err := el.cs.get(ctx, el.ns, resLeases, el.name, &cur); err != nil {
		return
	}
	if cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != el.me {
		return
	}
	var out coordv1.Lease
	if err := el.cs.update(ctx, el.ns, resLeases, el.name, releasedLease(&cur, time.Now()), &out); err == nil {
		el.log("kubernetes.lease.released", "lease", el.name, "namespace", el.ns)
	}
}
