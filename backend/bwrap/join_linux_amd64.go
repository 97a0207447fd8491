package bwrap

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// injection is a system call session in a stopped tracee (x86-64): its
// saved registers and the instructions that batches overwrite at its
// program counter.
type injection struct {
	pid  int
	regs unix.PtraceRegs
	text []byte // the tracee's own instructions at the program counter, as far as a batch wrote
}

// startInjection saves pid's registers; batch saves the instructions it
// overwrites.
func startInjection(pid int) (*injection, error) {
	in := &injection{pid: pid}
	if err := unix.PtraceGetRegs(pid, &in.regs); err != nil {
		return nil, fmt.Errorf("reading bwrap's registers: %w", err)
	}
	return in, nil
}

// scratch is an address for a few bytes of arguments: below the stack
// pointer (and its 128-byte red zone), 16-byte aligned. At the exec stop
// the kernel has mapped well over that much stack below it (fs/exec.c,
// setup_arg_pages).
func (in *injection) scratch() uintptr {
	return uintptr(in.regs.Rsp-512) &^ 15
}

// write stores b at addr in the tracee.
func (in *injection) write(addr uintptr, b []byte) error {
	_, err := unix.PtracePokeData(in.pid, addr, b)
	return err
}

// finish puts the instructions and the registers back.
func (in *injection) finish() error {
	if len(in.text) > 0 {
		if _, err := unix.PtracePokeText(in.pid, uintptr(in.regs.Rip), in.text); err != nil {
			return fmt.Errorf("restoring bwrap's instructions: %w", err)
		}
	}
	if err := unix.PtraceSetRegs(in.pid, &in.regs); err != nil {
		return fmt.Errorf("restoring bwrap's registers: %w", err)
	}
	return nil
}

// Registers that keep batch's results: the `syscall` instruction clobbers
// only rax, rcx and r11 (x86-64 ABI), so these survive the calls after the
// one they keep. Each entry is the `mov REG, rax` that stores one result.
var batchResultMoves = [...][3]byte{
	{0x49, 0x89, 0xc4}, // r12
	{0x49, 0x89, 0xc5}, // r13
	{0x49, 0x89, 0xc6}, // r14
	{0x49, 0x89, 0xc7}, // r15
	{0x48, 0x89, 0xc3}, // rbx
	{0x48, 0x89, 0xc5}, // rbp
}

// maxBatch is how many calls one batch makes: one per result register.
const maxBatch = len(batchResultMoves)

// notRun is what a result register holds for a call that batch did not
// make (an earlier one failed): no system call returns it (results are
// addresses below 2^47, counts, or -4095..-1).
const notRun = uint64(1) << 62

// batchCode returns the x86-64 code that makes calls in turn, each an
// argument vector {nr, a1, ..., a5?} of at most nr and four arguments
// (rax; rdi, rsi, rdx, r10), keeps each result in the next of
// batchResultMoves, jumps past the rest to the final int3 as soon as a
// result is negative (-errno), and ends with int3 (0xcc), whose SIGTRAP
// stop hands the tracee back. A value below 2^32 is loaded with the 5-
// (or 6-) byte `mov r32, imm32`, which zero-extends; any other with the
// 10-byte `movabs` (Intel SDM vol. 2, MOV: B8+rd id, REX.W B8+rd io).
func batchCode(calls [][]uintptr) ([]byte, error) {
	if len(calls) == 0 || len(calls) > maxBatch {
		return nil, fmt.Errorf("a batch makes 1 to %d system calls, not %d", maxBatch, len(calls))
	}
	// Per register, in argument order: the imm32 form (opcode bytes) and
	// the imm64 form.
	forms := [5]struct{ short, long []byte }{
		{[]byte{0xb8}, []byte{0x48, 0xb8}},       // rax (eax)
		{[]byte{0xbf}, []byte{0x48, 0xbf}},       // rdi (edi)
		{[]byte{0xbe}, []byte{0x48, 0xbe}},       // rsi (esi)
		{[]byte{0xba}, []byte{0x48, 0xba}},       // rdx (edx)
		{[]byte{0x41, 0xba}, []byte{0x49, 0xba}}, // r10 (r10d)
	}
	var code []byte
	var jumps []int // offsets of the rel32 fields to patch to the int3
	for i, c := range calls {
		if len(c) == 0 || len(c) > len(forms) {
			return nil, fmt.Errorf("system call %d of the batch has %d values; 1 to %d fit", i, len(c), len(forms))
		}
		for j, v := range c {
			if uint64(v) <= 0xffffffff {
				code = append(code, forms[j].short...)
				code = binary.LittleEndian.AppendUint32(code, uint32(v))
			} else {
				code = append(code, forms[j].long...)
				code = binary.LittleEndian.AppendUint64(code, uint64(v))
			}
		}
		code = append(code, 0x0f, 0x05)                   // syscall
		code = append(code, batchResultMoves[i][:]...)    // mov REG, rax
		code = append(code, 0x48, 0x85, 0xc0, 0x0f, 0x88) // test rax, rax; js rel32
		jumps = append(jumps, len(code))
		code = append(code, 0, 0, 0, 0)
	}
	end := len(code)
	for _, at := range jumps {
		binary.LittleEndian.PutUint32(code[at:], uint32(int32(end-(at+4))))
	}
	return append(code, 0xcc), nil // int3
}

// batch makes calls in the tracee one after another with one resume and
// one stop (a single-stepped call per resume cost a round trip through the
// scheduler each: about 0.12 ms apiece here), and returns their results in
// order: each the call's return value or, when it failed, an error
// wrapping its unix.Errno; a call after a failed one is not made and gets
// errBatchNotRun. The code (batchCode) is written at the program counter
// over the tracee's instructions, which save keeps and finish puts back; the registers are restored by finish as well.
// The stop must be a SIGTRAP (the int3); any other stop or an exit is an
// error, after which the caller kills the tracee.
func (in *injection) batch(calls ...[]uintptr) ([]uintptr, []error, error) {
	code, err := batchCode(calls)
	if err != nil {
		return nil, nil, err
	}
	if err := in.save(len(code)); err != nil {
		return nil, nil, err
	}
	if _, err := unix.PtracePokeText(in.pid, uintptr(in.regs.Rip), code); err != nil {
		return nil, nil, fmt.Errorf("writing system calls into bwrap: %w", err)
	}
	r := in.regs
	r.Orig_rax = ^uint64(0) // no system call restart for the stop it leaves (see call)
	r.R12, r.R13, r.R14, r.R15, r.Rbx, r.Rbp = notRun, notRun, notRun, notRun, notRun, notRun
	if err := unix.PtraceSetRegs(in.pid, &r); err != nil {
		return nil, nil, fmt.Errorf("setting registers: %w", err)
	}
	if err := unix.PtraceCont(in.pid, 0); err != nil {
		return nil, nil, fmt.Errorf("resuming bwrap for its system calls: %w", err)
	}
	exited, ws, err := waitEvent(in.pid)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("waiting for the system calls: %w", err)
	case exited:
		return nil, nil, fmt.Errorf("the process ended")
	case !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP:
		return nil, nil, fmt.Errorf("the system calls stopped with %v, not SIGTRAP", ws.StopSignal())
	}
	if err := unix.PtraceGetRegs(in.pid, &r); err != nil {
		return nil, nil, fmt.Errorf("reading the results: %w", err)
	}
	held := [maxBatch]uint64{r.R12, r.R13, r.R14, r.R15, r.Rbx, r.Rbp}
	res, errs := make([]uintptr, len(calls)), make([]error, len(calls))
	for i := range calls {
		switch v := held[i]; {
		case v == notRun:
			errs[i] = errBatchNotRun
		case int64(v) < 0 && int64(v) > -4096:
			errs[i] = unix.Errno(-int64(v))
		default:
			res[i] = uintptr(v)
		}
	}
	return res, errs, nil
}

// save extends the saved text at the program counter to cover n bytes
// (whole words), for finish to put back.
func (in *injection) save(n int) error {
	have := len(in.text)
	if n <= have {
		return nil
	}
	n = (n + 7) &^ 7
	more := make([]byte, n-have)
	if _, err := unix.PtracePeekText(in.pid, uintptr(in.regs.Rip)+uintptr(have), more); err != nil {
		return fmt.Errorf("reading bwrap's instructions: %w", err)
	}
	in.text = append(in.text, more...)
	return nil
}

// canJoinByInjection reports whether joinNamespaces is implemented here.
const canJoinByInjection = true
