package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// TestOpenUnwritable: a new session that cannot be set up says nothing
// ran, and, for a full or read-only file system, what to do.
func TestOpenUnwritable(t *testing.T) {
	root := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(root, nil, 0o600); err != nil { // a file where the directory goes
		t.Fatal(err)
	}
	m := NewManager(Options{StateDir: root})
	defer m.Close()
	_, err := m.Open("s")
	if !errors.Is(err, ErrStateUnwritable) || !strings.Contains(err.Error(), "nothing was run") {
		t.Errorf("Open under a file: %v", err)
	}
	for errno, want := range map[syscall.Errno]string{syscall.ENOSPC: "is full; free space there", syscall.EDQUOT: "is full", syscall.EROFS: "cannot be written here", syscall.EACCES: "cannot be written here"} {
		err := unwritable("writing x", "/st", &os.PathError{Op: "write", Path: "/st/x", Err: errno})
		if !errors.Is(err, ErrStateUnwritable) || !errors.Is(err, errno) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "XDG_STATE_HOME") {
			t.Errorf("%v: %v", errno, err)
		}
	}
}

// TestListedOnceRan: a session is listed (and found by Lookup, which
// corral exec asks) once a command of it started, not when it was only
// opened or its one command was refused before it ran ("sessions list"
// showed such a session, with no backend: it holds no sandbox); a command
// that timed out ran, and lists it. Prune removes the unlisted too.
func TestListedOnceRan(t *testing.T) {
	f := newFixture(t)
	names := func() (out []string) {
		infos, err := f.m.List()
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			out = append(out, in.Name)
		}
		return out
	}
	f.open("opened")
	refused := f.open("refused")
	if _, err := refused.Exec(context.Background(), ExecRequest{Command: "true", Workdir: "no-such-dir"}); !errors.Is(err, sandbox.ErrBadRequest) {
		t.Fatalf("a command in a missing directory: %v, want it refused", err)
	}
	if got := names(); len(got) != 0 {
		t.Errorf("listed before any command ran: %q", got)
	}
	for _, n := range []string{"opened", "refused", "never"} {
		if _, ok := f.m.Lookup(n); ok {
			t.Errorf("Lookup(%q) found a session that ran nothing", n)
		}
	}
	r, err := f.open("slow").Exec(context.Background(), ExecRequest{Command: "sleep 30", Timeout: 300 * time.Millisecond})
	if err != nil || !r.TimedOut {
		t.Fatalf("a command that times out: %+v %v", r, err)
	}
	f.exec(f.open("ran"), "true")
	if got := names(); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"ran", "slow"}) {
		t.Errorf("listed: %q, want ran and slow", got)
	}
	if in, ok := f.m.Lookup("ran"); !ok || in.Backend != "bwrap" || in.Cwd != f.work {
		t.Errorf("Lookup(ran) = %+v %v", in, ok)
	}
	pr := NewManager(Options{StateDir: f.state, MaxIdle: time.Nanosecond})
	gone, err := pr.Prune()
	if slices.Sort(gone); err != nil || !slices.Equal(gone, []string{"opened", "ran", "refused", "slow"}) {
		t.Errorf("Prune: %q %v", gone, err)
	}
}
