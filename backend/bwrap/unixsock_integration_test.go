package bwrap

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/sandbox"
)

// hostListener is a Unix stream socket bound and listening on the host at
// p, mode 0777, owned by the caller, never accepted from: quiet reports
// whether nothing ever connected (a non-blocking accept(2) says EAGAIN),
// which holds whatever the timing once the sandbox that tried is gone.
type hostListener struct {
	fd   int
	path string
}

func listenHost(t *testing.T, p string) *hostListener {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: p}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 64); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o777); err != nil {
		t.Fatal(err)
	}
	return &hostListener{fd: fd, path: p}
}

func (h *hostListener) quiet(t *testing.T) {
	t.Helper()
	nfd, _, err := unix.Accept4(h.fd, unix.SOCK_CLOEXEC)
	if err == nil {
		unix.Close(nfd)
		t.Errorf("the host socket %s received a connection from the sandbox", h.path)
	} else if !errors.Is(err, unix.EAGAIN) {
		t.Errorf("accept on %s: %v, want EAGAIN", h.path, err)
	}
}

// plantDir makes a fresh directory for host sockets outside /run, /tmp and
// the test's home, which the sandbox sees read-only with the host's root
// (0755, so a root caller's unprivileged sandbox identity can look in).
func plantDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("CORRAL_TEST_DIR")
	if base == "" {
		base = "/var/tmp"
	}
	d, err := os.MkdirTemp(base, "corral-plant-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	d, _ = filepath.EvalSymlinks(d)
	return d
}

// noSupervisorLeft fails if a connect(2) supervisor goroutine outlived its
// command: Run returns only after stop has waited for all of them. A
// goroutine that has called wg.Done may still be returning when Run does
// (seen runnable in its frame under load), so one is given until it ends;
// a goroutine that never ends (blocked in poll(2), or a connect) fails
// after the wait, whatever the load.
func noSupervisorLeft(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	var n int
	for deadline := time.Now().Add(30 * time.Second); ; {
		n = runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte("unixSupervisor")) {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("connect(2) supervisor goroutines left after the command:\n%s", buf[:n])
}

// noProcessWith fails if a process whose command line contains marker is
// still alive (the sandbox's pid namespace ended with the command).
func noProcessWith(t *testing.T, marker string) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) && !bytes.Contains(b, []byte(".test")) {
			t.Errorf("process %s left behind: %q", d.Name(), bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
}

func requirePython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed (apt-get install python3); CI installs it")
	}
}

// unixSockScript runs in the sandbox: sockets it makes and uses itself
// (in /tmp, the working directory, abstract, through a symlink of its
// own, seqpacket, a multiprocessing Manager) work; a datagram socket is
// refused; host sockets (argv[1], a symlink to it, a relative path to it,
// one planted in the working directory) are not reachable.
const unixSockScript = `
import errno, multiprocessing, os, socket, sys
def name(e): return errno.errorcode.get(e.errno, str(e.errno))
def rm(p):
    try: os.unlink(p)
    except FileNotFoundError: pass
def pair(typ, bind, connect, label):
    try:
        if not bind.startswith("\0"): rm(bind)
        srv = socket.socket(socket.AF_UNIX, typ); srv.bind(bind); srv.listen(1)
        c = socket.socket(socket.AF_UNIX, typ); c.settimeout(30); c.connect(connect)
        a, _ = srv.accept(); c.sendall(b"ping"); a.sendall(a.recv(4).upper())
        print(label, c.recv(4).decode())
        for s in (a, c, srv): s.close()
    except OSError as e:
        print(label, name(e))
def main():
    host = sys.argv[1]
    pair(socket.SOCK_STREAM, "/tmp/t.sock", "/tmp/t.sock", "tmp:")
    pair(socket.SOCK_STREAM, "cwd.sock", "cwd.sock", "cwd:")
    pair(socket.SOCK_STREAM, os.path.abspath("cwd2.sock"), "./sub/../cwd2.sock", "cwd-dotdot:")
    pair(socket.SOCK_STREAM, "\0corral-test-abstract", "\0corral-test-abstract", "abstract:")
    pair(socket.SOCK_SEQPACKET, "/tmp/seq.sock", "/tmp/seq.sock", "seqpacket:")
    rm("/tmp/link.sock"); os.symlink("/tmp/l.sock", "/tmp/link.sock")
    pair(socket.SOCK_STREAM, "/tmp/l.sock", "/tmp/link.sock", "own-link:")
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); print("dgram: allowed")
    except OSError as e:
        print("dgram:", name(e))
    m = multiprocessing.Manager(); d = m.dict(); d["k"] = 42; print("manager:", d["k"]); m.shutdown()
    print("host-visible:", os.path.exists(host))
    for label, p in [("host-abs:", host), ("host-link:", "hostlink.sock"), ("host-rel:", os.path.relpath(host)), ("host-in-workdir:", "planted.sock")]:
        try:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.settimeout(30); c.connect(p); print(label, "CONNECTED")
        except OSError as e:
            print(label, name(e))
if __name__ == "__main__":
    main()
`

// TestUnixSocketsInsideSandbox: under restricted, workspace and allowlist
// a command's own Unix sockets work and host sockets stay unreachable,
// however they are named; under network nothing is mediated.
func TestUnixSocketsInsideSandbox(t *testing.T) {
	e := newEnv(t)
	newWorld(t, e) // the allowlist profile needs its proxy
	requirePython(t)
	if err := os.MkdirAll(filepath.Join(e.work, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(e.work, "unixsock_probe.py")
	if err := os.WriteFile(script, []byte(unixSockScript), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []sandbox.Profile{sandbox.ProfileRestricted, sandbox.ProfileWorkspace, sandbox.ProfileAllowlist} {
		t.Run(string(p), func(t *testing.T) {
			host := listenHost(t, filepath.Join(plantDir(t), "host.sock"))
			inWork := listenHost(t, filepath.Join(e.work, "planted.sock"))
			link := filepath.Join(e.work, "hostlink.sock")
			_ = os.Remove(link)
			if err := os.Symlink(host.path, link); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(link)
			defer os.Remove(inWork.path)
			o := e.sh(`grep '^Seccomp_filters:' /proc/self/status; python3 unixsock_probe.py `+host.path, func(r *sandbox.Request) {
				allowlist(r)
				r.Profile = p
				r.Limits.MemoryMB = 1024
			})
			cwd := "PING"
			if p == sandbox.ProfileRestricted {
				cwd = "EROFS" // a read-only working directory: nothing can be bound there
			}
			mustContain(t, o, "Seccomp_filters:\t2\n",
				"tmp: PING\n", "cwd: "+cwd+"\n", "cwd-dotdot: "+cwd+"\n", "abstract: PING\n", "seqpacket: PING\n", "own-link: PING\n",
				"dgram: EPERM\n", "manager: 42\n", "host-visible: True\n",
				"host-abs: EACCES\n", "host-link: EACCES\n", "host-rel: EACCES\n", "host-in-workdir: EACCES\n")
			host.quiet(t)
			inWork.quiet(t)
			noSupervisorLeft(t)
			// The planted socket's directory is this run's own: another
			// run of the suite on the machine is not counted.
			noProcessWith(t, "unixsock_probe.py "+host.path)
		})
	}
	t.Run("network is not mediated", func(t *testing.T) {
		host := listenHost(t, filepath.Join(plantDir(t), "host.sock"))
		o := e.sh(`grep '^Seccomp_filters:' /proc/self/status; python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print("connected")' `+host.path, profile(sandbox.ProfileNetwork))
		mustContain(t, o, "Seccomp_filters:\t1\n", "connected\n")
		if nfd, _, err := unix.Accept4(host.fd, unix.SOCK_CLOEXEC); err != nil {
			t.Errorf("the host socket saw no connection under network: %v", err)
		} else {
			unix.Close(nfd)
		}
	})
	t.Run("without the gate AF_UNIX stays refused", func(t *testing.T) {
		e.backend.noGate = true
		defer func() { e.backend.noGate = false }()
		o := e.sh(`grep '^Seccomp_filters:' /proc/self/status; python3 -c '
import errno, socket
try: socket.socket(socket.AF_UNIX); print("unix: allowed")
except OSError as ex: print("unix:", errno.errorcode[ex.errno])'`, func(r *sandbox.Request) { r.Limits.MaxProcs = 0 })
		mustContain(t, o, "Seccomp_filters:\t1\n", "unix: EPERM\n")
	})
}

// raceC is a hostile client: one thread loops connect(2) on descriptor
// 100 with a shared address buffer, while another keeps replacing
// descriptor 100 with a fresh TCP socket and the buffer with a loopback
// address, then with a fresh Unix socket and the planted host socket's
// path. A supervisor that checked one thing and let the kernel re-read
// another would let one of these through.
const raceC = `
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#define FD 100
static union { struct sockaddr_un un; struct sockaddr_in in; } addr;
static const char *host;
static volatile int stop;
static int port, lsock;
static void set_inet(void) { struct sockaddr_in a = {0}; a.sin_family = AF_INET; a.sin_port = htons(port); a.sin_addr.s_addr = htonl(0x7f000001); memset(&addr, 0, sizeof addr); memcpy(&addr, &a, sizeof a); }
static void set_unix(void) { struct sockaddr_un a = {0}; a.sun_family = AF_UNIX; strncpy(a.sun_path, host, sizeof a.sun_path - 1); memcpy(&addr, &a, sizeof a); }
static void *swapper(void *x) {
	while (!stop) {
		int u = socket(AF_UNIX, SOCK_STREAM, 0); if (u >= 0) { dup2(u, FD); close(u); }
		set_unix();
		int t = socket(AF_INET, SOCK_STREAM, 0); if (t >= 0) { dup2(t, FD); close(t); }
		set_inet();
	}
	return 0;
}
static void *acceptor(void *x) { for (;;) { int c = accept(lsock, 0, 0); if (c >= 0) close(c); } return 0; }
int main(int argc, char **argv) {
	host = argv[1]; int n = atoi(argv[2]);
	lsock = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {0}; a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(0x7f000001);
	socklen_t sl = sizeof a;
	if (bind(lsock, (void *)&a, sizeof a) || listen(lsock, 1024) || getsockname(lsock, (void *)&a, &sl)) { perror("listen"); return 2; }
	port = ntohs(a.sin_port);
	set_inet();
	int t = socket(AF_INET, SOCK_STREAM, 0); dup2(t, FD); close(t);
	pthread_t th, ac; pthread_create(&ac, 0, acceptor, 0); pthread_create(&th, 0, swapper, 0);
	int ok = 0, eacces = 0, other = 0;
	for (int i = 0; i < n; i++) {
		if (connect(FD, (void *)&addr, sizeof addr) == 0) ok++;
		else if (errno == EACCES) eacces++;
		else other++;
	}
	stop = 1; pthread_join(th, 0);
	printf("race done: ok=%d eacces=%d other=%d\n", ok, eacces, other);
	return 0;
}
`

// TestUnixConnectRace: descriptor and address swapped under a pending
// connect(2) never reach the host socket.
func TestUnixConnectRace(t *testing.T) {
	e := newEnv(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed (apt-get install gcc); CI installs it")
	}
	src := filepath.Join(e.work, "race.c")
	bin := filepath.Join(e.work, "race")
	if err := os.WriteFile(src, []byte(raceC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-O2", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	host := listenHost(t, filepath.Join(plantDir(t), "host.sock"))
	o := e.sh(`./race `+host.path+` 3000`, func(r *sandbox.Request) { r.Limits.MemoryMB = 1024 })
	mustContain(t, o, "race done: ")
	t.Logf("%s", strings.TrimSpace(o.stdout))
	host.quiet(t)
	noSupervisorLeft(t)
}

// TestUnixDiagDevices: the bound files sock_diag reports (UNIX_DIAG_VFS,
// in the kernel's internal dev_t) match what fstat(2) says of the socket
// file, on tmpfs and on the test directory's filesystem (ext4 here).
func TestUnixDiagDevices(t *testing.T) {
	dirs := map[string]string{"test dir": testBase(t)}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "corral-diag-*"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			dirs["tmpfs"] = d
		}
	}
	diag, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		t.Fatalf("NETLINK_SOCK_DIAG: %v", err)
	}
	s := &unixSupervisor{diag: diag}
	defer unix.Close(diag)
	for name, d := range dirs {
		t.Run(name, func(t *testing.T) {
			var fs unix.Statfs_t
			_ = unix.Statfs(d, &fs)
			l := listenHost(t, filepath.Join(d, "diag.sock"))
			var st unix.Stat_t
			if err := unix.Stat(l.path, &st); err != nil {
				t.Fatal(err)
			}
			ids, err := s.boundSockets()
			if err != nil {
				t.Fatal(err)
			}
			if !ids[statVFSID(st.Dev, st.Ino)] {
				t.Errorf("%s (fs magic %#x, dev %d:%d ino %d) not among %d bound sockets", l.path, fs.Type, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino, len(ids))
			}
			// A file that is no socket's is not listed.
			f := filepath.Join(d, "plain")
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := unix.Stat(f, &st); err != nil {
				t.Fatal(err)
			}
			if ids[statVFSID(st.Dev, st.Ino)] {
				t.Errorf("a plain file is listed as a bound socket")
			}
		})
	}
}

// peerCredScript serves a Unix socket in the sandbox and prints the uid
// that SO_PEERCRED gives for a client of its own; the connect is mediated.
const peerCredScript = `
import os, socket, struct, threading
p = "/tmp/cred.sock"
srv = socket.socket(socket.AF_UNIX); srv.bind(p); srv.listen(1)
c = socket.socket(socket.AF_UNIX); c.settimeout(30)
t = threading.Thread(target=c.connect, args=(p,)); t.start()
a, _ = srv.accept(); t.join()
pid, uid, gid = struct.unpack("3i", a.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
print("me", os.getuid(), os.getgid())
print("peer", uid, gid)
`

// TestUnixPeerCred: a server in the sandbox sees its own uid in
// SO_PEERCRED for a client of its own: for a root caller the supervisor
// connects with the sandbox's identity (run_as), not as host root, which
// the sandbox's user namespace does not map and shows as the overflow uid
// 65534 (user_namespaces(7)); an unprivileged caller's uid is mapped.
func TestUnixPeerCred(t *testing.T) {
	e := newEnv(t)
	requirePython(t)
	o := e.sh("python3 -c '"+peerCredScript+"'", profile(sandbox.ProfileWorkspace))
	t.Logf("%s", o.stdout)
	me, peer, _ := strings.Cut(strings.TrimSpace(o.stdout), "\n")
	if o.res.ExitCode != 0 || strings.TrimPrefix(me, "me ") != strings.TrimPrefix(peer, "peer ") || strings.Contains(peer, "65534") {
		t.Errorf("SO_PEERCRED in the sandbox: %s; want the peer's uid and gid to be the sandbox's own", o)
	}
}

// TestUnixDeniedLogBounded: a command that keeps connecting to a host
// socket gets EACCES every time, but the log holds the first few refusals
// one by one and the rest as one count (a fresh-user trial's hostile loop
// wrote 40,000 lines to stderr).
func TestUnixDeniedLogBounded(t *testing.T) {
	e := newEnv(t)
	requirePython(t)
	host := listenHost(t, filepath.Join(plantDir(t), "host.sock"))
	h := &countHandler{n: map[string]int{}}
	old := e.backend.log
	e.backend.log = slog.New(h)
	defer func() { e.backend.log = old }()
	o := e.sh(`python3 -c '
import errno, socket, sys
n = 0
for i in range(25):
    s = socket.socket(socket.AF_UNIX)
    try: s.connect(sys.argv[1])
    except OSError as ex:
        if ex.errno == errno.EACCES: n += 1
    s.close()
print("refused", n)' `+host.path, profile(sandbox.ProfileWorkspace))
	mustContain(t, o, "refused 25\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	if got := h.n["bwrap.unixsock.denied"]; got != deniedLogged {
		t.Errorf("bwrap.unixsock.denied logged %d times, want %d", got, deniedLogged)
	}
	if got := h.kv["bwrap.unixsock.denied_more"]; h.n["bwrap.unixsock.denied_more"] != 1 || got != 25-deniedLogged {
		t.Errorf("bwrap.unixsock.denied_more: %d records, count %d; want 1 with %d", h.n["bwrap.unixsock.denied_more"], got, 25-deniedLogged)
	}
	host.quiet(t)
}
