package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// File returns corral's filter, compiled by [BPF], in a sealed memfd
// positioned at offset 0, for `bwrap --seccomp N` (or `--add-seccomp-fd N`).
// Pass it in exec.Cmd.ExtraFiles, where it becomes descriptor 3+i in bwrap
// for ExtraFiles[i], and close it once the command has started:
//
//	f, err := seccomp.File(opts)
//	cmd.ExtraFiles = []*os.File{f}
//	cmd.Args = append(cmd.Args, "--seccomp", "3", ...)
//
// The memfd is created close-on-exec (MFD_CLOEXEC), so it reaches only the
// process it is handed to, and sealed against writes, growth and shrinking
// (F_SEAL_WRITE|F_SEAL_GROW|F_SEAL_SHRINK|F_SEAL_SEAL). bwrap reads it from
// the current offset to end of file, and the offset is shared with every
// copy of the descriptor: use one File per bwrap run, or Seek it back to 0
// before reusing it. A File read to its end gives bwrap an empty program,
// which bwrap refuses (prctl fails with EINVAL), so reuse fails closed.
//
// Errors wrap the [BPF] error, or [ErrUnsupported] when memfd_create(2) is
// missing (Linux before 3.17), or the failing system call.
func File(opts Options) (*os.File, error) {
	prog, err := BPF(opts)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("corral-seccomp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return nil, fmt.Errorf("%w: memfd_create: %w", ErrUnsupported, err)
		}
		return nil, fmt.Errorf("creating seccomp memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "corral-seccomp")
	if err := fillSealed(f, prog); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func fillSealed(f *os.File, prog []byte) error {
	if _, err := f.Write(prog); err != nil {
		return fmt.Errorf("writing seccomp memfd: %w", err)
	}
	seals := unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("sealing seccomp memfd: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewinding seccomp memfd: %w", err)
	}
	return nil
}

// sockFilters decodes the [BPF] bytes into the kernel's records.
func sockFilters(prog []byte) []unix.SockFilter {
	out := make([]unix.SockFilter, len(prog)/8)
	for i := range out {
		b := prog[8*i : 8*i+8]
		out[i] = unix.SockFilter{
			Code: binary.NativeEndian.Uint16(b[0:2]),
			Jt:   b[2],
			Jf:   b[3],
			K:    binary.NativeEndian.Uint32(b[4:8]),
		}
	}
	return out
}

// Install loads corral's filter into the calling process, for a helper that
// filters itself and then execs the command (the filter is inherited across
// fork and execve and cannot be removed). It sets no_new_privs (required to
// load a filter without CAP_SYS_ADMIN, and so setuid binaries run without
// their privileges from then on), then calls seccomp(2)
// SECCOMP_SET_MODE_FILTER with SECCOMP_FILTER_FLAG_TSYNC, so every thread
// of the Go process is filtered, not only the caller's.
//
// Errors wrap the [BPF] error; [ErrUnsupported] when the kernel has no
// seccomp filters (EINVAL or ENOSYS); the errno of prctl(2) or seccomp(2);
// or name the thread TSYNC could not synchronize (one with an unrelated
// filter of its own). On error the process may already have no_new_privs
// set; it must not go on to run the command.
func Install(opts Options) error {
	prog, err := BPF(opts)
	if err != nil {
		return err
	}
	filters := sockFilters(prog)
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	// With TSYNC the kernel also sets no_new_privs on every other thread.
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filters)
	if errno != 0 {
		return loadError(errno)
	}
	if tid != 0 {
		return fmt.Errorf("loading seccomp filter: thread %d could not be synchronized (TSYNC)", tid)
	}
	return nil
}

func loadError(errno unix.Errno) error {
	if errno == unix.ENOSYS || errno == unix.EINVAL {
		return fmt.Errorf("%w: loading seccomp filter: %w (kernel without CONFIG_SECCOMP_FILTER?)", ErrUnsupported, errno)
	}
	return fmt.Errorf("loading seccomp filter: %w", errno)
}

// Probe checks, for `corral doctor`, that corral's filter (the strictest
// variant, with DenyUnixSockets) can be built, put in a memfd as for bwrap,
// and loaded by this kernel, and that once loaded it refuses what it should:
// io_uring_setup(2) and socket(AF_UNIX) fail with EPERM while getpid(2)
// works. It loads the filter on a throwaway OS thread, never on the rest of
// the process: the goroutine locks a thread other than the main one, sets
// no_new_privs and the filter on that thread alone (no TSYNC), tests it, and
// ends without unlocking, which makes the Go runtime terminate the thread
// (runtime.LockOSThread). The runtime never clones new threads from a locked
// one, so the filter goes nowhere else. Do not call Probe in a process that
// later calls [Install]: should the kernel keep a probed thread alive,
// TSYNC would refuse to synchronize it.
//
// It returns nil when all is well; otherwise an error naming the step that
// failed, wrapping [ErrUnsupported] when the kernel lacks seccomp filters or
// memfd_create.
func Probe() error {
	opts := Options{DenyUnixSockets: true}
	f, err := File(opts)
	if err != nil {
		return err
	}
	_ = f.Close()
	prog, err := BPF(opts)
	if err != nil {
		return err
	}
	return onThrowawayThread(func() error { return probeThread(prog) })
}

// onThrowawayThread runs fn on an OS thread that ends with it. It never uses
// the main thread, which the runtime keeps (wedged) instead of ending.
func onThrowawayThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			errc <- fn()
			return // still locked: the runtime ends this thread
		}
		// We hold the main thread; while we do, a second goroutine
		// cannot run on it.
		inner := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			inner <- fn()
		}()
		errc <- <-inner
		runtime.UnlockOSThread()
	}()
	return <-errc
}

func probeThread(prog []byte) error {
	filters := sockFilters(prog)
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp probe: setting no_new_privs: %w", err)
	}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filters)
	if errno != 0 {
		return fmt.Errorf("seccomp probe: %w", loadError(errno))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 0, 0, 0); e != unix.EPERM {
		return fmt.Errorf("seccomp probe: filter loaded but io_uring_setup returned %v, want EPERM", errnoText(e))
	}
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if e == 0 {
		_ = unix.Close(int(fd))
	}
	if e != unix.EPERM {
		return fmt.Errorf("seccomp probe: filter loaded but socket(AF_UNIX) returned %v, want EPERM", errnoText(e))
	}
	if pid, _, e := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0); e != 0 || int(pid) != unix.Getpid() {
		return fmt.Errorf("seccomp probe: filter loaded but getpid failed: %v", errnoText(e))
	}
	return nil
}

func errnoText(e unix.Errno) string {
	if e == 0 {
		return "success"
	}
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	return e.Error()
}
