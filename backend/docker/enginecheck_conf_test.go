package docker

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestReadConf (hostile trial): doctor reads a containers.conf only when
// it is a regular file of a sane size: a fifo named by CONTAINERS_CONF
// blocked doctor for ever, and /dev/zero filled its memory.
func TestReadConf(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(good, []byte("[containers]\ninit_path = \"/x/catatonit\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.conf")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.conf")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.conf")
	if err := os.WriteFile(big, make([]byte, maxConf+1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{good, link} {
		if b, err := readConf(p); err != nil || initPathOf([][]byte{b}) != "/x/catatonit" {
			t.Errorf("readConf(%s) = %q, %v; want the file", p, b, err)
		}
	}
	for _, p := range []string{fifo, "/dev/zero", big, dir} {
		if b, err := readConf(p); err == nil {
			t.Errorf("readConf(%s) = %d bytes, want an error", p, len(b))
		}
	}
}
