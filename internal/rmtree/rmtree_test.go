package rmtree

import (
	"os"
	"path/filepath"
	"testing"
)

// A tree as Go's module cache leaves it: read-only directories and files.
func readOnlyTree(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, "mod", "example.com", "m@v1")
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "m.go"), []byte("package m\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{p, filepath.Dir(p), filepath.Join(dir, "mod")} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEmptyReadOnlyTree(t *testing.T) {
	if os.Getuid() == 0 {
		// Root removes entries of read-only directories anyway; the tree
		// is still emptied, which is what is checked.
		t.Log("as root, permissions do not stop removal")
	}
	dir := t.TempDir()
	readOnlyTree(t, dir)
	// A symlink to a read-only directory outside: not followed.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(outside, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(outside, 0o755) })
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	freed, err := Empty(dir)
	if err != nil {
		t.Fatalf("Empty: %v", err)
	}
	if freed != int64(len("package m\n")) {
		t.Errorf("freed = %d", freed)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
	if st, err := os.Stat(outside); err != nil || st.Mode().Perm() != 0o555 {
		t.Errorf("the symlink's target changed: %v %v", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("the symlink's target was emptied: %v", err)
	}
	if _, err := Empty(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("Empty of a missing dir: %v", err)
	}
}

func TestRemoveAllReadOnly(t *testing.T) {
	dir := t.TempDir()
	readOnlyTree(t, dir)
	if err := RemoveAll(filepath.Join(dir, "mod")); err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "mod")); !os.IsNotExist(err) {
		t.Errorf("still there: %v", err)
	}
}
