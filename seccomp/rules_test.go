package seccomp

import (
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestRulesByOption(t *testing.T) {
	// The socket-family rows DenyUnixSockets adds, rendered by Rule.String.
	denyRows := []string{
		"socket [arg0: domain == AF_UNIX] -> errno EPERM",
		"socketpair [arg0: domain == AF_UNIX && arg1: type & 0xe == SOCK_DGRAM (SOCK_DGRAM or SOCK_RAW, any flags)] -> errno EPERM",
		"socket [arg0: domain == AF_VSOCK] -> errno EPERM",
		"socket [arg0: domain == AF_NETLINK && arg2: protocol != NETLINK_ROUTE] -> errno EPROTONOSUPPORT",
	}
	for _, tc := range []struct {
		name string
		opts Options
		want []string
	}{
		{"default", Options{}, nil},
		{"deny-unix-sockets", Options{DenyUnixSockets: true}, denyRows},
		{"mediated-unix-sockets", Options{DenyUnixSockets: true, MediatedUnixSockets: true}, append([]string{
			"socket [arg0: domain == AF_UNIX && arg1: type & 0xe == SOCK_DGRAM (SOCK_DGRAM or SOCK_RAW, any flags)] -> errno EPERM",
		}, denyRows[1:]...)},
		{"mediated-alone-changes-nothing", Options{MediatedUnixSockets: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range Rules(tc.opts) {
				if slices.Contains(r.Syscalls, "socket") || slices.Contains(r.Syscalls, "socketpair") {
					got = append(got, r.String())
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("socket rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	if d, a := len(Rules(Options{DenyUnixSockets: true})), len(Rules(Options{})); d != a+len(denyRows) {
		t.Errorf("DenyUnixSockets adds %d rows, want %d", d-a, len(denyRows))
	}
	// The exact conditions, which the strings above only describe.
	for _, r := range Rules(Options{DenyUnixSockets: true}) {
		switch {
		case slices.Contains(r.Syscalls, "socketpair"):
			want := []Arg{{Index: 0, Op: ArgEqual32, Value: afUnix}, {Index: 1, Op: ArgMaskedEqual, Mask: 0xe, Value: 2}}
			if !argsMatch(r.Args, want) {
				t.Errorf("socketpair rule conditions %+v, want %+v", r.Args, want)
			}
		case slices.Contains(r.Syscalls, "socket") && len(r.Args) == 2:
			want := []Arg{{Index: 0, Op: ArgEqual32, Value: afNetlink}, {Index: 2, Op: ArgAnyBit, Value: 0xffffffff}}
			if !argsMatch(r.Args, want) || r.Errno != syscall.EPROTONOSUPPORT {
				t.Errorf("netlink rule %+v errno %d, want %+v errno EPROTONOSUPPORT", r.Args, r.Errno, want)
			}
		}
	}
}

// argsMatch compares conditions, ignoring their Text.
func argsMatch(got, want []Arg) bool {
	return slices.EqualFunc(got, want, func(g, w Arg) bool {
		g.Text = ""
		return g == w
	})
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
			if r.Errno != syscall.EPERM && r.Errno != syscall.ENOSYS && r.Errno != syscall.EPROTONOSUPPORT {
				t.Errorf("%v: errno %d, want EPERM, ENOSYS or EPROTONOSUPPORT", r, r.Errno)
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
		if err := r.checkArgs(); err != nil {
			t.Error(err)
		}
		for _, a := range r.Args {
			if a.Text == "" {
				t.Errorf("%v: condition on arg%d has no text", r, a.Index)
			}
		}
		for _, goarch := range platformNames {
			p, _ := platformFor(goarch)
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
			if _, err := platformFor(a); err != nil {
				t.Errorf("%v: unsupported arch %q", r, a)
			}
		}
		if len(r.Args) > 0 {
			continue // ioctl and socket appear in several argument rows
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
		{Rule{Syscalls: []string{"socket"}, Args: []Arg{{Index: 0, Text: "domain == AF_UNIX"}}, Action: ActionErrno, Errno: syscall.EPERM},
			"socket [arg0: domain == AF_UNIX] -> errno EPERM"},
		{Rule{Syscalls: []string{"socket"}, Args: []Arg{{Index: 0, Text: "a"}, {Index: 2, Text: "b"}}, Action: ActionErrno, Errno: syscall.EPROTONOSUPPORT},
			"socket [arg0: a && arg2: b] -> errno EPROTONOSUPPORT"},
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
		if r.ABI == "" && len(r.Args) == 0 && r.appliesTo(goarch) && r.Errno == errno {
			names = append(names, r.Syscalls...)
		}
	}
	return names
}
