package docker

import (
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/mount"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/secrets"
)

func TestChooseTrust(t *testing.T) {
	for _, c := range []struct {
		name       string
		imgDests   []string
		img, host  string
		wantDests  []string
		wantSystem string
	}{
		{"image's own", []string{"/etc/pki/tls/certs/ca-bundle.crt"}, "IMG", "HOST", []string{"/etc/pki/tls/certs/ca-bundle.crt"}, "IMG"},
		{"host's when the image has none", nil, "", "HOST", []string{secrets.SystemCABundles[0]}, "HOST"},
		{"neither", nil, "", "", []string{secrets.SystemCABundles[0]}, ""},
	} {
		d, s := chooseTrust(c.imgDests, []byte(c.img), []byte(c.host))
		if !slices.Equal(d, c.wantDests) || string(s) != c.wantSystem {
			t.Errorf("%s: chooseTrust = %q, %q", c.name, d, s)
		}
	}
}

func TestExposedSecretFile(t *testing.T) {
	for _, c := range []struct {
		files, roots []string
		want         string
	}{
		{[]string{"/home/u/proj/.token"}, []string{"/home/u/proj"}, "/home/u/proj/.token"},
		{[]string{"/home/u/project-keys/t"}, []string{"/home/u/proj"}, ""},
		{[]string{"/keys/t"}, []string{"/home/u/proj", "/keys"}, "/keys/t"},
		{[]string{"/keys/t"}, []string{"/home/u/proj", "/"}, "/keys/t"},
		{nil, []string{"/"}, ""},
	} {
		if got, _ := exposedSecretFile(c.files, c.roots); got != c.want {
			t.Errorf("exposedSecretFile(%q, %q) = %q, want %q", c.files, c.roots, got, c.want)
		}
	}
}

// TestSpecTrust: the bundle is bound read-only at each destination and
// changes the container's hash; secrets without the proxy are refused;
// the container's Env holds no stand-in (they go per command).
func TestSpecTrust(t *testing.T) {
	st := DefaultSettings
	p, err := st.check(1000, 1001)
	if err != nil {
		t.Fatal(err)
	}
	filter := &filterSpec{profile: "{}", denyUnix: true}
	eg := &egressSpec{policy: netproxy.Policy{Allow: []string{"api.example.com"}}, key: "api.example.com|"}
	trust := &trustSpec{Bundle: "/state/trust/bundle-1.pem", Dests: []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/cert.pem"},
		JavaStore: "/state/trust/truststore-1.p12", JavaDests: []string{"/etc/ssl/certs/java/cacerts"}}
	plain, err := buildSpec(&st, p, testWS, "/opt/corral", nil, nil, "", nil, filter, eg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := buildSpec(&st, p, testWS, "/opt/corral", nil, nil, "", nil, filter, eg, trust, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range trust.Dests {
		if !slices.ContainsFunc(s.Host.Mounts, func(m mount.Mount) bool { return m.Source == trust.Bundle && m.Target == d && m.ReadOnly }) {
			t.Errorf("no read-only bundle mount at %s: %+v", d, s.Host.Mounts)
		}
	}
	if !slices.ContainsFunc(s.Host.Mounts, func(m mount.Mount) bool {
		return m.Source == trust.JavaStore && m.Target == "/etc/ssl/certs/java/cacerts" && m.ReadOnly
	}) {
		t.Errorf("no read-only Java trust store mount: %+v", s.Host.Mounts)
	}
	if s.Hash == plain.Hash {
		t.Error("the bundle mount does not change the hash")
	}
	for _, kv := range s.Config.Env {
		if slices.ContainsFunc(secrets.CABundleVars, func(v string) bool { return len(kv) > len(v) && kv[:len(v)+1] == v+"=" }) {
			t.Errorf("container Env holds %s: it is set per command", kv)
		}
	}
	if _, err := buildSpec(&st, p, testWS, "/opt/corral", nil, nil, "", nil, filter, nil, trust, nil); err == nil {
		t.Error("a trust bundle without the allowlist proxy was accepted")
	}
}

// TestSpecNodeShim: an allowlist container gets the Node preload's host
// directory bound read-only at egress.NodeShimDir and NODE_OPTIONS naming
// it; without the directory it gets neither (NODE_OPTIONS naming a missing
// file would stop every node), and other profiles get neither.
func TestSpecNodeShim(t *testing.T) {
	st := DefaultSettings
	p, err := st.check(1000, 1001)
	if err != nil {
		t.Fatal(err)
	}
	filter := &filterSpec{profile: "{}", denyUnix: true}
	opts := "NODE_OPTIONS=--require=" + egress.NodeShimPath
	hasMount := func(s *containerSpec) bool {
		return slices.ContainsFunc(s.Host.Mounts, func(m mount.Mount) bool { return m.Target == egress.NodeShimDir })
	}
	for _, tc := range []struct {
		name string
		eg   *egressSpec
		want bool
	}{
		{"allowlist", &egressSpec{key: "|", nodeShim: "/state/trust/node"}, true},
		{"allowlist without the directory", &egressSpec{key: "|"}, false},
		{"no proxy", nil, false},
	} {
		s, err := buildSpec(&st, p, testWS, "/opt/corral", nil, nil, "", nil, filter, tc.eg, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := slices.Contains(s.Config.Env, opts); got != tc.want {
			t.Errorf("%s: Env has %q: %v, want %v (%q)", tc.name, opts, got, tc.want, s.Config.Env)
		}
		if slices.ContainsFunc(s.Config.Env, func(kv string) bool { return strings.HasPrefix(kv, "NODE_OPTIONS=") && kv != opts }) {
			t.Errorf("%s: another NODE_OPTIONS in Env: %q", tc.name, s.Config.Env)
		}
		if got := hasMount(s); got != tc.want {
			t.Errorf("%s: mount at %s: %v, want %v", tc.name, egress.NodeShimDir, got, tc.want)
		}
		if tc.want && !slices.ContainsFunc(s.Host.Mounts, func(m mount.Mount) bool {
			return m.Source == tc.eg.nodeShim && m.Target == egress.NodeShimDir && m.ReadOnly && m.Type == mount.TypeBind
		}) {
			t.Errorf("%s: no read-only bind of %s at %s: %+v", tc.name, tc.eg.nodeShim, egress.NodeShimDir, s.Host.Mounts)
		}
	}
}

func TestCredentialFileRefusal(t *testing.T) {
	binds := []string{"/home/u/data"}
	for _, c := range []struct{ dest, want string }{
		{"/tmp/.netrc", ""},
		{"/tmp/.config/gh/hosts.yml", ""},
		{"/etc/npmrc", ""},
		{"/tmp", "is not a file path"},
		{"/", "is not a file path"},
		{"relative", "is not a file path"},
		{"/work/proj/.netrc", "lies in the workspace"},
		{"/work/proj", "lies in the workspace"},
		{"/home/u/data/.netrc", "lies in the bind at /home/u/data"},
		{"/.corral/x", "lies in /.corral"},
		{EgressDir + "/netrc", "lies in " + EgressDir},
		{"/proc/self/x", "lies in /proc"},
		{"/dev/shm/netrc", "lies in /dev"},
	} {
		got := credentialFileRefusal(c.dest, "/work/proj", binds)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("credentialFileRefusal(%q) = %q, want %q", c.dest, got, c.want)
		}
	}
}
