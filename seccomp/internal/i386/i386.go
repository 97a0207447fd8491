// Package i386 makes 32-bit (i386 ABI) system calls from a 64-bit x86
// process, for the tests that check corral's seccomp filter kills such
// calls instead of letting them past its x86_64 rules. Nothing outside
// tests imports it.
package i386

// Supported reports whether this build can issue an i386 call (GOARCH
// amd64). The kernel must also have CONFIG_IA32_EMULATION for the call to
// reach it; without it the process gets SIGSEGV.
const Supported = supported

// SysGetpid is getpid's number in the i386 table (arch/x86/entry/syscalls/syscall_32.tbl).
const SysGetpid = 20
