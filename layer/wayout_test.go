package layer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary, re-executed by a test, run the child's
// side of it (the layer's directory is the value) instead of the test.
const childEnv = "CORRAL_LAYER_TEST_CHILD"

// runChild re-executes the test binary as the child of test name, with
// the layer dir, its report pipe as fd 3, and returns the command and
// the pipe's reading end.
func runChild(t *testing.T, name, dir string, env ...string) (*exec.Cmd, *os.File, *bytes.Buffer) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childEnv+"="+dir), env...)
	cmd.ExtraFiles = []*os.File{w}
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { r.Close() })
	return cmd, r, &stderr
}

// TestApplyKilledMidway: an apply of 3,000 files killed with SIGKILL
// after its 1,000th write, then a host edit of a file it had not reached,
// then a rerun: the rerun names that file as a conflict and leaves the
// host's edit; the rest then applies and nothing is lost. The host's own
// files named like apply's temporary files survive it all.
func TestApplyKilledMidway(t *testing.T) {
	const n, killAt = 3000, 1000
	if dir := os.Getenv(childEnv); dir != "" {
		l, err := Open(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		report := os.NewFile(3, "report")
		testHookWrote = func(i int, p string) {
			if i == killAt {
				fmt.Fprintf(report, "%s\n", p)
				report.Close()
				for {
					unix.Pause() // until the parent's SIGKILL
				}
			}
		}
		_, err = Apply(l, nil, ApplyOptions{})
		fmt.Fprintf(os.Stderr, "apply ended before its %dth write: %v\n", killAt, err)
		os.Exit(2)
	}
	root := testRoot(t)
	lower := filepath.Join(root, "lower")
	name := func(i int) string { return fmt.Sprintf("d%02d/f%04d", i/100, i) }
	for i := range n {
		write(t, filepath.Join(lower, name(i)), fmt.Sprintf("host %d\n", i), 0o644)
	}
	// The host's own files with apply's prefix, one exactly of the form
	// an older corral used.
	hostTemps := map[string]string{"d29/.corral-apply-x": "mine\n", "d29/.corral-apply-0123456789ab-f2999": "mine too\n", ".corral-apply-y": "top\n"}
	for p, c := range hostTemps {
		write(t, filepath.Join(lower, p), c, 0o644)
	}
	l := New(filepath.Join(root, "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		write(t, filepath.Join(l.Upper(), name(i)), fmt.Sprintf("layer %d\n", i), 0o644)
	}

	cmd, r, stderr := runChild(t, "TestApplyKilledMidway", l.Dir)
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		cmd.Wait()
		t.Fatalf("the child did not report its %dth write: %v\n%s", killAt, err, stderr)
	}
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	t.Logf("killed after writing %s", strings.TrimSpace(line))
	if _, err := os.Stat(l.pendingPath()); err != nil {
		t.Fatalf("no journal after the kill: %v", err)
	}
	victim := name(n - 1)
	if got := read(t, filepath.Join(lower, victim)); got != fmt.Sprintf("host %d\n", n-1) {
		t.Fatalf("%s written before the kill: %q", victim, got)
	}
	if got := read(t, filepath.Join(lower, name(0))); got != "layer 0\n" {
		t.Fatalf("%s not written before the kill: %q", name(0), got)
	}
	write(t, filepath.Join(lower, victim), "edited on the host after the crash\n", 0o644)

	res, err := Apply(l, nil, ApplyOptions{})
	if !errors.Is(err, ErrConflict) || !reflect.DeepEqual(res.Conflicts, []string{victim}) {
		t.Fatalf("rerun: %v, conflicts %q", err, res.Conflicts)
	}
	if got := read(t, filepath.Join(lower, victim)); got != "edited on the host after the crash\n" {
		t.Fatalf("the host's edit was overwritten: %q", got)
	}
	// The session's version is still there to merge or discard.
	if got := read(t, filepath.Join(l.Upper(), victim)); got != fmt.Sprintf("layer %d\n", n-1) {
		t.Fatalf("the layer lost %s: %q", victim, got)
	}
	if err := Discard(l, []string{victim}); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(l, nil, ApplyOptions{}); err != nil {
		t.Fatalf("the rest: %v", err)
	}
	for i := range n - 1 {
		if got, want := read(t, filepath.Join(lower, name(i))), fmt.Sprintf("layer %d\n", i); got != want {
			t.Fatalf("%s = %q, want %q", name(i), got, want)
		}
	}
	if got := paths(t, l); got != nil {
		t.Errorf("left in the layer: %q", got)
	}
	for p, c := range hostTemps {
		if got, err := os.ReadFile(filepath.Join(lower, p)); err != nil || string(got) != c {
			t.Errorf("the host's %s: %q %v", p, got, err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(lower, "*", tempPrefix+"*"))
	top, _ := filepath.Glob(filepath.Join(lower, tempPrefix+"*"))
	if len(left)+len(top) != len(hostTemps) {
		t.Errorf("temporary files left: %q %q", left, top)
	}
	if _, err := os.Stat(l.pendingPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal left: %v", err)
	}
}

// TestLongPaths: a session nests directories past PATH_MAX (4096 bytes):
// diff shows the file, apply applies one chain, discard drops the other.
func TestLongPaths(t *testing.T) {
	l := project(t)
	seg := strings.Repeat("d", 200)
	// bash, not sh: dash's cd makes the whole path, which fails past
	// PATH_MAX; bash's falls back to the relative name.
	inOverlay(t, l, `bash -ec 'for top in long1 long2; do (mkdir $top; cd $top; for i in $(seq 25); do mkdir `+seg+`; cd `+seg+`; done; echo deep > file); done'`)
	deep := strings.Repeat(seg+"/", 25) + "file"
	if len("long1/"+deep) <= unix.PathMax {
		t.Fatalf("the path is only %d bytes", len(deep))
	}
	cs, err := Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Diff(&b, cs, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, top := range []string{"long1", "long2"} {
		if !strings.Contains(b.String(), "+++ b/"+top+"/"+deep+"\n@@ -0,0 +1 @@\n+deep\n") {
			t.Errorf("diff lacks %s/.../file:\n%.2000s", top, b.String())
		}
	}
	b.Reset()
	if err := Diff(&b, cs, DiffOptions{Stat: true}); err != nil || !strings.Contains(b.String(), " 2 files changed, 2 insertions(+)") {
		t.Errorf("stat: %v\n%.300s", err, b.String())
	}
	if _, err := Apply(l, []string{"long1"}, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	lo, err := openTree(l.Lower)
	if err != nil {
		t.Fatal(err)
	}
	defer lo.close()
	if got, err := lo.readFile("long1/" + deep); err != nil || string(got) != "deep\n" {
		t.Fatalf("applied: %q %v", got, err)
	}
	if err := Discard(l, nil); err != nil {
		t.Fatal(err)
	}
	if got := paths(t, l); got != nil {
		t.Errorf("left after discard: %q", got[:min(len(got), 3)])
	}
	inOverlay(t, l, `test ! -e long2; test -d long1`)
	if n, err := lo.lstat("long2"); n != nil || err != nil {
		t.Errorf("long2 reached the host: %v %v", n, err)
	}
}

// TestSpecialFilesLabelled: a fifo, a socket's absence of a form in git,
// and a device are shown as what they are in diff and in apply's error.
func TestSpecialFilesLabelled(t *testing.T) {
	l := project(t)
	inOverlay(t, l, `mkfifo pipe; python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")' 2>/dev/null || true`)
	cs, err := Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Diff(&b, cs, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "diff --git a/pipe b/pipe\n# new: a fifo (corral apply cannot write a special file; corral discard drops it)\n") || strings.Contains(out, "new file mode 100") {
		t.Errorf("diff:\n%s", out)
	}
	if _, err := os.Lstat(filepath.Join(l.Upper(), "sock")); err == nil && !strings.Contains(out, "# new: a socket") {
		t.Errorf("diff of a socket:\n%s", out)
	}
	b.Reset()
	if err := Diff(&b, cs, DiffOptions{Stat: true}); err != nil || !strings.Contains(b.String(), " pipe | fifo\n") {
		t.Errorf("stat: %v\n%s", err, b.String())
	}
	if _, err := Apply(l, []string{"pipe"}, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "pipe is a fifo (a special file): it cannot be applied; discard it") {
		t.Errorf("apply: %v", err)
	}
	for mode, want := range map[uint32]string{unix.S_IFIFO: "fifo", unix.S_IFSOCK: "socket", unix.S_IFCHR: "character device", unix.S_IFBLK: "block device"} {
		if got := specialKind(mode | 0o644); got != want {
			t.Errorf("specialKind(%o) = %q, want %q", mode, got, want)
		}
	}
}

// TestMemoryBounded: Changes, Diff, Diff --stat and Apply of a 1 GiB
// file changed in the layer (text by git's test: its head is text, the
// rest a hole) and a 100 MiB file added, in a child process whose peak
// RSS (VmHWM) must grow by less than 64 MiB over its start.
func TestMemoryBounded(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		start := vmKiB("VmRSS")
		l, err := Open(dir)
		if err == nil {
			err = memChild(l)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(os.NewFile(3, "report"), "%d %d\n", start, vmKiB("VmHWM"))
		os.Exit(0)
	}
	root := testRoot(t)
	lower := filepath.Join(root, "lower")
	head := strings.Repeat("a line of text\n", 1000)
	sparse := func(p string, size int64, tail string) {
		write(t, p, head, 0o644)
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(tail), size-int64(len(tail))); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	sparse(filepath.Join(lower, "big.txt"), 1<<30, "host\n")
	l := New(filepath.Join(root, "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	sparse(filepath.Join(l.Upper(), "big.txt"), 1<<30, "sess\n")
	sparse(filepath.Join(l.Upper(), "added.txt"), 100<<20, "end\n")

	cmd, r, stderr := runChild(t, "TestMemoryBounded", l.Dir)
	line, rerr := bufio.NewReader(r).ReadString('\n')
	if err := cmd.Wait(); err != nil || rerr != nil {
		t.Fatalf("child: %v %v\n%s", err, rerr, stderr)
	}
	f := strings.Fields(line)
	start, _ := strconv.Atoi(f[0])
	peak, _ := strconv.Atoi(f[1])
	t.Logf("child RSS at start %d KiB, peak %d KiB\n%s", start, peak, stderr)
	if peak-start > 64<<10 {
		t.Errorf("peak RSS grew by %d MiB (start %d MiB, peak %d MiB): want under 64", (peak-start)>>10, start>>10, peak>>10)
	}
	if got := read(t, filepath.Join(lower, "added.txt")); len(got) != 100<<20 || !strings.HasSuffix(got, "\x00end\n") {
		t.Errorf("added.txt applied with %d bytes", len(got))
	}
}

func memChild(l *Layer) error {
	cs, err := Changes(l, nil)
	if err != nil {
		return err
	}
	if len(cs) != 2 {
		return fmt.Errorf("changes: %+v", cs)
	}
	var b bytes.Buffer
	if err := Diff(&b, cs, DiffOptions{}); err != nil {
		return err
	}
	if !strings.Contains(b.String(), "Large files a/big.txt and b/big.txt differ (1073741824 -> 1073741824 bytes") {
		return fmt.Errorf("diff:\n%s", b.String())
	}
	fmt.Fprint(os.Stderr, b.String())
	b.Reset()
	if err := Diff(&b, cs, DiffOptions{Stat: true}); err != nil {
		return err
	}
	// 1000 lines of text, the hole and "end\n" as one more.
	if !strings.Contains(b.String(), " added.txt | 1001 +") || !strings.Contains(b.String(), " big.txt   | Large 1073741824 -> 1073741824 bytes") {
		return fmt.Errorf("stat:\n%s", b.String())
	}
	fmt.Fprint(os.Stderr, b.String())
	_, err = Apply(l, nil, ApplyOptions{})
	return err
}

// vmKiB returns a "kB" field of /proc/self/status.
func vmKiB(field string) int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// manyFiles is how many new empty files TestMemoryManyFiles makes: enough
// that memory growing with them shows (an apply before streaming peaked
// at 168 MiB for 100,000 files, a diff at 347 MiB), few enough to make,
// diff and apply in about a minute on a loaded machine (a tmpfs: 30 s
// without the race detector, 95 s with it, with other builds beside).
const manyFiles = 100_000

// TestMemoryManyFiles: diff, diff --stat and apply of a layer of
// manyFiles new empty files, in a child process whose peak RSS (its
// rusage's maxrss) stays under 40 MiB (96 MiB under the race detector):
// memory does not grow with the number of changed files (issue 24: at
// most 64 MiB). Measured: 18 MiB, the same for 200,000 files (51 and 55
// MiB under the race detector).
//
// The child is started by a small launcher (the test binary again) that
// reads its rusage: Linux records in a process's maxrss the peak of the
// memory it ran in before its execve(2), the parent's when started by
// fork or vfork (exec_mmap, setmax_mm_hiwater_rss), and the test
// process's peak, after the tests before this one, is past the bound.
func TestMemoryManyFiles(t *testing.T) {
	if os.Getenv(launchEnv) != "" {
		launchChild("TestMemoryManyFiles")
	}
	if dir := os.Getenv(childEnv); dir != "" {
		fmt.Fprintf(os.Stderr, "start: RSS %d MiB\n", vmKiB("VmRSS")>>10)
		l, err := Open(dir)
		if err == nil {
			err = manyChild(l)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	root := manyRoot(t)
	lower := filepath.Join(root, "lower")
	write(t, filepath.Join(lower, "README"), "project\n", 0o644)
	l := New(filepath.Join(root, "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for i := 0; i < manyFiles; i += 100 {
		d := filepath.Join(l.Upper(), "src", fmt.Sprintf("d%04d", i/100))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for j := i; j < i+100; j++ { // one mknodat(2) a file: the fastest way to make it
			if err := unix.Mknodat(fd, fmt.Sprintf("f%06d", j), unix.S_IFREG|0o644, 0); err != nil {
				t.Fatal(err)
			}
		}
		unix.Close(fd)
	}
	t.Logf("made %d files in %s under %s", manyFiles, time.Since(t0).Round(time.Millisecond), root)
	t0 = time.Now()
	cmd, r, stderr := runChild(t, "TestMemoryManyFiles", l.Dir, launchEnv+"=1")
	line, rerr := bufio.NewReader(r).ReadString('\n')
	err := cmd.Wait()
	t.Logf("diff, diff --stat and apply in %s\n%s", time.Since(t0).Round(time.Millisecond), stderr)
	var peak int64 // KiB
	if _, serr := fmt.Sscan(line, &peak); err != nil || rerr != nil || serr != nil {
		t.Fatalf("child: %v, report %q %v %v", err, line, rerr, serr)
	}
	bound := 40
	if raceDetector {
		bound = 96
	}
	t.Logf("child's peak RSS %d MiB (bound %d MiB)", peak>>10, bound)
	if peak > int64(bound)<<10 {
		t.Errorf("peak RSS %d MiB for %d files: want under %d (memory grows with the number of changes)", peak>>10, manyFiles, bound)
	}
	last := fmt.Sprintf("d%04d", manyFiles/100-1)
	if n, err := os.ReadDir(filepath.Join(lower, "src", last)); err != nil || len(n) != 100 {
		t.Errorf("applied: %d entries in src/%s, %v", len(n), last, err)
	}
	if got := paths(t, l); got != nil {
		t.Errorf("left in the layer: %d changes", len(got))
	}
}

// manyRoot is TestMemoryManyFiles's directory: on /dev/shm when it is a
// tmpfs with room for the files (making and syncing them there costs no
// disk), else testRoot's.
func manyRoot(t *testing.T) string {
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC && st.Ffree > 3*manyFiles && st.Bavail*uint64(st.Bsize) > 1<<30 {
		if root, err := os.MkdirTemp("/dev/shm", "corral-layer-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(root) })
			return root
		}
	}
	return testRoot(t)
}

// launchEnv makes the test binary, re-executed by a test, launch the
// child of test name (childEnv passed on) and report on fd 3 the child's
// peak RSS, in KiB, from its rusage.
const launchEnv = "CORRAL_LAYER_TEST_LAUNCH"

// launchChild is the launcher's side: it runs the child and exits with
// its status.
func launchChild(name string) {
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, launchEnv+"=") })
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "launching the child:", err)
		os.Exit(2)
	}
	fmt.Fprintf(os.NewFile(3, "report"), "%d\n", cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)
	os.Exit(cmd.ProcessState.ExitCode())
}

func manyChild(l *Layer) error {
	var c counter
	n, err := DiffLayer(&c, l, nil, DiffOptions{})
	if err != nil {
		return err
	}
	want := manyFiles + manyFiles/100 + 1 // the files, their directories, src
	if n != want || c.lines != 2*manyFiles {
		return fmt.Errorf("diff: %d changes, %d lines", n, c.lines)
	}
	fmt.Fprintf(os.Stderr, "diff: peak RSS %d MiB\n", vmKiB("VmHWM")>>10)
	c = counter{}
	if _, err := DiffLayer(&c, l, nil, DiffOptions{Stat: true}); err != nil {
		return err
	}
	if c.lines != manyFiles+1 || !strings.HasSuffix(c.last, fmt.Sprintf(" %d files changed, 0 insertions(+), 0 deletions(-)\n", manyFiles)) {
		return fmt.Errorf("stat: %d lines, ending %q", c.lines, c.last)
	}
	fmt.Fprintf(os.Stderr, "diff --stat: peak RSS %d MiB\n", vmKiB("VmHWM")>>10)
	res, err := Apply(l, nil, ApplyOptions{})
	fmt.Fprintf(os.Stderr, "apply: peak RSS %d MiB\n", vmKiB("VmHWM")>>10)
	if err == nil && (res.AppliedTotal != want || len(res.Applied) != ListMax) {
		err = fmt.Errorf("applied %d (%d listed), want %d", res.AppliedTotal, len(res.Applied), want)
	}
	return err
}

// counter counts the lines written to it and keeps the last.
type counter struct {
	lines int
	last  string
	cur   []byte
}

func (c *counter) Write(p []byte) (int, error) {
	for _, b := range p {
		c.cur = append(c.cur, b)
		if b == '\n' {
			c.lines++
			c.last, c.cur = string(c.cur), c.cur[:0]
		}
	}
	return len(p), nil
}
