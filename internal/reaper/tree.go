package reaper

import (
	"os"
	"slices"
	"strconv"

	"github.com/corralhq/corral/internal/procfs"
)

// Proc is one process as /proc showed it: its pid, its parent's, and its
// start time (field 22 of proc(5)'s stat, in clock ticks since boot),
// which together with the pid names the process even after the pid has
// been reused.
type Proc struct {
	Pid, PPid int
	Start     uint64
}

// Descendants returns every process of procs below root (children,
// their children, and so on), in breadth-first order, root itself left
// out. A process whose parent chain does not reach root is not among them.
func Descendants(root int, procs []Proc) []Proc {
	children := map[int][]Proc{}
	for _, p := range procs {
		if p.Pid != root {
			children[p.PPid] = append(children[p.PPid], p)
		}
	}
	var out []Proc
	seen := map[int]bool{root: true}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if seen[c.Pid] {
				continue // a table read while pids moved: no loops
			}
			seen[c.Pid] = true
			out = append(out, c)
			queue = append(queue, c.Pid)
		}
	}
	return out
}

// Scan reads every process of /proc: pid, parent and start time. A
// process that goes between the listing and the read is left out.
func Scan() []Proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]Proc, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, st, ok := procfs.ParentAndStart(pid)
		if !ok {
			continue
		}
		out = append(out, Proc{Pid: pid, PPid: ppid, Start: st})
	}
	return slices.Clip(out)
}
