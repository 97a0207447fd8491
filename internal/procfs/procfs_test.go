package procfs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSelf(t *testing.T) {
	sid, ok := SessionID(os.Getpid())
	want, _ := unix.Getsid(0)
	if !ok || sid != want {
		t.Errorf("SessionID = %d %v, want %d", sid, ok, want)
	}
	if st, ok := StartTime(os.Getpid()); !ok || st == 0 {
		t.Errorf("StartTime = %d %v", st, ok)
	}
	if Zombie(os.Getpid()) {
		t.Error("this process is a zombie")
	}
	if _, ok := StartTime(1 << 30); ok {
		t.Error("a pid that cannot exist has a start time")
	}
}

func TestSweepDead(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if !Gone(dead.Process.Pid) || Gone(os.Getpid()) {
		t.Fatalf("Gone(dead %d) = %v, Gone(self) = %v", dead.Process.Pid, Gone(dead.Process.Pid), Gone(os.Getpid()))
	}
	dir := t.TempDir()
	names := map[string]bool{ // name -> removed
		"p-" + strconv.Itoa(dead.Process.Pid): true,
		"p-" + strconv.Itoa(os.Getpid()):      false,
		"p-1":                                 false, // init: alive
		"other":                               false,
	}
	for n := range names {
		if err := os.MkdirAll(filepath.Join(dir, n, "x"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	got := SweepDead(dir, func(name string) (int, bool) {
		rest, ok := strings.CutPrefix(name, "p-")
		pid, err := strconv.Atoi(rest)
		return pid, ok && err == nil
	})
	if want := []string{filepath.Join(dir, "p-"+strconv.Itoa(dead.Process.Pid))}; !slices.Equal(got, want) {
		t.Errorf("SweepDead = %q, want %q", got, want)
	}
	for n, removed := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); (err == nil) == removed {
			t.Errorf("%s: removed %v, want %v", n, err != nil, removed)
		}
	}
}

// TestParentOf: the parent, or why it could not be read: a process that
// is gone says ENOENT, which armParentDeath takes for an ended bwrap.
func TestParentOf(t *testing.T) {
	if pp, err := ParentOf(os.Getpid()); err != nil || pp != os.Getppid() {
		t.Errorf("ParentOf(self) = %d, %v; want %d", pp, err, os.Getppid())
	}
	if _, err := ParentOf(1 << 30); !errors.Is(err, unix.ENOENT) {
		t.Errorf("ParentOf(a pid that cannot exist) = %v, want ENOENT", err)
	}
}
