package bwrap

import (
	"fmt"
	"strings"

	"github.com/corralhq/corral/hostview"
)

// This file is the policy of memory_mb where no memory cgroup holds a bwrap
// command; memorybound.go says which bound holds, for `corral doctor`. It
// reads nothing itself.
//
// Where corral can make a memory cgroup (cgroup.go, userscope.go),
// memory_mb bounds the whole command, every process of it together.
// Elsewhere each process gets RLIMIT_DATA (setrlimit(2)): since Linux 4.7
// ("mm: rework virtual memory accounting") it counts a process's private
// writable mappings, brk's heap and anonymous mmap(2) alike (mm->data_vm:
// mappings with VM_WRITE and neither VM_SHARED nor VM_STACK,
// is_data_mapping in mm/internal.h, checked by may_expand_vm in
// mm/mmap.c on mmap, brk, mprotect and mremap). Address space that is
// only reserved (PROT_NONE) is not counted until it is made writable,
// and that is how runtimes start: Go reserves its arenas and page
// summaries, V8 its pointer cage, the JVM its heap and code cache.
// RLIMIT_AS counted those reservations, and under it node, go and java
// did not start at the default memory_mb; corral never sets it.

// dataLimit returns the RLIMIT_DATA, in bytes, that holds memory_mb (MiB)
// for each process of a command no memory cgroup holds: memory_mb itself,
// since RLIMIT_DATA counts memory a process has made writable, which is
// what memory_mb bounds; 0 (no limit) for memory_mb 0 or less.
func dataLimit(memoryMB int) uint64 { return mib(memoryMB) }

// The JVM sizes its heap from the machine's memory (HotSpot's
// ergonomics: InitialRAMPercentage 1.5625 of it committed at start, 380 MiB
// of this machine's 24 GiB) or, in a memory cgroup, from the cgroup's limit
// (its container support); RLIMIT_DATA it does not read, and what it
// commits RLIMIT_DATA counts: java -version needed 487 MiB of RLIMIT_DATA
// here (24 GiB of RAM), and started under 256 with -XX:MaxRAM=256m (see
// docs/sandbox.md "Limits" for each runtime's need). So where memory_mb is
// RLIMIT_DATA, the command's JAVA_TOOL_OPTIONS starts with
// -XX:MaxRAM=<memory_mb>m: the sizing a memory cgroup of memory_mb would
// give. HotSpot takes the last of a repeated -XX option, and reads
// JAVA_TOOL_OPTIONS before its command line, so options of the command's
// own, later in the variable or on the command line, win. Each JVM says
// "Picked up JAVA_TOOL_OPTIONS: ..." on stderr.

// cutCorralMaxRAM returns s without the -XX:MaxRAM=<n>m option
// withJavaMaxRAM puts first (and the spaces after it), and whether it was
// there: a session's saved environment brings it back to the next
// command, which replaces it. Leading spaces go with it.
func cutCorralMaxRAM(s string) (string, bool) {
	t := strings.TrimLeft(s, " ")
	n, ok := strings.CutPrefix(t, "-XX:MaxRAM=")
	if !ok {
		return s, false
	}
	i := 0
	for i < len(n) && n[i] >= '0' && n[i] <= '9' {
		i++
	}
	if i == 0 || i == len(n) || n[i] != 'm' || i+1 < len(n) && n[i+1] != ' ' {
		return s, false
	}
	return strings.TrimLeft(n[i+1:], " "), true
}

// withJavaMaxRAM returns env with JAVA_TOOL_OPTIONS starting with
// -XX:MaxRAM=<memoryMB>m ahead of what it held (the same option a
// previous command got dropped first); memoryMB 0 or less drops that
// option only, and a variable left empty is removed. Pure.
func withJavaMaxRAM(env []string, memoryMB int) []string {
	v, had := hostview.LookupEnv(env, "JAVA_TOOL_OPTIONS")
	rest, _ := cutCorralMaxRAM(v)
	if memoryMB > 0 {
		rest = strings.TrimRight(fmt.Sprintf("-XX:MaxRAM=%dm %s", memoryMB, rest), " ")
	}
	switch {
	case rest == v:
		return env
	case rest == "" && had:
		return hostview.FilterEnv(env, []string{"JAVA_TOOL_OPTIONS"})
	}
	return hostview.FilterEnv(env, nil, "JAVA_TOOL_OPTIONS="+rest)
}
