package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := Write(p, []byte("one"), 0o600, true); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("new file mode %v, want 0600", st.Mode().Perm())
	}
	os.Chmod(p, 0o640)
	if err := Write(p, []byte("two"), 0o600, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Errorf("content %q", b)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o640 {
		t.Errorf("kept mode %v, want 0640", st.Mode().Perm())
	}
	if err := Write(p, []byte("three"), 0o444, false); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o444 {
		t.Errorf("forced mode %v, want 0444", st.Mode().Perm())
	}
	if err := Write(dir, []byte("x"), 0o600, false); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("directory: %v", err)
	}
	if err := Write(filepath.Join(dir, "missing", "f"), nil, 0o600, false); err == nil {
		t.Errorf("missing directory accepted")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

// TestWriteUnsynced: the same replacement as Write (content, mode, a
// directory refused, no temporary file left), without the fsync.
func TestWriteUnsynced(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for _, data := range []string{"one", "two"} {
		if err := WriteUnsynced(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != data {
			t.Errorf("content %q, want %q", b, data)
		}
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if err := WriteUnsynced(dir, []byte("x"), 0o600); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("directory: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}
