package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLoadRefusesSpecialFiles: a settings file that is a fifo, a device
// or huge is refused with a message at once (a fifo held open(2), and
// /dev/zero was read without end).
func TestLoadRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, []byte("# "+strings.Repeat("x", maxSettingsFile)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{fifo: "not a regular file", zero: "not a regular file", huge: "over"} {
		_, err := Load(path, nil)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("Load(%s): %v, want an error saying %q", filepath.Base(path), err, want)
		}
		if _, err := readDoc(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("readDoc(%s): %v", filepath.Base(path), err)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml"), nil); err != nil {
		t.Errorf("a missing file: %v", err)
	}
}
