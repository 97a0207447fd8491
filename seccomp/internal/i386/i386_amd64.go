package i386

const supported = true

// Syscall issues system call nr through int $0x80 with up to three
// arguments (in ebx, ecx, edx) and returns eax as the kernel left it: a
// result, or a negated errno.
func Syscall(nr, a1, a2, a3 uintptr) uintptr
