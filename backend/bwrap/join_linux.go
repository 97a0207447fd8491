package bwrap

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// nsJoin names the namespaces a sandbox's bwrap must enter before its first
// instruction, as descriptor numbers in bwrap's own table, -1 for none: the
// session's egress namespace of the allowlist profile (NetFD, with UserFD
// unless corral runs as root), or the review layer's mount namespace
// (MntFD with UserFD; see layerhold_linux.go), with its network namespace
// under allowlist (all three), or the layer's network namespace alone for
// its forwarder (UserFD and NetFD, NetFD alone as root).
type nsJoin struct {
	UserFD, MntFD, NetFD int
	// KeepCaps leaves bwrap the capabilities joining UserFD gave it: in
	// the review layer's user namespace bwrap is uid 0, and bwrap as uid 0
	// keeps its capabilities (it drops the command's with --cap-drop ALL)
	// and needs CAP_SETUID there to write its own namespace's uid map; the
	// namespace maps the caller's ids alone, so they grant nothing on the
	// host.
	KeepCaps bool
}

// errJoinUnsupported means this architecture has no syscall injection; the
// caller starts bwrap through nsenter(1) instead.
var errJoinUnsupported = errors.New("entering namespaces at bwrap's exec stop is not implemented on this architecture")

// errBatchNotRun is injection.batch's error for a call it did not make
// because an earlier call of the batch failed.
var errBatchNotRun = errors.New("not made: an earlier system call of the batch failed")

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
// "call" does (ptrace(2): save the registers and the instructions at the
// program counter, write the calls there, set the registers, resume it to
// the int3 that ends them, read the results; then put both back; one
// batch, injection.batch, which stops at the first call that fails):
//
//  1. setns(UserFD, CLONE_NEWUSER) when UserFD >= 0: entering a network
//     namespace takes CAP_SYS_ADMIN in the caller's own user namespace and
//     in the namespace's owner (setns(2)); an unprivileged process gets
//     both by joining the owner, which it may as the user who made it. The
//     process is single-threaded and shares no fs_struct (Go starts it
//     with CLONE_VFORK|CLONE_VM only), as user_namespaces(7) requires;
//  2. setns(MntFD, CLONE_NEWNS) when MntFD >= 0: the same rights, in the
//     user namespace that owns the mount namespace (setns(2)); it also
//     moves the process's root and working directory to the namespace's
//     root, which bwrap does not mind (every path it is given is absolute);
//  3. setns(NetFD, CLONE_NEWNET) when NetFD >= 0;
//  4. close(UserFD), close(MntFD), close(NetFD): nothing of them reaches the
//     sandbox;
//  5. when it joined a user namespace, capset(2) with empty sets: the join
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
	// One batch (injection.batch), stopping at the first failure.
	var names []string
	var calls [][]uintptr
	add := func(what string, call ...uintptr) {
		names, calls = append(names, what), append(calls, call)
	}
	if j.UserFD >= 0 {
		add("setns(user)", unix.SYS_SETNS, uintptr(j.UserFD), unix.CLONE_NEWUSER)
	}
	if j.MntFD >= 0 {
		add("setns(mnt)", unix.SYS_SETNS, uintptr(j.MntFD), unix.CLONE_NEWNS)
	}
	if j.NetFD >= 0 {
		add("setns(net)", unix.SYS_SETNS, uintptr(j.NetFD), unix.CLONE_NEWNET)
	}
	for _, fd := range []int{j.NetFD, j.MntFD, j.UserFD} {
		if fd >= 0 {
			add("close", unix.SYS_CLOSE, uintptr(fd))
		}
	}
	err = func() error {
		if j.UserFD >= 0 && !j.KeepCaps {
			// The header and empty data go on the stack below the stack
			// pointer, which nothing uses before the first instruction.
			buf := make([]byte, capHeaderLen+capDataLen)
			binary.NativeEndian.PutUint32(buf, capVersion3)
			hdr := in.scratch()
			if err := in.write(hdr, buf); err != nil {
				return fmt.Errorf("entering the session's namespaces: writing capset's arguments: %w", err)
			}
			add("capset", unix.SYS_CAPSET, hdr, hdr+capHeaderLen)
		}
		if len(calls) == 0 {
			return nil
		}
		_, errs, err := in.batch(calls...)
		if err != nil {
			return fmt.Errorf("entering the session's namespaces: %w", err)
		}
		for i, e := range errs {
			if e != nil {
				return fmt.Errorf("entering the session's namespaces: %s: %w", names[i], e)
			}
		}
		return nil
	}()
	return errors.Join(err, in.finish())
}
