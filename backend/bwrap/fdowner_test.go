package bwrap

import (
	"log/slog"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// isOpenFile reports whether f is open, as an *os.File and as a
// descriptor the kernel knows.
func isOpenFile(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var ferr error
	if rc.Control(func(fd uintptr) { _, ferr = unix.FcntlInt(fd, unix.F_GETFD, 0) }) != nil {
		return false
	}
	return ferr == nil
}

// fakeEgressNS is an egressNS whose holder is cat(1) reading the life
// pipe (it ends when Close closes it, as the forwarder does) and whose
// namespace descriptors are opens of this process's own namespaces.
func fakeEgressNS(t *testing.T) *egressNS {
	t.Helper()
	cmd, lifeW := lifelineProcess(t)
	e := &egressNS{log: slog.New(slog.DiscardHandler), cmd: cmd, life: lifeW, pidfd: -1, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(e.done)
	}()
	for _, o := range []struct {
		dst  **os.File
		path string
	}{{&e.netns, "/proc/self/ns/net"}, {&e.userns, "/proc/self/ns/user"}} {
		f, err := os.Open(o.path)
		if err != nil {
			e.Close()
			t.Fatal(err)
		}
		*o.dst = f
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestEgressNSCloseLeavesHeldDescriptors: the pool closes a holder it
// found dead while other commands of the session may be starting with its
// namespace descriptors (egress.Pool.Attach); those stay open until the
// last command releases them, so no number a command passes to bwrap (or
// names to nsenter) is closed, and maybe another session's file, by then.
func TestEgressNSCloseLeavesHeldDescriptors(t *testing.T) {
	e := fakeEgressNS(t)
	if !e.acquire() || !e.acquire() {
		t.Fatal("acquire refused on a live holder")
	}
	e.Close()
	if e.Alive() {
		t.Error("a closed holder says it is alive")
	}
	if e.acquire() {
		t.Error("acquire succeeded on a closed holder")
	}
	if !isOpenFile(e.netns) || !isOpenFile(e.userns) {
		t.Fatal("Close closed the namespace descriptors while commands held them")
	}
	e.release()
	if !isOpenFile(e.netns) || !isOpenFile(e.userns) {
		t.Fatal("the descriptors were closed while a command still held them")
	}
	e.release()
	if isOpenFile(e.netns) || isOpenFile(e.userns) {
		t.Error("the last release left the namespace descriptors open")
	}
}

// TestEgressNSCloseUnheld: a holder nobody uses closes its descriptors at
// Close, and a second Close does nothing.
func TestEgressNSCloseUnheld(t *testing.T) {
	e := fakeEgressNS(t)
	if !e.acquire() {
		t.Fatal("acquire refused on a live holder")
	}
	e.release()
	e.Close()
	if isOpenFile(e.netns) || isOpenFile(e.userns) {
		t.Error("Close left the descriptors of an unused holder open")
	}
	e.Close()
}
