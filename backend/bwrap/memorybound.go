package bwrap

import (
	"fmt"
	"strconv"
	"strings"
)

// This file says how memory_mb holds for this caller (memoryBound: a
// memory cgroup, or RLIMIT_DATA, memory.go) in words, for `corral
// doctor`. Pure.

// Memory bound kinds, as DiagnoseMemory reports them.
const (
	// MemoryCgroupV1 is a cgroup v1 memory cgroup per command
	// (memory.limit_in_bytes).
	MemoryCgroupV1 = "cgroup-v1"
	// MemoryCgroupV2 is a cgroup v2 memory cgroup per command
	// (memory.max).
	MemoryCgroupV2 = "cgroup-v2"
	// MemoryRlimitData is RLIMIT_DATA on each process.
	MemoryRlimitData = "rlimit-data"
	// MemoryNone is no memory limit (memory_mb 0).
	MemoryNone = "none"
)

// memoryBound is how memory_mb holds for this process's bwrap commands.
type memoryBound struct {
	// Place is where the per-command memory cgroups are made (Version 1
	// or 2); Version 0: none, each process gets RLIMIT_DATA, and
	// Place.Reason says why.
	Place memPlace
	// Scope is the transient systemd user scope (Delegate=yes) that
	// holds corral and so Place.Dir, or "" when there is none.
	Scope string
	// ScopePending is set when corral has not asked for Scope yet: it
	// will at its first command with a memory limit (doctor's forecast).
	ScopePending bool
	// Prlimit is set when bwrap starts through prlimit(1) (a setuid
	// bwrap run by an unprivileged caller): RLIMIT_DATA, and no cgroup,
	// since only the ptrace gate moves bwrap into one before it runs.
	Prlimit bool
	// Fix says what would give a memory cgroup where there is none, or
	// "" where corral knows nothing that would.
	Fix string
	// Caveat says where the kernel does not hold RLIMIT_DATA as
	// described (rlimitDataCaveat), or "".
	Caveat string
}

// kind is the bound's kind (MemoryCgroupV1, MemoryCgroupV2,
// MemoryRlimitData; MemoryNone for memoryMB 0 or less).
func (b memoryBound) kind(memoryMB int) string {
	switch {
	case memoryMB <= 0:
		return MemoryNone
	case b.Prlimit:
		return MemoryRlimitData
	case b.Place.Version == 1:
		return MemoryCgroupV1
	case b.Place.Version == 2:
		return MemoryCgroupV2
	}
	return MemoryRlimitData
}

// describeMemory says in one line how memoryMB (MiB) holds under b, for
// `corral doctor`: which bound, over what (the whole sandbox or each
// process), and where there is no cgroup, why, what it means for a
// memory bomb, and what would give one. Pure.
func describeMemory(b memoryBound, memoryMB int) string {
	var s string
	switch b.kind(memoryMB) {
	case MemoryNone:
		return "memory: no limit (memory_mb 0)"
	case MemoryCgroupV1:
		s = fmt.Sprintf("memory: cgroup v1 memory.limit_in_bytes %d MiB for the whole sandbox (all its processes together", memoryMB)
		if b.Place.Swap {
			s += ", swap included: memory.memsw.limit_in_bytes"
		}
		return s + fmt.Sprintf("), in a cgroup per command below %s", b.Place.Dir)
	case MemoryCgroupV2:
		s = fmt.Sprintf("memory: cgroup v2 memory.max %d MiB for the whole sandbox (all its processes together, memory.swap.max 0), in a cgroup per command below %s", memoryMB, b.Place.Dir)
		switch {
		case b.Scope != "" && b.ScopePending:
			s += fmt.Sprintf(", the systemd user scope %s (Delegate=yes) corral asks your user manager for and moves itself into at its first command", b.Scope)
		case b.Scope != "":
			s += fmt.Sprintf(", the systemd user scope %s (Delegate=yes) corral moved itself into", b.Scope)
		}
		if b.Place.Enable {
			s += "; corral moves itself into a leaf cgroup there to enable the controller"
		}
		return s
	}
	why := b.Place.Reason
	if b.Prlimit {
		why = "a setuid bwrap starts through prlimit(1), without the ptrace gate that moves it into a cgroup"
	}
	s = fmt.Sprintf("memory: RLIMIT_DATA %d MiB per process (no memory cgroup for this user: %s); a memory bomb is held per process, not in total", memoryMB, why)
	if b.Fix != "" {
		s += "; for a cgroup: " + b.Fix
	}
	if b.Caveat != "" {
		s += "; " + b.Caveat
	}
	return s
}

// rlimitDataCaveat returns why RLIMIT_DATA does not hold a process's
// memory on a kernel of release (uname -r, "6.1.0-13-amd64") booted with
// ignoreParam (/sys/module/kernel/parameters/ignore_rlimit_data, "Y" or
// "N"), or "": before Linux 4.7 it counted brk's heap only, not mmap(2)
// (setrlimit(2)), and the ignore_rlimit_data boot parameter makes the
// kernel only warn (kernel-parameters.txt). Pure.
func rlimitDataCaveat(release, ignoreParam string) string {
	if strings.TrimSpace(ignoreParam) == "Y" {
		return "the kernel was booted with ignore_rlimit_data, so RLIMIT_DATA only warns: nothing holds a process's memory"
	}
	if major, minor, ok := kernelVersion(release); ok && (major < 4 || major == 4 && minor < 7) {
		return fmt.Sprintf("Linux %d.%d's RLIMIT_DATA counts brk's heap only (mmap(2) too since 4.7): memory a process maps is not held", major, minor)
	}
	return ""
}

// kernelVersion parses the major and minor numbers of a kernel release.
func kernelVersion(release string) (major, minor int, ok bool) {
	f := strings.SplitN(strings.TrimSpace(release), ".", 3)
	if len(f) < 2 {
		return 0, 0, false
	}
	digits := func(s string) string {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return s[:i]
	}
	major, err1 := strconv.Atoi(digits(f[0]))
	minor, err2 := strconv.Atoi(digits(f[1]))
	return major, minor, err1 == nil && err2 == nil
}
