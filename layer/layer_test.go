package layer

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestEnsureRecordsBaseOnce(t *testing.T) {
	lower := t.TempDir()
	os.WriteFile(filepath.Join(lower, "a.txt"), []byte("alpha"), 0o644)
	os.Mkdir(filepath.Join(lower, "d"), 0o755)
	os.Symlink("a.txt", filepath.Join(lower, "d", "l"))
	l := New(filepath.Join(t.TempDir(), "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	base, err := Scan(lower)
	if err != nil || len(base) != 3 || base[0].Path != "a.txt" || base[0].Size != 5 || base[2].Type != "symlink" || base[2].Target != "a.txt" {
		t.Fatalf("scan: %v %+v", err, base)
	}
	before, _ := os.ReadFile(l.BasePath())
	os.WriteFile(filepath.Join(lower, "b.txt"), []byte("beta"), 0o644)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(l.BasePath()); string(after) != string(before) {
		t.Error("a second Ensure rewrote the base")
	}
	if err := New(l.Dir, t.TempDir()).Ensure(); !errors.Is(err, ErrOtherLower) {
		t.Errorf("another lower: %v", err)
	}
	if g, err := l.Generation(); g != 0 || err != nil {
		t.Errorf("generation %d %v", g, err)
	}
	l.Bump()
	if g, err := l.Generation(); g != 1 || err != nil {
		t.Errorf("generation %d %v", g, err)
	}
}
