package bwrap

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// injection is a system call session in a stopped tracee (x86-64): its
// saved registers and the instruction word that the `syscall` instruction
// replaces at the program counter.
type injection struct {
	pid  int
	regs unix.PtraceRegs
	text [8]byte
}

// startInjection saves pid's registers and the 8 bytes at its program
// counter, and writes the 2-byte `syscall` instruction (0f 05) there.
func startInjection(pid int) (*injection, error) {
	in := &injection{pid: pid}
	if err := unix.PtraceGetRegs(pid, &in.regs); err != nil {
		return nil, fmt.Errorf("reading bwrap's registers: %w", err)
	}
	if _, err := unix.PtracePeekText(pid, uintptr(in.regs.Rip), in.text[:]); err != nil {
		return nil, fmt.Errorf("reading bwrap's first instruction: %w", err)
	}
	code := in.text
	code[0], code[1] = 0x0f, 0x05
	if _, err := unix.PtracePokeText(pid, uintptr(in.regs.Rip), code[:]); err != nil {
		return nil, fmt.Errorf("writing a system call instruction into bwrap: %w", err)
	}
	return in, nil
}

// syscall executes system call nr with up to four arguments in the tracee
// (x86-64 ABI: number in rax, arguments in rdi, rsi, rdx, r10, result in
// rax, -errno on failure; the instruction clobbers rcx and r11). orig_rax
// is set to -1, as debuggers do, so the kernel applies no system call
// restart to the stop the tracee is leaving.
func (in *injection) syscall(nr uintptr, args ...uintptr) error {
	_, err := in.call(nr, args...)
	return err
}

// call is syscall returning the call's result as well.
func (in *injection) call(nr uintptr, args ...uintptr) (uintptr, error) {
	r := in.regs
	r.Rax, r.Orig_rax = uint64(nr), ^uint64(0)
	dst := []*uint64{&r.Rdi, &r.Rsi, &r.Rdx, &r.R10}
	for i, a := range args {
		*dst[i] = uint64(a)
	}
	if err := unix.PtraceSetRegs(in.pid, &r); err != nil {
		return 0, fmt.Errorf("setting registers: %w", err)
	}
	if err := unix.PtraceSingleStep(in.pid); err != nil {
		return 0, fmt.Errorf("single-stepping: %w", err)
	}
	exited, ws, err := waitEvent(in.pid)
	switch {
	case err != nil:
		return 0, fmt.Errorf("waiting for the step: %w", err)
	case exited:
		return 0, fmt.Errorf("the process ended")
	case !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP:
		return 0, fmt.Errorf("the step stopped with %v, not SIGTRAP", ws.StopSignal())
	}
	if err := unix.PtraceGetRegs(in.pid, &r); err != nil {
		return 0, fmt.Errorf("reading the result: %w", err)
	}
	if ret := int64(r.Rax); ret < 0 && ret > -4096 {
		return 0, unix.Errno(-ret)
	}
	return uintptr(r.Rax), nil
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

// finish puts the instruction word and the registers back.
func (in *injection) finish() error {
	if _, err := unix.PtracePokeText(in.pid, uintptr(in.regs.Rip), in.text[:]); err != nil {
		return fmt.Errorf("restoring bwrap's first instruction: %w", err)
	}
	if err := unix.PtraceSetRegs(in.pid, &in.regs); err != nil {
		return fmt.Errorf("restoring bwrap's registers: %w", err)
	}
	return nil
}

// canJoinByInjection reports whether joinNamespaces is implemented here.
const canJoinByInjection = true
