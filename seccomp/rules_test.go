package seccomp

import (
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestRulesByOption(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       Options
		unixSocket bool
	}{
		{"default", Options{}, false},
		{"deny-unix-sockets", Options{DenyUnixSockets: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := Rules(tc.opts)
			var hasSocket bool
			for _, r := range rules {
				if slices.Contains(r.Syscalls, "socket") {
					hasSocket = true
					if r.Arg == nil || r.Arg.Index != 0 || r.Arg.Op != ArgEqual32 || (r.Arg.Value != afUnix && r.Arg.Value != afVsock) {
						t.Errorf("socket rule %v does not match exactly domain AF_UNIX or AF_VSOCK", r)
					}
				}
				if slices.Contains(r.Syscalls, "socketpair") {
					t.Errorf("socketpair is refused by %v", r)
				}
			}
			if hasSocket != tc.unixSocket {
				t.Errorf("socket rule present = %v, want %v", hasSocket, tc.unixSocket)
			}
		})
	}
	if d, a := len(Rules(Options{DenyUnixSockets: true})), len(Rules(Options{})); d != a+2 {
		t.Errorf("DenyUnixSockets adds %d rows, want 2 (AF_UNIX, AF_VSOCK)", d-a)
	}
}

// TestRulesWellFormed checks every row: a reason, a known action, syscall
// names that exist on each architecture the row applies to, and no name
// refused twice.
func TestRulesWellFormed(t *testing.T) {
	rules := Rules(Options{DenyUnixSockets: true})
	seen := map[string]Rule{}
	for _, r := range rules {
		if r.Reason == "" {
			t.Errorf("%v: no reason", r)
		}
		switch r.Action {
		case ActionErrno:
			if r.Errno != syscall.EPERM && r.Errno != syscall.ENOSYS {
				t.Errorf("%v: errno %d, want EPERM or ENOSYS", r, r.Errno)
			}
		case ActionKillProcess:
			if r.ABI != ABIForeign {
				t.Errorf("%v: only the foreign-ABI rule kills", r)
			}
		default:
			t.Errorf("%v: unknown action %q", r, r.Action)
		}
		if (r.ABI == "") == (len(r.Syscalls) == 0) {
			t.Errorf("%v: a row names syscalls or an ABI, not both or neither", r)
		}
		if r.Arg != nil && len(r.Syscalls) != 1 {
			t.Errorf("%v: an argument rule names one syscall", r)
		}
		for goarch, p := range platforms {
			if !r.appliesTo(goarch) {
				continue
			}
			for _, name := range r.Syscalls {
				if _, ok := p.info.SyscallNames[name]; !ok {
					t.Errorf("%v: no syscall %q on %s", r, name, goarch)
				}
			}
		}
		for _, a := range r.Arches {
			if _, ok := platforms[a]; !ok {
				t.Errorf("%v: unsupported arch %q", r, a)
			}
		}
		if r.Arg != nil {
			continue // ioctl appears in two argument rows
		}
		for _, name := range r.Syscalls {
			if prev, dup := seen[name]; dup {
				t.Errorf("%s refused by both %v and %v", name, prev, r)
			}
			seen[name] = r
		}
	}
	// The brief's list, all present.
	for _, name := range []string{
		"io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open",
		"keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load",
		"init_module", "finit_module", "delete_module", "mount", "umount2", "pivot_root",
		"move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
		"process_vm_writev", "process_vm_readv", "ptrace", "userfaultfd", "setns",
		"open_by_handle_at", "name_to_handle_at", "acct", "swapon", "swapoff", "reboot",
		"syslog", "quotactl", "lookup_dcookie", "vhangup", "clone3",
	} {
		if _, ok := seen[name]; !ok {
			t.Errorf("%s is not refused", name)
		}
	}
}

func TestRulesAreCopies(t *testing.T) {
	a := Rules(Options{})
	a[0].Reason = "changed"
	a[len(a)-1].Syscalls[0] = "changed"
	b := Rules(Options{})
	if b[0].Reason == "changed" || b[len(b)-1].Syscalls[0] == "changed" {
		t.Error("Rules returned shared state")
	}
}

func TestRuleString(t *testing.T) {
	for _, tc := range []struct {
		rule Rule
		want string
	}{
		{Rule{Syscalls: []string{"socket"}, Arg: &Arg{Index: 0, Text: "domain == AF_UNIX"}, Action: ActionErrno, Errno: syscall.EPERM},
			"socket [arg0: domain == AF_UNIX] -> errno EPERM"},
		{Rule{ABI: ABIForeign, Action: ActionKillProcess}, "every foreign-ABI call -> kill-process"},
		{Rule{Syscalls: []string{"iopl", "ioperm"}, Action: ActionErrno, Errno: syscall.EPERM, Arches: []string{"amd64"}},
			"iopl, ioperm -> errno EPERM (amd64 only)"},
		{Rule{Syscalls: []string{"clone3"}, Action: ActionErrno, Errno: syscall.ENOSYS}, "clone3 -> errno ENOSYS"},
	} {
		if got := tc.rule.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
	for _, r := range Rules(Options{DenyUnixSockets: true}) {
		if s := r.String(); strings.Contains(s, "errno 0") || s == "" {
			t.Errorf("bad rendering %q", s)
		}
	}
}

var bothOptions = []struct {
	name string
	opts Options
}{
	{"deny-unix-sockets", Options{DenyUnixSockets: true}},
	{"default", Options{}},
}

// unconditional lists the names refused with errno without an argument
// condition on goarch.
func unconditional(rules []Rule, goarch string, errno syscall.Errno) []string {
	var names []string
	for _, r := range rules {
		if r.ABI == "" && r.Arg == nil && r.appliesTo(goarch) && r.Errno == errno {
			names = append(names, r.Syscalls...)
		}
	}
	return names
}
