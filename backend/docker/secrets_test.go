package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/testcert"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// realToken is the real value of the secrets tests, made when the test
// binary starts (the binary is mounted in containers: it must not hold it).
var realToken = "ghp_" + testkit.RandomAlnum(36)

// The AWS key pair of the secrets test: the key id of the real shape,
// the secret access key 40 characters.
var (
	realAWSID     = "AKIA" + strings.ToUpper(realToken[4:20])
	realAWSSecret = realToken[4:] + "/x+y"
)

// secretsFixture is a docker backend whose egress pool terminates TLS
// with a CA of the test's and forwards every name to one loopback HTTPS
// server for *.allowed.test, which records the Authorization header of
// each request.
type secretsFixture struct {
	*fixture
	mu       sync.Mutex
	arrivals []string
}

func (s *secretsFixture) seen() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.arrivals, "\n")
}

func newSecretsFixture(t *testing.T) *secretsFixture {
	t.Helper()
	if testing.Short() {
		t.Skip("docker integration test (-short)")
	}
	sf := &secretsFixture{}
	cert, _ := testcert.New(t, "allowed.test", "*.allowed.test")
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := strings.Cut(r.Host, ":")
		sf.mu.Lock()
		sf.arrivals = append(sf.arrivals, host+" auth="+r.Header.Get("Authorization"))
		sf.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/reflect") {
			// A secret's host that hands the credential back.
			testkit.Reflect(w, r)
			return
		}
		if host == "npm.allowed.test" {
			// A registry that takes any publish.
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"ok":true}`)
			return
		}
		fmt.Fprintf(w, "hello %s", host)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	cli := dockertest.Engine(t)
	st := DefaultSettings
	st.Image = dockertest.Image(t, cli)
	lb := &testkit.LogBuf{}
	logger := slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	state := dockertest.TestDir(t)
	netDir, err := os.MkdirTemp("/var/tmp", "cn-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(netDir) })
	pool := egress.NewPool(egress.Options{
		Dir: netDir, Logger: logger, Linger: -1,
		CADir: filepath.Join(state, "ca"), UpstreamRoots: roots,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
		},
	})
	t.Cleanup(func() { pool.Close() })
	e := secretsEngine(t, state, pool, logger)
	ws := dockertest.TestDir(t)
	if err := os.WriteFile(ws+"/README", []byte("workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sf.fixture = &fixture{t: t, cli: cli, e: e, b: e.Backend(st), ws: ws, log: lb}
	return sf
}

// withSecret: allowlist, *.allowed.test allowed, GITHUB_TOKEN from
// env:GH_REAL for api.allowed.test only (env_allow names the source: it
// is stripped all the same).
func withSecret(r *sandbox.Request) {
	r.Profile = sandbox.ProfileAllowlist
	r.NetworkAllow = []string{"*.allowed.test"}
	r.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.allowed.test"}}}
	r.EnvAllow = []string{"GH_REAL"}
	r.Env = append(r.Env, "GH_REAL="+realToken)
	r.PolicyEnv = append(r.PolicyEnv, "GH_REAL="+realToken)
}

// TestSecretsDocker: curl in the container sends a stand-in; the server
// of the secret's host receives the real token; another allowed host
// gets nothing and the request is refused; the container's configuration,
// its execs, its environment and /proc never hold the real value.
func TestSecretsDocker(t *testing.T) {
	f := newSecretsFixture(t)
	script := `set -u
echo "standin=$GITHUB_TOKEN"
echo "source=${GH_REAL-unset}"
echo "ssl=$SSL_CERT_FILE curl=$CURL_CA_BUNDLE git=$GIT_SSL_CAINFO node=$NODE_EXTRA_CA_CERTS req=$REQUESTS_CA_BUNDLE pip=$PIP_CERT"
grep -c "corral sandbox CA" "$SSL_CERT_FILE"
grep -c "PRIVATE KEY" "$SSL_CERT_FILE" || true
{ echo > "$SSL_CERT_FILE"; } 2>/dev/null && echo "bundle writable" || echo "bundle read-only"
echo "curl1=$(curl -sS -H "Authorization: Bearer $GITHUB_TOKEN" https://api.allowed.test/user)"
echo "curl2=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $GITHUB_TOKEN" https://other.allowed.test/x)"
echo "py=$(python3 -c 'import urllib.request,os; print(urllib.request.urlopen(urllib.request.Request("https://api.allowed.test/py", headers={"Authorization": "token "+os.environ["GITHUB_TOKEN"]}), timeout=20).read().decode())')"
echo "curl3=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $GITHUB_TOKEN" http://plain.allowed.test/x)"
echo "otherkey=${#OTHER_KEY}"
# corral's git credential helper, run as git runs it (the image has no git).
echo "gitcount=$GIT_CONFIG_COUNT key=$GIT_CONFIG_KEY_0"
cred=$(printf 'protocol=https\nhost=api.allowed.test\n\n' | sh -c "${GIT_CONFIG_VALUE_0#!} get")
echo "cred=$(echo "$cred" | head -n 1)"
echo "curl4=$(curl -sS -u "x-access-token:$(echo "$cred" | sed -n 's/^password=//p')" https://api.allowed.test/basic)"
echo "aws=${#AWS_ACCESS_KEY_ID} ${#AWS_SECRET_ACCESS_KEY} $(curl -sS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" https://s3.allowed.test/b/k)"
# corral's Node preload (the image has no node): named by NODE_OPTIONS,
# readable, and neither removable, writable nor movable.
echo "nodeopts=$NODE_OPTIONS"
echo "shim=$(grep -c 'corral: route' ` + egress.NodeShimPath + `)"
{ rm -f ` + egress.NodeShimPath + `; echo x >> ` + egress.NodeShimPath + `; mv ` + egress.NodeShimDir + ` /tmp/moved; } 2>/dev/null
echo "shimafter=$(tail -n 1 ` + egress.NodeShimPath + `)"
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | sort -u
`
	// A second secret, read from a file outside the workspace, whose host
	// the proxy terminates too: GITHUB_TOKEN's stand-in sent there is
	// misdirected.
	keyFile := filepath.Join(dockertest.TestDir(t), "other-key")
	if err := os.WriteFile(keyFile, []byte("sk-"+realToken[4:]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withSecret := func(r *sandbox.Request) {
		withSecret(r)
		r.Secrets = append(r.Secrets, sandbox.Secret{Name: "OTHER_KEY", From: "file:" + keyFile, Hosts: []string{"other.allowed.test"}})
		// An AWS key pair: the proxy signs curl's SigV4 request again.
		r.Secrets = append(r.Secrets, sandbox.Secret{Name: "AWS_ACCESS_KEY_ID", Kind: "aws", From: "env:AK_REAL", SecretFrom: "env:SK_REAL", Hosts: []string{"s3.allowed.test"}})
		r.Env = append(r.Env, "AK_REAL="+realAWSID, "SK_REAL="+realAWSSecret)
		r.PolicyEnv = append(r.PolicyEnv, "AK_REAL="+realAWSID, "SK_REAL="+realAWSSecret)
	}
	res, out := f.run("sec", script, withSecret)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	if strings.Contains(out, realToken) || strings.Contains(out, realToken[4:]) {
		t.Fatalf("the container saw the real value:\n%s", out)
	}
	standIn := ""
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(line, "standin="); ok {
			standIn = v
		}
	}
	if len(standIn) != len(realToken) || !strings.HasPrefix(standIn, "ghp_") || standIn == realToken {
		t.Fatalf("stand-in %q: want the shape of the real value\n%s", standIn, out)
	}
	bundle := secrets.SystemCABundles[0]
	for _, want := range []string{
		"source=unset\n",
		fmt.Sprintf("ssl=%[1]s curl=%[1]s git=%[1]s node=%[1]s req=%[1]s pip=%[1]s\n1\n0\nbundle read-only\n", bundle),
		"curl1=hello api.allowed.test\n",
		"curl2=403\n",
		"curl3=403\n",
		fmt.Sprintf("otherkey=%d\n", len(realToken)-1),
		"GITHUB_TOKEN=" + standIn + "\n",
		"py=hello api.allowed.test\n",
		"gitcount=1 key=credential.helper\n",
		"cred=username=x-access-token\n",
		"curl4=hello api.allowed.test\n",
		"aws=20 40 hello s3.allowed.test\n",
		"nodeopts=--require=" + egress.NodeShimPath + "\n",
		"shim=1\n",
		"shimafter=})();\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	seen := f.seen()
	if !strings.Contains(seen, "s3.allowed.test auth=AWS4-HMAC-SHA256 Credential="+realAWSID+"/") || strings.Contains(out, realAWSID) {
		t.Errorf("the AWS request was not signed again with the real key id (or the container saw it):\n%s", seen)
	}
	if !strings.Contains(seen, "api.allowed.test auth=Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+realToken))) {
		t.Errorf("the credential helper's stand-in did not reach the server as the real token:\n%s", seen)
	}
	if !strings.Contains(seen, "api.allowed.test auth=Bearer "+realToken) || !strings.Contains(seen, "api.allowed.test auth=token "+realToken) {
		t.Errorf("the secret's host did not get the real token:\n%s", seen)
	}
	if strings.Contains(seen, "plain.allowed.test") || strings.Contains(seen, "other.allowed.test") || strings.Contains(seen, standIn) {
		t.Errorf("the stand-in went on to a host it does not belong to (or unreplaced):\n%s", seen)
	}
	if l := f.log.String(); !strings.Contains(l, "secret.misdirected") || !strings.Contains(l, "secret.used") || strings.Contains(l, realToken) {
		t.Errorf("log: want secret.used and secret.misdirected and no real value:\n%s", l)
	}

	// Everything the engine knows of the container and its execs.
	names := f.containers("sec")
	if len(names) != 1 {
		t.Fatalf("containers %v", names)
	}
	ins, err := f.cli.ContainerInspect(context.Background(), names[0], client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dump, _ := json.Marshal(ins)
	if bytes.Contains(dump, []byte(realToken[4:])) || bytes.Contains(dump, []byte("GH_REAL")) {
		t.Errorf("docker inspect holds the real value or its source")
	}
	if !bytes.Contains(dump, []byte(bundle)) {
		t.Errorf("docker inspect shows no bundle mount at %s", bundle)
	}
	for _, id := range ins.Container.ExecIDs {
		x, err := f.cli.ExecInspect(context.Background(), id, client.ExecInspectOptions{})
		if err != nil {
			continue // ended and gone
		}
		if d, _ := json.Marshal(x); bytes.Contains(d, []byte(realToken[4:])) {
			t.Errorf("exec %s holds the real value: %s", id, d)
		}
	}
	// A command of another user runs in a docker exec of its own: its
	// environment gets the stand-in, never the real value.
	res, out = f.run("sec", `echo "$GITHUB_TOKEN"; cat /proc/self/environ | tr '\0' '\n' | grep -c GH_REAL || true`, withSecret, func(r *sandbox.Request) { r.User = "65534" })
	if res.ExitCode != 0 || out != standIn+"\n0\n" {
		t.Errorf("as another user: exit %d %q, want the stand-in", res.ExitCode, out)
	}
	f.b.Release("sec")
	if n := f.containers("sec"); len(n) != 0 {
		t.Errorf("left behind: %v", n)
	}
}

// TestSecretsDockerRefused: a secret file the container could read is
// refused before any container starts. (Secrets outside the allowlist
// profile are the conformance suite's secrets case.)
func TestSecretsDockerRefused(t *testing.T) {
	f := newSecretsFixture(t)
	inWS := filepath.Join(f.ws, "token")
	if err := os.WriteFile(inWS, []byte(realToken), 0o600); err != nil {
		t.Fatal(err)
	}
	req := &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.ws}, Session: "ref", Timeout: time.Minute}
	withSecret(req)
	req.Secrets[0].From = "file:" + inWS
	_, err := f.b.Run(context.Background(), req)
	if !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), "lies in") || strings.Contains(err.Error(), realToken) {
		t.Errorf("file in the workspace: err = %v", err)
	}
	// A credential file in the workspace: its bind would make a mount
	// point in the host's directory.
	if err := os.WriteFile(filepath.Join(f.ws, ".netrc"), []byte("machine x password "+realToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	req = &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.ws}, Session: "ref", Timeout: time.Minute}
	withSecret(req)
	req.Secrets[0].Files = []string{filepath.Join(f.ws, ".netrc")}
	_, err = f.b.Run(context.Background(), req)
	if !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), "lies in the workspace") || strings.Contains(err.Error(), realToken) {
		t.Errorf("files in the workspace: err = %v", err)
	}
	if n := f.containers("ref"); len(n) != 0 {
		t.Errorf("left behind: %v", n)
	}
}

// TestImageBundle reads the system bundle of an image that has one, with
// another of the known paths a symlink to it (Alpine's layout); an image
// without any gives nothing.
func TestImageBundle(t *testing.T) {
	f := newFixture(t, nil)
	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/java/", "etc/pki/", "etc/pki/ca-trust/", "etc/pki/ca-trust/extracted/", "etc/pki/ca-trust/extracted/java/"} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755})
	}
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Size: int64(len(pem))})
	tw.Write(pem)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "etc/ssl/cert.pem", Linkname: "certs/ca-certificates.crt"})
	// A Java trust store, and Fedora's path a symlink to it: one store.
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/ssl/certs/java/cacerts", Mode: 0o644, Size: 4})
	tw.Write([]byte("JKS?"))
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "etc/pki/ca-trust/extracted/java/cacerts", Linkname: "/etc/ssl/certs/java/cacerts"})
	tw.Close()
	ref := "corral-test-trust:1"
	res, err := f.cli.ImageImport(context.Background(), client.ImageImportSource{Source: &buf, SourceName: "-"}, ref, client.ImageImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res)
	res.Close()
	cli, err := f.e.client()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	it, err := f.e.imageBundle(context.Background(), cli, ref)
	t.Logf("reading an image's trust bundles: %v (once per image and corral process)", time.Since(start))
	if err != nil || !slices.Equal(it.dests, []string{"/etc/ssl/certs/ca-certificates.crt"}) || !bytes.Equal(it.system, pem) ||
		!slices.Equal(it.javaDests, []string{"/etc/ssl/certs/java/cacerts"}) {
		t.Errorf("imageBundle = %q, %q, Java %q, %v", it.dests, it.system, it.javaDests, err)
	}
	it, err = f.e.imageBundle(context.Background(), cli, dockertest.Image(t, f.cli))
	if err != nil || len(it.dests) != 0 || it.system != nil || len(it.javaDests) != 0 {
		t.Errorf("test image: imageBundle = %q, %d bytes, Java %q, %v", it.dests, len(it.system), it.javaDests, err)
	}
	if n := f.containers("trust-probe"); len(n) != 0 {
		t.Errorf("probe containers left: %v", n)
	}
}
