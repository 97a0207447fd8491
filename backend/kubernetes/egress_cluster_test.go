package kubernetes

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/corralhq/corral/backend/internal/scopes"
	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/testcert"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

// realToken is the real value of the secrets test, made when the test
// binary starts (the binary is copied into pods: it must not hold it).
var realToken = "ghp_" + testkit.RandomAlnum(36)

// egressKube is a kubernetes backend with an egress pool whose upstream
// dialer sends every name to servers on the host's loopback, which no pod
// can reach but through corral: port 443 to an HTTPS server for
// *.allowed.test (the pool trusts its certificate), any other port to a
// plain HTTP server. Both answer "hello HOST" and record each request's
// host and Authorization header.
type egressKube struct {
	*kube
	pool     *egress.Pool
	mu       sync.Mutex
	arrivals []string
}

func (k *egressKube) seen() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return strings.Join(k.arrivals, "\n")
}

func newEgressKube(t *testing.T) *egressKube {
	t.Helper()
	k := &egressKube{kube: newKube(t)}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := strings.Cut(r.Host, ":")
		if strings.HasPrefix(r.URL.Path, "/repo.git/") && r.Header.Get("Authorization") == "" {
			// git asks its credential helper only when challenged.
			w.Header().Set("WWW-Authenticate", `Basic realm="repo"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		k.mu.Lock()
		k.arrivals = append(k.arrivals, host+r.URL.Path+" auth="+r.Header.Get("Authorization"))
		k.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/reflect") {
			// A secret's host that hands the credential back.
			testkit.Reflect(w, r)
			return
		}
		fmt.Fprintf(w, "hello %s", host)
	})
	cert, _ := testcert.New(t, "allowed.test", "*.allowed.test")
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	tlsSrv := httptest.NewUnstartedServer(handler)
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	plain := httptest.NewServer(handler)
	t.Cleanup(plain.Close)
	netDir, err := os.MkdirTemp("/var/tmp", "cn-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(netDir) })
	state := dockertest.TestDir(t)
	k.pool = egress.NewPool(egress.Options{
		Dir: netDir, Logger: slog.New(slog.NewTextHandler(k.log, &slog.HandlerOptions{Level: slog.LevelDebug})), Linger: -1,
		CADir: filepath.Join(state, "ca"), UpstreamRoots: roots,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			to := plain.Listener.Addr().String()
			if strings.HasSuffix(addr, ":443") {
				to = tlsSrv.Listener.Addr().String()
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", to)
		},
	})
	t.Cleanup(func() { k.pool.Close() })
	// The engine of newKube has no pool: one with it, same logger.
	k.e.Close()
	k.e = NewEngine(Options{Helper: dockertest.StaticCorral(t), Logger: slog.New(slog.NewTextHandler(k.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		KillGrace: time.Second, Egress: k.pool, SecretFilesDir: filepath.Join(state, "secretfiles")})
	t.Cleanup(func() { k.e.Close() })
	k.b = k.e.Backend(k.st)
	return k
}

// allowlist sets the allowlist profile with *.allowed.test allowed.
func allowlist(r *sandbox.Request) {
	r.Profile = sandbox.ProfileAllowlist
	r.NetworkAllow = []string{"*.allowed.test"}
}

// podOf returns this engine's pod of session sess.
func (k *egressKube) podOf(sess string) *podRef {
	k.t.Helper()
	for _, en := range k.e.table.Entries() {
		if en.Key.Kind == scopes.PerSession && en.Key.Session == sess {
			return en.Handle
		}
	}
	k.t.Fatalf("no pod of session %s", sess)
	return nil
}

// TestAllowlistKubernetes: under allowlist, HTTP, HTTPS (CONNECT) and
// SOCKS5 reach an allowed host that only corral's side can reach, through
// the tunnel; a denied host is refused by the proxy; the commands see the
// same proxy variables as on docker, with the Node preload in the pod;
// the pod's NetworkPolicy denies all ingress and egress and selects the
// pod; where the cluster enforces NetworkPolicy (CORRAL_TEST_KUBE_NETWORKPOLICY_ENFORCED=1)
// a connection that bypasses the proxy fails. Release leaves no object.
func TestAllowlistKubernetes(t *testing.T) {
	k := newEgressKube(t)
	sess := "allow-" + strconv.Itoa(os.Getpid())
	// A server on the host's side of the pod network: reachable from the
	// pod directly unless NetworkPolicy is enforced.
	direct := "none"
	if a := os.Getenv("CORRAL_TEST_KUBE_HOST_ADDR"); a != "" {
		ln, err := net.Listen("tcp", net.JoinHostPort(a, "0"))
		if err != nil {
			t.Fatalf("listening on %s: %v", a, err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "direct") })}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		direct = ln.Addr().String()
	}
	script := `echo "http=$(curl -sS -m 60 http://web.allowed.test/plain)"
echo "https=$(curl -sS -m 60 -k https://web.allowed.test/tls)"
echo "socks=$(curl -sS -m 60 --proxy "$ALL_PROXY" http://web.allowed.test/socks)"
echo "denied=$(curl -sS -m 60 -o /dev/null -w '%{http_code}' http://denied.example/x)"
curl -sS -m 60 -k https://denied.example/x >/dev/null 2>&1; echo "denied_tls=$?"
echo "env=$http_proxy $HTTPS_PROXY $ALL_PROXY $NO_PROXY"
echo "nodeopts=$NODE_OPTIONS"
echo "shim=$(grep -c 'corral: route' ` + NodeShimPath + `)"
if [ "$DIRECT" != none ]; then curl -sS -m 10 --noproxy '*' "http://$DIRECT/" >/dev/null 2>&1; echo "direct=$?"; fi
`
	out, errb, res := k.run(sess, script, func(r *sandbox.Request) {
		allowlist(r)
		r.Env, r.EnvAllow = append(r.Env, "DIRECT="+direct), []string{"DIRECT"}
	})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s %s", res.ExitCode, out, errb)
	}
	for _, want := range []string{
		"http=hello web.allowed.test\n",
		"https=hello web.allowed.test\n",
		"socks=hello web.allowed.test\n",
		"denied=403\n",
		"env=http://127.0.0.1:3128 http://127.0.0.1:3128 socks5h://127.0.0.1:1080 ",
		"nodeopts=--require=" + NodeShimPath + "\n",
		"shim=1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "denied_tls=0\n") {
		t.Errorf("a CONNECT to a denied host succeeded:\n%s", out)
	}
	if l := k.log.String(); !strings.Contains(l, "network.denied") || !strings.Contains(l, "denied.example") {
		t.Errorf("log: want network.denied for denied.example")
	}
	if s := k.seen(); strings.Contains(s, "denied.example") {
		t.Errorf("a denied host's request arrived:\n%s", s)
	}
	switch os.Getenv("CORRAL_TEST_KUBE_NETWORKPOLICY_ENFORCED") {
	case "1":
		if !strings.Contains(out, "direct=") || strings.Contains(out, "direct=0\n") {
			t.Errorf("NetworkPolicy is enforced, yet a direct connection to %s did not fail:\n%s", direct, out)
		}
	default:
		t.Logf("NetworkPolicy is not enforced on this cluster: a direct connection to %s from the pod: %q (0: reached)", direct, lineOf(out, "direct="))
	}

	// The NetworkPolicy: deny-all both ways, selecting the pod.
	p := k.podOf(sess)
	var np networkingv1.NetworkPolicy
	if err := p.cl.cs.get(context.Background(), p.namespace, resPolicies, p.name, &np); err != nil {
		t.Fatalf("the pod's NetworkPolicy: %v", err)
	}
	var pod corev1.Pod
	if err := p.cl.cs.get(context.Background(), p.namespace, resPods, p.name, &pod); err != nil {
		t.Fatal(err)
	}
	sel := np.Spec.PodSelector.MatchLabels
	if len(sel) == 0 || len(np.Spec.PodSelector.MatchExpressions) > 0 {
		t.Errorf("policy selector %v", np.Spec.PodSelector)
	}
	for key, v := range sel {
		if pod.Labels[key] != v {
			t.Errorf("the policy's selector %s=%s does not select pod %s (labels %v)", key, v, pod.Name, pod.Labels)
		}
	}
	if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("policy is not deny-all both ways: %+v", np.Spec)
	}

	for l := range strings.SplitSeq(k.log.String(), "\n") {
		if strings.Contains(l, "kubernetes.tunnel.started") || strings.Contains(l, "kubernetes.pod.started") || strings.Contains(l, ".uploaded") {
			t.Logf("measured: %s", l[strings.Index(l, "msg="):])
		}
	}
	// Another command of the session reuses the pod and its tunnel.
	out, _, _ = k.run(sess, `curl -sS -m 60 http://web.allowed.test/again`, allowlist)
	if out != "hello web.allowed.test" {
		t.Errorf("second command: %q", out)
	}
	if strings.Count(k.log.String(), "kubernetes.tunnel.started") != 1 {
		t.Errorf("want one tunnel for the session:\n%s", k.log.String())
	}
	k.b.Release(sess)
	k.waitGone(sess)
}

// lineOf returns out's line starting with prefix, or "".
func lineOf(out, prefix string) string {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// signalWriter is a command's stdout that closes hit when want appears.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	hit  chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.hit) })
	}
	return len(b), nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestTunnelBrokenFailsClosed: when the tunnel's exec stream is cut from
// corral's side in the middle of a command, the command's proxied
// connections fail (the pod side exits, its ports refuse) and no request
// arrives any more; the next command gets a new tunnel.
func TestTunnelBrokenFailsClosed(t *testing.T) {
	k := newEgressKube(t)
	sess := "broken-" + strconv.Itoa(os.Getpid())
	k.run(sess, `true`, allowlist)
	p := k.podOf(sess)
	// The loop waits (up to 120 s) for the first failing request: the
	// verdict is what that failure looks like, never how long it took.
	script := `echo "first=$(curl -sS -m 30 http://web.allowed.test/first)"
i=0
while [ $i -lt 1200 ]; do
  if ! curl -sS -m 30 -o /dev/null "http://web.allowed.test/n$i" 2>/tmp/err; then
    echo "failed rc=$(curl -sS -m 30 -o /dev/null http://web.allowed.test/after; echo $?)"
    cat /tmp/err
    exit 0
  fi
  i=$((i+1)); sleep 0.1
done
echo never-failed`
	w := &signalWriter{want: "first=hello", hit: make(chan struct{})}
	var errb bytes.Buffer
	req := &sandbox.Request{Argv: []string{"bash", "-c", script}, Session: sess, Stdout: w, Stderr: &errb,
		Policy: sandbox.Policy{Workdir: k.ws}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Timeout: 5 * time.Minute}
	allowlist(req)
	done := make(chan error, 1)
	var res *sandbox.Result
	go func() {
		var err error
		res, err = k.b.Run(context.Background(), req)
		done <- err
	}()
	select {
	case <-w.hit:
	case err := <-done:
		t.Fatalf("the command ended before its first request: %v %q %s", err, w.String(), errb.String())
	}
	k.e.breakTunnel(p)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := w.String()
	if res.ExitCode != 0 || !strings.Contains(out, "failed rc=") || strings.Contains(out, "failed rc=0") {
		t.Fatalf("exit %d, want failing requests after the tunnel broke:\n%s\n%s", res.ExitCode, out, errb.String())
	}
	if s := k.seen(); strings.Contains(s, "/after") {
		t.Errorf("a request arrived after the tunnel broke:\n%s", s)
	}
	t.Logf("after the break: %s", strings.TrimSpace(out[strings.Index(out, "failed"):]))
	// The next command: a new tunnel.
	out2, _, _ := k.run(sess, `curl -sS -m 60 http://web.allowed.test/next`, allowlist)
	if out2 != "hello web.allowed.test" {
		t.Errorf("after a new tunnel: %q\n%s", out2, k.log.String())
	}
	// Close removes the pod and its policy, and ends the tunnel.
	k.e.Close()
	k.waitGone(sess)
	select {
	case <-p.tun.Done():
	case <-time.After(60 * time.Second):
		t.Error("the tunnel still runs 60 s after Close")
	}
	// The pod's proxy was released (the pool closes it at once: Linger -1).
	if c, err := net.Dial("unix", p.proxy.HTTPSocket()); err == nil {
		c.Close()
		t.Error("the pod's proxy still listens after Close")
	}
}

// TestSecretsKubernetes: curl and python in the pod send a stand-in; the
// secret's host receives the real token through the proxy; another
// allowed host gets nothing (403); the trust variables name the bundle
// in the pod, which holds corral's CA and no key; git's credential helper
// answers with the stand-in; the real value is in no environment,
// command line or file of the pod, nor in the pod object.
func TestSecretsKubernetes(t *testing.T) {
	k := newEgressKube(t)
	sess := "sec-" + strconv.Itoa(os.Getpid())
	// A second secret, read from a file, whose host the proxy
	// terminates too: GITHUB_TOKEN's stand-in sent there is misdirected.
	keyFile := filepath.Join(dockertest.TestDir(t), "other-key")
	if err := os.WriteFile(keyFile, []byte("sk-"+realToken[4:]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A credential file in the caller's home holding the real value:
	// the pod gets a copy with the stand-in at the same place below its
	// HOME (/tmp). Not ~/.netrc: git would read it and skip the
	// credential helper this test checks too.
	home := filepath.Join(dockertest.TestDir(t), "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	if err := os.MkdirAll(filepath.Join(home, ".config/corral-test"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".config/corral-test/netrc"), []byte("machine api.allowed.test login x password "+realToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withSecret := func(r *sandbox.Request) {
		allowlist(r)
		r.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.allowed.test"}, Files: []string{"~/.config/corral-test/netrc"}},
			{Name: "OTHER_KEY", From: "file:" + keyFile, Hosts: []string{"other.allowed.test"}}}
		r.EnvAllow = []string{"GH_REAL"}
		r.Env = append(r.Env, "GH_REAL="+realToken)
		r.PolicyEnv = append(r.PolicyEnv, "GH_REAL="+realToken)
	}
	script := `set -u
echo "standin=$GITHUB_TOKEN"
echo "source=${GH_REAL-unset}"
echo "ssl=$SSL_CERT_FILE curl=$CURL_CA_BUNDLE git=$GIT_SSL_CAINFO node=$NODE_EXTRA_CA_CERTS req=$REQUESTS_CA_BUNDLE pip=$PIP_CERT"
echo "java=$JAVA_TOOL_OPTIONS"
grep -c "corral sandbox CA" "$SSL_CERT_FILE"
grep -c "PRIVATE KEY" "$SSL_CERT_FILE" || true
echo "curl1=$(curl -sS -m 60 -H "Authorization: Bearer $GITHUB_TOKEN" https://api.allowed.test/user)"
echo "curl2=$(curl -sS -m 60 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $GITHUB_TOKEN" https://other.allowed.test/x)"
echo "py=$(python3 -c 'import urllib.request,os; print(urllib.request.urlopen(urllib.request.Request("https://api.allowed.test/py", headers={"Authorization": "token "+os.environ["GITHUB_TOKEN"]}), timeout=60).read().decode())')"
echo "otherkey=${#OTHER_KEY}"
echo "imagebundle=$(ls /etc/ssl/certs/ca-certificates.crt 2>&1)"
echo "gitcount=$GIT_CONFIG_COUNT key=$GIT_CONFIG_KEY_0"
cred=$(printf 'protocol=https\nhost=api.allowed.test\n\n' | git credential fill)
echo "cred=$(echo "$cred" | grep -c "password=$GITHUB_TOKEN")"
git ls-remote https://api.allowed.test/repo.git >/dev/null 2>&1; echo "git=$?"
f=~/.config/corral-test/netrc
echo "netrc=$(cat $f) mode=$(stat -c %a $f)"
echo "curl3=$(curl -sS -m 60 --netrc-file $f https://api.allowed.test/netrc)"
echo "--- proc"
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | sort -u
echo "--- files"
find /tmp /.corral "$PWD" -xdev -type f -size -4M ! -path /.corral/corral -exec cat {} + 2>/dev/null
`
	out, errb, res := k.run(sess, script, withSecret)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d:\n%s\n%s", res.ExitCode, out, errb)
	}
	if strings.Contains(out+errb, realToken) || strings.Contains(out+errb, realToken[4:]) {
		t.Fatalf("the pod saw the real value:\n%s", out)
	}
	standIn := strings.TrimPrefix(lineOf(out, "standin="), "standin=")
	if len(standIn) != len(realToken) || !strings.HasPrefix(standIn, "ghp_") || standIn == realToken {
		t.Fatalf("stand-in %q: want the shape of the real value\n%s", standIn, out)
	}
	for _, want := range []string{
		"source=unset\n",
		fmt.Sprintf("ssl=%[1]s curl=%[1]s git=%[1]s node=%[1]s req=%[1]s pip=%[1]s\n", TrustBundle),
		"-Djavax.net.ssl.trustStore=" + JavaTrustStore + " ",
		"\n1\n0\n",
		"curl1=hello api.allowed.test\n",
		"curl2=403\n",
		"py=hello api.allowed.test\n",
		"gitcount=1 key=credential.helper\n",
		"cred=1\n",
		fmt.Sprintf("otherkey=%d\n", len(realToken)-1),
		"GITHUB_TOKEN=" + standIn + "\n",
		"netrc=machine api.allowed.test login x password " + standIn + " mode=400\n",
		"curl3=hello api.allowed.test\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The image's own system bundle is the base of the pod's bundle.
	if ib := lineOf(out, "imagebundle="); ib == "imagebundle=/etc/ssl/certs/ca-certificates.crt" {
		if !strings.Contains(k.log.String(), "system_bundle=/etc/ssl/certs/ca-certificates.crt") {
			t.Errorf("the image has a system bundle, but the pod's bundle was not made from it")
		}
	} else {
		t.Logf("the image has no Debian bundle (%s): the host's is used", ib)
	}
	seen := k.seen()
	if !strings.Contains(seen, "api.allowed.test/user auth=Bearer "+realToken) || !strings.Contains(seen, "api.allowed.test/py auth=token "+realToken) {
		t.Errorf("the secret's host did not get the real token:\n%s", seen)
	}
	if !strings.Contains(seen, "api.allowed.test/repo.git/info/refs auth=Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+realToken))) {
		t.Errorf("git's request with the credential helper's stand-in did not arrive:\n%s", seen)
	}
	if !strings.Contains(seen, "api.allowed.test/netrc auth=Basic "+base64.StdEncoding.EncodeToString([]byte("x:"+realToken))) {
		t.Errorf("curl --netrc's request with the file's stand-in did not arrive with the real value:\n%s", seen)
	}
	if strings.Contains(seen, "other.allowed.test") || strings.Contains(seen, standIn) {
		t.Errorf("the stand-in went to a host it does not belong to (or unreplaced):\n%s", seen)
	}
	if l := k.log.String(); !strings.Contains(l, "secret.used") || !strings.Contains(l, "secret.misdirected") || strings.Contains(l, realToken) {
		t.Errorf("log: want secret.used and secret.misdirected and no real value")
	}
	// The pod object and its policy hold neither the value nor its source.
	p := k.podOf(sess)
	var pod corev1.Pod
	if err := p.cl.cs.get(context.Background(), p.namespace, resPods, p.name, &pod); err != nil {
		t.Fatal(err)
	}
	if dump, _ := json.Marshal(pod); bytes.Contains(dump, []byte(realToken[4:])) || bytes.Contains(dump, []byte("GH_REAL")) {
		t.Errorf("the pod object holds the real value or its source")
	}
	// Under another profile the secret is refused before any pod.
	var sink bytes.Buffer
	req := &sandbox.Request{Argv: []string{"true"}, Session: sess + "-ws", Stdout: &sink, Stderr: &sink,
		Policy: sandbox.Policy{Workdir: k.ws}, Env: []string{"PATH=/usr/bin:/bin"}}
	withSecret(req)
	req.Profile = sandbox.ProfileWorkspace
	if _, err := k.b.Run(context.Background(), req); err == nil || !strings.Contains(err.Error(), "allowlist") {
		t.Errorf("secret under workspace: %v, want a refusal naming allowlist", err)
	}
	k.b.Release(sess)
	k.waitGone(sess)
	k.waitGone(sess + "-ws")
}

// TestWarmPoolAllowlist: under allowlist a session claims a pre-made pod
// of the warm pool (the pool's pods have no proxy of their own) and gets
// its proxy, preload and tunnel at the claim: an allowed host is reached,
// a denied one refused, and the pod's policy still denies all.
func TestWarmPoolAllowlist(t *testing.T) {
	k := newEgressKube(t)
	k.kube.setWarmPool(1)
	id := strconv.Itoa(os.Getpid())
	k.run("wpa-first-"+id, "true", allowlist) // first sight of the key: the pool fills
	free := k.waitFree(maker(k.e), 1)
	sess := "wpa-claim-" + id
	out, errb, res := k.run(sess, `echo "http=$(curl -sS -m 60 http://web.allowed.test/plain)"
echo "denied=$(curl -sS -m 60 -o /dev/null -w '%{http_code}' http://denied.example/x)"
echo "shim=$(grep -c 'corral: route' `+NodeShimPath+`)"`, allowlist)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s %s\nlog:\n%s", res.ExitCode, out, errb, k.log.String())
	}
	p := k.podOf(sess)
	if p.name != free[0] {
		t.Fatalf("session pod %s was not the free pod %v\nlog:\n%s", p.name, free, k.log.String())
	}
	for _, want := range []string{"http=hello web.allowed.test\n", "denied=403\n", "shim=1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	var np networkingv1.NetworkPolicy
	if err := p.cl.cs.get(context.Background(), p.namespace, resPolicies, p.name, &np); err != nil {
		t.Fatalf("the claimed pod's NetworkPolicy: %v", err)
	}
	if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("the claimed pod's policy is not deny-all both ways: %+v", np.Spec)
	}
}
