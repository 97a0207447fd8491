//go:build !amd64

package i386

const supported = false

// Syscall panics: i386 calls exist only on amd64.
func Syscall(nr, a1, a2, a3 uintptr) uintptr { panic("i386.Syscall needs GOARCH=amd64") }
