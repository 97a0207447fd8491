package kubernetes

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

// scrubSecret: allowlist, GITHUB_TOKEN from env:GH_REAL for
// api.allowed.test, with files.
func scrubSecret(files ...string) func(*sandbox.Request) {
	return func(r *sandbox.Request) {
		allowlist(r)
		r.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.allowed.test"}, Files: files}}
		r.Env = append(r.Env, "GH_REAL="+realToken)
		r.PolicyEnv = append(r.PolicyEnv, "GH_REAL="+realToken)
		r.Timeout = 3 * time.Minute
	}
}

// TestSecretsResponsesScrubbedKubernetes: a secret's host that reflects
// the real token it got (header fields, body in every encoding,
// compressed, cut across writes or short) reaches curl in the pod with
// the stand-in in its place; TRACE to it is refused (issue 26).
func TestSecretsResponsesScrubbedKubernetes(t *testing.T) {
	k := newEgressKube(t)
	sess := "scrub-" + strconv.Itoa(os.Getpid())
	defer func() { k.b.Release(sess); k.waitGone(sess) }()
	out, errb, res := k.run(sess, `echo "$GITHUB_TOKEN"`, scrubSecret())
	standIn := strings.TrimSpace(out)
	if res.ExitCode != 0 || len(standIn) != len(realToken) || standIn == realToken {
		t.Fatalf("no stand-in: exit %d %q %s", res.ExitCode, out, errb)
	}
	out, errb, _ = k.run(sess, testkit.ReflectScript("api.allowed.test", "GITHUB_TOKEN"), scrubSecret())
	if probs := testkit.CheckReflect(out+errb, realToken, standIn); len(probs) > 0 {
		t.Errorf("what the pod got back:\n%s\n--- output:\n%s\n%s", strings.Join(probs, "\n"), out, errb)
	}
	if !strings.Contains(k.seen(), "api.allowed.test/reflect auth=Bearer "+realToken) {
		t.Errorf("the server did not get the real token:\n%s", k.seen())
	}
}

// TestSecretFilesOnlyDeclaredKubernetes: the pod's copies of declared
// credential files of the caller's home hold only the entries with the
// secret's real value, with the stand-in in the format's encoding, and
// none of the files' other credentials (issue 26).
func TestSecretFilesOnlyDeclaredKubernetes(t *testing.T) {
	k := newEgressKube(t)
	sess := "files-only-" + strconv.Itoa(os.Getpid())
	defer func() { k.b.Release(sess); k.waitGone(sess) }()
	home := filepath.Join(dockertest.TestDir(t), "home")
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
	out, errb, res := k.run(sess, `echo "GT=$GITHUB_TOKEN"; for x in .npmrc .git-credentials; do echo "== $x"; cat ~/$x; done
echo "curl=$(curl -q -sS -m 60 -H "Authorization: Basic $(sed -n 's/^\/\/npm.allowed.test\/:_auth=//p' ~/.npmrc)" https://api.allowed.test/whoami)"`,
		scrubSecret("~/.npmrc", "~/.git-credentials"))
	if res.ExitCode != 0 {
		t.Fatalf("exit %d:\n%s\n%s", res.ExitCode, out, errb)
	}
	_, standIn, _ := strings.Cut(out, "GT=")
	standIn, _, _ = strings.Cut(standIn, "\n")
	if len(standIn) != len(realToken) || standIn == realToken {
		t.Fatalf("no stand-in:\n%s", out)
	}
	for _, bad := range []string{realToken, otherPass, b64("me:" + realToken), "db.allowed.test"} {
		if strings.Contains(out+errb, bad) {
			t.Errorf("the pod sees %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{
		"registry=https://npm.allowed.test/\n//npm.allowed.test/:_auth=" + b64("me:"+standIn) + "\n== .git-credentials",
		"https://x-access-token:" + standIn + "@api.allowed.test\n",
		"curl=hello api.allowed.test",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(k.seen(), "api.allowed.test/whoami auth=Basic "+b64("me:"+realToken)) {
		t.Errorf("the server did not get the real token from _auth's stand-in:\n%s", k.seen())
	}
}
