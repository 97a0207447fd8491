package bwrap

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// plantEngineSocket starts an HTTP server that answers like a container
// engine's API on a Unix socket at a path nobody has heard of, below
// directories anyone may enter, with the socket itself root's only (0600),
// as k3s, CRI-O or a second containerd keep theirs.
func plantEngineSocket(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join("/var/tmp", "corral-plant-"+hex.EncodeToString(b[:]), "k3s", "agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(filepath.Dir(dir))) })
	for d := dir; d != "/var/tmp"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"ApiVersion":"1.41","Os":"linux","ENGINE":"answered"}`)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestRootOnlySocketUnreachable: a root-only Unix socket at a path corral
// has never heard of, outside /run and /tmp, answers the test itself but
// not a command of a root caller's sandbox under the network profile (the
// one that shares the host's network namespace).
func TestRootOnlySocketUnreachable(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("python3 is needed to connect inside the sandbox (apt install python3)")
	}
	e := newEnv(t)
	sock := plantEngineSocket(t)
	// It answers the host's root.
	c := http.Client{Transport: &http.Transport{Dial: func(_, _ string) (net.Conn, error) { return net.Dial("unix", sock) }}}
	if resp, err := c.Get("http://engine/version"); err != nil {
		t.Fatalf("the planted engine does not answer root on the host: %v", err)
	} else {
		resp.Body.Close()
	}
	script := `python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("refused", e.errno)
    sys.exit(0)
s.sendall(b"GET /version HTTP/1.0\r\nHost: x\r\n\r\n")
print("CONNECTED", s.recv(4096).decode(errors="replace"))
' ` + sock
	o := e.sh(script, profile(sandbox.ProfileNetwork))
	if o.res.ExitCode != 0 || strings.Contains(o.stdout, "CONNECTED") || !strings.Contains(o.stdout, "refused "+strconv.Itoa(int(syscall.EACCES))) {
		t.Errorf("a root caller's sandbox reached a root-only socket (want EACCES):\n%s", o)
	}
}

// TestRootCallerIdentity: a root caller's command sees uid 0 as before, but
// holds the working directory's owner (or nobody for root's own) on the
// host, and what it writes belongs to the directory's owner.
func TestRootCallerIdentity(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	hostUID := func(o out) string {
		// /proc/self/uid_map: inside, outside, count.
		for _, line := range strings.Split(o.stdout, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "0" {
				return f[1]
			}
		}
		return ""
	}
	script := `id -u; cat /proc/self/uid_map; echo made > made-$1; echo scratch > "$TMPDIR/s" && echo SCRATCH-OK`
	run := func(name string, tweak ...func(*sandbox.Request)) out {
		return e.sh(strings.ReplaceAll(script, "$1", name), tweak...)
	}
	owner := func(p string) int {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return int(st.Sys().(*syscall.Stat_t).Uid)
	}
	scratch := filepath.Join(e.base, "scratch")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		t.Fatal(err)
	}
	withScratch := func(r *sandbox.Request) { r.ScratchDir = scratch }

	// Root's own project: nobody on the host, root's files on disk.
	o := run("root", withScratch)
	if !strings.HasPrefix(o.stdout, "0\n") || hostUID(o) != "65534" || !strings.Contains(o.stdout, "SCRATCH-OK") {
		t.Fatalf("root's project: want uid 0 inside held by 65534 on the host, scratch writable:\n%s", o)
	}
	if u := owner(filepath.Join(e.work, "made-root")); u != 0 {
		t.Errorf("a file written in root's project belongs to %d, want 0", u)
	}

	// A person's project: that person on the host, their files.
	if err := os.Chown(e.work, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	o = run("person", withScratch)
	if !strings.HasPrefix(o.stdout, "0\n") || hostUID(o) != "4242" || !strings.Contains(o.stdout, "SCRATCH-OK") {
		t.Fatalf("a person's project: want uid 0 inside held by 4242:\n%s", o)
	}
	if u := owner(filepath.Join(e.work, "made-person")); u != 4242 {
		t.Errorf("a file written in a person's project belongs to %d, want 4242", u)
	}
	if u := owner(filepath.Join(scratch, "s")); u != 0 {
		t.Errorf("a file written in root's scratch directory belongs to %d, want 0", u)
	}

	// run_as names the identity.
	if err := os.Chown(e.work, 0, 0); err != nil {
		t.Fatal(err)
	}
	e.backend = New(Options{StateDir: e.state, RunAs: "4343:4343"})
	o = run("fixed")
	if hostUID(o) != "4343" {
		t.Fatalf("run_as 4343: %s", o)
	}
	if u := owner(filepath.Join(e.work, "made-fixed")); u != 0 {
		t.Errorf("with run_as, a file written in root's project belongs to %d, want 0", u)
	}
	e.backend = New(Options{StateDir: e.state, RunAs: "0"})
	var so strings.Builder
	if _, err := e.backend.Run(t.Context(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: e.work}, Env: e.envv, Stdout: &so, Stderr: &so}); err == nil {
		t.Errorf("run_as 0 was accepted")
	}
}

// requireRoot skips a test that needs corral to run as root (.ci/run runs
// the suite as root, then again as an unprivileged user).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: it tests what a root caller's sandbox holds (CI runs it as root)")
	}
}
