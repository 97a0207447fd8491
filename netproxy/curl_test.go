package netproxy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// startForwarders relays loopback ports to both proxy sockets of s, as the
// forwarder does inside a sandbox, and returns the two ports' addresses.
func startForwarders(t testing.TB, s *Server) (httpAddr, socksAddr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var addrs []string
	done := make(chan struct{}, 2)
	for _, sock := range []string{s.HTTPSocket(), s.SOCKSSocket()} {
		f, err := ListenForward("127.0.0.1:0", sock)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, f.Addr().String())
		go func() {
			_ = f.Serve(ctx)
			done <- struct{}{}
		}()
	}
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
	})
	return addrs[0], addrs[1]
}

type curlResult struct {
	code   int
	stdout string
	stderr string
}

// runCurl runs curl with args, without any proxy variables or curlrc of
// the machine.
func runCurl(t *testing.T, args ...string) curlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "curl", append([]string{"-q", "-sS", "--max-time", "10"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + testDir(t)}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := curlResult{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		res.code = exitCode(t, err)
	}
	return res
}

func TestCurlThroughForwarderAndServer(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed (apt-get install curl); the Go client tests cover the same paths")
	}
	u := newUpstreams(t)
	s, rec := startTestServer(t, u, nil)
	httpAddr, socksAddr := startForwarders(t, s)
	httpProxy := "http://" + httpAddr

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"http proxy, plain", []string{"-x", httpProxy, "http://api.allowed.test/plain"}, "hello host=api.allowed.test path=/plain tls=false"},
		{"http proxy, CONNECT + TLS", []string{"-x", httpProxy, "--cacert", u.ca.pemPath, "https://api.allowed.test/tls"}, "hello host=api.allowed.test path=/tls tls=true"},
		{"http proxy, forced tunnel", []string{"-x", httpProxy, "-p", "http://allowed.test/tunnel"}, "hello host=allowed.test path=/tunnel tls=false"},
		{"socks5h, plain", []string{"--socks5-hostname", socksAddr, "http://api.allowed.test/socks"}, "hello host=api.allowed.test path=/socks tls=false"},
		{"socks5h, TLS", []string{"-x", "socks5h://" + socksAddr, "--cacert", u.ca.pemPath, "https://x.allowed.test/stls"}, "hello host=x.allowed.test path=/stls tls=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCurl(t, tc.args...)
			if r.code != 0 || r.stdout != tc.want {
				t.Errorf("curl %v: exit %d, stdout %q, stderr %q; want %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
			}
		})
	}

	t.Run("http proxy, denied", func(t *testing.T) {
		r := runCurl(t, "-x", httpProxy, "-w", "\n%{http_code}", "http://evil.test/")
		if r.code != 0 || r.stdout != "blocked by corral network allowlist: evil.test\n\n403" {
			t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		rec.waitFor(t, "network.denied", "evil.test")
	})
	t.Run("http proxy, CONNECT denied", func(t *testing.T) {
		r := runCurl(t, "-x", httpProxy, "https://blocked.allowed.test/")
		if r.code == 0 || !strings.Contains(r.stderr, "403") {
			t.Errorf("exit %d, stderr %q; want a failure naming 403", r.code, r.stderr)
		}
		rec.waitFor(t, "network.denied", "blocked.allowed.test")
	})
	t.Run("socks5h, denied", func(t *testing.T) {
		r := runCurl(t, "--socks5-hostname", socksAddr, "http://allowed.test.evil/")
		if r.code == 0 {
			t.Errorf("curl succeeded: %q", r.stdout)
		}
		if a := rec.waitFor(t, "network.denied", "allowed.test.evil"); a["proto"] != "socks5" {
			t.Errorf("network.denied record = %v", a)
		}
	})
	t.Run("socks5 with local resolution, IP refused", func(t *testing.T) {
		// socks5:// (no h) makes curl resolve locally and send an address.
		r := runCurl(t, "-x", "socks5://"+socksAddr, "http://127.0.0.1:1/")
		if r.code == 0 {
			t.Errorf("curl succeeded: %q", r.stdout)
		}
		rec.waitFor(t, "network.denied", "127.0.0.1")
	})
	t.Run("proxy variables from ProxyEnv", func(t *testing.T) {
		var hp, sp int
		fmt.Sscanf(httpAddr[strings.LastIndexByte(httpAddr, ':')+1:], "%d", &hp)
		fmt.Sscanf(socksAddr[strings.LastIndexByte(socksAddr, ':')+1:], "%d", &sp)
		cmd := exec.Command("curl", "-q", "-sS", "--max-time", "10", "--cacert", u.ca.pemPath, "https://env.allowed.test/env")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + testDir(t)}, ProxyEnv(hp, sp, "")...)
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "hello host=env.allowed.test path=/env tls=true" {
			t.Errorf("curl with ProxyEnv: %v, %q", err, out)
		}
	})
}
