package portfwd

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/procfs"
)

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

func listenLocal(t *testing.T) (net.Listener, uint16) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, uint16(ln.Addr().(*net.TCPAddr).Port)
}

// TestForwardNetworkNamespace forwards into a fresh network namespace made
// by unshare(1) (as root) or by unshare -rn (unprivileged): a line echo
// server there answers through the forward, and the forward ends when
// that process exits, with no relay left.
func TestForwardNetworkNamespace(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping namespace test in -short mode")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed; the test's server needs it")
	}
	args := []string{"--net"}
	if os.Geteuid() != 0 {
		// Root in the new user namespace, so it may bring lo up.
		args = append(args, "--user", "--map-root-user")
	}
	if err := exec.Command("unshare", append(args, "--", "true")...).Run(); err != nil {
		t.Skipf("unshare(1) cannot make a network namespace here (%v): user namespaces may be disabled", err)
	}
	// The server prints "ready" once it listens, then echoes one line per
	// connection, upper-cased.
	script := `
import fcntl, socket, struct, threading
# Bring lo up (SIOCGIFFLAGS, SIOCSIFFLAGS with IFF_UP), as ip(8) would.
s = socket.socket(); req = struct.pack("16sH", b"lo", 0)
flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, req)[:18])[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))
l = socket.socket(); l.bind(("127.0.0.1", 7777)); l.listen()
print("ready", flush=True)
def serve(c):
    f = c.makefile("rwb"); f.write(f.readline().upper()); f.flush(); c.close()
while True:
    c, _ = l.accept(); threading.Thread(target=serve, args=(c,)).start()
`
	cmd := exec.Command("unshare", append(args, "--", py, "-c", script)...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("the server in the namespace did not start: %q %v", line, err)
	}
	ls, err := ListenersOf(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	target, ok := DialTarget(ls, 7777)
	if !ok {
		t.Fatalf("no listener on 7777 in the namespace: %v", ls)
	}
	fw, err := Start(cmd.Process.Pid, target, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", fw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		fmt.Fprintf(c, "hello %d\n", i)
		got, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if want := fmt.Sprintf("HELLO %d\n", i); got != want {
			t.Errorf("echo = %q, %v; want %q", got, err, want)
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	select {
	case <-fw.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the forward did not end when its namespace's process exited")
	}
	if !procfs.Gone(fw.RelayPID()) {
		t.Errorf("relay %d left behind", fw.RelayPID())
	}
	if c, err := net.Dial("tcp", fw.Addr().String()); err == nil {
		c.Close()
		t.Errorf("host port still open")
	}
}

// TestForwardBadInput: a taken host port and a gone process are errors,
// and nothing is left listening.
func TestForwardBadInput(t *testing.T) {
	ln, port := listenLocal(t)
	defer ln.Close()
	_, err := Start(os.Getpid(), netipAddrPort("127.0.0.1:1"), Options{HostPort: int(port)})
	if err == nil || !strings.Contains(err.Error(), "listening on 127.0.0.1:"+itoa(port)) {
		t.Errorf("taken host port: %v", err)
	}
	if _, err := Start(0x3fffffff, netipAddrPort("127.0.0.1:1"), Options{}); err == nil {
		t.Errorf("a process that does not exist was accepted")
	}
	if _, err := Start(os.Getpid(), netipAddrPort("127.0.0.1:1"), Options{HostPort: 70000}); err == nil {
		t.Errorf("host port 70000 accepted")
	}
}

func netipAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// TestAcceptBackoff: a forward outlives a full descriptor table (it was
// ended for good by one EMFILE), backing off; a closed listener ends it.
func TestAcceptBackoff(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", unix.EMFILE)}
	for _, tc := range []struct {
		name  string
		err   error
		delay time.Duration
		next  time.Duration
		retry bool
	}{
		{"EMFILE first", emfile, 0, 5 * time.Millisecond, true},
		{"EMFILE again", emfile, 5 * time.Millisecond, 10 * time.Millisecond, true},
		{"EMFILE capped", emfile, 800 * time.Millisecond, time.Second, true},
		{"ENFILE", &net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", unix.ENFILE)}, 0, 5 * time.Millisecond, true},
		{"ECONNABORTED", &net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", unix.ECONNABORTED)}, 0, 5 * time.Millisecond, true},
		{"closed", &net.OpError{Op: "accept", Err: net.ErrClosed}, 0, 0, false},
		{"EBADF", &net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", unix.EBADF)}, 0, 0, false},
	} {
		next, retry := acceptBackoff(tc.err, tc.delay)
		if next != tc.next || retry != tc.retry {
			t.Errorf("%s: acceptBackoff = %v, %v; want %v, %v", tc.name, next, retry, tc.next, tc.retry)
		}
	}
}
