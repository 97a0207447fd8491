package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestSecretsLoad(t *testing.T) {
	gh := sandbox.Secret{Name: "GITHUB_TOKEN", From: "env:GH_TOKEN", Hosts: []string{"github.com", "api.github.com"}}
	tests := []struct {
		name    string
		file    string
		environ []string
		want    []sandbox.Secret
	}{
		{"absent", "", nil, nil},
		{"file", `secrets:
  - {name: GITHUB_TOKEN, from: "env:GH_TOKEN", hosts: [github.com, api.github.com]}
  - name: GITLAB_TOKEN
    from: "file:/run/keys//gitlab/"
    hosts: ["*.GitLab.example.", gitlab.example]
    headers: [PRIVATE-TOKEN]
    username: oauth2
`, nil, []sandbox.Secret{gh, {Name: "GITLAB_TOKEN", From: "file:/run/keys/gitlab", Hosts: []string{"*.gitlab.example", "gitlab.example"}, Headers: []string{"PRIVATE-TOKEN"}, Username: "oauth2"}}},
		{"aws", `secrets: [{name: AWS_ACCESS_KEY_ID, kind: aws, from: "env:AK", secret_from: "file:/k//sk", hosts: ["*.amazonaws.com"]}]`, nil,
			[]sandbox.Secret{{Name: "AWS_ACCESS_KEY_ID", Kind: "aws", From: "env:AK", SecretFrom: "file:/k/sk", Hosts: []string{"*.amazonaws.com"}}}},
		{"files", `secrets: [{name: T, from: "env:V", hosts: [a.example], files: ["~/.netrc", "~//x/../.npmrc", "/etc//docker/config.json"]}]`, nil,
			[]sandbox.Secret{{Name: "T", From: "env:V", Hosts: []string{"a.example"}, Files: []string{"~/.netrc", "~/.npmrc", "/etc/docker/config.json"}}}},
		{"env JSON", "", env(`CORRAL_SECRETS=[{"name":"GITHUB_TOKEN","from":"env:GH_TOKEN","hosts":["github.com","api.github.com"]}]`), []sandbox.Secret{gh}},
		{"env single mapping", "", env(`CORRAL_SECRETS={name: GITHUB_TOKEN, from: "env:GH_TOKEN", hosts: [github.com, api.github.com]}`), []sandbox.Secret{gh}},
		{"env empty list clears the file", "secrets: [{name: A, from: 'env:B', hosts: [a.example]}]", env("CORRAL_SECRETS=[]"), []sandbox.Secret{}},
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
			if !reflect.DeepEqual(s.Secrets, tc.want) {
				t.Errorf("Secrets = %#v, want %#v", s.Secrets, tc.want)
			}
		})
	}
}

func TestSecretsBadValues(t *testing.T) {
	ok := `{name: T, from: "env:V", hosts: [a.example]}`
	tests := []struct {
		name, value, want string
	}{
		{"not a list", `tok`, `secrets: "tok" is not a list of {name, from, hosts, headers} mappings`},
		{"unknown field", `[{name: T, from: "env:V", hosts: [a.example], value: x}]`, `secrets[0]: `},
		{"no name", `[{from: "env:V", hosts: [a.example]}]`, `secrets[0].name: null is not a variable name`},
		{"bad name", `[{name: 1TOKEN, from: "env:V", hosts: [a.example]}]`, `secrets[0].name: "1TOKEN" is not a variable name`},
		{"name with dash", `[{name: MY-TOKEN, from: "env:V", hosts: [a.example]}]`, `secrets[0].name: "MY-TOKEN" is not a variable name`},
		{"a proxy variable corral sets", `[{name: npm_config_https_proxy, from: "env:V", hosts: [a.example]}]`, `secrets[0].name: "npm_config_https_proxy"`},
		{"a CA variable corral sets", `[{name: NODE_EXTRA_CA_CERTS, from: "env:V", hosts: [a.example]}]`, `secrets[0].name: "NODE_EXTRA_CA_CERTS"`},
		{"corral's name", `[{name: CORRAL_TOKEN, from: "env:V", hosts: [a.example]}]`, `starts with CORRAL_`},
		{"proxy variable", `[{name: https_proxy, from: "env:V", hosts: [a.example]}]`, `secrets[0].name: "https_proxy" is a variable corral sets`},
		{"duplicate", `[` + ok + `, ` + ok + `]`, `secrets[1].name: "T" names a secret declared earlier`},
		{"no from", `[{name: T, hosts: [a.example]}]`, `secrets[0].from: null is not "env:VAR" or "file:/abs/path"`},
		{"raw value as from", `[{name: T, from: "ghp_abc", hosts: [a.example]}]`, `secrets[0].from: "ghp_abc" is not "env:VAR" or "file:/abs/path"`},
		{"relative file", `[{name: T, from: "file:keys/t", hosts: [a.example]}]`, `secrets[0].from: "file:keys/t" is not "file:/abs/path"`},
		{"bad env var", `[{name: T, from: "env:A B", hosts: [a.example]}]`, `secrets[0].from: "env:A B" is not "env:VAR" with VAR`},
		{"no hosts", `[{name: T, from: "env:V"}]`, `secrets[0].hosts: null is not a non-empty list`},
		{"empty hosts", `[{name: T, from: "env:V", hosts: []}]`, `secrets[0].hosts: [] is not a non-empty list`},
		{"bare wildcard", `[{name: T, from: "env:V", hosts: ["*"]}]`, `secrets[0].hosts[0]: "*" is not a host pattern`},
		{"url host", `[{name: T, from: "env:V", hosts: ["https://a.example/"]}]`, `secrets[0].hosts[0]: "https://a.example/" is not a host pattern`},
		{"ip host", `[{name: T, from: "env:V", hosts: [a.example, 192.0.2.7]}]`, `secrets[0].hosts[1]: "192.0.2.7" is an IP address`},
		{"bad header", `[{name: T, from: "env:V", hosts: [a.example], headers: ["X Token"]}]`, `secrets[0].headers[0]: "X Token" is not an HTTP header name`},
		{"host header", `[{name: T, from: "env:V", hosts: [a.example], headers: [Host]}]`, `secrets[0].headers[0]: "Host" is a header the proxy must not rewrite`},
		{"username with a colon", `[{name: T, from: "env:V", hosts: [a.example], username: "a:b"}]`, `secrets[0].username: "a:b" is not a user name`},
		{"aws without secret_from", `[{name: T, kind: aws, from: "env:V", hosts: [a.example]}]`, `secrets[0].secret_from: null is not "env:VAR"`},
		{"secret_from of a token", `[{name: T, from: "env:V", secret_from: "env:W", hosts: [a.example]}]`, `secrets[0].secret_from: "env:W" belongs to kind: aws only`},
		{"unknown kind", `[{name: T, kind: gcp, from: "env:V", hosts: [a.example]}]`, `secrets[0].kind: "gcp" is not "token"`},
		{"relative credential file", `[{name: T, from: "env:V", hosts: [a.example], files: [.netrc]}]`, `secrets[0].files[0]: ".netrc" is not an absolute path or ~/path`},
		{"tilde user", `[{name: T, from: "env:V", hosts: [a.example], files: ["~bob/.netrc"]}]`, `secrets[0].files[0]: "~bob/.netrc" is not an absolute path or ~/path`},
		{"home as a file", `[{name: T, from: "env:V", hosts: [a.example], files: ["~/"]}]`, `secrets[0].files[0]: "~/" is the home directory`},
		{"root as a file", `[{name: T, from: "env:V", hosts: [a.example], files: ["/"]}]`, `secrets[0].files[0]: "/" is the root directory`},
		{"files not a list", `[{name: T, from: "env:V", hosts: [a.example], files: "~/.netrc"}]`, `secrets[0].files: "~/.netrc" is not a list of credential files`},
		{"file twice", `[{name: T, from: "env:V", hosts: [a.example], files: ["~/.netrc", "~/./.netrc"]}]`, `secrets[0].files[1]: "~/./.netrc" names a file listed earlier`},
		{"route", `[]`, ``},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := "secrets: " + tc.value + "\n"
			if tc.name == "route" {
				file = `routes: [{sessions: "x*", secrets: [{name: T, from: "env:V", hosts: ["10.0.0.1"]}]}]` + "\n"
				tc.want = `routes[0].secrets[0].hosts[0]: "10.0.0.1" is an IP address`
			}
			_, err := Load(writeFile(t, file), testEnv)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Load error = %v, want an ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestSecretsForSession(t *testing.T) {
	s, err := Load(writeFile(t, `secrets: [{name: A, from: "env:A_REAL", hosts: [a.example]}]
routes:
  - {sessions: "gh:*", profile: allowlist, secrets: [{name: GITHUB_TOKEN, from: "file:/k/gh", hosts: [github.com]}]}
  - {sessions: "*", profile: allowlist}
`), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.ForSession("gh:1").Secrets; len(got) != 1 || got[0].Name != "GITHUB_TOKEN" || got[0].From != "file:/k/gh" {
		t.Errorf("gh:1 secrets = %#v, want the route's", got)
	}
	if src, where := s.ForSession("gh:1").Source("secrets"); src != SourceRoute || where != "routes[0]" {
		t.Errorf("gh:1 secrets source = %v %q", src, where)
	}
	if got := s.ForSession("other").Secrets; len(got) != 1 || got[0].Name != "A" {
		t.Errorf("other secrets = %#v, want the key's", got)
	}
}

func TestCheckSecretsProfile(t *testing.T) {
	sec := []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH", Hosts: []string{"github.com"}}}
	for _, tc := range []struct {
		profile sandbox.Profile
		secrets []sandbox.Secret
		refused bool
	}{
		{sandbox.ProfileAllowlist, sec, false},
		{sandbox.ProfileNetwork, sec, true},
		{sandbox.ProfileWorkspace, sec, true},
		{sandbox.ProfileRestricted, sec, true},
		{"", sec, sandbox.DefaultProfile != sandbox.ProfileAllowlist},
		{sandbox.ProfileNetwork, nil, false},
	} {
		err := sandbox.CheckSecrets(sandbox.Policy{Profile: tc.profile, Secrets: tc.secrets})
		if (err != nil) != tc.refused {
			t.Errorf("profile %q: err = %v, want refused=%v", tc.profile, err, tc.refused)
			continue
		}
		if err != nil && (!errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), "allowlist") || !strings.Contains(err.Error(), "GITHUB_TOKEN")) {
			t.Errorf("profile %q: err = %v, want ErrBadRequest naming allowlist and the secret", tc.profile, err)
		}
	}
}
