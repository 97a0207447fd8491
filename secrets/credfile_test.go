package secrets

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// The credential files' table: each format, with a declared entry (the
// real value in the format's encoding) and undeclared ones; the copy
// holds only the declared entry, with the stand-in in the same encoding.
func TestFilterCredentials(t *testing.T) {
	gh := Secret{Name: "GH", Value: "ghp_RealRealRealReal01", StandIn: "ghp_StndStndStndStnd98", Hosts: []string{"github.com"}}
	pw := Secret{Name: "PW", Value: "p@ss/w:rd+Real", StandIn: "p@ss/w:rd+Stnd", Hosts: []string{"db.example"}}
	secs := []Secret{gh, pw}
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	const other = "OTHERsecretOTHERsecret"
	for _, tc := range []struct {
		name    string
		f       CredentialFormat
		in      string
		want    string
		wantErr bool
	}{
		{"npmrc token, _auth and _password; undeclared scopes hidden", FormatNpmrc,
			"; a comment with " + other + "\n" +
				"registry=https://npm.example/\n" +
				"//npm.example/:_authToken=" + gh.Value + "\n" +
				"//other.example/:_authToken=" + other + "\n" +
				"//other.example/:username=bob\n" +
				"//basic.example/:_auth=" + enc("me:"+gh.Value) + "\n" +
				"//pw.example/:username=me\n//pw.example/:_password=" + enc(pw.Value) + "\n" +
				"//env.example/:_authToken=${NPM_TOKEN}\n" +
				"_auth = " + enc("x:"+other) + "\n" +
				"@corp:registry=https://u:" + other + "@corp.example/\n",
			"registry=https://npm.example/\n" +
				"//npm.example/:_authToken=" + gh.StandIn + "\n" +
				"//basic.example/:_auth=" + enc("me:"+gh.StandIn) + "\n" +
				"//pw.example/:username=me\n//pw.example/:_password=" + enc(pw.StandIn) + "\n" +
				"//env.example/:_authToken=${NPM_TOKEN}\n", false},
		{"npmrc: an inline TLS key, a one-time password, other keys of undeclared scopes and tokens in query strings hidden", FormatNpmrc,
			"key=\"-----BEGIN PRIVATE KEY-----\\n" + other + "\\n-----END PRIVATE KEY-----\"\n" +
				"cert=\"-----BEGIN CERTIFICATE-----\\nMIIB\\n-----END CERTIFICATE-----\"\n" +
				"otp=123456\n" +
				"//other.example/:authToken=" + other + "\n" +
				"//other.example/:otp=654321\n" +
				"//npm.example/:authToken=" + gh.Value + "\n" +
				"@acme:registry=https://other.example/npm/?access_token=" + other + "\n" +
				"@mine:registry=https://npm.example/npm/?x=1&access_token=" + gh.Value + "\n" +
				"@env:registry=https://npm.example/?token=${NPM_TOKEN}\n" +
				"strict-ssl=true\n",
			"//npm.example/:authToken=" + gh.StandIn + "\n" +
				"@mine:registry=https://npm.example/npm/?x=1&access_token=" + gh.StandIn + "\n" +
				"@env:registry=https://npm.example/?token=${NPM_TOKEN}\n" +
				"strict-ssl=true\n", false},
		{"npmrc quoted value", FormatNpmrc, `//npm.example/:_authToken="` + gh.Value + "\"\n", "//npm.example/:_authToken=" + gh.StandIn + "\n", false},
		{"npmrc garbage", FormatNpmrc, "just words\n", "", true},
		{"netrc", FormatNetrc,
			"machine github.com login x password " + gh.Value + "\n" +
				"machine db.example\n  login deploy\n  password " + other + "\n" +
				"default login anonymous password " + other + "\n" +
				"macdef init\ncd /pub\n\n" +
				"machine q.example login \"" + pw.Value + "\" password x\n",
			"machine github.com login x password " + gh.StandIn + "\n" +
				"machine q.example login " + pw.StandIn + "\n", false},
		{"netrc unknown word", FormatNetrc, "machine a.example port 22\n", "", true},
		{"git-credentials", FormatGitCredentials,
			"https://x-access-token:" + gh.Value + "@github.com\n" +
				"https://deploy:" + other + "@db.example\n" +
				"https://me:p%40ss%2Fw%3Ard+Real@db.example/path\n",
			"https://x-access-token:" + gh.StandIn + "@github.com\n" +
				"https://me:p%40ss%2Fw%3Ard+Stnd@db.example/path\n", false},
		{"git-credentials not a URL", FormatGitCredentials, "github.com " + gh.Value + "\n", "", true},
		{"pypirc", FormatPypirc,
			"[distutils]\nindex-servers =\n    pypi\n    corp\n\n[pypi]\nusername = __token__\npassword = " + gh.Value + "\n\n[corp]\nrepository = https://corp.example/\nusername = bob\npassword = " + other + "\n[testpypi]\nrepository: https://test.pypi.org/legacy/\n",
			"[distutils]\nindex-servers =\n    pypi\n    corp\n[pypi]\nusername = __token__\npassword = " + gh.StandIn + "\n[testpypi]\nrepository: https://test.pypi.org/legacy/\n", false},
		{"pypirc key outside a section", FormatPypirc, "password = x\n", "", true},
		{"value file", FormatValueFile, gh.Value + "\n", gh.StandIn + "\n", false},
		{"value file with more", FormatValueFile, gh.Value + "\n" + other + "\n", "", true},
		{"unknown format", "", "x", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FilterCredentials(tc.f, []byte(tc.in), secs)
			if tc.wantErr {
				if !errors.Is(err, ErrUnparsable) || !errors.Is(err, ErrUnusable) {
					t.Fatalf("err = %v, want ErrUnparsable", err)
				}
				if strings.Contains(err.Error(), gh.Value) || strings.Contains(err.Error(), other) {
					t.Errorf("the error quotes a value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			if holdsValue(got, secs) || strings.Contains(string(got), other) {
				t.Errorf("the copy holds a real value:\n%s", got)
			}
		})
	}
}

func TestFilterDockerConfig(t *testing.T) {
	gh := Secret{Name: "GH", Value: "ghp_RealRealRealReal01", StandIn: "ghp_StndStndStndStnd98"}
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	in := `{"auths": {
  "ghcr.io": {"auth": "` + enc("me:"+gh.Value) + `", "email": "me@example"},
  "registry.example": {"auth": "` + enc("bob:hunter2hunter2") + `"},
  "tok.example": {"identitytoken": "` + gh.Value + `", "password": "hunter2hunter2"}
 },
 "credsStore": "desktop", "credHelpers": {"gcr.io": "gcloud"}}`
	got, err := FilterCredentials(FormatDockerConfig, []byte(in), []Secret{gh})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]map[string]map[string]string
	if err := json.Unmarshal(got, &cfg); err != nil || len(cfg) != 1 {
		t.Fatalf("%s: %v (want auths only)", got, err)
	}
	want := map[string]map[string]string{
		"ghcr.io":     {"auth": enc("me:" + gh.StandIn), "email": "me@example"},
		"tok.example": {"identitytoken": gh.StandIn},
	}
	if a := cfg["auths"]; len(a) != 2 || a["ghcr.io"]["auth"] != want["ghcr.io"]["auth"] || a["ghcr.io"]["email"] != "me@example" ||
		len(a["tok.example"]) != 1 || a["tok.example"]["identitytoken"] != gh.StandIn {
		t.Errorf("got %s, want %v", got, want)
	}
	if strings.Contains(string(got), "hunter2") || strings.Contains(string(got), "desktop") {
		t.Errorf("undeclared credentials or helpers show:\n%s", got)
	}
	if _, err := FilterCredentials(FormatDockerConfig, []byte("[1]"), nil); !errors.Is(err, ErrUnparsable) {
		t.Errorf("a JSON list: %v", err)
	}
}

func TestFormatOf(t *testing.T) {
	for p, want := range map[string]CredentialFormat{
		"/h/.npmrc": FormatNpmrc, "/etc/npmrc": FormatNpmrc, "/h/.netrc": FormatNetrc, "/h/_netrc": FormatNetrc,
		"/h/.git-credentials": FormatGitCredentials, "/h/.config/git/credentials": FormatGitCredentials,
		"/h/.docker/config.json": FormatDockerConfig, "/h/.pypirc": FormatPypirc,
		"/h/.config/gh/hosts.yml": "", "/h/credentials": "", "/h/dotfiles/netrc": FormatNetrc,
	} {
		if got := FormatOf(p); got != want {
			t.Errorf("FormatOf(%s) = %q, want %q", p, got, want)
		}
	}
	// The entry as given first: a ~/.netrc that leads to dotfiles/netrc.
	if got := FormatOf("/h/.netrc", "/h/dotfiles/netrc"); got != FormatNetrc {
		t.Errorf("FormatOf(entry, target) = %q", got)
	}
}
