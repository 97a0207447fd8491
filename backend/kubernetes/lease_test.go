package kubernetes

import (
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func lease(holder string, rv string, secs int32) *coordv1.Lease {
	l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "corral-pool-k", ResourceVersion: rv}}
	if holder != "-" {
		l.Spec.HolderIdentity = &holder
	}
	if secs != 0 {
		l.Spec.LeaseDurationSeconds = &secs
	}
	return l
}

func TestDecideLease(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		l        *coordv1.Lease
		seen     leaseSeen
		now      time.Time
		want     leaseStep
		wantSeen leaseSeen
	}{
		{"none: create", nil, leaseSeen{}, t0, leaseCreate, leaseSeen{}},
		{"mine: renew", lease("me", "5", 15), leaseSeen{"5", t0}, t0.Add(time.Second), leaseRenew, leaseSeen{"5", t0}},
		{"released: take", lease("", "6", 1), leaseSeen{}, t0, leaseTake, leaseSeen{"6", t0}},
		{"no holder field: take", lease("-", "6", 15), leaseSeen{}, t0, leaseTake, leaseSeen{"6", t0}},
		{"another's, first seen now: wait", lease("b", "7", 15), leaseSeen{}, t0, leaseWait, leaseSeen{"7", t0}},
		{"another's, changed since: wait, seen anew", lease("b", "8", 15), leaseSeen{"7", t0}, t0.Add(20 * time.Second), leaseWait, leaseSeen{"8", t0.Add(20 * time.Second)}},
		{"another's, unchanged for 15 s exactly: wait", lease("b", "7", 15), leaseSeen{"7", t0}, t0.Add(15 * time.Second), leaseWait, leaseSeen{"7", t0}},
		{"another's, unchanged past its duration: take", lease("b", "7", 15), leaseSeen{"7", t0}, t0.Add(16 * time.Second), leaseTake, leaseSeen{"7", t0}},
		{"another's, its own shorter duration", lease("b", "7", 3), leaseSeen{"7", t0}, t0.Add(4 * time.Second), leaseTake, leaseSeen{"7", t0}},
		// The holder's renewTime is not read: a holder whose clock is
		// behind keeps its lease while it renews.
		{"no duration: the default", lease("b", "7", 0), leaseSeen{"7", t0}, t0.Add(14 * time.Second), leaseWait, leaseSeen{"7", t0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, seen := decideLease(tc.l, "me", tc.seen, tc.now)
			if got != tc.want || seen != tc.wantSeen {
				t.Errorf("decideLease = %v %+v, want %v %+v", got, seen, tc.want, tc.wantSeen)
			}
		})
	}
}

func TestHeldLease(t *testing.T) {
	now := time.Unix(2000, 0)
	c := heldLease(nil, leaseCreate, "me", "corral-pool-k", "ns", now)
	if c.Name != "corral-pool-k" || c.Namespace != "ns" || c.Labels[LabelManaged] != "true" || *c.Spec.HolderIdentity != "me" ||
		*c.Spec.LeaseDurationSeconds != 15 || !c.Spec.AcquireTime.Time.Equal(now) || !c.Spec.RenewTime.Time.Equal(now) || c.Spec.LeaseTransitions != nil {
		t.Errorf("created %+v", c)
	}
	old := lease("b", "9", 15)
	acq := metav1.NewMicroTime(now.Add(-time.Hour))
	two := int32(2)
	old.Spec.AcquireTime, old.Spec.LeaseTransitions = &acq, &two
	tk := heldLease(old, leaseTake, "me", "", "", now)
	if *tk.Spec.HolderIdentity != "me" || *tk.Spec.LeaseTransitions != 3 || !tk.Spec.AcquireTime.Time.Equal(now) || tk.ResourceVersion != "9" {
		t.Errorf("taken %+v", tk.Spec)
	}
	if *old.Spec.HolderIdentity != "b" {
		t.Error("heldLease changed its input")
	}
	mine := lease("me", "10", 15)
	mine.Spec.AcquireTime = &acq
	r := heldLease(mine, leaseRenew, "me", "", "", now)
	if !r.Spec.AcquireTime.Time.Equal(acq.Time) || !r.Spec.RenewTime.Time.Equal(now) || r.Spec.LeaseTransitions != nil {
		t.Errorf("renewed %+v", r.Spec)
	}
	rel := releasedLease(r, now)
	if rel.Spec.HolderIdentity != nil || *rel.Spec.LeaseDurationSeconds != 1 || rel.ResourceVersion != "10" {
		t.Errorf("released %+v", rel.Spec)
	}
	// A released lease is taken at once by another candidate.
	if step, _ := decideLease(rel, "c", leaseSeen{}, now); step != leaseTake {
		t.Errorf("released lease: %v", step)
	}
}

func TestPoolHave(t *testing.T) {
	now := time.Unix(10000, 0)
	pod := func(state, maker string, age time.Duration, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: state + "-" + maker, CreationTimestamp: metav1.NewTime(now.Add(-age)),
			Labels: map[string]string{LabelPool: state}, Annotations: map[string]string{AnnotationMaker: maker}}}
		if deleting {
			d := metav1.NewTime(now)
			p.DeletionTimestamp = &d
		}
		return p
	}
	items := []corev1.Pod{
		pod(PoolFree, "me", time.Hour, false),
		pod(PoolFree, "other", time.Hour, false), // the pool is the key's
		pod(PoolFree, "gone", time.Hour, true),   // being deleted
		pod(PoolWarming, "me", time.Hour, false), // mine: still being made
		pod(PoolWarming, "other", time.Minute, false),
		pod(PoolWarming, "dead", 7*time.Minute, false), // abandoned
		pod(PoolClaimed, "me", time.Hour, false),
	}
	have, abandoned := poolHave(items, "me", now, 6*time.Minute)
	if have != 4 || len(abandoned) != 1 || abandoned[0].Name != "warming-dead" {
		t.Errorf("poolHave = %d %v", have, abandoned)
	}
}
