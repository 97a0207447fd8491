package forkfds

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/sandbox"
)

// helperEnv names the child's mode: the test binary, started again with
// a low open-files limit, makes the failure in a process of its own.
const helperEnv = "CORRAL_FORKFDS_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		fmt.Print(helper(mode))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helper fills this process's descriptor table up to a low RLIMIT_NOFILE,
// frees a few low descriptors (as other goroutines of a busy server do),
// and starts /bin/true passing the descriptor at the top of the table, as
// the child's ExtraFiles[0]. mode "raw" starts it with cmd.Start, "explain"
// with Start, "closed" with Start after closing the passed descriptor
// behind its *os.File's back (a use after close). It returns what the
// start said: "ok", or the error with its errno class.
func helper(mode string) string {
	const limit = 64
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
		return "setrlimit: " + err.Error()
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return "open: " + err.Error()
	}
	var fill []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		fill = append(fill, f)
	}
	if len(fill) < 16 {
		return fmt.Sprintf("only %d descriptors below the limit", len(fill))
	}
	top := fill[len(fill)-1]
	if top.Fd() != limit-1 {
		return fmt.Sprintf("the last descriptor is %d, not %d", top.Fd(), limit-1)
	}
	for _, f := range fill[:8] {
		f.Close()
	}
	cmd := exec.Command("/bin/true")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, null, null
	cmd.ExtraFiles = []*os.File{top}
	switch mode {
	case "raw":
		err = cmd.Start()
	case "explain":
		err = Start(cmd)
	case "closed":
		// The number is taken by nothing else: the child's placement
		// of it fails for the closed descriptor, not for the limit.
		if err := unix.Close(int(top.Fd())); err != nil {
			return "close: " + err.Error()
		}
		err = Start(cmd)
	}
	if err == nil {
		_ = cmd.Wait()
		return "ok"
	}
	return fmt.Sprintf("EMFILE=%v EBADF=%v transient=%v: %v", errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.EBADF), sandbox.IsTransient(err), err)
}

func runHelper(t *testing.T, mode string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper %s: %v\n%s", mode, err, out)
	}
	return string(out)
}

// TestGoReportsFullTableAsEBADF pins the failure itself: with the passed
// descriptor at the top of the table, Go's fork/exec says "bad file
// descriptor" although every descriptor is open. If a Go release stops
// doing so this test fails, and Explain may go.
func TestGoReportsFullTableAsEBADF(t *testing.T) {
	got := runHelper(t, "raw")
	if !strings.HasPrefix(got, "EMFILE=false EBADF=true transient=false: fork/exec /bin/true: bad file descriptor") {
		t.Fatalf("cmd.Start at the top of the descriptor table: %s", got)
	}
}

// TestExplainFullTable: Start reports the same failure as a full table,
// a passing failure that says what happened.
func TestExplainFullTable(t *testing.T) {
	got := runHelper(t, "explain")
	if !strings.HasPrefix(got, "EMFILE=true EBADF=false transient=true: fork/exec /bin/true: too many open files: the open-files limit (64) left no room") {
		t.Fatalf("Start at the top of the descriptor table: %s", got)
	}
	if !strings.Contains(got, `Go reports this as "bad file descriptor"`) {
		t.Errorf("the message does not say why Go said otherwise: %s", got)
	}
}

// TestExplainKeepsUseAfterClose: a passed descriptor closed behind its
// *os.File is a bug, and its EBADF is not taken for a full table.
func TestExplainKeepsUseAfterClose(t *testing.T) {
	got := runHelper(t, "closed")
	if !strings.HasPrefix(got, "EMFILE=false EBADF=true transient=false: fork/exec /bin/true: bad file descriptor") {
		t.Fatalf("Start with a closed descriptor: %s", got)
	}
}

func TestExplainPassesOtherErrors(t *testing.T) {
	if err := Explain(exec.Command("/x"), nil); err != nil {
		t.Errorf("nil became %v", err)
	}
	enoent := &os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.ENOENT}
	if err := Explain(exec.Command("/x"), enoent); err != enoent {
		t.Errorf("ENOENT became %v", err)
	}
}
