package testkit

import (
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// MakeTree writes a test tree at dir/src (the copy tests of corral cp
// and sync): modes, an executable, a
// sticky directory, symlinks inside and out, a binary file and a file of
// big random bytes at src/big (0 for none). 4 files (5 with big), 3
// directories below src, 3 symlinks.
func MakeTree(t testing.TB, dir string, big int) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "src/sub/deeper"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "src/run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "src/secret"), []byte("s"), 0o600))
	bin := make([]byte, 70000)
	_, _ = rand.Read(bin)
	bin[5] = 0
	must(os.WriteFile(filepath.Join(dir, "src/sub/blob.bin"), bin, 0o644))
	must(os.Symlink("../run.sh", filepath.Join(dir, "src/sub/link-in")))
	must(os.Symlink("/etc/passwd", filepath.Join(dir, "src/sub/link-out")))
	must(os.Symlink("deeper", filepath.Join(dir, "src/sub/dirlink")))
	must(os.WriteFile(filepath.Join(dir, "src/sub/deeper/x"), []byte("x"), 0o640))
	must(os.Chmod(filepath.Join(dir, "src/sub/deeper"), 0o750|os.ModeSticky))
	if big > 0 {
		f, err := os.Create(filepath.Join(dir, "src/big"))
		must(err)
		_, err = io.CopyN(f, rand.Reader, int64(big))
		must(err)
		must(f.Close())
	}
}
