package kubernetes

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// TestPlanEgress: the plan of each profile, the refusals, and a key that
// follows the allowlist and the secrets.
func TestPlanEgress(t *testing.T) {
	tok := "ghp_" + strings.Repeat("a1B2", 9)
	sec := []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.example.com"}}}
	// An empty home: ~/.config/gh/hosts.yml is missing; a file outside
	// the home exists (it must be refused for its place, not its absence).
	t.Setenv("HOME", t.TempDir())
	filesDir := t.TempDir()
	etcFile := filepath.Join(t.TempDir(), "npmrc")
	if err := os.WriteFile(etcFile, []byte("//registry.example.com/:_authToken="+tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	req := func(p sandbox.Profile, allow []string, secs []sandbox.Secret) *sandbox.Request {
		return &sandbox.Request{Policy: sandbox.Policy{Profile: p, NetworkAllow: allow, Secrets: secs}, Env: []string{"GH_REAL=" + tok}}
	}
	for _, c := range []struct {
		name    string
		req     *sandbox.Request
		plan    bool
		err     error
		errText string
	}{
		{"workspace", req(sandbox.ProfileWorkspace, nil, nil), false, nil, ""},
		{"network", req(sandbox.ProfileNetwork, nil, nil), false, nil, ""},
		{"allowlist", req(sandbox.ProfileAllowlist, []string{"example.com"}, nil), true, nil, ""},
		{"allowlist secrets", req(sandbox.ProfileAllowlist, nil, sec), true, nil, ""},
		{"secrets under workspace", req(sandbox.ProfileWorkspace, nil, sec), false, sandbox.ErrBadRequest, "allowlist"},
		{"secrets under network", req(sandbox.ProfileNetwork, nil, sec), false, sandbox.ErrBadRequest, "allowlist"},
		{"secret file outside the home", req(sandbox.ProfileAllowlist, nil, []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.example.com"}, Files: []string{etcFile}}}), false, sandbox.ErrBadRequest, "is not in your home directory"},
		{"secret file missing", req(sandbox.ProfileAllowlist, nil, []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.example.com"}, Files: []string{"~/.config/gh/hosts.yml"}}}), false, sandbox.ErrBadRequest, "files[0]"},
		{"bad allow entry", req(sandbox.ProfileAllowlist, []string{"http://x/"}, nil), false, sandbox.ErrBadRequest, "network allowlist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := planEgress(c.req, filesDir)
			if c.err != nil {
				if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.errText) || p != nil {
					t.Fatalf("got %v, %v; want %v naming %q", p, err, c.err, c.errText)
				}
				return
			}
			if err != nil || (p != nil) != c.plan {
				t.Fatalf("got %v, %v; want a plan: %v", p, err, c.plan)
			}
			if p != nil && strings.Contains(p.key, tok) {
				t.Fatal("the key holds the real value")
			}
		})
	}
	a, _ := planEgress(req(sandbox.ProfileAllowlist, []string{"example.com"}, nil), filesDir)
	b, _ := planEgress(req(sandbox.ProfileAllowlist, []string{"example.org"}, nil), filesDir)
	s, _ := planEgress(req(sandbox.ProfileAllowlist, []string{"example.com"}, sec), filesDir)
	a2, _ := planEgress(req(sandbox.ProfileAllowlist, []string{"example.com"}, nil), filesDir)
	if a.key == b.key || a.key == s.key || a.key != a2.key {
		t.Errorf("keys %s %s %s %s: want equal only for the same plan", a.key, b.key, s.key, a2.key)
	}
	// A credential file of the home: its stand-in copy goes below the
	// pod's HOME, and its content is part of the key.
	home := os.Getenv("HOME")
	netrc := filepath.Join(home, ".netrc")
	withFile := slices.Clone(sec)
	withFile[0].Files = []string{"~/.netrc"}
	planFile := func(content string) *egressPlan {
		t.Helper()
		if err := os.WriteFile(netrc, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := planEgress(req(sandbox.ProfileAllowlist, nil, withFile), filesDir)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	f1 := planFile("machine api.example.com login x password " + tok + "\n")
	f2 := planFile("machine api.example.com login y password " + tok + "\n")
	if len(f1.files) != 1 || f1.files[0].dest != Home+"/.netrc" || strings.Contains(string(f1.files[0].data), tok) ||
		!strings.Contains(string(f1.files[0].data), "login x password "+f1.prep.Secrets[0].StandIn) {
		t.Errorf("the file's plan: %+v", f1.files)
	}
	if f1.key == f2.key || f1.key == s.key {
		t.Errorf("keys %s %s %s: a changed credential file must change the key", f1.key, f2.key, s.key)
	}
	// A secret's host is allowed; its real value is the proxy's only.
	if !slices.Contains(s.policy.Allow, "api.example.com") || s.prep == nil || s.prep.Secrets[0].Value != tok {
		t.Errorf("plan with secrets: allow %v", s.policy.Allow)
	}
}

// TestProxyEnv: the docker container's proxy variables with the Node
// preload in /.corral; with secrets the bundle's variables, the Java
// store and git's helper; and none of them follow a session to another
// profile.
func TestProxyEnv(t *testing.T) {
	plain := proxyEnv(nil)
	for _, kv := range egress.Env() {
		if strings.HasPrefix(kv, "NODE_OPTIONS=") {
			continue
		}
		if !slices.Contains(plain, kv) {
			t.Errorf("proxyEnv lacks docker's %s", kv)
		}
	}
	if !slices.Contains(plain, "NODE_OPTIONS=--require="+NodeShimPath) {
		t.Errorf("NODE_OPTIONS: %v", plain)
	}
	specs := []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:X", Hosts: []string{"api.example.com"}}}
	withSecrets := proxyEnv(specs)
	for _, v := range secrets.CABundleVars {
		if !slices.Contains(withSecrets, v+"="+TrustBundle) {
			t.Errorf("with secrets: %s does not name %s", v, TrustBundle)
		}
	}
	java := ""
	for _, kv := range withSecrets {
		if v, ok := strings.CutPrefix(kv, "JAVA_TOOL_OPTIONS="); ok {
			java = v
		}
	}
	if !strings.Contains(java, "-Dhttps.proxyPort=3128") || !strings.Contains(java, "-Djavax.net.ssl.trustStore="+JavaTrustStore) {
		t.Errorf("JAVA_TOOL_OPTIONS %q", java)
	}
	if !slices.ContainsFunc(withSecrets, func(kv string) bool { return strings.HasPrefix(kv, "GIT_CONFIG_KEY_0=credential.helper") }) {
		t.Errorf("no git credential helper: %v", withSecrets)
	}
	saved := append(append([]string{"KEEP=1", "HTTP_PROXY=http://mine:8080"}, withSecrets...), egress.Env()...)
	got := withoutProxyEnv(saved, specs)
	if !slices.Equal(got, []string{"KEEP=1", "HTTP_PROXY=http://mine:8080"}) {
		t.Errorf("withoutProxyEnv kept %v", got)
	}
}

// TestReadBundleScript: the script that reads an image's bundle prints
// the first regular file's path and content, and exits 3 when there is
// none (run by this machine's sh, as the pod's runs it).
func TestReadBundleScript(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/b.pem", []byte("PEM\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir+"/d", 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", readBundleScript, "sh", dir+"/missing", dir+"/d", dir+"/b.pem").Output()
	if err != nil || string(out) != dir+"/b.pem\nPEM\n" {
		t.Errorf("got %q, %v", out, err)
	}
	err = exec.Command("sh", "-c", readBundleScript, "sh", dir+"/missing").Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("none: %v, want exit 3", err)
	}
}

// TestBuildPolicyAllowlist: an allowlist pod gets the deny-all policy
// (its egress goes through the tunnel, not the pod network).
func TestBuildPolicyAllowlist(t *testing.T) {
	np := buildPolicy(podPlan{name: "corral-x", namespace: "ns"}, sandbox.ProfileAllowlist)
	if np == nil || len(np.Spec.Egress) != 0 || len(np.Spec.Ingress) != 0 || len(np.Spec.PolicyTypes) != 2 || np.Spec.PodSelector.MatchLabels[LabelPod] != "corral-x" {
		t.Fatalf("policy %+v", np)
	}
}

// TestRefuseWithoutPool: without an egress pool the allowlist profile is
// refused as unavailable, before any cluster is contacted.
func TestRefuseWithoutPool(t *testing.T) {
	b := NewEngine(Options{}).Backend(DefaultSettings)
	err := b.refuse(&sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Profile: sandbox.ProfileAllowlist}})
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "proxies") {
		t.Fatalf("got %v", err)
	}
}
