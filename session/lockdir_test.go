package session

import (
	"path/filepath"
	"testing"
)

func TestLockDir(t *testing.T) {
	dir := t.TempDir()
	release, err := lockFile(filepath.Join(dir, "lock")) // a command running
	if err != nil {
		t.Fatal(err)
	}
	if _, held, err := LockDir(dir, false); !held || err != nil {
		t.Fatalf("held by a command: held=%v %v", held, err)
	}
	release()
	r2, held, err := LockDir(dir, false)
	if held || err != nil || r2 == nil {
		t.Fatalf("free lock: held=%v %v", held, err)
	}
	r2()
	r3, held, err := LockDir(dir, true)
	if held || err != nil {
		t.Fatalf("waiting lock: %v %v", held, err)
	}
	r3()
	if _, _, err := LockDir(filepath.Join(dir, "none"), false); err == nil {
		t.Error("a missing session directory locked")
	}
}
