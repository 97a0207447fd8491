package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/sandbox"
)

// TestSecretsDockerNode: in a container of an image holding the host's
// node (nodeImage), Node's fetch and https.get, and npm publish with the
// token in a credential file (~/.npmrc), reach a secret's host
// through corral's proxy (the preload named by NODE_OPTIONS: Node 20
// ignores HTTPS_PROXY) and trust corral's CA (NODE_EXTRA_CA_CERTS); the
// server gets the real token, and the stand-in sent to another secret's
// host is refused (403).
func TestSecretsDockerNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on this host to copy into the test image (apt-get install nodejs; CI has it)")
	}
	f := newSecretsFixture(t)
	st := f.b.Settings()
	st.Image = nodeImage(t, f.cli, st.Image, node)
	f.b = f.e.Backend(st)
	script := `node -e '
const https = require("https");
const auth = {authorization: "Bearer " + process.env.GITHUB_TOKEN};
fetch("https://api.allowed.test/node-fetch", {headers: auth})
  .then(r => r.text()).then(t => { console.log("fetch:", t);
    return fetch("https://other.allowed.test/node-misdirected", {headers: auth}); })
  .then(r => { console.log("misdirected:", r.status);
    https.get("https://api.allowed.test/node-https", {headers: auth}, r => {
      let b = ""; r.on("data", d => b += d); r.on("end", () => console.log("https:", b)); });
  }).catch(e => { console.log("failed:", e, e.cause); process.exit(3); });'; node --version`
	res, out := f.run("node", script, withSecret, func(r *sandbox.Request) {
		// A second secret makes the proxy terminate TLS for another host
		// too, where GITHUB_TOKEN's stand-in is misdirected.
		r.Secrets = append(r.Secrets, sandbox.Secret{Name: "OTHER_KEY", From: "env:OTHER_REAL", Hosts: []string{"other.allowed.test"}})
		r.Env = append(r.Env, "OTHER_REAL=sk-"+realToken[4:])
		r.PolicyEnv = append(r.PolicyEnv, "OTHER_REAL=sk-"+realToken[4:])
		r.Timeout = 3 * 60e9
		r.Limits = sandbox.DefaultLimits
	})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	for _, want := range []string{"fetch: hello api.allowed.test\n", "misdirected: 403\n", "https: hello api.allowed.test\n", "v"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, realToken) {
		t.Errorf("the container saw the real value:\n%s", out)
	}
	seen := f.seen()
	if n := strings.Count(seen, "api.allowed.test auth=Bearer "+realToken); n != 2 {
		t.Errorf("the server got the real token %d times from Node, want 2 (fetch, https):\n%s", n, seen)
	}
	if strings.Contains(seen, "other.allowed.test") {
		t.Errorf("the misdirected stand-in reached the server:\n%s", seen)
	}
	f.b.Release("node")

	// npm publish (the host's npm, bound read-only) with the token in
	// ~/.npmrc, a secret's credential file: npm reads the stand-in from
	// the container's /tmp/.npmrc and the registry gets the real token.
	const npm = "/usr/lib/node_modules/npm"
	if _, err := os.Stat(npm + "/bin/npm-cli.js"); err != nil {
		t.Skipf("no npm at %s to bind (apt-get install npm; CI has it)", npm)
	}
	home := dockertest.TestDir(t)
	t.Setenv("HOME", home)
	if err := os.WriteFile(filepath.Join(home, ".npmrc"), []byte("//npm.allowed.test/:_authToken="+realToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st.Binds = []sandbox.Bind{{Src: npm, ReadOnly: true}}
	f.b = f.e.Backend(st)
	res, out = f.run("npm", `set -e
mkdir -p /tmp/pkg && cd /tmp/pkg
printf '%s\n' '{"name":"corral-secret-test","version":"1.0.0"}' > package.json
echo 'module.exports = 1' > index.js
node `+npm+`/bin/npm-cli.js publish --registry https://npm.allowed.test/ --cache /tmp/npm-cache --no-update-notifier --loglevel=warn --no-audit --no-fund --ignore-scripts 2>&1
echo PUBLISHED`, withSecret, func(r *sandbox.Request) {
		r.Secrets[0].Hosts = []string{"npm.allowed.test"}
		r.Secrets[0].Files = []string{"~/.npmrc"}
		r.Timeout = 3 * 60e9
		r.Limits = sandbox.DefaultLimits
	})
	if res.ExitCode != 0 || !strings.Contains(out, "PUBLISHED") || strings.Contains(out, realToken) {
		t.Fatalf("npm publish: exit %d:\n%s", res.ExitCode, out)
	}
	if !strings.Contains(f.seen(), "npm.allowed.test auth=Bearer "+realToken) {
		t.Errorf("the registry did not get the real token from npm publish:\n%s", f.seen())
	}
	f.b.Release("npm")
}

// nodeImage builds (once per base and node executable) base plus the
// host's node at /usr/bin/node and the shared libraries ldd names
// for it that the test image lacks (symlinks resolved; copied from the
// host, nothing pulled).
func nodeImage(t *testing.T, cli *client.Client, base, node string) string {
	t.Helper()
	real, err := filepath.EvalSymlinks(node)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(real)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%d|%d", base, real, st.Size(), st.ModTime().UnixNano()))
	ref := "corral-test-node:2-" + hex.EncodeToString(h[:6])
	if _, err := cli.ImageInspect(context.Background(), ref); err == nil {
		return ref
	}
	out, err := exec.Command("ldd", real).Output()
	if err != nil {
		t.Skipf("ldd %s: %v (a node that is not a dynamic executable of this host)", real, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name, src string) {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(data))})
		tw.Write(data)
	}
	dockerfile := "FROM " + base + "\nCOPY node /usr/bin/node\n"
	add("node", real)
	for i, line := range strings.Split(string(out), "\n") {
		// "libstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x...)"
		_, lib, ok := strings.Cut(line, "=> ")
		lib, _, _ = strings.Cut(lib, " ")
		if !ok || !filepath.IsAbs(lib) {
			continue
		}
		name := fmt.Sprintf("lib%d", i)
		add(name, lib)
		dockerfile += "COPY " + name + " " + lib + "\n"
	}
	data := []byte(dockerfile)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "Dockerfile", Mode: 0o644, Size: int64(len(data))})
	tw.Write(data)
	tw.Close()
	dockertest.BuildImage(t, cli, ref, &buf)
	return ref
}
