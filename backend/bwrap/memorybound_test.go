package bwrap

import (
	"strings"
	"testing"
)

// TestDescribeMemory: doctor's line names the bound, what it holds (the
// whole sandbox or each process), and where there is no cgroup, why, what
// that means for a memory bomb and what would give one.
func TestDescribeMemory(t *testing.T) {
	v1 := memPlace{Version: 1, Dir: "/sys/fs/cgroup/memory/x", Swap: true}
	v2 := memPlace{Version: 2, Dir: "/sys/fs/cgroup/user.slice/u/app.slice/app-corral-7.scope", Swap: true, Enable: true}
	none := memPlace{Reason: "cgroup v1 memory hierarchy: corral's cgroup /m is not writable"}
	for _, tc := range []struct {
		name     string
		b        memoryBound
		mb       int
		kind     string
		want     []string
		dontWant []string
	}{
		{"no limit", memoryBound{Place: v1}, 0, MemoryNone, []string{"memory: no limit (memory_mb 0)"}, []string{"cgroup"}},
		{"v1", memoryBound{Place: v1}, 2048, MemoryCgroupV1,
			[]string{"memory: cgroup v1 memory.limit_in_bytes 2048 MiB for the whole sandbox", "swap included", "below /sys/fs/cgroup/memory/x"}, []string{"RLIMIT", "per process"}},
		{"v1 without swap accounting", memoryBound{Place: memPlace{Version: 1, Dir: "/m"}}, 256, MemoryCgroupV1,
			[]string{"memory.limit_in_bytes 256 MiB"}, []string{"swap"}},
		{"v2 in a scope corral moved into", memoryBound{Place: v2, Scope: "app-corral-7.scope"}, 512, MemoryCgroupV2,
			[]string{"memory: cgroup v2 memory.max 512 MiB for the whole sandbox", "memory.swap.max 0", "scope app-corral-7.scope (Delegate=yes) corral moved itself into", "leaf cgroup"}, []string{"RLIMIT", "asks"}},
		{"v2 scope still to ask for", memoryBound{Place: v2, Scope: "app-corral-7.scope", ScopePending: true}, 512, MemoryCgroupV2,
			[]string{"corral asks your user manager for and moves itself into at its first command"}, nil},
		{"v2 delegated subtree", memoryBound{Place: memPlace{Version: 2, Dir: "/d", Swap: true}}, 512, MemoryCgroupV2,
			[]string{"memory.max 512 MiB", "below /d"}, []string{"scope", "leaf"}},
		{"per process with the reason and the fix", memoryBound{Place: none, Fix: fixV1}, 2048, MemoryRlimitData,
			[]string{"memory: RLIMIT_DATA 2048 MiB per process (no memory cgroup for this user: cgroup v1 memory hierarchy", "a memory bomb is held per process, not in total", "for a cgroup: on cgroup v1 only root makes cgroups"}, []string{"RLIMIT_AS", "address space"}},
		{"per process, kernel caveat", memoryBound{Place: none, Caveat: "the kernel was booted with ignore_rlimit_data"}, 256, MemoryRlimitData,
			[]string{"RLIMIT_DATA 256 MiB per process", "; the kernel was booted with ignore_rlimit_data"}, []string{"for a cgroup"}},
		{"setuid bwrap through prlimit", memoryBound{Place: v1, Prlimit: true, Fix: "a bwrap without the setuid bit"}, 256, MemoryRlimitData,
			[]string{"RLIMIT_DATA 256 MiB per process", "setuid bwrap starts through prlimit(1)", "for a cgroup: a bwrap without the setuid bit"}, []string{"memory.limit_in_bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := describeMemory(tc.b, tc.mb)
			if k := tc.b.kind(tc.mb); k != tc.kind {
				t.Errorf("kind = %q, want %q", k, tc.kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("describeMemory = %q\nwant it to contain %q", got, w)
				}
			}
			for _, w := range tc.dontWant {
				if strings.Contains(got, w) {
					t.Errorf("describeMemory = %q\nwant no %q", got, w)
				}
			}
		})
	}
}

func TestRlimitDataCaveat(t *testing.T) {
	for _, tc := range []struct {
		release, ignore string
		want            string // substring; "" for none
	}{
		{"6.18.44-fc-v1098", "N", ""},
		{"4.7.0", "N", ""},
		{"5.10.0-28-amd64", "", ""},
		{"4.4.0-210-generic", "N", "Linux 4.4's RLIMIT_DATA counts brk's heap only"},
		{"3.10.0-1160.el7.x86_64", "N", "Linux 3.10's"},
		{"6.1.0", "Y\n", "booted with ignore_rlimit_data"},
		{"4.4.0", "Y", "booted with ignore_rlimit_data"},
		{"", "", ""},
		{"garbage", "N", ""},
	} {
		got := rlimitDataCaveat(tc.release, tc.ignore)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("rlimitDataCaveat(%q, %q) = %q, want %q", tc.release, tc.ignore, got, tc.want)
		}
	}
}
