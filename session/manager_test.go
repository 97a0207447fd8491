package session

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
