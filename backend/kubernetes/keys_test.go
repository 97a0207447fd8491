package kubernetes

import (
	"reflect"
	"testing"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/config/configtest"
)

// TestBadSettings: a bad kubernetes.* value is refused by config.Load, naming
// the key and what it accepts (the checks declared in keys.go).
func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string   // settings file body, or
		env  []string // extra variables
		want []string // substrings of the error
	}{
		{"kubernetes memory", "kubernetes:\n  memory: 1g", nil, []string{`kubernetes.memory: "1g" is not a Kubernetes quantity`}},
		{"kubernetes root", "kubernetes:\n  user: \"0:0\"", nil, []string{`kubernetes.user: "0:0" would run commands as root`}},
		{"kubernetes namespace", "kubernetes:\n  namespace: Corral", nil, []string{`kubernetes.namespace: "Corral" is not a DNS-1123 label`}},
		{"kubernetes toleration", "kubernetes:\n  tolerations: [\"gpu=1:Often\"]", nil, []string{`kubernetes.tolerations[0]: "gpu=1:Often" has effect "Often"`}},
		{"kubernetes selector", "kubernetes:\n  node_selector: [pool]", nil, []string{`kubernetes.node_selector[0]: "pool" is not key=value`}},
		{"kubernetes storage", "kubernetes:\n  storage: hostPath", nil, []string{`kubernetes.storage: "hostPath" is not emptyDir or pvc`}},
		{"kubernetes idle_timeout", "kubernetes:\n  idle_timeout: soon", nil, []string{`kubernetes.idle_timeout: "soon" is not a duration; want a duration such as 30m; 0 or empty for none`}},
		{"kubernetes idle_timeout negative", "", []string{"CORRAL_KUBERNETES_IDLE_TIMEOUT=-5m"}, []string{`kubernetes.idle_timeout: "-5m" is negative; want a duration`}},
		{"kubernetes env seccomp", "", []string{"CORRAL_KUBERNETES_SECCOMP_PROFILE=/etc/x.json"}, []string{`CORRAL_KUBERNETES_SECCOMP_PROFILE`, `is not a path relative`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			configtest.Refused(t, tc.file, tc.env, tc.want...)
		})
	}
}

// TestSettingsKeys: no settings give DefaultSettings; the kubernetes.*
// keys load into this package's Settings (SettingsOf).
func TestSettingsKeys(t *testing.T) {
	if got := SettingsOf(config.Defaults()); !reflect.DeepEqual(got, DefaultSettings) {
		t.Errorf("defaults %+v, want %+v", got, DefaultSettings)
	}
	got := SettingsOf(configtest.Load(t, "kubernetes:\n  namespace: agents\n  seccomp_profile: corral.json\n  node_selector: [pool=a]"))
	if got.Namespace != "agents" || got.SeccompProfile != "corral.json" || len(got.NodeSelector) != 1 || got.NodeSelector[0] != "pool=a" {
		t.Errorf("loaded %+v", got)
	}
}

// TestIdleTimeoutOff: kubernetes.idle_timeout 0 (or 0s) is off, as ""
// is: the other settings' 0 disables too.
func TestIdleTimeoutOff(t *testing.T) {
	for _, v := range []string{"0", "0s", `""`} {
		if got := SettingsOf(configtest.Load(t, "kubernetes:\n  idle_timeout: "+v)).IdleTimeout; got != "" {
			t.Errorf("idle_timeout %s: %q, want off", v, got)
		}
	}
	if got := SettingsOf(configtest.Load(t, "kubernetes:\n  idle_timeout: 45m")).IdleTimeout; got != "45m" {
		t.Errorf("idle_timeout 45m: %q", got)
	}
	// Any bare number where a form of text is expected is read as text.
	if got := SettingsOf(configtest.Load(t, "kubernetes:\n  cpus: 2")).CPUs; got != "2" {
		t.Errorf("cpus 2: %q", got)
	}
}
