package bwrap

import (
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// sockProbe is run by python3 in the sandbox with a host socket's path: it
// reports whether a new AF_UNIX socket can reach it, whether socketpair
// works, and what io_uring_setup(2) returns.
const sockProbe = `
import ctypes, errno, platform, socket, sys
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(sys.argv[1])
    print("unix:", s.recv(64).decode().strip())
except OSError as e:
    print("unix:", errno.errorcode.get(e.errno, e.errno))
a, b = socket.socketpair()
a.send(b"ok")
print("socketpair:", b.recv(2).decode())
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": 425, "aarch64": 425}[platform.machine()]  # io_uring_setup
r = libc.syscall(nr, 1, None)
print("io_uring_setup:", "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno()))
`

// plantSocket listens on a Unix socket in dir, answering every connection
// with "HOST-SOCKET", and returns its path.
func plantSocket(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "host.sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HOST-SOCKET\n"))
			c.Close()
		}
	}()
	return p
}

// TestSeccompFilter: every profile runs under corral's filter (Seccomp 2,
// no_new_privs, no capabilities); under every profile but network a socket
// planted on the host cannot be reached (EACCES from the connect(2)
// supervisor), while socketpair works; io_uring is refused everywhere.
func TestSeccompFilter(t *testing.T) {
	e := newEnv(t)
	newWorld(t, e) // the allowlist profile needs its proxy
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed (apt-get install python3); CI installs it")
	}
	sock := plantSocket(t, e.work)
	for _, tc := range []struct {
		p       sandbox.Profile
		unix    string
		filters string
	}{
		// Two filters: the connect(2) notification filter and the main one.
		{sandbox.ProfileRestricted, "EACCES", "2"},
		{sandbox.ProfileWorkspace, "EACCES", "2"},
		{sandbox.ProfileAllowlist, "EACCES", "2"},
		{sandbox.ProfileNetwork, "HOST-SOCKET", "1"},
	} {
		t.Run(string(tc.p), func(t *testing.T) {
			o := e.sh(`grep -E '^(Seccomp|Seccomp_filters|NoNewPrivs|CapEff):' /proc/self/status; python3 -c '`+sockProbe+`' `+sock, func(r *sandbox.Request) {
				allowlist(r)
				r.Profile = tc.p
			})
			mustContain(t, o, "Seccomp:\t2\n", "Seccomp_filters:\t"+tc.filters+"\n", "NoNewPrivs:\t1\n", "CapEff:\t0000000000000000\n",
				"unix: "+tc.unix+"\n", "socketpair: ok\n", "io_uring_setup: EPERM\n")
		})
	}
	// The control: without the filter the same socket answers under
	// workspace, so the filter is what refuses it.
	t.Run("workspace without the filter", func(t *testing.T) {
		e.backend.noFilter = true
		defer func() { e.backend.noFilter = false }()
		o := e.sh(`grep '^Seccomp:' /proc/self/status; python3 -c '` + sockProbe + `' ` + sock)
		mustContain(t, o, "Seccomp:\t0\n", "unix: HOST-SOCKET\n", "io_uring_setup: EFAULT\n")
	})
}

// TestSeccompPrograms: ordinary tools still work under the strictest
// filter: a build with threads and subprocesses, git, and programs that
// fall back when clone3 says ENOSYS.
func TestSeccompPrograms(t *testing.T) {
	e := newEnv(t)
	o := e.sh(`set -e
git init -q repo && cd repo && git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m one && git log --oneline | wc -l
seq 1000 | sort -rn | head -1
(sleep 0.1 & wait) && echo SUBSHELL-OK
unshare -U true 2>/dev/null && echo NESTED-NS || echo NO-NESTED-NS
strace -V >/dev/null 2>&1 && { strace -o /dev/null true 2>/dev/null && echo PTRACE-WORKS || echo NO-PTRACE; } || echo NO-PTRACE`,
		func(r *sandbox.Request) { r.Limits.MemoryMB = 1024 })
	mustContain(t, o, "1\n1000\nSUBSHELL-OK\nNO-NESTED-NS\nNO-PTRACE\n")
	if o.res.ExitCode != 0 {
		t.Errorf("exit %d\n%s", o.res.ExitCode, o)
	}
	if _, err := exec.LookPath("python3"); err == nil {
		o := e.sh(`python3 -c '
import concurrent.futures as f, subprocess
with f.ThreadPoolExecutor(4) as ex: print(sum(ex.map(lambda x: x*x, range(10))))
print(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip())'`, func(r *sandbox.Request) { r.Limits.MemoryMB = 1024 })
		if !strings.Contains(o.stdout, "285\nchild\n") {
			t.Errorf("python threads and subprocesses under the filter:\n%s", o)
		}
	}
}

// TestSeccompFDNotInherited: bwrap reads the filter's descriptor and closes
// it; the command sees only its standard streams.
func TestSeccompFDNotInherited(t *testing.T) {
	e := newEnv(t)
	newWorld(t, e)
	for _, p := range []sandbox.Profile{sandbox.ProfileWorkspace, sandbox.ProfileAllowlist} {
		o := e.sh(`for f in /proc/self/fd/*; do printf '%s=%s\n' "${f##*/}" "$(readlink "$f")"; done`, func(r *sandbox.Request) {
			allowlist(r)
			r.Profile = p
		})
		fds := strings.Split(strings.TrimSpace(o.stdout), "\n")
		for _, l := range fds {
			n, target, _ := strings.Cut(l, "=")
			if target == "" {
				continue // the descriptor the glob listed the directory with, closed by now
			}
			if n != "0" && n != "1" && n != "2" {
				t.Errorf("%s: descriptor %s (%s) reached the command\n%s", p, n, target, o)
			}
			if strings.Contains(target, "seccomp") || strings.Contains(target, "corral") {
				t.Errorf("%s: descriptor %s leads to %s", p, n, target)
			}
		}
		if len(fds) < 3 {
			t.Errorf("%s: %d descriptors listed\n%s", p, len(fds), o)
		}
	}
}
