package tunnel

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// pipeConn joins the pod side's stdout (r) and stdin (w).
type pipeConn struct {
	io.Reader
	w io.WriteCloser
}

func (p pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipeConn) Close() error                { return p.w.Close() }

// freeAddr returns a loopback TCP address nothing listens on just now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// unixPair returns two connected Unix stream sockets (socketpair(2)),
// which, unlike net.Pipe, have a half-close.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Error(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// TestTunnel runs the pod side as a real process on pipes: a connection
// to its HTTP socket and to its TCP forwarder reaches the host's dialer
// with the right kind, both directions and the half-close pass; when the
// host ends the session the pod side exits and its sockets refuse.
func TestTunnel(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	cmd := exec.Command(exe, Argv(exe, dir, httpAddr, freeAddr(t))[1:]...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	kinds := make(chan Kind, 4)
	h, err := NewHost(pipeConn{stdout, stdin}, func(k Kind) (net.Conn, error) {
		kinds <- k
		a, b := unixPair(t)
		go func() { // an upper-casing echo that answers after the client's end
			data, _ := io.ReadAll(b)
			b.Write(bytes.ToUpper(data))
			b.CloseWrite()
			b.Close()
		}()
		return a, nil
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Ready():
	case err := <-exited:
		t.Fatalf("pod side exited before ready: %v %s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("not ready in 60 s")
	}
	roundTrip := func(network, addr string, want Kind) {
		t.Helper()
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("hello " + network))
		c.(interface{ CloseWrite() error }).CloseWrite()
		got, err := io.ReadAll(c)
		if err != nil || string(got) != strings.ToUpper("hello "+network) {
			t.Fatalf("%s: got %q, %v", network, got, err)
		}
		if k := <-kinds; k != want {
			t.Fatalf("%s: kind %q, want %q", network, k, want)
		}
	}
	roundTrip("unix", filepath.Join(dir, HTTPSocketName), KindHTTP)
	roundTrip("unix", filepath.Join(dir, SOCKSSocketName), KindSOCKS)
	roundTrip("tcp", httpAddr, KindHTTP)

	h.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("pod side: %v %s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the pod side did not exit in 60 s after the session ended")
	}
	for _, a := range [][2]string{{"tcp", httpAddr}, {"unix", filepath.Join(dir, HTTPSocketName)}} {
		c, err := net.Dial(a[0], a[1])
		if err == nil {
			c.Close()
			t.Errorf("%s %s still accepts after the session ended", a[0], a[1])
		} else if !errors.Is(err, os.ErrNotExist) && !strings.Contains(err.Error(), "refused") {
			t.Logf("%s: %v", a[1], err)
		}
	}
}
