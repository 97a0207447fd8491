package inside

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestValidBgID(t *testing.T) {
	for id, want := range map[string]bool{
		"bg-1": true, "bg-0a1b2c3d4e5f": true, "bg-" + strings.Repeat("a", 32): true,
		"bg-": false, "bg-" + strings.Repeat("a", 33): false, "bg-A": false, "bg-../x": false,
		"bg-1/2": false, "x-1": false, "": false, "bg-1\n": false,
	} {
		if got := ValidBgID(id); got != want {
			t.Errorf("ValidBgID(%q) = %v, want %v", id, got, want)
		}
	}
}

// bgTestDir is a directory for a test's session, outside /tmp
// ($CORRAL_TEST_DIR, else /var/tmp), removed after it.
func bgTestDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("CORRAL_TEST_DIR")
	if root == "" {
		root = "/var/tmp"
	}
	d, err := os.MkdirTemp(root, "corral-bg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// startKeeper runs this test binary as a keeper (ModeBgKeep) of script
// in dir, detached as the agent starts it, and returns its answer and
// process.
func startKeeper(t *testing.T, dir, id, script string, extra ...string) (BgRecord, *exec.Cmd) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{ModeBgKeep, "--dir", dir, "--id", id, "--command", script}, extra...)
	c := exec.Command(self, append(args, "--", "bash", "-c", script)...)
	c.Dir = dir
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("keeper's answer: %q, %v", line, err)
	}
	var r BgRecord
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("keeper's answer %q: %v", line, err)
	}
	return r, c
}

// TestBgKeeper: a keeper's record, output, status and kill, as ModeBg
// reads them, on this machine (the cluster test runs them in a pod).
func TestBgKeeper(t *testing.T) {
	dir := bgTestDir(t)
	// Over MaxBgOutput: kept up to it, then a note, the rest counted.
	r, c := startKeeper(t, dir, "bg-big", `head -c 5000000 /dev/zero | tr '\0' a; echo done >&2`)
	if r.Error != "" || r.PGID <= 0 || r.Keeper != c.Process.Pid || r.Command == "" {
		t.Fatalf("record %+v", r)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	ch := bgRead(filepath.Join(dir, "bg", "bg-big"), MaxBgOutput-10, MaxBgRead)
	if ch.Error != "" || ch.Status == nil || ch.Status.Code != 0 || ch.Status.Dropped != 5000000+5-MaxBgOutput {
		t.Fatalf("chunk %+v, status %+v", ch, ch.Status)
	}
	if !strings.HasPrefix(string(ch.Data), strings.Repeat("a", 10)+"\n[corral: output past") {
		t.Errorf("end of a cut output: %q", ch.Data)
	}
	if ch.Size > MaxBgOutput+200 {
		t.Errorf("output file of %d bytes", ch.Size)
	}

	// Killed: its whole tree, and the status says so.
	r, c = startKeeper(t, dir, "bg-k", `echo up; sleep 600 & wait`)
	pdir := filepath.Join(dir, "bg", "bg-k")
	if st, _ := statusOrLost(pdir); st != nil {
		t.Fatalf("running process has status %+v", st)
	}
	k := bgKill(pdir)
	if k.Error != "" || k.Status == nil || !k.Status.Killed || k.Status.Code != 137 {
		t.Fatalf("kill: %+v %+v", k, k.Status)
	}
	if err := syscall.Kill(-r.PGID, 0); err != syscall.ESRCH {
		t.Errorf("process group %d after the kill: %v", r.PGID, err)
	}
	if k := bgKill(pdir); !k.Ended || k.Status == nil || k.Status.Code != 137 {
		t.Errorf("second kill: %+v", k)
	}
	_ = c.Wait()

	// A keeper killed itself (from inside the pod) reads as lost, not
	// running.
	_, c = startKeeper(t, dir, "bg-lost", `sleep 600`)
	_ = c.Process.Kill()
	_ = c.Wait()
	st, err := statusOrLost(filepath.Join(dir, "bg", "bg-lost"))
	if err != nil || st == nil || st.Error != lostKeeper {
		t.Errorf("lost keeper: %+v, %v", st, err)
	}

	// A command that is not found (by bash): ended, 127.
	_, c = startKeeper(t, dir, "bg-nf", "x")
	_ = c.Wait()
	if st, _ := statusOrLost(filepath.Join(dir, "bg", "bg-nf")); st == nil || st.Code != 127 {
		t.Errorf("not found: %+v", st)
	}

	// An id in use is refused, and leaves the first as it was.
	r, c = startKeeper(t, dir, "bg-k", "true")
	_ = c.Wait()
	if r.Error == "" {
		t.Errorf("a second bg-k started: %+v", r)
	}

	// The list has them all, with their records.
	l := bgList(filepath.Join(dir, "bg"))
	ids := map[string]BgInfo{}
	for _, p := range l.Procs {
		ids[p.ID] = p
	}
	if len(ids) != 4 || ids["bg-big"].Bytes != ch.Size || ids["bg-k"].Status == nil || ids["bg-k"].Command != `echo up; sleep 600 & wait` {
		t.Errorf("list %+v", l)
	}

	// What the session's commands could put there is not followed.
	out := filepath.Join(dir, "bg", "bg-big", "out")
	os.Remove(out)
	os.Symlink("/etc/passwd", out)
	if ch := bgRead(filepath.Join(dir, "bg", "bg-big"), 0, 100); ch.Error == "" {
		t.Errorf("a symlinked output was read: %q", ch.Data)
	}
	os.Remove(out)
	if err := syscall.Mkfifo(out, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan BgChunk, 1)
	go func() { done <- bgRead(filepath.Join(dir, "bg", "bg-big"), 0, 100) }()
	select {
	case ch := <-done:
		if ch.Error == "" {
			t.Errorf("a fifo was read as output")
		}
	case <-time.After(time.Minute):
		t.Fatal("a read of a fifo blocks")
	}
	if ch := bgRead(filepath.Join(dir, "bg", "bg-nosuch"), 0, 100); !ch.NotFound {
		t.Errorf("unknown id: %+v", ch)
	}
}

// TestBgMakeRoom: past MaxBgProcs the oldest ended processes go; when
// every one runs, a start is refused.
func TestBgMakeRoom(t *testing.T) {
	root := filepath.Join(bgTestDir(t), "bg")
	mk := func(id string, ended time.Time) {
		p := filepath.Join(root, id)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if !ended.IsZero() {
			os.WriteFile(filepath.Join(p, "status"), mustJSON(BgStatus{Ended: ended}), 0o600)
		}
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range MaxBgProcs {
		ended := time.Time{}
		if i < 2 {
			ended = base.Add(time.Duration(2-i) * time.Hour) // bg-a0 ended last
		}
		mk("bg-a"+string(rune('a'+i)), ended)
	}
	if err := bgMakeRoom(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "bg-ab")); !os.IsNotExist(err) {
		t.Errorf("the oldest ended process is kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "bg-aa")); err != nil {
		t.Errorf("another ended one went too: %v", err)
	}
	mk("bg-zz", time.Time{})
	os.RemoveAll(filepath.Join(root, "bg-aa"))
	mk("bg-zy", time.Time{})
	if err := bgMakeRoom(root); err == nil || !strings.Contains(err.Error(), "running") {
		t.Errorf("all running: %v", err)
	}
}
