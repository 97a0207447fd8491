package bwrap

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

// scrubSecret: allowlist, GITHUB_TOKEN from env:GH_REAL for
// api.allowed.test and npm.allowed.test.
func scrubSecret(files ...string) func(*sandbox.Request) {
	return func(r *sandbox.Request) {
		allowlist(r)
		r.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.allowed.test", "npm.allowed.test"}, Files: files}}
		r.Timeout = 3 * time.Minute
	}
}

// standInOf runs a command that prints the sandbox's GITHUB_TOKEN.
func standInOf(t *testing.T, e *env, on func(*sandbox.Request)) string {
	t.Helper()
	o := e.sh(`echo "$GITHUB_TOKEN"`, on)
	si := strings.TrimSpace(o.stdout)
	if len(si) != len(realGH) || si == realGH {
		t.Fatalf("no stand-in in the sandbox:\n%s", o)
	}
	return si
}

// TestSecretsResponsesScrubbed: a secret's host that reflects the real
// token it got (in its header fields and body, in every encoding, with
// a compressed body although identity was asked for, cut across writes
// or cut short) reaches curl in the sandbox with the stand-in in its
// place; TRACE to it is refused (issue 26).
func TestSecretsResponsesScrubbed(t *testing.T) {
	e := newEnv(t)
	requireTool(t, "curl", "apt-get install curl")
	w := newSecretsWorld(t, e)
	on := scrubSecret()
	standIn := standInOf(t, e, on)
	o := e.sh(testkit.ReflectScript("api.allowed.test", "GITHUB_TOKEN"), on)
	if probs := testkit.CheckReflect(o.stdout, realGH, standIn); len(probs) > 0 {
		t.Errorf("what the sandbox got back:\n%s\n--- output:\n%s", strings.Join(probs, "\n"), o)
	}
	// The server did get the real value (else nothing was reflected).
	if !strings.Contains(w.seen(), "api.allowed.test GET /reflect auth=Bearer "+realGH) {
		t.Errorf("the server did not get the real token:\n%s", w.seen())
	}
	w.log.waitFor(t, "secret.scrubbed", "api.allowed.test")
}

// TestSecretFilesOnlyDeclared: declared credential files are parsed; the
// sandbox's copies hold only the entries with the secret's real value,
// each with the stand-in in the format's encoding (base64 of user:token
// in .npmrc's _auth and Docker's auth, percent-encoding in
// .git-credentials), and none of the other credentials of the same
// files; the stand-in in _auth reaches the registry as the real value; a
// kind of file corral cannot parse is refused (issue 26).
func TestSecretFilesOnlyDeclared(t *testing.T) {
	e := newEnv(t)
	requireTool(t, "curl", "apt-get install curl")
	w := newSecretsWorld(t, e)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	otherPass := "Other" + testkit.RandomAlnum(20)
	e.write(".npmrc", "registry=https://npm.allowed.test/\n//npm.allowed.test/:_auth="+b64("me:"+realGH)+"\n//other.allowed.test/:_authToken="+otherPass+"\n")
	e.write(".git-credentials", "https://x-access-token:"+realGH+"@api.allowed.test\nhttps://deploy:"+otherPass+"@db.allowed.test\n")
	e.write(".docker/config.json", `{"auths": {"npm.allowed.test": {"auth": "`+b64("me:"+realGH)+`"}, "db.allowed.test": {"auth": "`+b64("deploy:"+otherPass)+`"}}, "credsStore": "desktop"}`)
	e.write(".pypirc", "[distutils]\nindex-servers = pypi db\n[pypi]\nusername = __token__\npassword = "+realGH+"\n[db]\nusername = deploy\npassword = "+otherPass+"\n")
	on := scrubSecret("~/.npmrc", "~/.git-credentials", "~/.docker/config.json", "~/.pypirc")
	standIn := standInOf(t, e, on)
	o := e.sh(`for f in .npmrc .git-credentials .docker/config.json .pypirc; do echo "== $f"; cat ~/$f; done`, on)
	mustNotContain(t, o, realGH, otherPass, b64("me:"+realGH), b64("deploy:"+otherPass), "desktop", "db.allowed.test")
	mustContain(t, o,
		"registry=https://npm.allowed.test/\n//npm.allowed.test/:_auth="+b64("me:"+standIn)+"\n== .git-credentials",
		"https://x-access-token:"+standIn+"@api.allowed.test\n== .docker/config.json",
		`"auth": "`+b64("me:"+standIn)+`"`,
		"[pypi]\nusername = __token__\npassword = "+standIn+"\n")

	// npm's _auth as a client sends it: the registry gets the real token.
	mark := w.mark()
	o = e.sh(`curl -q -sS --max-time 20 -H "Authorization: Basic $(sed -n 's/^\/\/npm.allowed.test\/:_auth=//p' ~/.npmrc)" https://npm.allowed.test/-/whoami`, on)
	if seen := w.seenSince(mark); !strings.Contains(seen, "(basic me:"+realGH+")") {
		t.Errorf("the registry did not get the real token from _auth's stand-in:\n%s\n%s", seen, o)
	}

	// A kind of file corral does not parse is refused, naming it.
	e.write(".config/gh/hosts.yml", "github.com:\n  oauth_token: "+realGH+"\n")
	err := e.shErr(`echo ran`, scrubSecret("~/.config/gh/hosts.yml"))
	if !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), "cannot parse this kind of file") || strings.Contains(err.Error(), realGH) {
		t.Errorf("hosts.yml: %v, want a refusal naming the file", err)
	}
	// So is a file of a known kind that does not parse.
	e.write(".netrc", "machine\n")
	err = e.shErr(`echo ran`, scrubSecret("~/.netrc"))
	if !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), "read as netrc") {
		t.Errorf("a broken .netrc: %v, want a refusal", err)
	}
	// The host's files are unchanged.
	if b, _ := os.ReadFile(filepath.Join(e.home, ".git-credentials")); !strings.Contains(string(b), otherPass) {
		t.Errorf("the host's .git-credentials changed: %q", b)
	}
}
