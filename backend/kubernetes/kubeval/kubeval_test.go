package kubeval

import (
	"strings"
	"testing"
)

func TestParseToleration(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   Toleration
		reason string
	}{
		{"gpu=true:NoSchedule", Toleration{Key: "gpu", Operator: "Equal", Value: "true", Effect: "NoSchedule"}, ""},
		{"dedicated:NoExecute", Toleration{Key: "dedicated", Operator: "Exists", Effect: "NoExecute"}, ""},
		{"example.com/pool", Toleration{Key: "example.com/pool", Operator: "Exists"}, ""},
		{"pool=agents", Toleration{Key: "pool", Operator: "Equal", Value: "agents"}, ""},
		{"pool=agents:Sometimes", Toleration{}, `effect "Sometimes"`},
		{"=x", Toleration{}, "key"},
		{"a b", Toleration{}, "key"},
		{"k=v v", Toleration{}, "value"},
	} {
		got, reason := ParseToleration(tc.in)
		if tc.reason == "" && (reason != "" || got != tc.want) {
			t.Errorf("ParseToleration(%q) = %+v, %q; want %+v", tc.in, got, reason, tc.want)
		}
		if tc.reason != "" && !strings.Contains(reason, tc.reason) {
			t.Errorf("ParseToleration(%q) reason = %q, want it to contain %q", tc.in, reason, tc.reason)
		}
	}
}

func TestSelector(t *testing.T) {
	for _, tc := range []struct {
		in, k, v string
		ok       bool
	}{
		{"kubernetes.io/arch=amd64", "kubernetes.io/arch", "amd64", true},
		{"pool=", "pool", "", true},
		{"pool", "", "", false},
		{"Bad_Prefix.x/y=1", "", "", false},
		{"a=-x", "", "", false},
	} {
		k, v, reason := Selector(tc.in)
		if (reason == "") != tc.ok || k != tc.k || v != tc.v {
			t.Errorf("Selector(%q) = %q, %q, %q; want ok=%v %q %q", tc.in, k, v, reason, tc.ok, tc.k, tc.v)
		}
	}
}

func TestQuantityAndNames(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{{"1Gi", true}, {"512Mi", true}, {"1g", false}, {"4Mi", false}, {"lots", false}} {
		if _, r := Quantity(tc.in, MinMemory); (r == "") != tc.ok {
			t.Errorf("Quantity(%q) reason %q, want ok=%v", tc.in, r, tc.ok)
		}
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{{"0.5", true}, {"500m", true}, {"1m", false}, {"-1", false}} {
		if _, r := Quantity(tc.in, MinCPU); (r == "") != tc.ok {
			t.Errorf("Quantity(%q, cpu) reason %q, want ok=%v", tc.in, r, tc.ok)
		}
	}
	if DNSLabel("corral") != "" || DNSLabel("Corral") == "" || DNSLabel(strings.Repeat("a", 64)) == "" {
		t.Error("DNSLabel")
	}
	if DNSSubdomain("gvisor") != "" || DNSSubdomain("run.sc") != "" || DNSSubdomain("-x") == "" {
		t.Error("DNSSubdomain")
	}
}

func TestRunAsAndProfile(t *testing.T) {
	for _, tc := range []struct {
		in       string
		uid, gid int64
		reason   string
	}{
		{"1000:1000", 1000, 1000, ""},
		{"65534:0", 65534, 0, ""},
		{"0:0", 0, 0, "root"},
		{"1000", 0, 0, "uid:gid"},
		{"a:b", 0, 0, "uid:gid"},
	} {
		u, g, r := RunAs(tc.in)
		if u != tc.uid || g != tc.gid || (tc.reason == "") != (r == "") || !strings.Contains(r, tc.reason) {
			t.Errorf("RunAs(%q) = %d, %d, %q", tc.in, u, g, r)
		}
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{{"", true}, {"corral/agent.json", true}, {"/etc/x.json", false}, {"a/../../x.json", false}, {"x.yaml", false}} {
		if (LocalhostProfile(tc.in) == "") != tc.ok {
			t.Errorf("LocalhostProfile(%q) = %q, want ok=%v", tc.in, LocalhostProfile(tc.in), tc.ok)
		}
	}
}
