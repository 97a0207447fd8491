package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sessionLockFile returns the lock file of session name under c's state
// directory, after a first command has made the session.
func sessionLockFile(t *testing.T, c *cli, name string) string {
	t.Helper()
	if code, _, se := c.run(nil, "run", "--session", name, "--", "true"); code != 0 {
		t.Fatalf("first command of session %s: %d %s", name, code, se)
	}
	m, _ := filepath.Glob(filepath.Join(c.home, ".local", "state", "corral", "sessions", name+"-*", "lock"))
	if len(m) != 1 {
		t.Fatalf("session %s's lock file: %v", name, m)
	}
	return m[0]
}

// queued is a `corral run --session` started behind a held lock, with its
// stderr read until it says it waits.
type queued struct {
	cmd    *exec.Cmd
	stderr strings.Builder
	done   chan struct{} // closed once stderr is read to its end
}

// startQueued starts `corral --log-level info run --session name -- words`
// and returns once corral waits for the session's turn: it has logged
// session.lock.wait (when it finds the lock held, before it waits), or one
// of its threads sleeps in flock(2) (wchan locks_lock_inode_wait, which
// is how a corral that does not log the event is seen waiting).
func startQueued(t *testing.T, c *cli, name string, words ...string) *queued {
	t.Helper()
	q := &queued{done: make(chan struct{})}
	q.cmd = exec.Command(corralBin, append([]string{"--log-level", "info", "run", "--session", name, "--"}, words...)...)
	q.cmd.Dir, q.cmd.Env = c.work, c.env
	r, err := q.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	go func() {
		defer close(q.done)
		sc := bufio.NewScanner(r)
		said := false
		for sc.Scan() {
			q.stderr.WriteString(sc.Text() + "\n")
			if !said && strings.Contains(sc.Text(), "msg=session.lock.wait ") {
				said = true
				close(waiting)
			}
		}
		if !said {
			close(waiting)
		}
	}()
	deadline := time.After(2 * time.Minute)
	for !inFlock(q.cmd.Process.Pid) {
		select {
		case <-waiting:
			return q
		case <-deadline:
			_ = q.cmd.Process.Kill()
			t.Fatalf("corral did not wait for the session's turn within 2 minutes:\n%s", q.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return q
}

// inFlock reports whether a thread of process pid sleeps in flock(2).
func inFlock(pid int) bool {
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "wchan"))
	for _, w := range tasks {
		if b, _ := os.ReadFile(w); string(b) == "locks_lock_inode_wait" {
			return true
		}
	}
	return false
}

// end waits for the queued corral to exit, at most bound, and returns its
// exit status and stderr.
func (q *queued) end(t *testing.T, bound time.Duration) (int, string, time.Duration) {
	t.Helper()
	start := time.Now()
	exited := make(chan error, 1)
	go func() {
		<-q.done
		exited <- q.cmd.Wait()
	}()
	var err error
	select {
	case err = <-exited:
	case <-time.After(bound):
		_ = q.cmd.Process.Kill()
		<-exited
		t.Fatalf("the queued corral had not exited %s after the signal:\n%s", bound, q.stderr.String())
	}
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, q.stderr.String(), time.Since(start)
}

// TestQueuedCommandEndsOnSignal (issue 27, item 9): a `corral run
// --session` queued behind the session's running command ends at once on
// SIGTERM (143) and on ^C (SIGINT, 130), says that nothing was run, and
// never runs: its command's side effect (a file it would touch) never
// happens, also once the lock is let go. Before, the queued corral sat in
// a flock(2) that nothing could call off, and ran its command (then killed
// it) when its turn came: exit 137, or 125 "sandbox unavailable ... exit
// status 137".
//
// The turn is held two ways: by the test itself (flock(2) on the
// session's lock file, as a running command's corral holds it), and by a
// real running command (it reads a fifo that the test writes to end it).
// That the queued corral waits is read from its own log
// (session.lock.wait), never guessed from time.
func TestQueuedCommandEndsOnSignal(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	const bound = 20 * time.Second // "at once", with room for a loaded machine
	check := func(t *testing.T, q *queued, sig syscall.Signal, marker string) {
		t.Helper()
		if err := q.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		code, se, took := q.end(t, bound)
		if want := 128 + int(sig); code != want {
			t.Errorf("after %v: exit %d, want %d (took %s)\n%s", sig, code, want, took, se)
		}
		if !strings.Contains(se, "did not run") || !strings.Contains(se, "safe to run it again") {
			t.Errorf("after %v: stderr does not say the command did not run:\n%s", sig, se)
		}
		if strings.Contains(se, "msg=bwrap.sandbox.") {
			t.Errorf("after %v: a sandbox was started:\n%s", sig, se)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("after %v: the queued command ran (%s exists)", sig, marker)
		}
		t.Logf("%v ended the queued corral in %s", sig, took.Round(time.Millisecond))
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run("lock held/"+unix.SignalName(sig), func(t *testing.T) {
			name := "q-" + strings.ToLower(unix.SignalName(sig))
			lock := sessionLockFile(t, c, name)
			f, err := os.OpenFile(lock, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			marker := filepath.Join(c.work, "ran-"+name)
			q := startQueued(t, c, name, "touch", marker)
			check(t, q, sig, marker)
			// Let the turn go: nothing of the queued command is left to
			// take it, and the session goes on.
			_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
			if code, so, se := c.run(nil, "run", "--session", name, "--", "echo next"); code != 0 || so != "next\n" {
				t.Errorf("the session's next command: %d %q %s", code, so, se)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the queued command ran once the lock was let go (%s exists)", marker)
			}
		})
	}

	t.Run("command running/SIGINT", func(t *testing.T) {
		name := "q-running"
		sessionLockFile(t, c, name)
		fifo := filepath.Join(c.work, "hold")
		if err := unix.Mkfifo(fifo, 0o666); err != nil {
			t.Fatal(err)
		}
		// The running command: it says it runs, then reads the fifo.
		run := exec.Command(corralBin, "run", "--session", name, "--", "echo running; read x < hold; echo done")
		run.Dir, run.Env = c.work, c.env
		out, err := run.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = run.Process.Kill(); _ = run.Wait() }()
		br := bufio.NewReader(out)
		if l, _ := br.ReadString('\n'); l != "running\n" {
			t.Fatalf("the running command said %q", l)
		}
		marker := filepath.Join(c.work, "ran-"+name)
		q := startQueued(t, c, name, "touch", marker)
		check(t, q, syscall.SIGINT, marker)
		// The running command is untouched by the other's ^C, and ends
		// as it would have.
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.WriteString("go\n")
		w.Close()
		rest, _ := io.ReadAll(br)
		if err := run.Wait(); err != nil || string(rest) != "done\n" {
			t.Errorf("the running command: %v, then %q", err, rest)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("the queued command ran after the running one (%s exists)", marker)
		}
	})
}
