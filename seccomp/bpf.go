package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"syscall"

	libseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// Return values of a seccomp filter (linux/seccomp.h).
const (
	retKillProcess = 0x80000000
	retErrno       = 0x00050000
	retAllow       = 0x7fff0000
)

// Offsets into struct seccomp_data (linux/seccomp.h): int nr; __u32 arch;
// __u64 instruction_pointer; __u64 args[6].
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

const x32SyscallBit = 0x40000000 // __X32_SYSCALL_BIT

// platform is what the filter needs to know about one architecture.
type platform struct {
	goarch string
	info   *arch.Info // syscall table and AUDIT_ARCH value, from go-seccomp-bpf
	x32    bool       // the x32 ABI shares this AUDIT_ARCH value
	docker string     // libseccomp's name, for Docker profiles
}

// platformNames are the architectures the filter supports (GOARCH
// names). Both are little endian, which argLo relies on.
var platformNames = [...]string{"amd64", "arm64"}

// platformFor returns the platform of goarch, or an error wrapping
// ErrUnsupported. A switch, not a package-level map: nothing is built when
// the package is initialised.
func platformFor(goarch string) (platform, error) {
	switch goarch {
	case "amd64":
		return platform{goarch: "amd64", info: arch.X86_64, x32: true, docker: "SCMP_ARCH_X86_64"}, nil
	case "arm64":
		return platform{goarch: "arm64", info: arch.AARCH64, docker: "SCMP_ARCH_AARCH64"}, nil
	}
	return platform{}, fmt.Errorf("%w: no syscall filter for GOARCH %q (corral supports amd64 and arm64)", ErrUnsupported, goarch)
}

// argLo is the offset of the low 32 bits of args[i] on a little-endian
// machine.
func argLo(i int) uint32 { return uint32(offArgs + 8*i) }

// BPF compiles corral's filter (the rows of [Rules]) for the running
// architecture and returns it as the raw contents of a struct sock_fprog's
// filter array: len(result)/8 struct sock_filter records (u16 code, u8 jt,
// u8 jf, u32 k) in native byte order. That is the format `bwrap --seccomp FD`
// and `--add-seccomp-fd FD` read from their descriptor to end of file
// (bwrap(1); bubblewrap checks the length is a multiple of 8 and loads it
// with prctl(PR_SET_SECCOMP)), and what seccomp(2) SECCOMP_SET_MODE_FILTER
// takes.
//
// The program first checks seccomp_data.arch and kills the process on a
// foreign ABI, refuses x32 calls with ENOSYS, then checks the argument rules
// (a rule's conditions ANDed, each on the low 32 bits of the argument: the
// kernel reads these arguments as ints), and finally the
// syscall-number rules, assembled by github.com/elastic/go-seccomp-bpf.
// Anything else is allowed.
//
// The error wraps [ErrUnsupported] on an architecture other than amd64 and
// arm64, and reports any syscall name the kernel table lacks; the caller must
// then not run the command.
//
// The program is a pure function of opts and the architecture, so it is
// assembled once per Options value and process; each call returns a copy
// the caller may keep or change.
func BPF(opts Options) ([]byte, error) {
	if p, ok := compiled.Load(opts); ok {
		return slices.Clone(p.([]byte)), nil
	}
	out, err := assemble(opts)
	if err != nil {
		return nil, err // not kept: an error is rare and cheap to repeat
	}
	compiled.Store(opts, out)
	return slices.Clone(out), nil
}

// compiled maps an Options value to its assembled program ([]byte, never
// handed out: BPF returns copies). Options has a handful of values, so it
// never grows beyond them.
var compiled sync.Map

// assemble builds BPF's program for opts.
func assemble(opts Options) ([]byte, error) {
	insts, err := program(opts, runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("assembling seccomp filter: %w", err)
	}
	if len(raw) > 4096 { // BPF_MAXINSNS
		return nil, fmt.Errorf("seccomp filter has %d instructions, the kernel takes at most 4096", len(raw))
	}
	out := make([]byte, 0, 8*len(raw))
	for _, ins := range raw {
		out = binary.NativeEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out, nil
}

// program builds the instructions for goarch, which must be the running
// architecture: go-seccomp-bpf assembles only for runtime.GOARCH.
func program(opts Options, goarch string) ([]bpf.Instruction, error) {
	p, err := platformFor(goarch)
	if err != nil {
		return nil, err
	}
	if goarch != runtime.GOARCH {
		return nil, fmt.Errorf("%w: cannot assemble a %s filter on %s", ErrUnsupported, goarch, runtime.GOARCH)
	}
	rules := Rules(opts)

	// Prologue, written by hand: go-seccomp-bpf sends a foreign arch to the
	// default action, which for a default-allow policy would let 32-bit
	// calls through unfiltered, and it compares arguments on all 64 bits.
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(p.info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: retKillProcess},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if p.x32 {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
			bpf.RetConstant{Val: retErrno | uint32(syscall.ENOSYS)},
		)
	}

	// Argument rules, one block per rule; each block starts with A = nr and
	// leaves A = nr when the call does not match.
	var policy libseccomp.Policy
	policy.DefaultAction = libseccomp.ActionAllow
	groups := map[syscall.Errno]*libseccomp.SyscallGroup{}
	var order []syscall.Errno
	for _, r := range rules {
		if r.ABI != "" || !r.appliesTo(goarch) {
			continue
		}
		if r.Action != ActionErrno || r.Errno == 0 || r.Errno > 0xffff {
			return nil, fmt.Errorf("seccomp rule %v: unsupported action", r)
		}
		ret := retErrno | uint32(r.Errno)
		if len(r.Args) > 0 {
			block, err := argBlock(p, r, ret)
			if err != nil {
				return nil, err
			}
			prog = append(prog, block...)
			continue
		}
		g := groups[r.Errno]
		if g == nil {
			g = &libseccomp.SyscallGroup{Action: libseccomp.Action(ret)}
			groups[r.Errno] = g
			order = append(order, r.Errno)
		}
		g.Names = append(g.Names, r.Syscalls...)
	}
	for _, e := range order {
		policy.Syscalls = append(policy.Syscalls, *groups[e])
	}
	tail, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("assembling seccomp syscall rules for %s: %w", goarch, err)
	}
	return append(prog, tail...), nil
}

// argBlock compiles one argument rule:
//
//	        jeq #nr, 0, out        ; not this call: on to the next rule (A still nr)
//	        ld  [arg]              ; for each condition: the argument's low 32 bits,
//	        and #mask              ;   masked (ArgMaskedEqual only),
//	        jeq/jset #value, 0, restore  ; and tested
//	        ret #action            ; every condition held
//	restore: ld [nr]               ; A = nr again for the next rule
//	out:
func argBlock(p platform, r Rule, ret uint32) ([]bpf.Instruction, error) {
	if err := r.checkArgs(); err != nil {
		return nil, err
	}
	if len(r.Args) == 0 {
		return nil, fmt.Errorf("seccomp rule %v: not an argument rule", r)
	}
	name := r.Syscalls[0]
	nr, ok := p.info.SyscallNames[name]
	if !ok {
		return nil, fmt.Errorf("seccomp rule %v: no syscall %q on %s", r, name, p.info.Name)
	}
	block := []bpf.Instruction{nil} // the syscall test, once the length is known
	var tests []int                 // positions of the condition jumps
	for _, a := range r.Args {
		block = append(block, bpf.LoadAbsolute{Off: argLo(a.Index), Size: 4})
		switch a.Op {
		case ArgEqual32:
			block = append(block, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.Value)})
		case ArgAnyBit:
			// The flags compared here all live in the low half; a set bit
			// in the high half is an invalid flag the kernel refuses
			// anyway, or ignored in an int.
			block = append(block, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: uint32(a.Value)})
		case ArgMaskedEqual:
			block = append(block,
				bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: uint32(a.Mask)},
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.Value)})
		}
		tests = append(tests, len(block)-1)
	}
	block = append(block,
		bpf.RetConstant{Val: ret},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	)
	restore := len(block) - 1
	for _, i := range tests {
		t := block[i].(bpf.JumpIf)
		t.SkipFalse = uint8(restore - i - 1)
		block[i] = t
	}
	block[0] = bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: uint8(len(block) - 1)}
	return block, nil
}
