package kubernetes

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TestPoolKey: what shapes a pod changes the key; warm_pool, idle_timeout
// and scope do not; the key is a valid label value.
func TestPoolKey(t *testing.T) {
	tmp := resource.MustParse("512Mi")
	key := func(mut func(*Settings), ns, ws string, tmp resource.Quantity, denyNet, denyUnix, readOnly bool, helper string) string {
		st := DefaultSettings
		if mut != nil {
			mut(&st)
		}
		return poolKey(&st, ns, ws, tmp, denyNet, denyUnix, readOnly, helper)
	}
	base := key(nil, "ns", "/work/a", tmp, true, true, false, "sum1")
	if errs := validation.IsValidLabelValue(base); len(errs) != 0 || len(base) != 16 {
		t.Fatalf("key %q: %v", base, errs)
	}
	cases := []struct {
		name string
		k    string
		same bool
	}{
		{"same inputs", key(nil, "ns", "/work/a", tmp, true, true, false, "sum1"), true},
		{"warm_pool", key(func(s *Settings) { s.WarmPool = 3 }, "ns", "/work/a", tmp, true, true, false, "sum1"), true},
		{"idle_timeout", key(func(s *Settings) { s.IdleTimeout = "5m" }, "ns", "/work/a", tmp, true, true, false, "sum1"), true},
		{"scope", key(func(s *Settings) { s.Scope = ScopeShared }, "ns", "/work/a", tmp, true, true, false, "sum1"), true},
		{"image", key(func(s *Settings) { s.Image = "other" }, "ns", "/work/a", tmp, true, true, false, "sum1"), false},
		{"memory", key(func(s *Settings) { s.Memory = "2Gi" }, "ns", "/work/a", tmp, true, true, false, "sum1"), false},
		{"storage", key(func(s *Settings) { s.Storage = StoragePVC }, "ns", "/work/a", tmp, true, true, false, "sum1"), false},
		{"namespace", key(nil, "ns2", "/work/a", tmp, true, true, false, "sum1"), false},
		{"workspace", key(nil, "ns", "/work/b", tmp, true, true, false, "sum1"), false},
		{"tmp", key(nil, "ns", "/work/a", resource.MustParse("1Gi"), true, true, false, "sum1"), false},
		{"network", key(nil, "ns", "/work/a", tmp, false, true, false, "sum1"), false},
		{"unix", key(nil, "ns", "/work/a", tmp, true, false, false, "sum1"), false},
		{"read-only", key(nil, "ns", "/work/a", tmp, true, true, true, "sum1"), false},
		{"helper", key(nil, "ns", "/work/a", tmp, true, true, false, "sum2"), false},
	}
	for _, tc := range cases {
		if (tc.k == base) != tc.same {
			t.Errorf("%s: key %s vs %s, want same=%v", tc.name, tc.k, base, tc.same)
		}
	}
	// Whatever makes another pool pod makes another session pod: a
	// session whose /tmp size alone changed kept its pod before the
	// session's hash was made from the pool key.
	baseHash := settingsHash(base, &DefaultSettings, "")
	for _, tc := range cases {
		if tc.k != base && settingsHash(tc.k, &DefaultSettings, "") == baseHash {
			t.Errorf("%s: another pool key, the same session hash", tc.name)
		}
	}
	for _, tc := range []struct {
		name   string
		mut    func(*Settings)
		egress string
	}{
		{"warm_pool", func(s *Settings) { s.WarmPool = 3 }, ""},
		{"idle_timeout", func(s *Settings) { s.IdleTimeout = "5m" }, ""},
		{"scope", func(s *Settings) { s.Scope = ScopeShared }, ""},
		{"allowlist plan", nil, "plan1"},
	} {
		st := DefaultSettings
		if tc.mut != nil {
			tc.mut(&st)
		}
		if settingsHash(base, &st, tc.egress) == baseHash {
			t.Errorf("%s: the same session hash", tc.name)
		}
	}
}

func TestToMake(t *testing.T) {
	for _, tc := range []struct{ n, have, want int }{
		{0, 0, 0}, {3, 0, 3}, {3, 1, 2}, {3, 3, 0}, {3, 5, 0}, {1, 0, 1},
	} {
		if got := toMake(tc.n, tc.have); got != tc.want {
			t.Errorf("toMake(%d, %d) = %d, want %d", tc.n, tc.have, got, tc.want)
		}
	}
}

func poolPod(name, state, maker string, ready, deleting bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "41",
		Labels:      map[string]string{LabelPool: state, LabelPoolKey: "k"},
		Annotations: map[string]string{AnnotationMaker: maker, AnnotationOwner: "h/b/1/2", AnnotationSession: ""}}}
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	if deleting {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	return p
}

// TestClaimable: only free, Ready pods not being deleted are claimed;
// ownPoolPod counts free and warming pods of one maker.
func TestClaimable(t *testing.T) {
	items := []corev1.Pod{
		poolPod("a", PoolFree, "m1", true, false),
		poolPod("b", PoolFree, "m1", false, false),
		poolPod("c", PoolFree, "m2", true, true),
		poolPod("d", PoolWarming, "m1", true, false),
		poolPod("e", PoolClaimed, "m1", true, false),
		poolPod("f", PoolFree, "m2", true, false),
	}
	var got []string
	for _, p := range claimable(items) {
		got = append(got, p.Name)
	}
	if !reflect.DeepEqual(got, []string{"a", "f"}) {
		t.Errorf("claimable %v, want [a f]", got)
	}
	var own []string
	for i := range items {
		if ownPoolPod(&items[i], "m1") {
			own = append(own, items[i].Name)
		}
	}
	if !reflect.DeepEqual(own, []string{"a", "b", "d"}) {
		t.Errorf("own %v, want [a b d]", own)
	}
}

// TestClaimedPod: the update keeps the resourceVersion read (the API
// server's optimistic concurrency), relabels and takes the session's
// annotations, and leaves the pod read unchanged.
func TestClaimedPod(t *testing.T) {
	p := poolPod("a", PoolFree, "m1", true, false)
	c := claimedPod(&p, "sess", "h/b/9/10", "hash2")
	if c.ResourceVersion != "41" || c.Labels[LabelPool] != PoolClaimed || c.Labels[LabelPoolKey] != "k" ||
		c.Annotations[AnnotationSession] != "sess" || c.Annotations[AnnotationOwner] != "h/b/9/10" ||
		c.Annotations[AnnotationSettings] != "hash2" || c.Annotations[AnnotationMaker] != "m1" {
		t.Errorf("claimed %+v", c.ObjectMeta)
	}
	if p.Labels[LabelPool] != PoolFree || p.Annotations[AnnotationOwner] != "h/b/1/2" {
		t.Errorf("the pod read changed: %+v", p.ObjectMeta)
	}
	if !reflect.DeepEqual(c.Spec, p.Spec) {
		t.Error("the spec changed")
	}
}

// TestBuildPoolPod: a pool pod is a session's pod with the pool's labels.
func TestBuildPoolPod(t *testing.T) {
	st := DefaultSettings
	p, err := st.check()
	if err != nil {
		t.Fatal(err)
	}
	pl := testPlan()
	cold := buildPod(&st, p, pl)
	pl.poolKey, pl.maker = "0123456789abcdef", "m1"
	warm := buildPod(&st, p, pl)
	if warm.Labels[LabelPool] != PoolWarming || warm.Labels[LabelPoolKey] != pl.poolKey || warm.Annotations[AnnotationMaker] != "m1" {
		t.Errorf("pool labels %v %v", warm.Labels, warm.Annotations)
	}
	if !reflect.DeepEqual(cold.Spec, warm.Spec) {
		t.Error("a pool pod's spec differs from a cold one's")
	}
	if _, ok := cold.Labels[LabelPool]; ok {
		t.Error("a cold pod has the pool label")
	}
}

func TestIdleNote(t *testing.T) {
	n := idleNote(90*time.Second, false)
	if !strings.Contains(n, "1m30s") || !strings.Contains(n, "workspace was reset (emptyDir)") {
		t.Errorf("emptyDir note %q", n)
	}
	n = idleNote(time.Minute, true)
	if !strings.Contains(n, "same workspace volume (PVC)") || strings.Contains(n, "reset (emptyDir)") {
		t.Errorf("pvc note %q", n)
	}
}
