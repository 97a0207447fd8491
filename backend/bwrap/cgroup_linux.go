package bwrap

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// readCgroupFacts gathers what placeMemoryCgroup decides from.
func readCgroupFacts() cgroupFacts {
	read := func(p string) (string, bool) {
		b, err := os.ReadFile(p)
		return string(b), err == nil
	}
	pc, _ := read("/proc/self/cgroup")
	mi, _ := read("/proc/self/mountinfo")
	return cgroupFacts{
		ProcCgroup: pc,
		MountInfo:  mi,
		Read:       read,
		Writable:   func(p string) bool { return unix.Access(p, unix.W_OK) == nil },
	}
}

// MemoryLimit says, in one line for `corral doctor`, how memory_mb (MiB;
// 0: none) bounds a bwrap command on this machine for this caller: for the
// whole command in a memory cgroup where corral can make one (see
// placeMemoryCgroup; the ptrace gate moves bwrap in, so a setuid bwrap,
// which runs ungated, never gets one), else per process through RLIMIT_DATA,
// with the reason. It reads /proc and the cgroup filesystem and writes
// nothing.
func MemoryLimit(bin *Binary, memoryMB int) string {
	if memoryMB <= 0 {
		return "memory: no limit (memory_mb 0)"
	}
	p := placeMemoryCgroup(readCgroupFacts())
	why := p.Reason
	if p.Version != 0 && bin != nil && bin.Setuid && os.Getuid() != 0 {
		why = "a setuid bwrap starts without the ptrace gate that moves it into the cgroup"
	} else if p.Version != 0 {
		extra := ""
		if p.Enable {
			extra = "; corral moves itself into a leaf cgroup there to enable the controller"
		}
		return fmt.Sprintf("memory: %d MiB for the whole command (cgroup v%d memory controller at %s%s)", memoryMB, p.Version, p.Dir, extra)
	}
	return fmt.Sprintf("memory: %d MiB of memory per process (RLIMIT_DATA); no cgroup memory controller corral can use (%s)", memoryMB, why)
}

// memCgroups is the process's place for memory cgroups, found once: it
// is about the process's own cgroup, so every Backend of the process
// shares it (and, on v2, corral moves itself into its leaf only once), and
// the numbers in the cgroups' names are the process's, never repeated.
type memCgroups struct {
	once  sync.Once
	place memPlace
	n     atomic.Int64
}

// processMemCgroups is the one memCgroups of this process.
var processMemCgroups memCgroups

// get returns where this process makes its memory cgroups. The first call
// decides (placeMemoryCgroup), sweeps the empty cgroups crashed corral
// processes left there, and on cgroup v2 enables the controller when
// needed; a failure of that makes the place unusable (Version 0), and
// commands then get RLIMIT_DATA.
func (m *memCgroups) get(log *slog.Logger) memPlace {
	m.once.Do(func() {
		p := placeMemoryCgroup(readCgroupFacts())
		if p.Version == 0 {
			log.Debug("bwrap.memcg.none", "reason", p.Reason)
			m.place = p
			return
		}
		if n := sweepMemCgroupsIn(p.Dir); len(n) > 0 {
			log.Info("bwrap.memcg.swept", "dir", p.Dir, "removed", len(n))
		}
		if p.Enable {
			leaf := filepath.Join(p.Dir, fmt.Sprintf("%s%d-self", cgroupPrefix, os.Getpid()))
			if err := applyWrites(enableWrites(p, leaf, os.Getpid())); err != nil {
				// Move back, so nothing of corral's is left in the leaf.
				_ = os.WriteFile(filepath.Join(p.Dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
				_ = os.Remove(leaf)
				p = memPlace{Reason: fmt.Sprintf("cgroup v2: enabling memory for the children of %s failed (%v); other processes sharing corral's cgroup prevent it: start corral in a cgroup of its own (systemd-run --scope -p Delegate=yes)", p.Dir, err)}
				log.Warn("bwrap.memcg.unavailable", "reason", p.Reason)
			}
		}
		m.place = p
	})
	return m.place
}

// applyWrites carries out ws in order.
func applyWrites(ws []cgWrite) error {
	for _, w := range ws {
		var err error
		if w.Mkdir {
			err = os.Mkdir(w.Path, 0o755)
		} else {
			err = os.WriteFile(w.Path, []byte(w.Data), 0)
		}
		if err != nil && !w.Optional {
			return err
		}
	}
	return nil
}

// memCgroup is one command's memory cgroup.
type memCgroup struct {
	version int
	dir     string
	// procs is dir's cgroup.procs, opened by the starting goroutine while
	// it holds corral's own credentials: the kernel judges a migration by
	// the opener's credentials (Linux 5.16+, "cgroup: Use open-time
	// credentials for process migraton perm checks"), and the gate's
	// thread may have taken run_as's identity by the time it writes.
	procs  *os.File
	joined atomic.Bool
}

// newMemCgroup makes a memory cgroup below p.Dir whose limit is mb MiB for
// everything in it, memory and swap together.
func (m *memCgroups) newMemCgroup(p memPlace, mb int) (*memCgroup, error) {
	dir := filepath.Join(p.Dir, fmt.Sprintf("%s%d-%d", cgroupPrefix, os.Getpid(), m.n.Add(1)))
	ws := memoryCgroupWrites(p, dir, mib(mb))
	// The directory first, on its own: a failure to make it must not
	// remove one that is not this command's.
	if err := applyWrites(ws[:1]); err != nil {
		return nil, fmt.Errorf("making the memory cgroup %s: %w", dir, err)
	}
	if err := applyWrites(ws[1:]); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("setting the limit of the memory cgroup %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("opening %s/cgroup.procs: %w", dir, err)
	}
	return &memCgroup{version: p.Version, dir: dir, procs: f}, nil
}

// enter moves process pid (bwrap, stopped at its exec stop by the gate, so
// it has run no instruction yet) into the cgroup, and reports whether it
// did; nil c does nothing. Everything bwrap starts is then born inside.
func (c *memCgroup) enter(pid int, log *slog.Logger) bool {
	if c == nil {
		return false
	}
	if _, err := c.procs.WriteString(strconv.Itoa(pid)); err != nil {
		if log != nil {
			log.Warn("bwrap.memcg.enter_failed", "dir", c.dir, "pid", pid, "error", err)
		}
		return false
	}
	c.joined.Store(true)
	return true
}

// inside reports whether bwrap was moved into the cgroup; nil c is not.
func (c *memCgroup) inside() bool { return c != nil && c.joined.Load() }

// oomKills returns how many processes the OOM killer ended in the cgroup.
func (c *memCgroup) oomKills() int {
	b, err := os.ReadFile(filepath.Join(c.dir, oomKillsFile(c.version)))
	if err != nil {
		return 0
	}
	return parseOOMKills(string(b))
}

// cgroupRemoveWait bounds how long remove waits for the last task to leave
// before it hands the removal to a background goroutine.
const cgroupRemoveWait = 2 * time.Second

// remove deletes the cgroup once the command's whole tree has left it:
// rmdir(2) of a cgroup refuses (EBUSY) while it has tasks, and the tasks
// of a killed pid namespace may still be on their way out. It waits for
// that with a bounded condition loop, then leaves the rest to a goroutine
// with a minute's deadline; what a crashed corral leaves, the next one
// sweeps (sweepMemCgroupsIn). nil c does nothing.
func (c *memCgroup) remove(log *slog.Logger) {
	if c == nil {
		return
	}
	_ = c.procs.Close()
	try := func() bool {
		err := os.Remove(c.dir)
		return err == nil || errors.Is(err, os.ErrNotExist)
	}
	if waitFor(cgroupRemoveWait, try) {
		return
	}
	go func() {
		if !waitFor(time.Minute, try) && log != nil {
			log.Warn("bwrap.memcg.left", "dir", c.dir)
		}
	}()
}

// waitFor polls cond until it holds or d has passed, and says which.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
}

// sweepMemCgroupsIn removes the empty cgroups below dir that corral
// processes left (sweepableCgroup) and returns their paths.
func sweepMemCgroupsIn(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		fi, err := e.Info()
		if err != nil || !sweepableCgroup(e.Name(), time.Since(fi.ModTime()).Seconds(), os.Getpid()) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if os.Remove(p) == nil {
			out = append(out, p)
		}
	}
	return out
}

// SweepMemoryCgroups removes the empty memory cgroups that corral
// processes which are gone left below this process's own cgroup (older
// than a minute, named corral-*; rmdir(2) refuses one that still has
// tasks), and returns their paths. For `corral cleanup`.
func SweepMemoryCgroups() []string {
	p := placeMemoryCgroup(readCgroupFacts())
	if p.Version == 0 {
		return nil
	}
	return sweepMemCgroupsIn(p.Dir)
}
