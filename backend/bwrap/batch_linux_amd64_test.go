package bwrap

import (
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBatchCode: the machine code of a batch, byte for byte (Intel SDM
// vol. 2: MOV B8+rd id / REX.W B8+rd io, MOV 89 /r, TEST 85 /r, JS 0F 88
// cd, SYSCALL 0F 05, INT3 CC), and the batches it refuses.
func TestBatchCode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls [][]uintptr
		want  string // hex
		err   bool
	}{
		{name: "one call, imm32 forms", calls: [][]uintptr{{3, 5}},
			want: "b803000000" + "bf05000000" + "0f05" + "4989c4" + "4885c0" + "0f8800000000" + "cc"},
		{name: "four arguments, r10 and a 64-bit value", calls: [][]uintptr{{317, 1, 8, 0x7ffd12345670, 0}},
			want: "b83d010000" + "bf01000000" + "be08000000" + "48ba70563412fd7f0000" + "41ba00000000" + "0f05" + "4989c4" + "4885c0" + "0f8800000000" + "cc"},
		{name: "two calls: the first jumps past the second", calls: [][]uintptr{{39}, {110}},
			// Each call is 5+2+3+3+6 = 19 bytes; the first js (ending at 19)
			// jumps 19 bytes to the int3 at 38; the second lands on it.
			want: "b827000000" + "0f05" + "4989c4" + "4885c0" + "0f8813000000" +
				"b86e000000" + "0f05" + "4989c5" + "4885c0" + "0f8800000000" + "cc"},
		{name: "no call", calls: nil, err: true},
		{name: "seven calls", calls: [][]uintptr{{39}, {39}, {39}, {39}, {39}, {39}, {39}}, err: true},
		{name: "five arguments", calls: [][]uintptr{{1, 2, 3, 4, 5, 6}}, err: true},
		{name: "an empty call", calls: [][]uintptr{{}}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, err := batchCode(tc.calls)
			if tc.err {
				if err == nil {
					t.Fatalf("batchCode(%v) = %x, want an error", tc.calls, code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(code); got != tc.want {
				t.Errorf("batchCode(%v)\n got %s\nwant %s", tc.calls, got, tc.want)
			}
		})
	}
}

// TestBatchInTracee runs batches in a real process stopped at its exec
// stop: results in order, an errno, the calls after a failed one not made,
// a second batch over more of its instructions, and a process that runs on
// unharmed after finish (its instructions and registers put back).
func TestBatchInTracee(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command("/bin/sh", "-c", "exit 7")
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if exited, err := waitStop(pid); err != nil || exited {
		t.Fatalf("exec stop: exited %v, %v", exited, err)
	}
	in, err := startInjection(pid)
	if err != nil {
		t.Fatal(err)
	}
	res, errs, err := in.batch(
		[]uintptr{unix.SYS_GETPID},
		[]uintptr{unix.SYS_GETPPID},
		[]uintptr{unix.SYS_CLOSE, 1 << 30}, // EBADF
		[]uintptr{unix.SYS_GETPID},
	)
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || res[0] != uintptr(pid) {
		t.Errorf("getpid = %d, %v; want %d", res[0], errs[0], pid)
	}
	if errs[1] != nil || res[1] != uintptr(os.Getpid()) {
		t.Errorf("getppid = %d, %v; want %d", res[1], errs[1], os.Getpid())
	}
	if !errors.Is(errs[2], unix.EBADF) {
		t.Errorf("close(1<<30): %v, want EBADF", errs[2])
	}
	if !errors.Is(errs[3], errBatchNotRun) {
		t.Errorf("the call after a failed one: %d, %v; want errBatchNotRun", res[3], errs[3])
	}
	// A second, longer batch over more of the text than the first.
	calls := make([][]uintptr, maxBatch)
	for i := range calls {
		calls[i] = []uintptr{unix.SYS_GETPID, 0xffffffffffff, 0xffffffffffff, 0xffffffffffff, 0xffffffffffff}
	}
	if res, errs, err := in.batch(calls...); err != nil {
		t.Fatal(err)
	} else {
		for i := range calls {
			if errs[i] != nil || res[i] != uintptr(pid) {
				t.Errorf("call %d of %d: %d, %v", i, maxBatch, res[i], errs[i])
			}
		}
	}
	if err := in.finish(); err != nil {
		t.Fatal(err)
	}
	if err := unix.PtraceDetach(pid); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("the shell after the batches: %v, want exit status 7", err)
	}
}
