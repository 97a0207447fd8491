package agentclient

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// treeDir is a directory of the test's own outside /tmp (under
// CORRAL_TEST_DIR, else /var/tmp), removed at its end.
func treeDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("CORRAL_TEST_DIR")
	if root == "" {
		root = "/var/tmp"
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.MkdirTemp(root, "corral-turn-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// lockWaiters counts the processes blocked on a flock(2) of path, from
// /proc/locks (proc(5): a waiter's line has "->" before its type, and
// MAJOR:MINOR:INODE names the file).
func lockWaiters(t *testing.T, path string) int {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 6 && f[1] == "->" && strings.HasSuffix(f[6], fmt.Sprintf(":%d", st.Ino)) {
			n++
		}
	}
	return n
}

// waitWaiters waits (a condition loop, 2 min deadline) until n processes
// are blocked on path's lock.
func waitWaiters(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for lockWaiters(t, path) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters on %s, want %d", lockWaiters(t, path), path, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTurn: a session's turn held by one agent keeps another's waiting
// in flock(2) until it ends; the state saved at its end is the next
// turn's; a wait called off holds nothing; an agent killed while it
// holds the turn lets it go, and the next turn names the command it
// held as interrupted, once.
func TestTurn(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(treeDir(t), "session")
	a1, cmd1 := localAgent(t)
	a2, _ := localAgent(t)
	a3, _ := localAgent(t)

	t1, err := a1.Turn(ctx, dir, "one")
	if err != nil {
		t.Fatal(err)
	}
	if t1.State != nil || t1.Interrupted != "" || t1.StateError != "" {
		t.Fatalf("first turn %+v", t1)
	}
	got := make(chan *Turn, 1)
	go func() {
		t2, err := a2.Turn(ctx, dir, "two")
		if err != nil {
			t.Error(err)
		}
		got <- t2
	}()
	lock := filepath.Join(dir, "lock")
	waitWaiters(t, lock, 1)
	select {
	case <-got:
		t.Fatal("a second turn was granted while the first was held")
	default:
	}
	t1.End([]byte(`{"cwd":"/x"}`))
	t2 := <-got
	if t2 == nil {
		t.FailNow()
	}
	if string(t2.State) != `{"cwd":"/x"}` || t2.Interrupted != "" {
		t.Fatalf("second turn: state %q interrupted %q", t2.State, t2.Interrupted)
	}

	// Called off while waiting: nothing held, nothing changed.
	cctx, cancel := context.WithCancel(ctx)
	cerr := make(chan error, 1)
	go func() {
		_, err := a3.Turn(cctx, dir, "three")
		cerr <- err
	}()
	waitWaiters(t, lock, 1)
	cancel()
	if err := <-cerr; !errors.Is(err, context.Canceled) {
		t.Fatalf("a called-off wait: %v", err)
	}
	t2.End(nil) // unchanged: the state stays

	// A holder killed with its agent: the lock goes with the process,
	// the marker stays and is reported once.
	t4, err := a1.Turn(ctx, dir, "four: sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if string(t4.State) != `{"cwd":"/x"}` {
		t.Fatalf("state after an unchanged turn %q", t4.State)
	}
	if err := cmd1.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	t5, err := a3.Turn(ctx, dir, "five")
	if err != nil {
		t.Fatal(err)
	}
	if t5.Interrupted != "four: sleep 600" || string(t5.State) != `{"cwd":"/x"}` {
		t.Fatalf("after the holder was killed: interrupted %q state %q", t5.Interrupted, t5.State)
	}
	t5.End(nil)
	t6, err := a2.Turn(ctx, dir, "six")
	if err != nil {
		t.Fatal(err)
	}
	if t6.Interrupted != "" {
		t.Errorf("the interrupted command was reported again: %q", t6.Interrupted)
	}
	t6.End(nil)
}

// TestTurnHostileState: what a command of the session put where the
// state is (a fifo, a symlink, a file past the bound) is reported as
// unreadable, without blocking, following or reading it whole.
func TestTurnHostileState(t *testing.T) {
	ctx := context.Background()
	a, _ := localAgent(t)
	root := treeDir(t)
	secret := filepath.Join(root, "secret")
	if err := os.WriteFile(secret, []byte(`{"cwd":"/secret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		make func(path string) error
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"symlink", func(p string) error { return os.Symlink(secret, p) }},
		{"huge", func(p string) error { return os.Truncate(p, 9<<20) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(root, c.name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "state")
			if c.name == "huge" {
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.make(p); err != nil {
				t.Fatal(err)
			}
			tr, err := a.Turn(ctx, dir, "x")
			if err != nil {
				t.Fatal(err)
			}
			defer tr.End(nil)
			if tr.State != nil || tr.StateError == "" {
				t.Errorf("state %q error %q, want it refused", tr.State, tr.StateError)
			}
		})
	}
}
