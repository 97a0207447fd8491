package seccomp

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
)

// Options selects the optional rules of corral's filter. The zero value is
// the filter every profile gets.
type Options struct {
	// DenyUnixSockets confines a sandboxed command to the sockets of its
	// own network namespace. With it:
	//
	//   - socket(2) with domain AF_UNIX fails with EPERM, so the command
	//     cannot open a new Unix socket and reach a host socket (the Docker
	//     daemon, an ssh or gpg agent, D-Bus, or an abstract-namespace
	//     socket when the network is shared);
	//   - socketpair(2) with domain AF_UNIX and a datagram type (SOCK_DGRAM,
	//     or SOCK_RAW, which the kernel turns into SOCK_DGRAM) fails with
	//     EPERM: a datagram socket can sendto(2) any address, such as
	//     /dev/log or /run/systemd/journal/socket. Stream and seqpacket
	//     pairs still work, since they cannot address another socket;
	//   - socket(2) with domain AF_VSOCK fails with EPERM (vsock(7): the
	//     hypervisor's and the host's vsock services, which no network
	//     namespace separates);
	//   - socket(2) with domain AF_NETLINK fails with EPROTONOSUPPORT for
	//     every protocol but NETLINK_ROUTE (0), which glibc's getaddrinfo
	//     and `ip` need and which sees only the sandbox's own network
	//     namespace.
	//
	// Descriptors the command inherits are untouched. Every profile but
	// network sets it (sandbox.Profile.DeniesUnixSockets).
	DenyUnixSockets bool
	// MediatedUnixSockets, together with DenyUnixSockets, is for a sandbox
	// whose connect(2) calls a supervisor outside it answers (a filter
	// from [ConnectNotifyBPF] installed below this one, whose listener the
	// supervisor holds: corral's bwrap backend). It replaces the
	// socket(AF_UNIX) row with two rows:
	//
	//   - socket(2) with domain AF_UNIX and a datagram type (type & 0xe ==
	//     SOCK_DGRAM, as for socketpair) still fails with EPERM: a datagram
	//     socket names its peer in every sendto(2)/sendmsg(2), in memory a
	//     supervisor could only mediate by sending every message itself.
	//     Stream and seqpacket sockets reach another socket only through
	//     connect(2) (unix_stream_sendmsg refuses an address,
	//     unix_seqpacket_sendmsg ignores it: net/unix/af_unix.c), which the
	//     supervisor mediates, so they are allowed;
	//   - seccomp(2) SECCOMP_SET_MODE_FILTER with
	//     SECCOMP_FILTER_FLAG_NEW_LISTENER fails with EPERM: of several
	//     filters answering SECCOMP_RET_USER_NOTIF the most recent one's
	//     listener gets the call (kernel/seccomp.c, seccomp_run_filters), and
	//     a command's own supervisor could let connect(2) through with
	//     SECCOMP_USER_NOTIF_FLAG_CONTINUE.
	//
	// Without DenyUnixSockets it changes nothing. Never set it without the
	// supervisor: AF_UNIX stream sockets would then reach every host
	// socket. [DockerProfile] refuses it.
	MediatedUnixSockets bool
}

// Action is what the filter does with a call a [Rule] matches.
type Action string

const (
	// ActionErrno makes the call fail with the rule's Errno without
	// running it (SECCOMP_RET_ERRNO, seccomp(2)): programs see an ordinary
	// error and can carry on.
	ActionErrno Action = "errno"
	// ActionKillProcess kills the whole process with SIGSYS
	// (SECCOMP_RET_KILL_PROCESS, Linux 4.14+). Only calls made through a
	// foreign ABI get it.
	ActionKillProcess Action = "kill-process"
)

// ABI names the calling conventions that [Rule.ABI] matches as a whole.
const (
	// ABIForeign matches every call whose seccomp_data.arch is not the
	// native one: on x86_64 the i386 ABI (int 0x80, sysenter, a 32-bit
	// binary), on arm64 the 32-bit arm compat ABI. Their syscall numbers
	// differ from the native table, and i386 multiplexes socket(2) through
	// socketcall(2), whose arguments a filter cannot read, so the filter
	// kills rather than trying to translate.
	ABIForeign = "foreign"
	// ABIX32 matches x86_64 calls with __X32_SYSCALL_BIT (0x40000000) set
	// in the number: the x32 ABI shares AUDIT_ARCH_X86_64 with the native
	// one but numbers its calls differently.
	ABIX32 = "x32"
)

// ArgOp is how an [Arg] compares a syscall argument. Every op looks at the
// low 32 bits only: the arguments compared are ints to the kernel (socket's
// domain, type and protocol, ioctl's request), whose upper half it ignores,
// or flags (clone's, unshare's) whose upper half holds no valid flag.
type ArgOp string

const (
	// ArgEqual32 matches when the low 32 bits of the argument equal
	// Value. It is used for arguments the kernel declares as int or
	// unsigned int (socket's domain, ioctl's request): the kernel ignores
	// the upper half of the register, so a filter comparing all 64 bits
	// could be bypassed by setting them (CVE-2019-10063 in flatpak's
	// TIOCSTI filter).
	ArgEqual32 ArgOp = "equal32"
	// ArgAnyBit matches when argument & Value is not zero (any of the
	// flag bits in Value is set). Value is a non-zero mask of at most
	// 32 bits; with 0xffffffff it matches an int argument that is not 0.
	ArgAnyBit ArgOp = "any-bit"
	// ArgMaskedEqual matches when argument & Mask equals Value, e.g.
	// socketpair's type with the SOCK_NONBLOCK and SOCK_CLOEXEC flags
	// masked off. Mask is non-zero and at most 32 bits; Value has no bit
	// outside Mask.
	ArgMaskedEqual ArgOp = "masked-equal"
)

// Arg is one condition on a syscall argument; a [Rule] matches a call only
// when all of its Args do.
type Arg struct {
	// Index is the argument's position, 0 to 5 (seccomp_data.args[Index]).
	Index int
	// Op is the comparison.
	Op ArgOp
	// Value is compared with the argument according to Op.
	Value uint64
	// Mask is what ArgMaskedEqual ANDs the argument with before comparing
	// it with Value; the other ops ignore it and it must then be 0.
	Mask uint64
	// Text describes the condition for people, e.g. "domain == AF_UNIX".
	Text string
}

// Rule is one row of corral's syscall filter: the calls it matches, what the
// filter does with them, and why. Calls no rule matches are allowed.
type Rule struct {
	// Syscalls are the matched calls, named as in the kernel's syscall
	// tables (syscalls(2)). Empty when ABI is set.
	Syscalls []string
	// ABI, when set (ABIForeign, ABIX32), makes the rule match every call
	// made through that ABI, whatever its number.
	ABI string
	// Args, when not empty, restricts the rule to calls whose arguments
	// match every condition (a logical AND, at most one condition per
	// argument index). A rule with Args names exactly one syscall.
	Args []Arg
	// Action is what happens to a matching call.
	Action Action
	// Errno is the error a matching call returns when Action is
	// ActionErrno: EPERM; ENOSYS where a program should fall back (clone3,
	// x32); EPROTONOSUPPORT for netlink protocols, which programs take for
	// a kernel built without them.
	Errno syscall.Errno
	// Arches lists the GOARCH values the rule exists on (some calls exist
	// only on x86_64); nil means every supported architecture.
	Arches []string
	// Reason says why the call is refused.
	Reason string
}

// String renders the rule on one line, e.g.
// "socket [arg0: domain == AF_UNIX] -> errno EPERM", with the conditions of
// a several-argument rule joined by " && ".
func (r Rule) String() string {
	var b strings.Builder
	if r.ABI != "" {
		fmt.Fprintf(&b, "every %s-ABI call", r.ABI)
	} else {
		b.WriteString(strings.Join(r.Syscalls, ", "))
	}
	if len(r.Args) > 0 {
		conds := make([]string, len(r.Args))
		for i, a := range r.Args {
			conds[i] = fmt.Sprintf("arg%d: %s", a.Index, a.Text)
		}
		fmt.Fprintf(&b, " [%s]", strings.Join(conds, " && "))
	}
	b.WriteString(" -> ")
	b.WriteString(string(r.Action))
	if r.Action == ActionErrno {
		b.WriteString(" " + errnoName(r.Errno))
	}
	if len(r.Arches) > 0 {
		fmt.Fprintf(&b, " (%s only)", strings.Join(r.Arches, ", "))
	}
	return b.String()
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EPERM:
		return "EPERM"
	case syscall.ENOSYS:
		return "ENOSYS"
	case syscall.EPROTONOSUPPORT:
		return "EPROTONOSUPPORT"
	}
	return fmt.Sprintf("errno %d", int(e))
}

// checkArgs reports a malformed argument rule, which [BPF] and
// [DockerProfile] refuse rather than compile into something weaker: it must
// name one syscall, put at most one condition on each argument index 0-5,
// and give each op values it can compare on 32 bits (see [ArgOp]).
func (r Rule) checkArgs() error {
	if len(r.Args) == 0 {
		return nil
	}
	if len(r.Syscalls) != 1 {
		return fmt.Errorf("seccomp rule %v: an argument rule names exactly one syscall", r)
	}
	var seen [6]bool
	for _, a := range r.Args {
		if a.Index < 0 || a.Index > 5 {
			return fmt.Errorf("seccomp rule %v: argument index %d out of range 0-5", r, a.Index)
		}
		if seen[a.Index] {
			return fmt.Errorf("seccomp rule %v: two conditions on argument %d", r, a.Index)
		}
		seen[a.Index] = true
		if a.Mask != 0 && a.Op != ArgMaskedEqual {
			return fmt.Errorf("seccomp rule %v: a mask only goes with %s", r, ArgMaskedEqual)
		}
		switch a.Op {
		case ArgEqual32:
			if a.Value > 0xffffffff {
				return fmt.Errorf("seccomp rule %v: value %#x does not fit 32 bits", r, a.Value)
			}
		case ArgAnyBit:
			if a.Value == 0 || a.Value > 0xffffffff {
				return fmt.Errorf("seccomp rule %v: mask %#x must be non-zero and fit 32 bits", r, a.Value)
			}
		case ArgMaskedEqual:
			if a.Mask == 0 || a.Mask > 0xffffffff || a.Value&^a.Mask != 0 {
				return fmt.Errorf("seccomp rule %v: mask %#x must be non-zero and fit 32 bits, and value %#x lie within it", r, a.Mask, a.Value)
			}
		default:
			return fmt.Errorf("seccomp rule %v: unknown argument operation %q", r, a.Op)
		}
	}
	return nil
}

// appliesTo reports whether the rule exists on goarch.
func (r Rule) appliesTo(goarch string) bool {
	return len(r.Arches) == 0 || slices.Contains(r.Arches, goarch)
}

// Terminal ioctls, from asm-generic/ioctls.h; x86_64 and arm64 share these
// values (other architectures, which corral does not support, differ).
const (
	tiocsti   = 0x5412 // TIOCSTI: push a byte into the terminal's input queue
	tioclinux = 0x541C // TIOCLINUX: virtual-console subcodes, selection paste among them
)

// Namespace flags. clone(2) takes the first seven; CLONE_NEWTIME (0x80)
// overlaps clone's exit-signal byte and is only valid for unshare(2) and
// clone3(2).
const (
	cloneNamespaceFlags   = 0x7E020000 // CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET (Docker's mask)
	unshareNamespaceFlags = cloneNamespaceFlags | 0x80
)

// Socket domains, types and protocols, from linux/socket.h, linux/net.h
// and linux/netlink.h (the same on x86_64 and arm64).
const (
	afUnix    = 1  // AF_UNIX (AF_LOCAL)
	afNetlink = 16 // AF_NETLINK
	afVsock   = 40 // AF_VSOCK: host and hypervisor services, in no network namespace

	sockDgram = 2 // SOCK_DGRAM; SOCK_RAW (3) differs only in bit 0
	// sockDgramOrRawMask is SOCK_TYPE_MASK (0xf) without bit 0: type &
	// 0xe == SOCK_DGRAM holds for SOCK_DGRAM and SOCK_RAW, with or without
	// SOCK_NONBLOCK and SOCK_CLOEXEC (which live above SOCK_TYPE_MASK).
	sockDgramOrRawMask = 0xe

	seccompSetModeFilter   = 1      // SECCOMP_SET_MODE_FILTER (linux/seccomp.h)
	seccompFlagNewListener = 1 << 3 // SECCOMP_FILTER_FLAG_NEW_LISTENER

	modeSetID       = 0o6000             // S_ISUID | S_ISGID
	oCreatOrTmpfile = 0o100 | 0o20000000 // O_CREAT | __O_TMPFILE (asm-generic/fcntl.h; arm64 and x86_64 alike)
)

// Rules returns corral's filter as a table, for documentation and `corral
// doctor`. The filter checks the ABI rows first; the other rows match
// disjoint calls, so their order decides nothing. Every row applies on the
// architectures its Arches field names (all when nil); [BPF] and
// [DockerProfile] are built from exactly these rows. The result is a fresh
// copy the caller may change.
func Rules(opts Options) []Rule {
	eperm := func(reason string, arches []string, names ...string) Rule {
		return Rule{Syscalls: names, Action: ActionErrno, Errno: syscall.EPERM, Arches: arches, Reason: reason}
	}
	amd64 := []string{"amd64"}
	var rules []Rule
	rules = append(rules,
		Rule{ABI: ABIForeign, Action: ActionKillProcess, Reason: "32-bit calls (i386 int 0x80 on x86_64, arm32 on arm64) use other syscall numbers and i386 socketcall(2) hides socket's arguments: rather than filter them, the process is killed, so a 32-bit program cannot bypass the rules below"},
		Rule{ABI: ABIX32, Action: ActionErrno, Errno: syscall.ENOSYS, Arches: amd64, Reason: "the x32 ABI numbers its calls differently; it is refused as a kernel without x32 support would refuse it"},
	)
	if opts.DenyUnixSockets && opts.MediatedUnixSockets {
		rules = append(rules, Rule{
			Syscalls: []string{"socket"},
			Args: []Arg{
				{Index: 0, Op: ArgEqual32, Value: afUnix, Text: "domain == AF_UNIX"},
				{Index: 1, Op: ArgMaskedEqual, Mask: sockDgramOrRawMask, Value: sockDgram, Text: "type & 0xe == SOCK_DGRAM (SOCK_DGRAM or SOCK_RAW, any flags)"},
			},
			Action: ActionErrno, Errno: syscall.EPERM,
			Reason: "a datagram Unix socket names its peer in every sendto(2)/sendmsg(2) (unix_dgram_sendmsg in net/unix/af_unix.c), in memory the connect(2) supervisor cannot mediate without sending every message itself; stream and seqpacket sockets reach another socket only through connect(2), which the supervisor allows only to sockets of the sandbox's own network namespace",
		}, Rule{
			Syscalls: []string{"seccomp"},
			Args: []Arg{
				{Index: 0, Op: ArgEqual32, Value: seccompSetModeFilter, Text: "op == SECCOMP_SET_MODE_FILTER"},
				{Index: 1, Op: ArgAnyBit, Value: seccompFlagNewListener, Text: "flags & SECCOMP_FILTER_FLAG_NEW_LISTENER != 0"},
			},
			Action: ActionErrno, Errno: syscall.EPERM,
			Reason: "a filter with a listener of the command's own would receive its connect(2) calls before corral's supervisor (the most recent filter's SECCOMP_RET_USER_NOTIF wins, kernel/seccomp.c) and could let them through with SECCOMP_USER_NOTIF_FLAG_CONTINUE",
		})
	} else if opts.DenyUnixSockets {
		rules = append(rules, Rule{
			Syscalls: []string{"socket"},
			Args:     []Arg{{Index: 0, Op: ArgEqual32, Value: afUnix, Text: "domain == AF_UNIX"}},
			Action:   ActionErrno, Errno: syscall.EPERM,
			Reason: "no new Unix socket, so no host socket (Docker daemon, ssh/gpg agents, D-Bus, abstract sockets on a shared network) can be reached; inherited descriptors and stream or seqpacket socketpair(2) still work (datagram pairs: see the socketpair row)",
		})
	}
	if opts.DenyUnixSockets {
		rules = append(rules, Rule{
			Syscalls: []string{"socketpair"},
			Args: []Arg{
				{Index: 0, Op: ArgEqual32, Value: afUnix, Text: "domain == AF_UNIX"},
				{Index: 1, Op: ArgMaskedEqual, Mask: sockDgramOrRawMask, Value: sockDgram, Text: "type & 0xe == SOCK_DGRAM (SOCK_DGRAM or SOCK_RAW, any flags)"},
			},
			Action: ActionErrno, Errno: syscall.EPERM,
			Reason: "a datagram Unix socket can sendto(2) any address (unix_dgram_sendmsg in net/unix/af_unix.c sends to msg_name, and unix_dgram_connect re-points it), so a socketpair datagram socket would reach host datagram sockets visible in the sandbox (/dev/log, /run/systemd/journal/socket) despite the socket(AF_UNIX) rule; SOCK_RAW is refused too because unix_create turns it into SOCK_DGRAM. Stream and seqpacket pairs stay allowed: they cannot address another socket (unix_stream_sendmsg fails with EISCONN, or EOPNOTSUPP when unconnected, if given an address; unix_seqpacket_sendmsg discards the address and sends to its peer; connect(2) on either fails, with EISCONN, or ECONNREFUSED when nothing listens at the address, and queues nothing)",
		}, Rule{
			Syscalls: []string{"socket"},
			Args:     []Arg{{Index: 0, Op: ArgEqual32, Value: afVsock, Text: "domain == AF_VSOCK"}},
			Action:   ActionErrno, Errno: syscall.EPERM,
			Reason: "vsock(7) reaches the hypervisor and the host's vsock services, and no network namespace separates it: a sandbox without the host's network must not have it either",
		}, Rule{
			Syscalls: []string{"socket"},
			Args: []Arg{
				{Index: 0, Op: ArgEqual32, Value: afNetlink, Text: "domain == AF_NETLINK"},
				// NETLINK_ROUTE is 0: any bit set in the int is another protocol.
				{Index: 2, Op: ArgAnyBit, Value: 0xffffffff, Text: "protocol != NETLINK_ROUTE"},
			},
			Action: ActionErrno, Errno: syscall.EPROTONOSUPPORT,
			Reason: "netlink families other than NETLINK_ROUTE are not all confined to the network namespace: NETLINK_KOBJECT_UEVENT carries the host's device events, NETLINK_AUDIT is the kernel's one audit interface, NETLINK_CONNECTOR reports other processes' events, and NETLINK_GENERIC serves taskstats among others. NETLINK_ROUTE, which glibc's getaddrinfo (AI_ADDRCONFIG), getifaddrs and `ip` use, sees only the sandbox's own network namespace and stays allowed. EPROTONOSUPPORT is the kernel's own answer for a netlink protocol it lacks (netlink_create in net/netlink/af_netlink.c), which programs handle: after EINVAL, EPROTONOSUPPORT or EAFNOSUPPORT from audit_open, shadow's useradd and passwd, libuser and sudo go on without audit, while any other errno (EPERM) makes shadow and libuser abort",
		})
	}
	rules = append(rules,
		Rule{
			Syscalls: []string{"ioctl"},
			Args:     []Arg{{Index: 1, Op: ArgEqual32, Value: tiocsti, Text: "request == TIOCSTI"}},
			Action:   ActionErrno, Errno: syscall.EPERM,
			Reason: "TIOCSTI pushes input into a terminal, so a command sharing corral's terminal could type commands into the shell outside the sandbox (CVE-2017-5226 in bubblewrap)",
		},
		Rule{
			Syscalls: []string{"ioctl"},
			Args:     []Arg{{Index: 1, Op: ArgEqual32, Value: tioclinux, Text: "request == TIOCLINUX"}},
			Action:   ActionErrno, Errno: syscall.EPERM,
			Reason: "TIOCLINUX can paste the virtual console's selection buffer as input: the same injection as TIOCSTI (CVE-2023-1523)",
		},
		Rule{
			Syscalls: []string{"clone"},
			Args:     []Arg{{Index: 0, Op: ArgAnyBit, Value: cloneNamespaceFlags, Text: "flags & CLONE_NEW* != 0"}},
			Action:   ActionErrno, Errno: syscall.EPERM,
			Reason: "no nested namespaces: a new user namespace would give the command capabilities over fresh mount and network namespaces (remounting its view, and the kernel code behind most unprivileged local root exploits); Docker's default profile refuses the same. Chromium needs --no-sandbox, as in Docker",
		},
		Rule{
			Syscalls: []string{"unshare"},
			Args:     []Arg{{Index: 0, Op: ArgAnyBit, Value: unshareNamespaceFlags, Text: "flags & CLONE_NEW* != 0"}},
			Action:   ActionErrno, Errno: syscall.EPERM,
			Reason: "as for clone: no nested namespaces (unshare of files, fs or sysvsem still works)",
		},
		Rule{
			Syscalls: []string{"clone3"},
			Action:   ActionErrno, Errno: syscall.ENOSYS,
			Reason: "clone3 passes its flags in memory, where a filter cannot check them for CLONE_NEW*; ENOSYS makes glibc fall back to clone(2), which is checked (Docker's default does the same)",
		},
		eperm("enters another namespace; nothing in a sandbox needs to", nil, "setns"),
	)
	// No set-user-ID or set-group-ID bit: a file the sandbox writes in a
	// root caller's project is root's on the host (idmapped, or uid 0 in a
	// container), so a setuid copy of a shell there would run as root for
	// any local user who can reach it. Every call that sets a mode is
	// covered: chmod(2) and its variants, and the creating calls whose mode
	// lands on the new file (open and openat with O_CREAT or O_TMPFILE,
	// creat, mkdir, mknod); openat2 carries its mode in memory and is
	// refused (see its row).
	suid := func(name string, arches []string, modeArg int, flagsArg int) Rule {
		args := []Arg{{Index: modeArg, Op: ArgAnyBit, Value: modeSetID, Text: "mode & (S_ISUID|S_ISGID) != 0"}}
		if flagsArg >= 0 {
			args = append([]Arg{{Index: flagsArg, Op: ArgAnyBit, Value: oCreatOrTmpfile, Text: "flags & (O_CREAT|O_TMPFILE) != 0"}}, args...)
		}
		return Rule{Syscalls: []string{name}, Args: args, Action: ActionErrno, Errno: syscall.EPERM, Arches: arches,
			Reason: "no set-user-ID or set-group-ID file or directory: what a sandbox writes in a root caller's project belongs to root on the host, and a setuid copy of a shell there would give root to any local user"}
	}
	rules = append(rules,
		suid("chmod", amd64, 1, -1), suid("fchmod", nil, 1, -1), suid("fchmodat", nil, 2, -1), suid("fchmodat2", nil, 2, -1),
		suid("creat", amd64, 1, -1), suid("open", amd64, 2, 1), suid("openat", nil, 3, 2),
		suid("mkdir", amd64, 1, -1), suid("mkdirat", nil, 2, -1), suid("mknod", amd64, 1, -1), suid("mknodat", nil, 2, -1),
		Rule{
			Syscalls: []string{"openat2"},
			Action:   ActionErrno, Errno: syscall.ENOSYS,
			Reason: "openat2 passes its mode in memory, where a filter cannot check it for S_ISUID; ENOSYS makes callers fall back to openat(2), which is checked",
		},
	)
	rules = append(rules,
		eperm("io_uring is a large kernel attack surface, and its operations (IORING_OP_SOCKET, _OPENAT, ...) are not syscalls, so they would bypass every other rule here", nil,
			"io_uring_setup", "io_uring_enter", "io_uring_register"),
		eperm("reads and writes other processes' memory: a sandboxed command could take over an unfiltered helper in the same sandbox (a proxy forwarder) and act outside the filter; strace and gdb therefore do not work inside", nil,
			"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd"),
		eperm("eBPF programs and perf events expose kernel attack surface and side channels", nil, "bpf", "perf_event_open"),
		eperm("kernel keyrings are not namespaced: the user's session keyring (Kerberos tickets, filesystem keys) would be reachable", nil,
			"add_key", "keyctl", "request_key"),
		eperm("loads or replaces kernel code (already refused without CAP_SYS_MODULE/CAP_SYS_BOOT)", nil,
			"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module"),
		eperm("obsolete module calls, refused by Docker's default profile", amd64, "create_module", "get_kernel_syms", "query_module"),
		eperm("the mount tree is final once bubblewrap (or Docker) has built it; the filter is installed after that", nil,
			"mount", "umount2", "pivot_root", "move_mount", "open_tree", "open_tree_attr",
			"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"),
		eperm("opens files by handle, bypassing the mount tree (the 'shocker' container escape)", nil,
			"open_by_handle_at", "name_to_handle_at"),
		eperm("a classic primitive for winning kernel race conditions in exploits", nil, "userfaultfd"),
		eperm("host-global state not namespaced: accounting, swap, reboot, kernel log, quotas, terminal hangup, clock; Docker's default profile refuses them", nil,
			"acct", "swapon", "swapoff", "reboot", "syslog", "quotactl", "quotactl_fd", "lookup_dcookie", "vhangup", "nfsservctl",
			"settimeofday", "clock_settime", "clock_adjtime"),
		eperm("x86 port I/O and obsolete calls, refused by Docker's default profile", amd64,
			"iopl", "ioperm", "uselib", "ustat", "sysfs", "_sysctl"),
	)
	return rules
}
