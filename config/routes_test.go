package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestRoutesLoad(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		environ []string
		want    []Route
	}{
		{"absent", "", nil, nil},
		{"file, every field", `routes:
  - {sessions: "tg:*", backend: bwrap, profile: workspace}
  - {sessions: "local:*", backend: local}
  - {profile: network}
`, nil, []Route{
			{Sessions: "tg:*", Backend: "bwrap", Profile: sandbox.ProfileWorkspace},
			{Sessions: "local:*", Backend: "local"},
			{Profile: sandbox.ProfileNetwork},
		}},
		{"null fields count as left out", "routes:\n  - sessions: x\n    backend:\n", nil, []Route{{Sessions: "x"}}},
		{"workspace_mode", `routes: [{sessions: "agent:*", workspace_mode: review}]`, nil, []Route{{Sessions: "agent:*", WorkspaceMode: "review"}}},
		{"empty mapping", "routes: [{}]", nil, []Route{{}}},
		{"env JSON", "", env(`CORRAL_ROUTES=[{"sessions":"a*","profile":"restricted"}]`), []Route{{Sessions: "a*", Profile: sandbox.ProfileRestricted}}},
		{"env single mapping", "", env(`CORRAL_ROUTES={sessions: "b?", backend: local}`), []Route{{Sessions: "b?", Backend: "local"}}},
		{"env empty list clears the file", "routes: [{profile: network}]", env("CORRAL_ROUTES=[]"), []Route{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			environ := tc.environ
			if environ == nil {
				environ = testEnv
			}
			s, err := Load(writeFile(t, tc.file), environ)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Routes, tc.want) {
				t.Errorf("Routes = %#v, want %#v", s.Routes, tc.want)
			}
		})
	}
}

func TestRoutesBadValues(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  []string
		want string
	}{
		{"not a list", "routes: tg", nil, `routes: "tg" is not a list of {sessions, backend, profile, allow, deny, secrets, workspace_mode, ports} mappings`},
		{"item not a mapping", "routes: [tg]", nil, `routes[0]: "tg" is not a {sessions, backend, profile, allow, deny, secrets, workspace_mode, ports} mapping`},
		{"unknown field", "routes: [{sessions: x, cwd: /a}]", nil, `routes[0]: {"cwd":"/a","sessions":"x"} has unknown field "cwd"`},
		{"bad backend", "routes: [{backend: podman}]", nil, `routes[0].backend: "podman" is not one of bwrap, docker, kubernetes, local`},
		{"bad profile", "routes: [{}, {profile: open}]", nil, `routes[1].profile: "open" is not one of restricted, workspace, allowlist, network`},
		{"sessions not a string", "routes: [{sessions: 5}]", nil, `routes[0].sessions: 5 is not a string`},
		{"bad workspace_mode", "routes: [{workspace_mode: overlay}]", nil, `routes[0].workspace_mode: "overlay" is not one of direct, review`},
		{"unterminated set", `routes: [{sessions: "tg[:*"}]`, nil, `routes[0].sessions: "tg[:*" is not a valid glob: has a "[" without its "]"`},
		{"lone backslash", `routes: [{sessions: 'x\'}]`, nil, `is not a valid glob: ends with a lone "\"`},
		{"env plain word", "", []string{"CORRAL_ROUTES=tg"}, `routes: "tg" is not a list`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.file), env(tc.env...))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Load error = %v, want an ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestRouteMatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"", "anything", true},
		{"tg:*", "tg:12345", true},
		{"tg:*", "tg:", true},
		{"tg:*", "xtg:1", false},
		{"tg:*", "TG:1", false},
		{"dir:*", "dir:/home/u/src/proj", true}, // '*' crosses '/'
		{"dir:/home/*/proj", "dir:/home/u/x/proj", true},
		{"chat-?", "chat-7", true},
		{"chat-?", "chat-77", false},
		{"chat-?", "chat-é", true}, // '?' is one character, not one byte
		{"[ab]:*", "b:1", true},
		{"[ab]:*", "c:1", false},
		{"[!ab]:*", "c:1", true},
		{"[a-c]x", "bx", true},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"a.b", "axb", false}, // regexp characters are literal
		{"(x)+", "(x)+", true},
		{"mcp:*", "mcp:", true},
		{"tg[", "tg[", false}, // malformed: matches nothing
	}
	for _, tc := range tests {
		if got := (Route{Sessions: tc.pattern}).Match(tc.name); got != tc.want {
			t.Errorf("Route{Sessions: %q}.Match(%q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestForSession(t *testing.T) {
	p := writeFile(t, `profile: network
routes:
  - {sessions: "admin:*"}
  - {sessions: "tg:*", profile: workspace, workspace_mode: review}
  - {sessions: "dbg:*", backend: local, profile: restricted}
  - {sessions: "*", profile: restricted}
`)
	s, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		session        string
		backend        string
		profile        sandbox.Profile
		profileSource  Source
		profileOrigin  string
		wantRouteIndex int
	}{
		{"admin:1", "bwrap", sandbox.ProfileNetwork, SourceFile, p, 0},
		{"tg:42", "bwrap", sandbox.ProfileWorkspace, SourceRoute, "routes[1]", 1},
		{"dbg:x", "local", sandbox.ProfileRestricted, SourceRoute, "routes[2]", 2},
		{"other", "bwrap", sandbox.ProfileRestricted, SourceRoute, "routes[3]", 3},
	}
	for _, tc := range tests {
		t.Run(tc.session, func(t *testing.T) {
			got := s.ForSession(tc.session)
			if want := map[bool]string{true: "review", false: "direct"}[tc.session == "tg:42"]; got.WorkspaceMode != want {
				t.Errorf("ForSession(%q).WorkspaceMode = %q, want %q", tc.session, got.WorkspaceMode, want)
			}
			if got.Backend != tc.backend || got.Profile != tc.profile {
				t.Errorf("ForSession(%q) = %s/%s, want %s/%s", tc.session, got.Backend, got.Profile, tc.backend, tc.profile)
			}
			if src, where := got.Source("profile"); src != tc.profileSource || where != tc.profileOrigin {
				t.Errorf("Source(profile) = %s %s, want %s %s", src, where, tc.profileSource, tc.profileOrigin)
			}
			if _, i := s.RouteFor(tc.session); i != tc.wantRouteIndex {
				t.Errorf("RouteFor(%q) index = %d, want %d", tc.session, i, tc.wantRouteIndex)
			}
		})
	}
	// The original is untouched.
	if s.Profile != sandbox.ProfileNetwork || s.Backend != "bwrap" {
		t.Errorf("ForSession changed its receiver: %s/%s", s.Backend, s.Profile)
	}
	if src, _ := s.Source("profile"); src != SourceFile {
		t.Errorf("ForSession changed the receiver's origins: %s", src)
	}

	// No routes: the settings as they are.
	d := Defaults().ForSession("x")
	if d.Profile != sandbox.DefaultProfile || d.Backend != "bwrap" {
		t.Errorf("Defaults().ForSession = %s/%s", d.Backend, d.Profile)
	}

	// A flag beats the route.
	f, _ := Load(p, testEnv)
	if err := f.Apply("profile", "network"); err != nil {
		t.Fatal(err)
	}
	if got := f.ForSession("tg:1"); got.Profile != sandbox.ProfileNetwork {
		t.Errorf("flag profile lost to the route: %s", got.Profile)
	}
}

func TestListenAndToken(t *testing.T) {
	good := []struct{ key, value, want string }{
		{"listen", "127.0.0.1:8765", "127.0.0.1:8765"},
		{"listen", "[::1]:0", "[::1]:0"},
		{"listen", ":9000", ":9000"},
		{"listen", "", ""},
		{"token", "0123456789abcdef", "0123456789abcdef"},
		{"token", "", ""},
		// A token file's newline, kept by a Secret made from the file.
		{"token", "0123456789abcdef\n", "0123456789abcdef"},
		{"token", " 0123456789abcdef\r\n", "0123456789abcdef"},
	}
	for _, tc := range good {
		s := Defaults()
		if err := s.Apply(tc.key, tc.value); err != nil {
			t.Errorf("Apply(%s, %q): %v", tc.key, tc.value, err)
			continue
		}
		if v, _ := s.Value(tc.key); v != tc.want {
			t.Errorf("Apply(%s, %q) gave %q, want %q", tc.key, tc.value, v, tc.want)
		}
	}
	bad := []struct{ key, value, want string }{
		{"listen", "localhost", `listen: "localhost" is not a host:port address`},
		{"listen", "host:http", `has no port number`},
		{"listen", "host:70000", `has no port number`},
		{"token", "short", `token: "short" is too short`},
		{"token", "0123456789 abcdef", `has spaces`},
		{"token", "0123456789abcdefé", `non-ASCII`},
	}
	for _, tc := range bad {
		err := Defaults().Apply(tc.key, tc.value)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Apply(%s, %q) = %v, want an error containing %q", tc.key, tc.value, err, tc.want)
		}
	}
	// CORRAL_TOKEN sets token.
	s, err := Load(missing(t), env("CORRAL_TOKEN=abcdefghijklmnopqrstuvwxyz"))
	if err != nil || s.Token != "abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("Load with CORRAL_TOKEN = %+v, %v", s, err)
	}
}

// routes can be set from the command line, and the token is never printed.
func TestSetRoutesAndHiddenToken(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := Set(p, "routes", `[{sessions: "tg:*", profile: workspace}]`); err != nil {
		t.Fatalf("Set routes: %v", err)
	}
	e, err := get(p, "routes", nil)
	if err != nil || !strings.Contains(e.Text, "tg:*") {
		t.Errorf("routes: %v %+v", err, e)
	}
	e, err = get(p, "token", []string{"CORRAL_TOKEN=abcdefghijklmnopqrstuv"})
	if err != nil || strings.Contains(e.Text, "abcdef") || strings.Contains(fmt.Sprint(e.Value), "abcdef") {
		t.Errorf("token shown: %v %+v", err, e)
	}
}

// network.allow and network.deny take host patterns, and a route's allow
// and deny replace them for its sessions.
func TestNetworkAllowDeny(t *testing.T) {
	p := writeFile(t, `profile: allowlist
network:
  allow: ["pypi.org", "*.PythonHosted.org", " github.com "]
  deny: [upload.pypi.org]
routes:
  - {sessions: "tg:*", allow: ["example.com"], deny: []}
  - {sessions: "ci:*", profile: workspace, deny: ["*.evil.test"]}
`)
	s, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"pypi.org", "*.PythonHosted.org", "github.com"}; !reflect.DeepEqual(s.NetworkAllow, want) {
		t.Errorf("NetworkAllow = %q, want %q", s.NetworkAllow, want)
	}
	if want := []string{"upload.pypi.org"}; !reflect.DeepEqual(s.NetworkDeny, want) {
		t.Errorf("NetworkDeny = %q, want %q", s.NetworkDeny, want)
	}
	for _, tc := range []struct {
		session           string
		allow, deny       []string
		allowSrc, denySrc Source
	}{
		{"tg:1", []string{"example.com"}, []string{"upload.pypi.org"}, SourceRoute, SourceFile},
		{"ci:1", s.NetworkAllow, []string{"*.evil.test"}, SourceFile, SourceRoute},
		{"other", s.NetworkAllow, s.NetworkDeny, SourceFile, SourceFile},
	} {
		got := s.ForSession(tc.session)
		if !reflect.DeepEqual(got.NetworkAllow, tc.allow) || !reflect.DeepEqual(got.NetworkDeny, tc.deny) {
			t.Errorf("ForSession(%q): allow %q deny %q, want %q %q", tc.session, got.NetworkAllow, got.NetworkDeny, tc.allow, tc.deny)
		}
		if src, _ := got.Source("network.allow"); src != tc.allowSrc {
			t.Errorf("ForSession(%q): Source(network.allow) = %s, want %s", tc.session, src, tc.allowSrc)
		}
		if src, _ := got.Source("network.deny"); src != tc.denySrc {
			t.Errorf("ForSession(%q): Source(network.deny) = %s, want %s", tc.session, src, tc.denySrc)
		}
	}
	// The route's list is a copy: changing it does not change the route.
	got := s.ForSession("tg:1")
	got.NetworkAllow[0] = "changed.test"
	if s.Routes[0].Allow[0] != "example.com" {
		t.Errorf("ForSession shares the route's list")
	}

	// The environment sets them, as JSON or comma-separated.
	e, err := Load(missing(t), env(`CORRAL_NETWORK_ALLOW=a.test, *.b.test`, `CORRAL_NETWORK_DENY=["x.b.test"]`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e.NetworkAllow, []string{"a.test", "*.b.test"}) || !reflect.DeepEqual(e.NetworkDeny, []string{"x.b.test"}) {
		t.Errorf("from the environment: allow %q deny %q", e.NetworkAllow, e.NetworkDeny)
	}

	for _, tc := range []struct {
		name, file, want string
	}{
		{"bare wildcard", `network: {allow: ["*"]}`, `network.allow[0]: "*" is not a host pattern: a bare wildcard would allow every host`},
		{"url", `network: {deny: ["https://x.test/"]}`, `network.deny[0]: "https://x.test/" is not a host pattern: URLs, paths and CIDR ranges are not supported`},
		{"port", `network: {allow: ["x.test:443"]}`, `ports are not supported`},
		{"route allow", `routes: [{allow: ["ok.test", "a.*.test"]}]`, `routes[0].allow[1]: "a.*.test" is not a host pattern`},
		{"route deny not a list", `routes: [{deny: x.test}]`, `routes[0].deny: "x.test" is not a list of host names`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.file), testEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load(%s) = %v, want an error containing %q", tc.file, err, tc.want)
			}
		})
	}
}

// TestRouteToDocker: the README's chat-bot route to the docker backend loads.
func TestRouteToDocker(t *testing.T) {
	s, err := Load(writeFile(t, `routes: [{sessions: "tg:*", backend: docker}]`), testEnv)
	if err != nil || len(s.Routes) != 1 || s.Routes[0].Backend != "docker" {
		t.Fatalf("%+v %v", s.Routes, err)
	}
	if got := s.ForSession("tg:42").Backend; got != "docker" {
		t.Errorf("ForSession(tg:42).Backend = %q", got)
	}
}

// TestRouteEmptySecrets: a route's secrets: [] leaves its sessions none of
// the secrets key's, says so in its origin, and shows as [] (a route that
// leaves the field out inherits them).
func TestRouteEmptySecrets(t *testing.T) {
	p := writeFile(t, `profile: allowlist
secrets: [{name: GITHUB_TOKEN, from: "env:GH", hosts: [api.github.com]}]
routes:
  - {sessions: "untrusted:*", secrets: []}
  - {sessions: "*"}
`)
	s, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.ForSession("untrusted:1"); len(got.Secrets) != 0 {
		t.Errorf("secrets of a session whose route says secrets: [] = %v, want none", got.Secrets)
	} else if src, where := got.Source("secrets"); src != SourceRoute || where != "routes[0]" {
		t.Errorf("Source(secrets) = %s %s, want the route", src, where)
	}
	if got := s.ForSession("other"); len(got.Secrets) != 1 {
		t.Errorf("a route without secrets: %v, want the inherited one", got.Secrets)
	}
	if out := format(s.Routes); !strings.Contains(out, `"sessions":"untrusted:*","secrets":[]`) || strings.Count(out, "secrets") != 1 {
		t.Errorf("routes shown as %s, want secrets: [] on the first only", out)
	}
}

// TestSetRoutesKeepsEmptySecrets: corral config set routes writes a
// route's secrets: [] to the file, and it reads back as an empty list
// (omitempty would drop it, and the route would inherit the secrets).
func TestSetRoutesKeepsEmptySecrets(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := set(p, "routes", `[{sessions: "free:*", secrets: []}, {sessions: "x:*", profile: workspace}]`, testEnv); err != nil {
		t.Fatal(err)
	}
	s, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Routes; len(r) != 2 || r[0].Secrets == nil || len(r[0].Secrets) != 0 || r[1].Secrets != nil {
		t.Errorf("routes read back as %+v, want secrets: [] on the first only", r)
	}
}
