package bwrap

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// nsJoin names the namespaces a sandbox's bwrap must enter before its first
// instruction (the session's egress namespace of the allowlist profile), as
// descriptor numbers in bwrap's own table. UserFD is -1 when only the
// network namespace is entered (corral runs as root).
type nsJoin struct {
	UserFD, NetFD int
}

// errJoinUnsupported means this architecture has no syscall injection; the
// caller starts bwrap through nsenter(1) instead.
var errJoinUnsupported = errors.New("entering namespaces at bwrap's exec stop is not implemented on this architecture")

// Capability sets as capset(2) takes them (<linux/capability.h>):
// _LINUX_CAPABILITY_VERSION_3 with two 32-bit data words per set.
const (
	capVersion3  = 0x20080522
	capHeaderLen = 8      // struct __user_cap_header_struct {u32 version; int pid}
	capDataLen   = 2 * 12 // struct __user_cap_data_struct {u32 effective, permitted, inheritable} [2]
)

// joinNamespaces makes the traced process pid, stopped at its exec stop
// (bwrap before its first instruction, see startGated), enter the
// namespaces of j by executing system calls in it, as a debugger's
// "call" does (ptrace(2): save the registers and the instruction word at
// the program counter, write a system call instruction there, set the
// registers to the call, single-step, read the result; then put both
// back):
//
//  1. setns(UserFD, CLONE_NEWUSER) when UserFD >= 0: entering a network
//     namespace takes CAP_SYS_ADMIN in the caller's own user namespace and
//     in the namespace's owner (setns(2)); an unprivileged process gets
//     both by joining the owner, which it may as the user who made it. The
//     process is single-threaded and shares no fs_struct (Go starts it
//     with CLONE_VFORK|CLONE_VM only), as user_namespaces(7) requires;
//  2. setns(NetFD, CLONE_NEWNET);
//  3. close(UserFD), close(NetFD): nothing of them reaches the sandbox;
//  4. when it joined a user namespace, capset(2) with empty sets: the join
//     gave it every capability there, which a bwrap that is not setuid
//     refuses to run with ("Unexpected capabilities but not setuid"), and
//     which the sandbox must not have anyway. nsenter(1) gets the same
//     result by executing its command (execve(2) drops the capabilities
//     of a process whose uid is not 0); this costs no second execve.
//
// A failed call is returned as an error naming it; the caller kills the
// process, so a command never runs outside its namespace.
func joinNamespaces(pid int, j nsJoin) error {
	in, err := startInjection(pid)
	if err != nil {
		return err
	}
	call := func(what string, nr uintptr, args ...uintptr) error {
		if err := in.syscall(nr, args...); err != nil {
			return fmt.Errorf("entering the session's network namespace: %s: %w", what, err)
		}
		return nil
	}
	err = func() error {
		if j.UserFD >= 0 {
			if err := call("setns(user)", unix.SYS_SETNS, uintptr(j.UserFD), unix.CLONE_NEWUSER); err != nil {
				return err
			}
		}
		if err := call("setns(net)", unix.SYS_SETNS, uintptr(j.NetFD), unix.CLONE_NEWNET); err != nil {
			return err
		}
		if err := call("close", unix.SYS_CLOSE, uintptr(j.NetFD)); err != nil {
			return err
		}
		if j.UserFD < 0 {
			return nil
		}
		if err := call("close", unix.SYS_CLOSE, uintptr(j.UserFD)); err != nil {
			return err
		}
		// The header and empty data go on the stack below the stack
		// pointer, which nothing uses before the first instruction.
		buf := make([]byte, capHeaderLen+capDataLen)
		binary.NativeEndian.PutUint32(buf, capVersion3)
		hdr := in.scratch()
		if err := in.write(hdr, buf); err != nil {
			return fmt.Errorf("entering the session's network namespace: writing capset's arguments: %w", err)
		}
		return call("capset", unix.SYS_CAPSET, hdr, hdr+capHeaderLen)
	}()
	return errors.Join(err, in.finish())
}
