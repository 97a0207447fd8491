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
//     which also calls [Probe].
//
// # The filter
//
// Calls are allowed unless a rule refuses them; refused calls fail with an
// errno (EPERM, or ENOSYS where glibc should fall back), so programs see an
// ordinary error rather than being killed. The exception is a call made
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
//	socket, domain == AF_UNIX                   EPERM  only with Options.DenyUnixSockets
//	socket, domain == AF_VSOCK                  EPERM  only with Options.DenyUnixSockets
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
// Arguments the kernel reads as 32-bit ints (socket's domain, ioctl's
// request) are compared on their low 32 bits only, so setting the upper half
// of the register does not slip past a rule.
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
// Nested namespaces are refused, so nested bwrap, podman and rootless
// containers fail, and Chromium needs --no-sandbox (as in Docker). The
// mount family is refused because the filter goes on after bwrap has built
// the mount tree. personality(2) is allowed: its flags change only the
// caller's own process tree, and setuid execs clear the unsafe ones.
//
// Sources: seccomp(2) for the program format and
// return values; bwrap(1) for --seccomp and --add-seccomp-fd; Docker's
// seccomp documentation and default profile for the profile format and the
// calls it refuses.
package seccomp
