package transfer

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/handback"
)

// memChildEnv makes the test binary the child of TestUnpackMemoryByEntries.
const memChildEnv = "CORRAL_TRANSFER_MEM_CHILD"

// Entries of the archive TestUnpackMemoryByEntries unpacks: enough that
// memory kept per entry shows (before transfer kept only directories and
// 8-byte hashes, 300,000 entries peaked at 122 MB), spread as a sandbox's
// tree would be.
const (
	memEntries = 250_000
	memPerDir  = 500
	// memBound is issue 24's bound for any number of files.
	memBound = 64 << 20
)

// writeManyEntries writes an archive of n empty files, perDir to a
// directory, to w: generated, so the writer keeps nothing.
func writeManyEntries(w io.Writer, n, perDir int) error {
	tw := tar.NewWriter(w)
	for i := 0; i < n; i++ {
		if i%perDir == 0 {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("d%05d/", i/perDir), Mode: 0o755}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("d%05d/file-%07d.txt", i/perDir, i), Mode: 0o644}); err != nil {
			return err
		}
	}
	return tw.Close()
}

// TestUnpackMemoryByEntries: a hand-back's memory does not grow with its
// number of entries. A child process unpacks 250,000 files through the
// gate with Delete (the costliest options: the gate's precheck and
// Delete's set of what arrived) and its peak RSS, as the kernel counted
// it (getrusage(2) ru_maxrss), stays under 64 MiB. No clock is read.
func TestUnpackMemoryByEntries(t *testing.T) {
	if os.Getenv(memChildEnv) != "" {
		unpackManyChild(t)
		return
	}
	if testing.Short() {
		t.Skip("writes 250,000 files (-short)")
	}
	dir := os.Getenv("CORRAL_TEST_DIR")
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir = "/dev/shm" // tmpfs: the files cost memory, not disk writes
	}
	root, err := os.MkdirTemp(dir, "corral-transfer-mem-*")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestUnpackMemoryByEntries$", "-test.count", "1")
	cmd.Env = append(os.Environ(), memChildEnv+"="+root, "GOMAXPROCS=2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	// The child's own high-water mark (VmHWM, proc(5)): its rusage's
	// ru_maxrss would also count this process's RSS, which the child
	// shared between fork and exec.
	_, after, ok := strings.Cut(string(out), "VmHWM_KiB=")
	kib, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(after, "\n", 2)[0]), 10, 64)
	if !ok || err != nil {
		t.Fatalf("the child did not report its peak RSS: %v\n%s", err, out)
	}
	bound := int64(memBound)
	if raceDetector {
		bound *= 3 // the race detector's shadow memory: about 3x the RSS
	}
	t.Logf("unpacking %d entries peaked at %d KiB RSS (bound %d MiB)", memEntries, kib, bound>>20)
	if kib<<10 > bound {
		t.Errorf("unpacking %d entries peaked at %d MiB RSS, over %d MiB", memEntries, kib>>10, bound>>20)
	}
	ents, err := os.ReadDir(root)
	if err != nil || len(ents) != memEntries/memPerDir {
		t.Errorf("the child unpacked %d directories (%v), want %d", len(ents), err, memEntries/memPerDir)
	}
}

func unpackManyChild(t *testing.T) {
	root := os.Getenv(memChildEnv)
	// The gate reads the archive twice, so callers spool a stream to a
	// file first (wscopy); the file is the archive here.
	f, err := os.CreateTemp(filepath.Dir(root), "corral-transfer-mem-*.tar")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	if err := writeManyEntries(io.MultiWriter(f, h), memEntries, memPerDir); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	st, err := Unpack(f, root, Options{Dir: ".", Gate: &handback.Policy{}, Delete: true, WantSHA256: hex.EncodeToString(h.Sum(nil))})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != memEntries {
		t.Fatalf("unpacked %d files, want %s", st.Files, strconv.Itoa(memEntries))
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fmt.Printf("VmHWM_KiB=%s\n", strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
}
