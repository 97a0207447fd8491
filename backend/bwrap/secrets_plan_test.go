package bwrap

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestPlanSecrets(t *testing.T) {
	f := newPlanFix(t)
	bundle := filepath.Join(f.base, "bundle.pem")
	store := filepath.Join(f.base, "truststore.p12")
	tokenFile := filepath.Join(f.data, "token")
	for _, p := range []string{bundle, store, tokenFile} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	specs := []sandbox.Secret{
		{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"github.com"}},
		{Name: "GITLAB_TOKEN", From: "file:" + tokenFile, Hosts: []string{"gitlab.example"}},
	}
	facts := &SecretFacts{
		Env:         []string{"GITHUB_TOKEN=ghp_stand", "GITLAB_TOKEN=glpat-stand"},
		Strip:       []string{"GH_REAL", "GITHUB_TOKEN", "GITLAB_TOKEN"},
		Files:       []string{tokenFile},
		Bundle:      bundle,
		BundleDests: []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"},
		JavaStore:   store,
		// A path the host need not have: the plan binds over it as told.
		JavaStoreDests: []string{"/etc/ssl/certs/java/cacerts"},
	}
	host := f.host()
	host.Secrets = facts
	req := f.req(func(r *sandbox.Request) {
		r.Profile = sandbox.ProfileAllowlist
		r.Secrets = specs
		r.Binds = []sandbox.Bind{{Src: f.data, ReadOnly: true}}
		// env_allow names the source and the secret: neither comes through.
		r.Env = append(r.Env, "GH_REAL=ghp_REALVALUE", "GITHUB_TOKEN=ghp_REALVALUE", "SSL_CERT_FILE=/x.pem")
		r.EnvAllow = []string{"GH_REAL", "GITHUB_TOKEN"}
	})
	plan, err := checkedPlan(t, req, host)
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(plan.Env, "\n")
	if strings.Contains(env, "REALVALUE") || strings.Contains(env, "GH_REAL=") {
		t.Errorf("the real value or its source variable is in the environment:\n%s", env)
	}
	for _, want := range []string{"GITHUB_TOKEN=ghp_stand", "GITLAB_TOKEN=glpat-stand", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt", "REQUESTS_CA_BUNDLE=", "CURL_CA_BUNDLE=", "GIT_SSL_CAINFO=", "PIP_CERT="} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %q:\n%s", want, env)
		}
	}
	var got []string
	for _, m := range plan.Mounts {
		got = append(got, planM(m))
	}
	for _, want := range []string{"ro-bind " + bundle + " /etc/ssl/certs/ca-certificates.crt", "ro-bind " + bundle + " /etc/pki/tls/certs/ca-bundle.crt", "ro-bind " + store + " /etc/ssl/certs/java/cacerts", "ro-bind " + f.empty + " " + tokenFile} {
		if !slices.Contains(got, want) {
			t.Errorf("no mount %q in%s", want, planDump(plan.Mounts))
		}
	}
	if !slices.Contains(plan.Reach, bundle) || !slices.Contains(plan.Reach, store) {
		t.Errorf("Reach %v lacks the bundle or the Java trust store", plan.Reach)
	}

	for _, prof := range []sandbox.Profile{sandbox.ProfileNetwork, sandbox.ProfileWorkspace, sandbox.ProfileRestricted} {
		r := *req
		r.Profile = prof
		_, err := checkedPlan(t, &r, host)
		if !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), "need the allowlist profile") {
			t.Errorf("profile %s: err = %v, want a refusal naming allowlist", prof, err)
		}
	}
	r := *req
	if _, err := checkedPlan(t, &r, f.host()); !errors.Is(err, sandbox.ErrBadRequest) {
		t.Errorf("secrets without prepared facts: err = %v", err)
	}
	inWork := filepath.Join(f.home, "project", "token")
	if err := os.WriteFile(inWork, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h2 := host
	f2 := *facts
	f2.Files = []string{inWork}
	h2.Secrets = &f2
	if _, err := checkedPlan(t, req, h2); !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), "that a secret is read from lies in") {
		t.Errorf("a secret's file in the working directory: err = %v", err)
	}
}
