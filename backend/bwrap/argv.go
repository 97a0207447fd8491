package bwrap

import (
	"fmt"
	"strconv"
	"strings"
)

// Features are the optional bwrap flags the installed version supports.
type Features struct {
	// Perms: --perms before --tmpfs (bwrap 0.5).
	Perms bool
	// JSONStatus: --json-status-fd (bwrap 0.5).
	JSONStatus bool
	// Size: --size before --tmpfs (bwrap 0.7).
	Size bool
}

// FeaturesFor returns the features of bwrap version v (major, minor, patch).
func FeaturesFor(v Version) Features {
	return Features{
		Perms:      v.AtLeast(0, 5, 0),
		JSONStatus: v.AtLeast(0, 5, 0),
		Size:       v.AtLeast(0, 7, 0),
	}
}

// Argv returns bwrap's arguments (without the program name) that build the
// sandbox of plan and run cmd in it, with plan.Env set by --clearenv and
// --setenv (bwrap itself runs with a fixed, minimal environment). statusFD, when >= 0, is the child-side
// descriptor number for --json-status-fd. Every path is passed as its own
// argument, never joined into a string, so spaces, colons and newlines in
// paths are safe.
//
// Flag semantics are bwrap(1)'s: every namespace is unshared (user, pid,
// ipc, uts, cgroup, and net unless plan.ShareNet or plan.Egress, where the
// caller starts bwrap inside the session's egress namespace); --die-with-parent ends
// the sandbox when corral dies (with --unshare-pid the whole tree goes, as
// bwrap is then pid 1); --new-session stops TIOCSTI input injection into the
// caller's terminal; --cap-drop ALL matters when corral runs as root, where
// bwrap would otherwise keep the capabilities; --seccomp plan.SeccompFD
// (when > 0) loads corral's syscall filter from that descriptor.
func Argv(plan *Plan, f Features, statusFD int, cmd []string) []string {
	a := []string{"--die-with-parent"}
	if !plan.TTY {
		a = append(a, "--new-session")
	}
	a = append(a,
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
	)
	if !plan.ShareNet && !plan.Egress {
		a = append(a, "--unshare-net")
	}
	if plan.RunAs != nil || plan.LayerDir != "" {
		// bwrap runs as plan.RunAs, or as uid 0 of the review layer's user
		// namespace; inside, the command keeps the caller's ids
		// (user_namespaces(7): the new namespace maps them to bwrap's).
		a = append(a, "--uid", strconv.Itoa(plan.InsideUID), "--gid", strconv.Itoa(plan.InsideGID))
	}
	a = append(a, "--cap-drop", "ALL")
	// The command's environment is set inside the sandbox, never on bwrap
	// itself: variables a session exported (LD_PRELOAD, GCONV_PATH, ...)
	// must not reach a process on the host.
	a = append(a, "--clearenv")
	for _, kv := range plan.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			a = append(a, "--setenv", k, v)
		}
	}
	if statusFD >= 0 && f.JSONStatus {
		a = append(a, "--json-status-fd", strconv.Itoa(statusFD))
	}
	if plan.SeccompFD > 0 {
		// bwrap loads the program just before it executes the command,
		// after every mount (bwrap(1)), and closes the descriptor.
		a = append(a, "--seccomp", strconv.Itoa(plan.SeccompFD))
	}
	for _, m := range plan.Mounts {
		switch m.Kind {
		case mRoBind:
			if m.FD > 0 {
				a = append(a, "--ro-bind-fd", strconv.Itoa(m.FD), m.Dest)
			} else {
				a = append(a, "--ro-bind", m.Src, m.Dest)
			}
		case mBind:
			if m.FD > 0 {
				a = append(a, "--bind-fd", strconv.Itoa(m.FD), m.Dest)
			} else {
				a = append(a, "--bind", m.Src, m.Dest)
			}
		case mDevBind:
			a = append(a, "--dev-bind", m.Src, m.Dest)
		case mTmpfs:
			if m.Perms != 0 && f.Perms {
				a = append(a, "--perms", fmt.Sprintf("%04o", m.Perms))
			}
			if m.Size > 0 && f.Size {
				a = append(a, "--size", strconv.FormatInt(m.Size, 10))
			}
			a = append(a, "--tmpfs", m.Dest)
		case mSymlink:
			a = append(a, "--symlink", m.Src, m.Dest)
		case mRemountRO:
			a = append(a, "--remount-ro", m.Dest)
		case mDev:
			a = append(a, "--dev", m.Dest)
		case mProc:
			a = append(a, "--proc", m.Dest)
		}
	}
	if plan.Chdir != "" {
		a = append(a, "--chdir", plan.Chdir)
	}
	a = append(a, "--")
	return append(a, cmd...)
}
