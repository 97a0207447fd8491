package bwrap

import "os"

// fdLayout says which descriptor bwrap is started with holds what: numbers
// in bwrap's process, where exec.Cmd.ExtraFiles[i] becomes descriptor 3+i
// (os/exec). 0, 1 and 2 are the command's stdin, stdout and stderr (with a
// terminal, 0 is also the controlling one: SysProcAttr.Ctty). -1 is absent.
//
// The order is fixed by what must not move: the caller's descriptors come
// first, so the sandbox sees them at 3, 4, ... (bwrap passes on the
// descriptors it does not consume); the namespaces the gate enters come
// last, so that dropping them when the gate is refused (and nsenter joins
// instead) renumbers nothing.
type fdLayout struct {
	// Caller is how many of the caller's descriptors (Request.ExtraFiles)
	// sit at 3 .. 3+Caller-1.
	Caller int
	// Status is the write end of the status pipe (--json-status-fd), Args
	// the read end of the argument pipe (--args): bwrap's own, not passed
	// on.
	Status, Args int
	// Seccomp is the syscall filter (--seccomp).
	Seccomp int
	// FirstBind is the first of Binds protected paths' descriptors
	// (--bind-fd), numbered in plan order.
	FirstBind, Binds int
	// UserNS, MntNS and NetNS are the namespaces the gate enters at
	// bwrap's exec stop (nsJoin): the allowlist's egress namespace (user
	// and network), or the review layer's (user and mount, and network
	// under allowlist).
	UserNS, MntNS, NetNS int
	// Count is the number of ExtraFiles.
	Count int
}

// layoutFDs returns the layout for caller descriptors of the caller, a
// syscall filter or none, binds bind descriptors and the namespaces the
// gate joins (userNS with netNS or mntNS, or netNS alone as root).
func layoutFDs(caller int, seccomp bool, binds int, userNS, mntNS, netNS bool) fdLayout {
	l := fdLayout{Caller: caller, Seccomp: -1, UserNS: -1, MntNS: -1, NetNS: -1}
	next := 3 + caller
	take := func() int { next++; return next - 1 }
	l.Status, l.Args = take(), take()
	if seccomp {
		l.Seccomp = take()
	}
	l.FirstBind, l.Binds = next, binds
	next += binds
	if userNS {
		l.UserNS = take()
	}
	if mntNS {
		l.MntNS = take()
	}
	if netNS {
		l.NetNS = take()
	}
	l.Count = next - 3
	return l
}

// files returns ExtraFiles for l: each file at its descriptor's place.
// filter, userns, mntns and netns are nil where l has none; len(caller)
// and len(binds) must be l.Caller and l.Binds.
func (l fdLayout) files(caller []*os.File, status, args, filter *os.File, binds []*os.File, userns, mntns, netns *os.File) []*os.File {
	fs := make([]*os.File, l.Count)
	put := func(fd int, f *os.File) {
		if fd >= 0 {
			fs[fd-3] = f
		}
	}
	for i, f := range caller {
		put(3+i, f)
	}
	put(l.Status, status)
	put(l.Args, args)
	put(l.Seccomp, filter)
	for i, f := range binds {
		put(l.FirstBind+i, f)
	}
	put(l.UserNS, userns)
	put(l.MntNS, mntns)
	put(l.NetNS, netns)
	return fs
}
