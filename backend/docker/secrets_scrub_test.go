package docker

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

// TestSecretsResponsesScrubbedDocker: a secret's host that reflects the
// real token it got (header fields, body in every encoding, compressed,
// cut across writes or short) reaches curl in the container with the
// stand-in in its place; TRACE to it is refused (issue 26).
func TestSecretsResponsesScrubbedDocker(t *testing.T) {
	f := newSecretsFixture(t)
	long := func(r *sandbox.Request) { r.Timeout = 3 * time.Minute }
	res, out := f.run("scrub", `echo "$GITHUB_TOKEN"`, withSecret, long)
	standIn := strings.TrimSpace(out)
	if res.ExitCode != 0 || len(standIn) != len(realToken) || standIn == realToken {
		t.Fatalf("no stand-in: exit %d %q", res.ExitCode, out)
	}
	_, out = f.run("scrub", testkit.ReflectScript("api.allowed.test", "GITHUB_TOKEN"), withSecret, long)
	if probs := testkit.CheckReflect(out, realToken, standIn); len(probs) > 0 {
		t.Errorf("what the container got back:\n%s\n--- output:\n%s", strings.Join(probs, "\n"), out)
	}
	if !strings.Contains(f.seen(), "api.allowed.test auth=Bearer "+realToken) {
		t.Errorf("the server did not get the real token:\n%s", f.seen())
	}
	if !strings.Contains(f.log.String(), "secret.scrubbed") {
		t.Errorf("no secret.scrubbed in the log")
	}
}

// TestSecretFilesOnlyDeclaredDocker: the container's copies of declared
// credential files hold only the entries with the secret's real value,
// with the stand-in in the format's encoding, and none of the files'
// other credentials; a kind of file corral cannot parse is refused
// (issue 26).
func TestSecretFilesOnlyDeclaredDocker(t *testing.T) {
	f := newSecretsFixture(t)
	home := dockertest.TestDir(t)
	t.Setenv("HOME", home)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	otherPass := "Other" + testkit.RandomAlnum(20)
	write := func(rel, data string) {
		t.Helper()
		p := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(".npmrc", "registry=https://npm.allowed.test/\n//npm.allowed.test/:_auth="+b64("me:"+realToken)+"\n//other.allowed.test/:_authToken="+otherPass+"\n")
	write(".git-credentials", "https://x-access-token:"+realToken+"@api.allowed.test\nhttps://deploy:"+otherPass+"@db.allowed.test\n")
	write(".docker/config.json", `{"auths": {"api.allowed.test": {"auth": "`+b64("me:"+realToken)+`"}, "db.allowed.test": {"auth": "`+b64("deploy:"+otherPass)+`"}}}`)
	withFiles := func(files ...string) func(*sandbox.Request) {
		return func(r *sandbox.Request) {
			withSecret(r)
			r.Secrets[0].Files = files
		}
	}
	res, out := f.run("files-only", `echo "GT=$GITHUB_TOKEN"; for x in .npmrc .git-credentials .docker/config.json; do echo "== $x"; cat ~/$x; done
echo "curl=$(curl -q -sS --max-time 20 -H "Authorization: Basic $(sed -n 's/^\/\/npm.allowed.test\/:_auth=//p' ~/.npmrc)" https://api.allowed.test/whoami)"`,
		withFiles("~/.npmrc", "~/.git-credentials", "~/.docker/config.json"))
	if res.ExitCode != 0 {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	_, standIn, _ := strings.Cut(out, "GT=")
	standIn, _, _ = strings.Cut(standIn, "\n")
	if len(standIn) != len(realToken) || standIn == realToken {
		t.Fatalf("no stand-in:\n%s", out)
	}
	for _, bad := range []string{realToken, otherPass, b64("me:" + realToken), b64("deploy:" + otherPass), "db.allowed.test"} {
		if strings.Contains(out, bad) {
			t.Errorf("the container sees %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{
		"registry=https://npm.allowed.test/\n//npm.allowed.test/:_auth=" + b64("me:"+standIn) + "\n== .git-credentials",
		"https://x-access-token:" + standIn + "@api.allowed.test\n== .docker/config.json",
		`"auth": "` + b64("me:"+standIn) + `"`,
		"curl=hello api.allowed.test",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(f.seen(), "api.allowed.test auth=Basic "+b64("me:"+realToken)) {
		t.Errorf("the server did not get the real token from _auth's stand-in:\n%s", f.seen())
	}
	// A kind of file corral does not parse is refused before any container.
	write(".config/gh/hosts.yml", "github.com:\n  oauth_token: "+realToken+"\n")
	req := &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.ws}, Session: "files-refused", Stdout: os.Stderr, Stderr: os.Stderr,
		Env: []string{"PATH=/usr/bin:/bin"}}
	withFiles("~/.config/gh/hosts.yml")(req)
	if _, err := f.b.Run(t.Context(), req); !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), "cannot parse this kind of file") || strings.Contains(err.Error(), realToken) {
		t.Errorf("hosts.yml: %v, want a refusal naming the file", err)
	}
}
