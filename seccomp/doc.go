// Package seccomp builds corral's system call filter, in pure Go with
// github.com/elastic/go-seccomp-bpf, and hands it to the sandboxes in the
// form each one takes:
//
//   - [BPF]: the raw struct sock_filter array, as `bwrap --seccomp FD` reads
//     it (bwrap(1));
//   - [File]: the same bytes in a sealed, close-on-exec memfd, ready for
//     exec.Cmd.ExtraFiles;
//   - [Install]: loaded into the calling process with seccomp(2) (TSYNC,
//     no_new_privs), for a helper that filters itself before it execs;
//   - [DockerProfile]: a Docker seccomp profile (JSON) with the same rules;
//   - [Rules]: the table itself, for documentation and `corral doctor`,
//     which also calls [Probe];
//   - [ConnectNotifyBPF]: a second, tiny filter that hands connect(2) to a
//     supervisor (SECCOMP_RET_USER_NOTIF), for Options.MediatedUnixSockets.
//
// # The filter
//
// Calls are allowed unless a rule refuses them; refused calls fail with an
// errno (EPERM; ENOSYS where glibc should fall back; EPROTONOSUPPORT for
// netlink protocols, as from a kernel built without them), so programs see
// an ordinary error rather than being killed. The exception is a call made
// through a foreign ABI (i386 on x86_64, arm32 on arm64), which kills the
// process: those ABIs number calls differently and hide socket's arguments
// behind socketcall(2), so letting them through unchecked would bypass every
// rule. x32 calls get ENOSYS. Only amd64 and arm64 are supported; elsewhere
// every function returns an error wrapping [ErrUnsupported], and nothing
// may run unfiltered.
//
// The rows of [Rules], in order (see each Reason for the why):
//
//	every foreign-ABI call                      kill process
//	every x32 call (amd64)                      ENOSYS
//	socket, domain == AF_UNIX                   EPERM  only with Options.DenyUnixSockets, without
//	                                                   Options.MediatedUnixSockets
//	socket, domain == AF_UNIX,                  EPERM  only with DenyUnixSockets and MediatedUnixSockets:
//	  type & 0xe == SOCK_DGRAM                         stream and seqpacket sockets allowed
//	seccomp, op == SECCOMP_SET_MODE_FILTER,     EPERM  only with DenyUnixSockets and MediatedUnixSockets:
//	  flags & SECCOMP_FILTER_FLAG_NEW_LISTENER         no listener of the command's own
//	socketpair, domain == AF_UNIX,              EPERM  only with Options.DenyUnixSockets:
//	  type & 0xe == SOCK_DGRAM                         datagram (or SOCK_RAW, made datagram) pairs
//	socket, domain == AF_VSOCK                  EPERM  only with Options.DenyUnixSockets
//	socket, domain == AF_NETLINK,               EPROTONOSUPPORT  only with Options.DenyUnixSockets
//	  protocol != NETLINK_ROUTE (0)
//	ioctl, request == TIOCSTI                   EPERM  terminal input injection (CVE-2017-5226)
//	ioctl, request == TIOCLINUX                 EPERM  console selection paste
//	clone, flags & CLONE_NEW*                   EPERM  no nested namespaces
//	unshare, flags & CLONE_NEW*                 EPERM  no nested namespaces
//	clone3                                      ENOSYS flags unreadable; glibc falls back to clone
//	setns                                       EPERM
//	io_uring_setup, _enter, _register           EPERM  its operations bypass syscall rules
//	ptrace, process_vm_readv/writev, pidfd_getfd EPERM cross-process access
//	bpf, perf_event_open                        EPERM
//	add_key, keyctl, request_key                EPERM  keyrings are not namespaced
//	kexec_load, kexec_file_load, init_module, finit_module, delete_module  EPERM
//	create_module, get_kernel_syms, query_module (amd64)                   EPERM
//	mount, umount2, pivot_root, move_mount, open_tree, open_tree_attr,
//	fsopen, fsconfig, fsmount, fspick, mount_setattr                       EPERM
//	open_by_handle_at, name_to_handle_at        EPERM
//	userfaultfd                                 EPERM
//	acct, swapon, swapoff, reboot, syslog, quotactl, quotactl_fd,
//	lookup_dcookie, vhangup, nfsservctl, settimeofday, clock_settime,
//	clock_adjtime                               EPERM
//	iopl, ioperm, uselib, ustat, sysfs, _sysctl (amd64)                   EPERM
//
// Arguments the kernel reads as 32-bit ints (socket's domain and protocol,
// socketpair's domain and type, ioctl's request) are compared on their low
// 32 bits only, so setting the upper half of the register does not slip past
// a rule. socketpair's type is compared under a mask (0xe: SOCK_TYPE_MASK
// without the bit that tells SOCK_RAW from SOCK_DGRAM), so SOCK_NONBLOCK and
// SOCK_CLOEXEC do not hide a datagram pair; a rule's conditions must all
// hold (the netlink and socketpair rows have two).
//
// # What it means inside a sandbox
//
// strace, gdb and other ptrace users do not work: a sandboxed command that
// could ptrace, or write the memory of, an unfiltered process in the same
// sandbox (a proxy forwarder started before the filter) could make it
// issue the refused calls. The seccomp rule covers ptrace(2) and
// process_vm_writev(2) but not writes to /proc/PID/mem, which the kernel
// allows under the same ptrace access check: an unfiltered helper must make
// itself non-dumpable (prctl(PR_SET_DUMPABLE, 0)) or run under another uid.
//
// With Options.DenyUnixSockets (the restricted, workspace and allowlist
// profiles) a command keeps the sockets of its own network namespace and
// nothing else. With MediatedUnixSockets as well (corral's bwrap backend,
// where a supervisor answers connect(2) through the [ConnectNotifyBPF]
// filter, see package backend/bwrap), stream and seqpacket Unix sockets may
// be made and the supervisor connects them only to sockets of the sandbox's
// network namespace. Without it (Docker, or no supervisor): no new Unix
// socket but stream and seqpacket socketpairs,
// which can only talk to each other (a datagram pair could sendto /dev/log
// or the journal's socket); no vsock; and of netlink only NETLINK_ROUTE,
// which name resolution (getaddrinfo's AI_ADDRCONFIG) and `ip` use. So `ss`
// (NETLINK_SOCK_DIAG), udev monitors (NETLINK_KOBJECT_UEVENT) and
// generic-netlink tools fail with EPROTONOSUPPORT, as on a kernel without
// those families; programs that log to audit when they can (shadow's
// useradd, sudo) treat that errno as "no audit here" and carry on.
//
// Nested namespaces are refused, so nested bwrap, podman and rootless
// containers fail, and Chromium needs --no-sandbox (as in Docker). The
// mount family is refused because the filter goes on after bwrap has built
// the mount tree. personality(2) is allowed: its flags change only the
// caller's own process tree, and setuid execs clear the unsafe ones.
//
// Sources: seccomp(2) for the program format and
// return values; bwrap(1) for --seccomp and --add-seccomp-fd; Docker's
// seccomp documentation and default profile for the profile format and the
// calls it refuses; socket(2), socketpair(2), unix(7) and netlink(7), and
// the kernel's net/socket.c (__sys_socketpair, SOCK_TYPE_MASK),
// net/unix/af_unix.c (unix_create, unix_dgram_sendmsg, unix_stream_sendmsg,
// unix_seqpacket_sendmsg) and net/netlink/af_netlink.c (netlink_create) for
// the socket rules.
package seccomp
