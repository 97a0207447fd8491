package bwrap

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// This file is the policy half of the memory cgroup that bounds a whole
// command (bwrap and everything in it) by memory_mb: where such a cgroup
// can be made, which files are written to make it, and how its OOM kills
// are counted. It reads nothing itself; cgroup_linux.go gathers the facts
// and does the writes.

// cgroupPrefix starts the name of every cgroup corral makes, so that a
// sweep touches corral's own only: "corral-<pid>-<n>" per command, and on
// cgroup v2 "corral-<pid>-self", the leaf corral moves itself into.
const cgroupPrefix = "corral-"

// cgroupFacts are what the choice of a memory cgroup depends on.
type cgroupFacts struct {
	// ProcCgroup is /proc/self/cgroup (cgroups(7): "hierarchy-ID:
	// controller-list:cgroup-path" per line; "0::path" is cgroup v2).
	ProcCgroup string
	// MountInfo is /proc/self/mountinfo (proc(5)).
	MountInfo string
	// Read returns a file's contents and whether it could be read.
	Read func(path string) (string, bool)
	// Writable reports access(2) W_OK for path.
	Writable func(path string) bool
}

// memPlace is where the per-command memory cgroups go, or why there are
// none.
type memPlace struct {
	// Version is 1 (the v1 memory hierarchy), 2 (the unified hierarchy),
	// or 0: no memory cgroup corral can use (Reason says why).
	Version int
	// Dir is corral's own cgroup directory in that hierarchy; the
	// per-command cgroups are made directly below it, never anywhere
	// shared with other programs.
	Dir string
	// Swap is set when the hierarchy accounts swap
	// (memory.memsw.limit_in_bytes on v1, memory.swap.max on v2), so the
	// limit covers swap too.
	Swap bool
	// Enable (v2 only) means memory is not yet in Dir's
	// cgroup.subtree_control: corral must move itself into a leaf below Dir
	// and enable it there (cgroup v2's "no internal processes" rule,
	// Documentation/admin-guide/cgroup-v2.rst) before making children.
	Enable bool
	// Reason says why Version is 0.
	Reason string
}

// cgroupMount is one cgroup hierarchy from mountinfo.
type cgroupMount struct {
	point, root string
}

// parseCgroupMounts finds the v1 hierarchy that carries the memory
// controller and the cgroup2 mount in mountinfo (proc(5): fields 4 and 5
// are the mount's root and mount point; after " - " come the filesystem
// type, the source and the super options, which name a v1 hierarchy's
// controllers).
func parseCgroupMounts(mountinfo string) (v1mem, v2 *cgroupMount) {
	for _, line := range strings.Split(mountinfo, "\n") {
		left, right, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 {
			continue
		}
		m := &cgroupMount{root: unescapeMount(lf[3]), point: unescapeMount(lf[4])}
		switch rf[0] {
		case "cgroup2":
			if v2 == nil {
				v2 = m
			}
		case "cgroup":
			if v1mem == nil && hasField(rf[2], "memory", ",") {
				v1mem = m
			}
		}
	}
	return v1mem, v2
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroups returns this process's cgroup in the v1 memory hierarchy and
// in the unified one ("" where it has none), from /proc/self/cgroup.
func ownCgroups(procCgroup string) (v1mem, v2 string) {
	for _, line := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case hasField(parts[1], "memory", ","):
			v1mem = parts[2]
		}
	}
	return v1mem, v2
}

// hasField reports whether w is one of the sep-separated fields of s.
func hasField(s, w, sep string) bool {
	for _, f := range strings.Split(strings.TrimSpace(s), sep) {
		if strings.TrimSpace(f) == w {
			return true
		}
	}
	return false
}

// cgroupDir is the directory of cgroup path own in a hierarchy mounted at
// m; ok is false when own lies outside the part of the hierarchy that is
// mounted (a bind of a subtree).
func cgroupDir(m *cgroupMount, own string) (string, bool) {
	rel := own
	if m.root != "/" {
		if own != m.root && !strings.HasPrefix(own, m.root+"/") {
			return "", false
		}
		rel = strings.TrimPrefix(own, m.root)
	}
	return path.Join(m.point, rel), true
}

// placeMemoryCgroup decides where the per-command memory cgroups go: below
// corral's own cgroup in the v1 memory hierarchy when there is one (the
// controller is then bound to it and absent from v2, cgroups(7)), else
// below corral's own cgroup in the unified hierarchy when memory is among
// its cgroup.controllers. Corral's own cgroup must be writable (mkdir);
// on v2 also its cgroup.procs (moving a process takes write access to the
// common ancestor's cgroup.procs, cgroup-v2.rst "Delegation Containment")
// and, unless memory is enabled there already, its cgroup.subtree_control.
// Pure: every fact comes from f.
func placeMemoryCgroup(f cgroupFacts) memPlace {
	mv1, mv2 := parseCgroupMounts(f.MountInfo)
	own1, own2 := ownCgroups(f.ProcCgroup)
	var why []string
	if mv1 != nil {
		dir, ok := cgroupDir(mv1, own1)
		switch {
		case own1 == "":
			why = append(why, fmt.Sprintf("cgroup v1 memory hierarchy at %s: corral's cgroup there is unknown (/proc/self/cgroup)", mv1.point))
		case !ok:
			why = append(why, fmt.Sprintf("cgroup v1 memory hierarchy at %s: corral's cgroup %s is outside the mounted part", mv1.point, own1))
		case !f.Writable(dir):
			why = append(why, fmt.Sprintf("cgroup v1 memory hierarchy: corral's cgroup %s is not writable (on v1 only root can make cgroups)", dir))
		default:
			if _, ok := f.Read(path.Join(dir, "memory.limit_in_bytes")); !ok {
				why = append(why, fmt.Sprintf("cgroup v1 memory hierarchy: %s has no memory.limit_in_bytes", dir))
				break
			}
			_, swap := f.Read(path.Join(dir, "memory.memsw.limit_in_bytes"))
			return memPlace{Version: 1, Dir: dir, Swap: swap}
		}
	}
	if mv2 != nil {
		dir, ok := cgroupDir(mv2, own2)
		ctrl, _ := f.Read(path.Join(dir, "cgroup.controllers"))
		sub, _ := f.Read(path.Join(dir, "cgroup.subtree_control"))
		enabled := hasField(sub, "memory", " ")
		switch {
		case own2 == "":
			why = append(why, fmt.Sprintf("cgroup v2 at %s: corral's cgroup there is unknown (/proc/self/cgroup)", mv2.point))
		case !ok:
			why = append(why, fmt.Sprintf("cgroup v2 at %s: corral's cgroup %s is outside the mounted part", mv2.point, own2))
		case !hasField(ctrl, "memory", " "):
			why = append(why, fmt.Sprintf("cgroup v2 at %s: memory is not among the controllers of %s", mv2.point, dir))
		case !f.Writable(dir) || !f.Writable(path.Join(dir, "cgroup.procs")):
			why = append(why, fmt.Sprintf("cgroup v2: corral's cgroup %s is not delegated to it (not writable)", dir))
		case !enabled && !f.Writable(path.Join(dir, "cgroup.subtree_control")):
			why = append(why, fmt.Sprintf("cgroup v2: memory is not enabled in %s/cgroup.subtree_control, which corral may not write", dir))
		default:
			// memory.swap.max lives in the children once memory is enabled
			// for them; the root cgroup's own files say whether swap is
			// accounted at all (CONFIG_MEMCG_SWAP): read a child's later.
			return memPlace{Version: 2, Dir: dir, Swap: true, Enable: !enabled}
		}
	}
	if mv1 == nil && mv2 == nil {
		why = append(why, "no cgroup filesystem is mounted")
	}
	return memPlace{Reason: strings.Join(why, "; ")}
}

// cgWrite is one step of making a cgroup: a directory to make, or data to
// write to a file.
type cgWrite struct {
	Path  string
	Data  string
	Mkdir bool
	// Optional steps may fail (a file the kernel lacks) without failing
	// the whole.
	Optional bool
}

// memoryCgroupWrites returns the steps that make the cgroup dir (below
// p.Dir) and set its limit to limit bytes: on v1 memory.limit_in_bytes and
// then memory.memsw.limit_in_bytes (memory plus swap; it may not be set
// below the memory limit, so it comes second: Documentation/admin-guide/
// cgroup-v1/memory.rst 2.4), both to limit, so swap cannot stretch it; on
// v2 memory.max = limit, memory.swap.max = 0, and memory.oom.group = 1, so
// that an OOM kill ends the whole command rather than one process of it
// (cgroup-v2.rst "Memory Interface Files"). The first step is always the
// directory. Pure.
func memoryCgroupWrites(p memPlace, dir string, limit uint64) []cgWrite {
	n := strconv.FormatUint(limit, 10)
	switch p.Version {
	case 1:
		w := []cgWrite{{Path: dir, Mkdir: true}, {Path: path.Join(dir, "memory.limit_in_bytes"), Data: n}}
		if p.Swap {
			w = append(w, cgWrite{Path: path.Join(dir, "memory.memsw.limit_in_bytes"), Data: n})
		}
		return w
	case 2:
		return []cgWrite{
			{Path: dir, Mkdir: true},
			{Path: path.Join(dir, "memory.max"), Data: n},
			{Path: path.Join(dir, "memory.swap.max"), Data: "0", Optional: true},
			{Path: path.Join(dir, "memory.oom.group"), Data: "1", Optional: true},
		}
	}
	return nil
}

// enableWrites returns the steps that enable the memory controller for
// the children of p.Dir on cgroup v2 (p.Enable): a non-root cgroup that
// enables a controller for its children may hold no process itself, so
// corral (pid) first moves into a leaf of its own, leaf, below it. Pure.
func enableWrites(p memPlace, leaf string, pid int) []cgWrite {
	if p.Version != 2 || !p.Enable {
		return nil
	}
	return []cgWrite{
		{Path: leaf, Mkdir: true},
		{Path: path.Join(leaf, "cgroup.procs"), Data: strconv.Itoa(pid)},
		{Path: path.Join(p.Dir, "cgroup.subtree_control"), Data: "+memory"},
	}
}

// oomKillsFile is the file whose "oom_kill N" line counts the processes
// the OOM killer ended in a cgroup: memory.oom_control on v1 (Linux 4.13+)
// and memory.events on v2.
func oomKillsFile(version int) string {
	if version == 2 {
		return "memory.events"
	}
	return "memory.oom_control"
}

// parseOOMKills returns N of the "oom_kill N" line of an oomKillsFile, or
// 0.
func parseOOMKills(content string) int {
	for _, line := range strings.Split(content, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// sweepableCgroup reports whether a cgroup directory named name, ageSec
// seconds old, may be swept by corral process self: one of corral's
// (cgroupPrefix), not self's own, and older than a minute, since a younger
// one may belong to a corral that is about to move its bwrap in. Whether
// it is empty is the kernel's to say (rmdir(2) of a cgroup with tasks
// fails with EBUSY).
func sweepableCgroup(name string, ageSec float64, self int) bool {
	if !strings.HasPrefix(name, cgroupPrefix) {
		return false
	}
	if pid, _, ok := strings.Cut(strings.TrimPrefix(name, cgroupPrefix), "-"); ok && pid == strconv.Itoa(self) {
		return false
	}
	return ageSec >= 60
}
