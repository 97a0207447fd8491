package seccomp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// vm runs the bytes BPF returned the way the kernel would, on a
// seccomp_data built from a call.
type vm struct {
	t  *testing.T
	vm *bpf.VM
}

func newVM(t *testing.T, prog []byte) vm {
	t.Helper()
	if len(prog)%8 != 0 || len(prog) == 0 {
		t.Fatalf("program is %d bytes, want a non-zero multiple of 8", len(prog))
	}
	raw := make([]bpf.RawInstruction, len(prog)/8)
	for i := range raw {
		b := prog[8*i:]
		raw[i] = bpf.RawInstruction{
			Op: binary.NativeEndian.Uint16(b[0:2]),
			Jt: b[2],
			Jf: b[3],
			K:  binary.NativeEndian.Uint32(b[4:8]),
		}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("program has instructions the BPF disassembler does not know")
	}
	for i, ins := range insts {
		switch ins := ins.(type) {
		case bpf.LoadAbsolute, bpf.JumpIf, bpf.Jump, bpf.RetConstant:
		case bpf.ALUOpConstant:
			if ins.Op != bpf.ALUOpAnd {
				t.Fatalf("instruction %d (%v) is not one the filter should use", i, ins)
			}
		default:
			t.Fatalf("instruction %d (%v) is not one the filter should use", i, ins)
		}
	}
	v, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatalf("invalid program: %v", err)
	}
	return vm{t: t, vm: v}
}

// run evaluates the filter for a call. x/net/bpf loads words big-endian
// while the kernel loads them in native order from struct seccomp_data, so
// each 32-bit word is laid out big-endian with the value the kernel would
// read there.
func (v vm) run(auditArch uint32, nr uint32, args ...uint64) uint32 {
	v.t.Helper()
	var in [64]byte
	binary.BigEndian.PutUint32(in[offNr:], nr)
	binary.BigEndian.PutUint32(in[offArch:], auditArch)
	for i, a := range args {
		// Little-endian machine: low word first.
		binary.BigEndian.PutUint32(in[offArgs+8*i:], uint32(a))
		binary.BigEndian.PutUint32(in[offArgs+8*i+4:], uint32(a>>32))
	}
	ret, err := v.vm.Run(in[:])
	if err != nil {
		v.t.Fatalf("running filter: %v", err)
	}
	return uint32(ret)
}

func retName(ret uint32) string {
	switch {
	case ret == retAllow:
		return "allow"
	case ret == retKillProcess:
		return "kill-process"
	case ret == retUserNotif:
		return "user-notif"
	case ret == 0: // SECCOMP_RET_KILL_THREAD
		return "kill-thread"
	case ret&0xffff0000 == retErrno:
		return errnoName(syscall.Errno(ret & 0xffff))
	}
	return fmt.Sprintf("%#x", ret)
}

func nativePlatform(t *testing.T) platform {
	t.Helper()
	p, err := platformFor(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	return p
}

// TestBPFDecisions evaluates the compiled program for calls that exercise
// every kind of rule, for each option.
func TestBPFDecisions(t *testing.T) {
	p := nativePlatform(t)
	native := uint32(p.info.ID)
	nr := func(name string) uint32 {
		n, ok := p.info.SyscallNames[name]
		if !ok {
			t.Fatalf("no syscall %s on %s", name, p.info.Name)
		}
		return uint32(n)
	}
	const (
		cloneNewuser = 0x10000000
		cloneNewns   = 0x00020000
		cloneNewtime = 0x80
		cloneFiles   = 0x400
		pthreadFlags = 0x3d0f00 // glibc's CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID
		sigchld      = 17
		sockNonblock = 0x800
		sockCloexec  = 0x80000
	)
	type call struct {
		name  string
		arch  uint32
		nr    uint32
		args  []uint64
		deny  string // want with DenyUnixSockets
		allow string // want without
	}
	same := func(name string, nrv uint32, want string, args ...uint64) call {
		return call{name: name, arch: native, nr: nrv, args: args, deny: want, allow: want}
	}
	calls := []call{
		{name: "socket(AF_UNIX)", arch: native, nr: nr("socket"), args: []uint64{1, 1, 0}, deny: "EPERM", allow: "allow"},
		{name: "socket(AF_UNIX) with high bits", arch: native, nr: nr("socket"), args: []uint64{1 | 0xdead<<32, 1, 0}, deny: "EPERM", allow: "allow"},
		{name: "socket(AF_VSOCK)", arch: native, nr: nr("socket"), args: []uint64{40, 1, 0}, deny: "EPERM", allow: "allow"},
		same("socket(AF_INET)", nr("socket"), "allow", 2, 1, 0),
		same("socket(AF_INET6)", nr("socket"), "allow", 10, 1, 0),
		same("socket(0x100000001)'s low half only matters: AF_INET high", nr("socket"), "allow", 2|1<<32, 1, 0),
		same("socketpair(AF_UNIX, SOCK_STREAM)", nr("socketpair"), "allow", 1, 1, 0),
		same("socketpair(AF_UNIX, SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC)", nr("socketpair"), "allow", 1, 1|sockNonblock|sockCloexec, 0),
		same("socketpair(AF_UNIX, SOCK_SEQPACKET)", nr("socketpair"), "allow", 1, 5, 0),
		same("socketpair(AF_UNIX, SOCK_SEQPACKET|SOCK_CLOEXEC)", nr("socketpair"), "allow", 1, 5|sockCloexec, 0),
		same("socketpair(AF_UNIX, type 0)", nr("socketpair"), "allow", 1, 0, 0),
		same("socketpair(AF_UNIX, SOCK_PACKET)", nr("socketpair"), "allow", 1, 10, 0),
		{name: "socketpair(AF_UNIX, SOCK_DGRAM)", arch: native, nr: nr("socketpair"), args: []uint64{1, 2, 0}, deny: "EPERM", allow: "allow"},
		{name: "socketpair(AF_UNIX, SOCK_DGRAM|SOCK_CLOEXEC)", arch: native, nr: nr("socketpair"), args: []uint64{1, 2 | sockCloexec, 0}, deny: "EPERM", allow: "allow"},
		{name: "socketpair(AF_UNIX, SOCK_DGRAM|SOCK_NONBLOCK|SOCK_CLOEXEC)", arch: native, nr: nr("socketpair"), args: []uint64{1, 2 | sockNonblock | sockCloexec, 0}, deny: "EPERM", allow: "allow"},
		{name: "socketpair(AF_UNIX, SOCK_RAW) (a datagram pair)", arch: native, nr: nr("socketpair"), args: []uint64{1, 3, 0}, deny: "EPERM", allow: "allow"},
		{name: "socketpair(AF_UNIX, SOCK_DGRAM) with high bits", arch: native, nr: nr("socketpair"), args: []uint64{1 | 0xdead<<32, 2 | 0xbeef<<32, 0}, deny: "EPERM", allow: "allow"},
		same("socketpair(AF_INET, SOCK_DGRAM)", nr("socketpair"), "allow", 2, 2, 0),
		same("socketpair(AF_NETLINK, AF_UNIX in the high half, SOCK_DGRAM)", nr("socketpair"), "allow", 16|1<<32, 2, 0),
		same("socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE)", nr("socket"), "allow", 16, 3, 0),
		same("socket(AF_NETLINK, SOCK_DGRAM|SOCK_CLOEXEC, NETLINK_ROUTE)", nr("socket"), "allow", 16, 2|sockCloexec, 0),
		same("socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE with high bits)", nr("socket"), "allow", 16|0xdead<<32, 3, 0xffffffff<<32),
		{name: "socket(AF_NETLINK, SOCK_DGRAM, NETLINK_KOBJECT_UEVENT)", arch: native, nr: nr("socket"), args: []uint64{16, 2, 15}, deny: "EPROTONOSUPPORT", allow: "allow"},
		{name: "socket(AF_NETLINK, SOCK_RAW, NETLINK_GENERIC)", arch: native, nr: nr("socket"), args: []uint64{16, 3, 16}, deny: "EPROTONOSUPPORT", allow: "allow"},
		{name: "socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT)", arch: native, nr: nr("socket"), args: []uint64{16, 3, 9}, deny: "EPROTONOSUPPORT", allow: "allow"},
		{name: "socket(AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG)", arch: native, nr: nr("socket"), args: []uint64{16, 3, 4}, deny: "EPROTONOSUPPORT", allow: "allow"},
		{name: "socket(AF_NETLINK, SOCK_RAW, protocol -1)", arch: native, nr: nr("socket"), args: []uint64{16, 3, 0xffffffff}, deny: "EPROTONOSUPPORT", allow: "allow"},
		{name: "socket(AF_NETLINK, SOCK_RAW, protocol 1<<31)", arch: native, nr: nr("socket"), args: []uint64{16, 3, 1 << 31}, deny: "EPROTONOSUPPORT", allow: "allow"},
		{name: "socket(AF_NETLINK, SOCK_DGRAM, NETLINK_GENERIC) with high bits", arch: native, nr: nr("socket"), args: []uint64{16 | 1<<32, 2 | 1<<40, 16 | 0xffff<<32}, deny: "EPROTONOSUPPORT", allow: "allow"},
		same("socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP)", nr("socket"), "allow", 2, 2, 17),
		same("socket(AF_INET6, SOCK_RAW, 16)", nr("socket"), "allow", 10, 3, 16),
		same("connect", nr("connect"), "allow", 3, 0, 0),
		same("ioctl(TIOCSTI)", nr("ioctl"), "EPERM", 0, tiocsti, 0),
		same("ioctl(TIOCSTI) with high bits", nr("ioctl"), "EPERM", 0, tiocsti|0xffffffff<<32, 0),
		same("ioctl(TIOCLINUX)", nr("ioctl"), "EPERM", 0, tioclinux, 0),
		same("ioctl(TCGETS)", nr("ioctl"), "allow", 0, 0x5401, 0),
		same("ioctl(fd=TIOCSTI, TCGETS)", nr("ioctl"), "allow", tiocsti, 0x5401, 0),
		same("clone(SIGCHLD) (fork)", nr("clone"), "allow", sigchld),
		same("clone(pthread flags)", nr("clone"), "allow", pthreadFlags),
		same("clone(CLONE_NEWUSER)", nr("clone"), "EPERM", cloneNewuser|sigchld),
		same("clone(CLONE_NEWNS)", nr("clone"), "EPERM", cloneNewns|sigchld),
		same("clone(exit signal 0x80)", nr("clone"), "allow", cloneNewtime),
		same("unshare(CLONE_NEWUSER)", nr("unshare"), "EPERM", cloneNewuser),
		same("unshare(CLONE_NEWTIME)", nr("unshare"), "EPERM", cloneNewtime),
		same("unshare(CLONE_FILES)", nr("unshare"), "allow", cloneFiles),
		same("clone3", nr("clone3"), "ENOSYS", 0, 88),
		same("setns", nr("setns"), "EPERM", 3, 0),
		same("io_uring_setup", nr("io_uring_setup"), "EPERM", 8, 0),
		same("ptrace", nr("ptrace"), "EPERM", 0),
		same("mount", nr("mount"), "EPERM"),
		same("read", nr("read"), "allow", 0, 0, 0),
		same("execve", nr("execve"), "allow"),
		same("seccomp", nr("seccomp"), "allow"),
		same("personality", nr("personality"), "allow", 0xffffffff),
		{name: "foreign arch (i386 getpid)", arch: 0x40000003, nr: 20, deny: "kill-process", allow: "kill-process"},
		{name: "foreign arch (i386 socketcall)", arch: 0x40000003, nr: 102, deny: "kill-process", allow: "kill-process"},
		{name: "foreign arch (arm)", arch: 0x40000028, nr: 20, deny: "kill-process", allow: "kill-process"},
		{name: "arch 0", arch: 0, nr: 0, deny: "kill-process", allow: "kill-process"},
	}
	if p.x32 {
		calls = append(calls,
			call{name: "x32 socket(AF_UNIX)", arch: native, nr: x32SyscallBit | 41, args: []uint64{1}, deny: "ENOSYS", allow: "ENOSYS"},
			call{name: "x32 read", arch: native, nr: x32SyscallBit, deny: "ENOSYS", allow: "ENOSYS"},
		)
	}
	for _, tc := range bothOptions {
		t.Run(tc.name, func(t *testing.T) {
			prog, err := BPF(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			v := newVM(t, prog)
			for _, c := range calls {
				want := c.allow
				if tc.opts.DenyUnixSockets {
					want = c.deny
				}
				if got := retName(v.run(c.arch, c.nr, c.args...)); got != want {
					t.Errorf("%s: %s, want %s", c.name, got, want)
				}
			}
		})
	}
}

// TestBPFMediatedDecisions: with MediatedUnixSockets, stream and seqpacket
// AF_UNIX sockets may be made, datagram ones may not, and no filter of the
// command's own may take a listener; the rest is DenyUnixSockets's filter.
func TestBPFMediatedDecisions(t *testing.T) {
	p := nativePlatform(t)
	native := uint32(p.info.ID)
	nr := func(name string) uint32 { return uint32(p.info.SyscallNames[name]) }
	const sockNonblock, sockCloexec = 0x800, 0x80000
	prog, err := BPF(Options{DenyUnixSockets: true, MediatedUnixSockets: true})
	if err != nil {
		t.Fatal(err)
	}
	v := newVM(t, prog)
	for _, c := range []struct {
		name string
		nr   uint32
		args []uint64
		want string
	}{
		{"socket(AF_UNIX, SOCK_STREAM)", nr("socket"), []uint64{1, 1, 0}, "allow"},
		{"socket(AF_UNIX, SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC)", nr("socket"), []uint64{1, 1 | sockNonblock | sockCloexec, 0}, "allow"},
		{"socket(AF_UNIX, SOCK_SEQPACKET)", nr("socket"), []uint64{1, 5, 0}, "allow"},
		{"socket(AF_UNIX, SOCK_DGRAM)", nr("socket"), []uint64{1, 2, 0}, "EPERM"},
		{"socket(AF_UNIX, SOCK_DGRAM|SOCK_CLOEXEC)", nr("socket"), []uint64{1, 2 | sockCloexec, 0}, "EPERM"},
		{"socket(AF_UNIX, SOCK_RAW)", nr("socket"), []uint64{1, 3, 0}, "EPERM"},
		{"socket(AF_UNIX, SOCK_DGRAM) with high bits", nr("socket"), []uint64{1 | 0xdead<<32, 2 | 0xbeef<<32, 0}, "EPERM"},
		{"socket(AF_INET, SOCK_DGRAM)", nr("socket"), []uint64{2, 2, 0}, "allow"},
		{"socket(AF_VSOCK)", nr("socket"), []uint64{40, 1, 0}, "EPERM"},
		{"socket(AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG)", nr("socket"), []uint64{16, 3, 4}, "EPROTONOSUPPORT"},
		{"socketpair(AF_UNIX, SOCK_DGRAM)", nr("socketpair"), []uint64{1, 2, 0}, "EPERM"},
		{"socketpair(AF_UNIX, SOCK_STREAM)", nr("socketpair"), []uint64{1, 1, 0}, "allow"},
		{"seccomp(SET_MODE_FILTER, NEW_LISTENER)", nr("seccomp"), []uint64{1, 8, 0}, "EPERM"},
		{"seccomp(SET_MODE_FILTER, TSYNC|NEW_LISTENER)", nr("seccomp"), []uint64{1, 9, 0}, "EPERM"},
		{"seccomp(SET_MODE_FILTER, 0)", nr("seccomp"), []uint64{1, 0, 0}, "allow"},
		{"seccomp(GET_NOTIF_SIZES)", nr("seccomp"), []uint64{3, 0, 0}, "allow"},
		{"connect", nr("connect"), []uint64{3, 0, 0}, "allow"},
	} {
		if got := retName(v.run(native, c.nr, c.args...)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// TestConnectNotifyBPF: the listener's filter notifies native connect(2)
// and nothing else.
func TestConnectNotifyBPF(t *testing.T) {
	p := nativePlatform(t)
	native := uint32(p.info.ID)
	prog, err := ConnectNotifyBPF()
	if err != nil {
		t.Fatal(err)
	}
	v := newVM(t, prog)
	for nr, name := range p.info.SyscallNumbers {
		want := "allow"
		if name == "connect" {
			want = "user-notif"
		}
		if got := retName(v.run(native, uint32(nr), 1, 2, 3)); got != want {
			t.Errorf("%s (%d): %s, want %s", name, nr, got, want)
		}
	}
	connect := uint32(p.info.SyscallNames["connect"])
	for _, c := range []struct {
		name string
		arch uint32
		nr   uint32
	}{
		{"i386 connect number", 0x40000003, connect},
		{"i386 socketcall", 0x40000003, 102},
		{"x32 connect", native, x32SyscallBit | connect},
	} {
		if got := retName(v.run(c.arch, c.nr)); got != "allow" {
			t.Errorf("%s: %s, want allow (the main filter decides)", c.name, got)
		}
	}
	if _, err := connectNotifyProgram("riscv64"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("riscv64: %v, want ErrUnsupported", err)
	}
}

// TestBPFWholeTable checks every syscall of the native table with zero
// arguments: refused exactly when a rule names it without condition.
func TestBPFWholeTable(t *testing.T) {
	p := nativePlatform(t)
	for _, tc := range bothOptions {
		t.Run(tc.name, func(t *testing.T) {
			prog, err := BPF(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			v := newVM(t, prog)
			rules := Rules(tc.opts)
			eperm := unconditional(rules, runtime.GOARCH, syscall.EPERM)
			enosys := unconditional(rules, runtime.GOARCH, syscall.ENOSYS)
			for nr, name := range p.info.SyscallNumbers {
				want := "allow"
				switch {
				case slices.Contains(eperm, name):
					want = "EPERM"
				case slices.Contains(enosys, name):
					want = "ENOSYS"
				}
				if got := retName(v.run(uint32(p.info.ID), uint32(nr))); got != want {
					t.Errorf("%s (%d) with zero arguments: %s, want %s", name, nr, got, want)
				}
			}
		})
	}
}

// TestBPFOtherArches checks the architecture handling that cannot run here.
func TestBPFOtherArches(t *testing.T) {
	for _, goarch := range []string{"386", "arm", "riscv64", "s390x", "ppc64le", "mips64"} {
		if _, err := program(Options{}, goarch); !errors.Is(err, ErrUnsupported) {
			t.Errorf("program(%s) error = %v, want ErrUnsupported", goarch, err)
		}
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	if _, err := program(Options{}, other); !errors.Is(err, ErrUnsupported) {
		t.Errorf("cross-assembling for %s: error = %v, want ErrUnsupported (go-seccomp-bpf assembles only natively)", other, err)
	}
}

// TestBPFRejectsBadRules feeds argBlock and DockerProfile's translation
// malformed rules: they must fail, never compile into something weaker.
func TestBPFRejectsBadRules(t *testing.T) {
	p := platform{info: arch.X86_64}
	for _, tc := range []struct {
		name string
		rule Rule
	}{
		{"two syscalls", Rule{Syscalls: []string{"socket", "socketpair"}, Args: []Arg{{Op: ArgEqual32, Value: 1}}}},
		{"no syscall", Rule{Args: []Arg{{Op: ArgEqual32, Value: 1}}}},
		{"no condition", Rule{Syscalls: []string{"socket"}}},
		{"unknown syscall", Rule{Syscalls: []string{"sockett"}, Args: []Arg{{Op: ArgEqual32, Value: 1}}}},
		{"index 6", Rule{Syscalls: []string{"socket"}, Args: []Arg{{Index: 6, Op: ArgEqual32, Value: 1}}}},
		{"index -1", Rule{Syscalls: []string{"socket"}, Args: []Arg{{Index: -1, Op: ArgEqual32, Value: 1}}}},
		{"64-bit value", Rule{Syscalls: []string{"socket"}, Args: []Arg{{Op: ArgEqual32, Value: 1 << 32}}}},
		{"empty mask", Rule{Syscalls: []string{"clone"}, Args: []Arg{{Op: ArgAnyBit}}}},
		{"64-bit any-bit mask", Rule{Syscalls: []string{"clone"}, Args: []Arg{{Op: ArgAnyBit, Value: 1 << 32}}}},
		{"unknown op", Rule{Syscalls: []string{"clone"}, Args: []Arg{{Op: "like", Value: 1}}}},
		{"masked-equal without mask", Rule{Syscalls: []string{"socketpair"}, Args: []Arg{{Index: 1, Op: ArgMaskedEqual, Value: 2}}}},
		{"masked-equal 64-bit mask", Rule{Syscalls: []string{"socketpair"}, Args: []Arg{{Index: 1, Op: ArgMaskedEqual, Mask: 0xf << 32, Value: 2 << 32}}}},
		{"masked-equal value outside mask", Rule{Syscalls: []string{"socketpair"}, Args: []Arg{{Index: 1, Op: ArgMaskedEqual, Mask: 0xe, Value: 3}}}},
		{"mask on equal32", Rule{Syscalls: []string{"socket"}, Args: []Arg{{Op: ArgEqual32, Value: 1, Mask: 0xff}}}},
		{"two conditions on one argument", Rule{Syscalls: []string{"socket"}, Args: []Arg{{Op: ArgEqual32, Value: 1}, {Op: ArgAnyBit, Value: 1}}}},
		{"one good condition, one bad", Rule{Syscalls: []string{"socket"}, Args: []Arg{{Op: ArgEqual32, Value: 1}, {Index: 2, Op: ArgAnyBit}}}},
	} {
		if _, err := argBlock(p, tc.rule, retErrno|1); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
		if tc.rule.ABI == "" && len(tc.rule.Args) > 0 && len(tc.rule.Syscalls) > 0 && tc.rule.Syscalls[0] != "sockett" {
			if err := tc.rule.checkArgs(); err == nil {
				t.Errorf("%s: checkArgs, which DockerProfile relies on, finds nothing wrong", tc.name)
			}
		}
	}
}

// BPF keeps one program per Options value: every call returns the program
// assemble builds for that value (not another value's), and a caller that
// changes the bytes it got changes nothing for the next caller.
func TestBPFCachedPerOptions(t *testing.T) {
	all := []Options{{}, {DenyUnixSockets: true}, {DenyUnixSockets: true, MediatedUnixSockets: true}, {MediatedUnixSockets: true}}
	for round := 0; round < 2; round++ {
		for _, opts := range all {
			want, err := assemble(opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := BPF(opts)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("round %d: BPF(%+v) differs from a fresh assembly", round, opts)
			}
			for i := range got {
				got[i] = 0xff // a careless caller
			}
		}
	}
	a, _ := BPF(Options{})
	b, _ := BPF(Options{DenyUnixSockets: true})
	if bytes.Equal(a, b) {
		t.Fatal("BPF gave the same program for different options")
	}
}
