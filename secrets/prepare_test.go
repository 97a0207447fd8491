package secrets

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestPlanEnv(t *testing.T) {
	specs := []sandbox.Secret{
		{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"github.com"}},
		{Name: "API_KEY", From: "file:/keys/api", Hosts: []string{"api.example.com"}},
	}
	secs := []Secret{
		{Name: "GITHUB_TOKEN", StandIn: "ghp_stand", Hosts: []string{"github.com"}},
		{Name: "API_KEY", StandIn: "sk-stand", Hosts: []string{"api.example.com"}},
	}
	p := planEnv(specs, secs)
	for _, c := range []struct {
		what      string
		got, want []string
	}{
		{"Env", p.Env, []string{"GITHUB_TOKEN=ghp_stand", "API_KEY=sk-stand"}},
		{"Strip", p.Strip, []string{"GH_REAL", "GITHUB_TOKEN", "API_KEY"}},
		{"Files", p.Files, []string{"/keys/api"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
}

func TestPrepareRefusesOtherProfiles(t *testing.T) {
	req := &sandbox.Request{Policy: sandbox.Policy{Profile: sandbox.ProfileNetwork,
		Secrets: []sandbox.Secret{{Name: "T", From: "env:T_REAL", Hosts: []string{"a.example"}}}}, Env: []string{"T_REAL=ghp_" + strings.Repeat("x", 36)}}
	if _, err := Prepare(req); err == nil || !strings.Contains(err.Error(), "allowlist") {
		t.Errorf("Prepare under network: %v", err)
	}
	if p, err := Prepare(&sandbox.Request{}); p != nil || err != nil {
		t.Errorf("Prepare without secrets = %v, %v", p, err)
	}
}

func TestBundle(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n")
	for _, c := range []struct {
		name   string
		system []byte
	}{
		{"system", []byte("-----BEGIN CERTIFICATE-----\nSYS\n-----END CERTIFICATE-----\n\n")},
		{"none", nil},
	} {
		b := Bundle(c.system, ca)
		if !bytes.HasPrefix(b, bytes.TrimRight(c.system, "\n")) || !bytes.HasSuffix(b, ca) || bytes.Contains(b, []byte("\n\n\n")) {
			t.Errorf("%s: Bundle = %q", c.name, b)
		}
	}
	if got := BundleEnv("/b.pem"); len(got) != len(CABundleVars) || got[0] != "SSL_CERT_FILE=/b.pem" || !slices.Contains(got, "PIP_CERT=/b.pem") {
		t.Errorf("BundleEnv = %q", got)
	}
	dir := filepath.Join(t.TempDir(), "trust")
	p1, err := WriteBundle(dir, []byte("SYS"), ca)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := WriteBundle(dir, []byte("SYS"), ca)
	if err != nil || p1 != p2 {
		t.Errorf("same content, other path: %s %s %v", p1, p2, err)
	}
	if p3, _ := WriteBundle(dir, []byte("OTHER"), ca); p3 == p1 {
		t.Error("other content, same path: a running sandbox's bundle would change")
	}
	if st, err := os.Stat(p1); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode: %v %v", st.Mode(), err)
	}
}

// HostTrustBundle gives the kept bundle while nothing changed, writes it
// again when its file is gone, and another one for another CA.
func TestHostTrustBundleKept(t *testing.T) {
	dir := t.TempDir()
	ca := []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	dests, path, err := HostTrustBundle(dir, ca)
	if err != nil {
		t.Fatal(err)
	}
	if len(dests) == 0 {
		if path != "" {
			t.Fatalf("no host bundle, yet a bundle %s", path)
		}
		return // a host without a CA bundle: nothing is written
	}
	if _, p2, _ := HostTrustBundle(dir, ca); p2 != path {
		t.Errorf("second call: %s, want the kept %s", p2, path)
	}
	os.Remove(path)
	if _, p3, err := HostTrustBundle(dir, ca); err != nil || p3 != path {
		t.Errorf("after its file was removed: %s %v", p3, err)
	} else if b, err := os.ReadFile(p3); err != nil || !bytes.Contains(b, ca) {
		t.Errorf("rewritten bundle lacks the CA: %v", err)
	}
	other := []byte("-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n")
	if _, p4, _ := HostTrustBundle(dir, other); p4 == path {
		t.Errorf("another CA got the same bundle %s", p4)
	}
}
