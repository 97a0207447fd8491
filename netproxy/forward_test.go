package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unixEchoUntilEOF serves a Unix socket that reads everything a client
// sends until its write side is shut, then answers "got N bytes" and
// closes: it only works if half-close is relayed.
func unixEchoUntilEOF(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(testDir(t), "echo.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "got %d bytes", n)
			}()
		}
	}()
	return sock
}

func TestForwardRelaysWithHalfClose(t *testing.T) {
	sock := unixEchoUntilEOF(t)
	f, err := ListenForward("127.0.0.1:0", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.Serve(ctx) }()

	for i := range 3 {
		c, err := net.Dial("tcp", f.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		payload := bytes.Repeat([]byte{byte(i)}, 100000+i)
		if _, err := c.Write(payload); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		_ = c.Close()
		if want := fmt.Sprintf("got %d bytes", len(payload)); err != nil || string(got) != want {
			t.Fatalf("got %q (err %v), want %q", got, err, want)
		}
	}

	// An open connection is closed when the context ends.
	idle, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(50 * time.Millisecond) // let the relay start
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("idle connection still open after cancel: %v", err)
	}
	if _, err := net.Dial("tcp", f.Addr().String()); err == nil {
		t.Error("listener still accepting after cancel")
	}
}

func TestForwardMissingSocket(t *testing.T) {
	f, err := ListenForward("127.0.0.1:0", filepath.Join(testDir(t), "absent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = f.Serve(context.Background()) }()
	defer f.Close()
	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read = %d, %v; want the connection closed", n, err)
	}
}

func TestListenForwardRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:3128", "example.com:3128", "nonsense"} {
		if _, err := ListenForward(addr, "/x.sock"); err == nil {
			t.Errorf("ListenForward(%q) succeeded", addr)
		} else if addr != "nonsense" && !errors.Is(err, ErrNotLoopback) {
			t.Errorf("ListenForward(%q) = %v, want ErrNotLoopback", addr, err)
		}
	}
	if err := Forward(context.Background(), "0.0.0.0:0", "/x.sock"); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("Forward = %v, want ErrNotLoopback", err)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// forwarderCmd runs the test binary as the forwarder with args.
func forwarderCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "NETPROXY_TEST_MODE=forwarder")
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("running the forwarder: %v", err)
	}
	return ee.ExitCode()
}

func TestForwarderMainEndToEnd(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the test seccomp filter assumes a little-endian 64-bit machine")
	}
	u := newUpstreams(t)
	s, rec := startTestServer(t, u, nil)
	httpPort, socksPort := freePort(t), freePort(t)
	proxyURL := fmt.Sprintf("http://127.0.0.1:%d", httpPort)

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := forwarderCmd(
		"--http", fmt.Sprintf("127.0.0.1:%d=%s", httpPort, s.HTTPSocket()),
		"--socks", fmt.Sprintf("127.0.0.1:%d=%s", socksPort, s.SOCKSSocket()),
		"--ready-fd", "3",
		"--", os.Args[0], probeArg, proxyURL, "http://api.allowed.test/through-forwarder", "7")
	cmd.Env = append(cmd.Env, "NETPROXY_TEST_SECCOMP=deny-unix")
	cmd.ExtraFiles = []*os.File{w}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	ready, _ := io.ReadAll(r)
	err = cmd.Wait()
	if code := exitCode(t, err); code != 7 {
		t.Fatalf("exit status %d, want 7 (the command's)\nstdout: %s\nstderr: %s", code, &stdout, &stderr)
	}
	wantReady := fmt.Sprintf("http 127.0.0.1:%d\nsocks 127.0.0.1:%d\n", httpPort, socksPort)
	if string(ready) != wantReady {
		t.Errorf("ready lines %q, want %q", ready, wantReady)
	}
	out := stdout.String()
	// The command ran under the filter installed by the trampoline ...
	if !strings.Contains(out, "unix-socket: operation not permitted") {
		t.Errorf("the command could create an AF_UNIX socket; output:\n%s\nstderr: %s", out, &stderr)
	}
	// ... while the forwarder, unfiltered, still relayed to the Unix socket.
	if !strings.Contains(out, "fetch: 200 hello host=api.allowed.test path=/through-forwarder") {
		t.Errorf("fetch through the forwarder failed; output:\n%s\nstderr: %s", out, &stderr)
	}
	rec.waitFor(t, "network.allowed", "api.allowed.test")
	// The listeners lived as long as the command, no longer.
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort)); err == nil {
		_ = c.Close()
		t.Error("forwarder port still open after the command ended")
	}
}

func TestForwarderMainExitStatus(t *testing.T) {
	dir := testDir(t)
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		want   int
		stderr string
	}{
		{"status passed on", []string{"--", "sh", "-c", "exit 3"}, 3, ""},
		{"success", []string{"--", "true"}, 0, ""},
		{"killed by signal", []string{"--", "sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{"not found", []string{"--", "no-such-command-netproxy"}, 127, "command not found"},
		{"missing path", []string{"--", "/nonexistent/cmd"}, 127, "/nonexistent/cmd"},
		{"not executable", []string{"--", notExec}, 126, "permission denied"},
		{"no command", []string{"--http", "127.0.0.1:0=/x.sock"}, 125, "no command"},
		{"bad flag", []string{"--bogus", "--", "true"}, 125, "bogus"},
		{"bad relay spec", []string{"--http", "127.0.0.1:0", "--", "true"}, 125, "ADDR=SOCKET"},
		{"non-loopback", []string{"--http", "0.0.0.0:0=/x.sock", "--", "true"}, 125, "not loopback"},
		{"ready-fd on stdout", []string{"--ready-fd", "1", "--", "true"}, 125, "standard input"},
		{"pass-fds negative", []string{"--pass-fds", "-1", "--", "true"}, 125, "want 0 to 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := forwarderCmd(tc.args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			code := exitCode(t, cmd.Run())
			if code != tc.want || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tc.want, tc.stderr)
			}
		})
	}
}

// TestTrampolineInstallFails: when the restrictions cannot be applied the
// command does not run, and the trampoline exits 125 saying why.
func TestTrampolineInstallFails(t *testing.T) {
	marker := filepath.Join(testDir(t), "ran")
	cmd := exec.Command(os.Args[0], TrampolineArg, "--", "sh", "-c", "touch "+marker)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "NETPROXY_TEST_SECCOMP=fail"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if code := exitCode(t, cmd.Run()); code != 125 || !strings.Contains(stderr.String(), "restricting the command: no filter for you") {
		t.Errorf("exit %d, stderr %q; want 125 naming the failure", code, &stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran without its restrictions")
	}
}

// TestForwarderMainPassFDs: --pass-fds N hands descriptors 3.. on to the
// command at the same numbers, and no other inherited descriptor.
func TestForwarderMainPassFDs(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	extra, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	// Descriptor 3 is the pipe, 4 a file the command must not get.
	cmd := forwarderCmd("--pass-fds", "1", "--", "sh", "-c", `echo via-fd3 >&3; ls /proc/self/fd | sort -n | tr '\n' ' '`)
	cmd.ExtraFiles = []*os.File{w, extra}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	got, _ := io.ReadAll(r) // EOF only once the forwarder and the command have let go
	if code := exitCode(t, cmd.Wait()); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, &stderr)
	}
	if string(got) != "via-fd3\n" {
		t.Errorf("descriptor 3 carried %q, want %q", got, "via-fd3\n")
	}
	// ls itself opens one descriptor to list the directory.
	if fds := strings.Fields(stdout.String()); len(fds) != 5 || fds[3] != "3" {
		t.Errorf("the command's descriptors are %q, want 0 1 2 3 and the one ls reads with", fds)
	}
}

func TestForwarderMainForwardsSignals(t *testing.T) {
	for _, tc := range []struct {
		sig    syscall.Signal
		script string
		want   int
		out    string
	}{
		{syscall.SIGTERM, `trap 'echo got TERM; exit 42' TERM`, 42, "got TERM"},
		{syscall.SIGHUP, `trap 'echo got HUP; exit 43' HUP`, 43, "got HUP"},
		{syscall.SIGINT, `trap 'echo got INT; exit 44' INT`, 44, "got INT"},
		{syscall.SIGQUIT, `trap 'echo got QUIT; exit 45' QUIT`, 45, "got QUIT"},
		{syscall.SIGTERM, `:`, 128 + 15, ""}, // no trap: killed by the forwarded signal
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			script := tc.script + `; echo ready; while :; do sleep 0.05; done`
			cmd := forwarderCmd("--", "sh", "-c", script)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(stdout)
			line, err := br.ReadString('\n')
			if err != nil || line != "ready\n" {
				_ = cmd.Process.Kill()
				t.Fatalf("first line %q, %v", line, err)
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(br)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if code := exitCode(t, err); code != tc.want || !strings.Contains(string(rest), tc.out) {
					t.Errorf("exit %d, output %q; want %d and %q", code, rest, tc.want, tc.out)
				}
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("the forwarder did not end after the signal")
			}
		})
	}
}

func TestForwarderMainNotDumpable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the forwarder as an unprivileged user (root may read any /proc entry)")
	}
	// The forwarder runs as nobody; its command, also nobody, tries to read
	// the forwarder's environment, which only works if the forwarder is
	// dumpable. Its own environment serves as the control.
	// Under the system temporary directory, which every user may traverse
	// ($CORRAL_TEST_DIR may not be).
	dir, err := os.MkdirTemp(os.TempDir(), "np")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "netproxy.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "--", "sh", "-c",
		`cat /proc/$$/environ >/dev/null && echo self-readable; cat /proc/$PPID/environ >/dev/null 2>&1 && echo parent-readable || echo parent-refused`)
	cmd.Env = []string{"NETPROXY_TEST_MODE=forwarder", "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("forwarder: %v\n%s", err, out)
		}
		t.Skipf("cannot run the test binary as nobody here: %v", err)
	}
	if got := string(out); got != "self-readable\nparent-refused\n" {
		t.Errorf("output %q, want the forwarder's /proc entries refused to its command", got)
	}
}
