package bwrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// MemoryDiagnosis is how memory_mb holds for this caller's bwrap
// commands, for `corral doctor`.
type MemoryDiagnosis struct {
	// Kind is MemoryCgroupV1 or MemoryCgroupV2 (the whole command, all
	// its processes together), MemoryRlimitData (each process) or
	// MemoryNone (memory_mb 0).
	Kind string `json:"kind"`
	// Line says it in one line: the bound, over what, and where there is
	// no cgroup why, what that means and what would give one
	// (describeMemory).
	Line string `json:"line"`
}

// DiagnoseMemory says how memory_mb (MiB; 0: none) bounds a bwrap command
// for this caller on this machine: what this process decided at its first
// command with a memory limit (memCgroups.get), or before that, what it
// would decide, found without changing anything: the cgroups are read
// and, where corral would ask its systemd user manager for a scope, the
// manager is asked for its cgroup only. bin is the bwrap in use (nil:
// unknown); a setuid one run unprivileged starts through prlimit(1) and
// gets RLIMIT_DATA.
func DiagnoseMemory(bin *Binary, memoryMB int) MemoryDiagnosis {
	b := processMemCgroups.forecast()
	if bin != nil && bin.Setuid && os.Getuid() != 0 {
		b = memoryBound{Prlimit: true, Fix: "a bwrap without the setuid bit, where unprivileged user namespaces work"}
	}
	if b.kind(memoryMB) == MemoryRlimitData {
		b.Caveat = rlimitDataCaveat(kernelRelease(), readTrim("/sys/module/kernel/parameters/ignore_rlimit_data"))
	}
	return MemoryDiagnosis{Kind: b.kind(memoryMB), Line: describeMemory(b, memoryMB)}
}

// MemoryLimit is DiagnoseMemory's line.
func MemoryLimit(bin *Binary, memoryMB int) string { return DiagnoseMemory(bin, memoryMB).Line }

// kernelRelease is uname(2)'s release, or "".
func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// readTrim returns a file's contents without surrounding white space, or
// "".
func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.TrimSpace(string(b))
}

// memCgroups is the process's bound for memory, found once: it is about
// the process's own cgroup, so every Backend of the process shares it
// (and, on v2, corral moves itself into a scope or leaf only once), and
// the numbers in the cgroups' names are the process's, never repeated.
type memCgroups struct {
	once    sync.Once
	decided atomic.Bool
	bound   memoryBound
	n       atomic.Int64
}

// processMemCgroups is the one memCgroups of this process.
var processMemCgroups memCgroups

// get returns where this process makes its memory cgroups (Version 0:
// nowhere; commands then get RLIMIT_DATA). The first call decides
// (settleMemory).
func (m *memCgroups) get(log *slog.Logger) memPlace {
	m.once.Do(func() {
		m.bound = settleMemory(log)
		m.decided.Store(true)
	})
	return m.bound.Place
}

// forecast returns the bound get decided, or, before it has, the one it
// would decide, found without changing anything (DiagnoseMemory).
func (m *memCgroups) forecast() memoryBound {
	if m.decided.Load() {
		return m.bound
	}
	f := readCgroupFacts()
	p := placeMemoryCgroup(f)
	b := memoryBound{Place: p}
	if p.Version != 0 {
		return b
	}
	why, fix := userScopeBlocked(f, os.Getuid(), os.Getpid(), p)
	if why != "" {
		b.Fix = fix
		return b
	}
	cg, err := probeUserManager(thisScopeHost())
	if err == nil {
		why, fix = userScopeFits(f, cg)
	} else {
		why, fix = err.Error(), fixNoManager
	}
	if why != "" {
		b.Place.Reason = joinReasons(p.Reason, "systemd user scope: "+why)
		b.Fix = fix
		return b
	}
	// It would be asked for, and below it memory enabled for the
	// commands' cgroups.
	_, mv2 := parseCgroupMounts(f.MountInfo)
	dir, _ := cgroupDir(mv2, cg)
	unit := userScopeUnit(os.Getpid())
	return memoryBound{Place: memPlace{Version: 2, Dir: filepath.Join(dir, "app.slice", unit), Swap: true, Enable: true}, Scope: unit, ScopePending: true}
}

// settleMemory decides where this process makes its memory cgroups, and
// readies the place: corral's own cgroup where it can use one
// (placeMemoryCgroup, readyPlace), else, for an unprivileged caller on
// cgroup v2, a transient scope of its systemd user manager that corral
// moves itself into (userscope.go); else none, with why and what would
// give one.
func settleMemory(log *slog.Logger) memoryBound {
	p := readyPlace(placeMemoryCgroup(readCgroupFacts()), log)
	if p.Version != 0 {
		return memoryBound{Place: p}
	}
	b := memoryBound{Place: p}
	why, fix := userScopeBlocked(readCgroupFacts(), os.Getuid(), os.Getpid(), p)
	if why != "" {
		b.Fix = fix
		log.Debug("bwrap.memcg.none", "reason", p.Reason, "scope", why)
		return b
	}
	unit, err := joinUserScope(context.Background(), thisScopeHost())
	if err != nil {
		var se *scopeError
		if errors.As(err, &se) {
			b.Fix = se.fix
		}
		b.Place.Reason = joinReasons(p.Reason, "systemd user scope: "+err.Error())
		log.Warn("bwrap.memcg.scope_failed", "error", err)
		return b
	}
	q := readyPlace(placeMemoryCgroup(readCgroupFacts()), log)
	if q.Version == 0 {
		b.Place.Reason = joinReasons(p.Reason, fmt.Sprintf("in the systemd user scope %s corral moved itself into: %s", unit, q.Reason))
		b.Scope, b.Fix = unit, fixNotDelegated
		log.Warn("bwrap.memcg.unavailable", "unit", unit, "reason", q.Reason)
		return b
	}
	log.Info("bwrap.memcg.scope", "unit", unit, "dir", q.Dir)
	return memoryBound{Place: q, Scope: unit}
}

// joinReasons joins the non-empty reasons with "; ".
func joinReasons(rs ...string) string {
	var out []string
	for _, r := range rs {
		if r != "" {
			out = append(out, r)
		}
	}
	return strings.Join(out, "; ")
}

// readyPlace readies a place placeMemoryCgroup found: it sweeps the empty
// cgroups crashed corral processes left there and, on cgroup v2 where
// needed, enables the controller (enableWrites). A failure of that makes
// the place unusable: Version 0, with the reason.
func readyPlace(p memPlace, log *slog.Logger) memPlace {
	if p.Version == 0 {
		return p
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
			p = memPlace{Reason: fmt.Sprintf("cgroup v2: enabling memory for the children of %s failed (%v): other processes share corral's cgroup (start corral in a cgroup of its own: systemd-run --scope -p Delegate=yes)", p.Dir, err)}
			log.Warn("bwrap.memcg.unavailable", "reason", p.Reason)
		}
	}
	return p
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
	procs *os.File
	// tasks and home (v1 only; nil on v2) are this cgroup's tasks file
	// and that of the cgroup it was made in (corral's own), opened like
	// procs with corral's own credentials, for enterThread.
	tasks, home *os.File
	// byThread is set by the starter when bwrap is started from a thread
	// that ends with the command (startAs): enterThread may then move it.
	byThread bool
	joined   atomic.Bool
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
	c := &memCgroup{version: p.Version, dir: dir, procs: f}
	if p.Version == 1 {
		// Failures leave tasks or home nil: bwrap is then moved in at
		// its exec stop (enter), as on v2.
		c.tasks, _ = os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
		c.home, _ = os.OpenFile(filepath.Join(p.Dir, "tasks"), os.O_WRONLY, 0)
	}
	return c, nil
}

// threadEntry reports whether bwrap can be born inside its memory cgroup
// rather than moved in at its exec stop: on cgroup v1, whose cgroups hold
// threads, the starting thread moves itself in (writing "0", itself, to
// the tasks file) for the fork, as a child is born in its forking
// thread's cgroups (kernel/cgroup/cgroup.c, cgroup_fork). The kernel
// skips its system-wide lock for a thread that moves itself
// (cgroup_procs_write_start: pid 0, not the thread group): 0.1 to 0.3 ms
// measured on Linux 6.18, where moving a process (cgroup.procs)
// write-locks cgroup_threadgroup_rwsem and waits out an RCU grace period:
// 8 to 24 ms on the same 2-core machine, the largest single cost of a
// `corral run` (a kernel that locks for both is no slower than before). Only a thread that ends with the command (throwaway) is moved:
// should moving it back out fail, nothing else of corral's runs in the
// sandbox's cgroup, and the cgroup is removed after the thread ended. v2
// has no such move for a memory cgroup (its cgroups are domains, whose
// threads move together); there bwrap is moved in at its exec stop.
// Pure.
func threadEntry(version int, throwaway, filesOpen bool) bool {
	return version == 1 && throwaway && filesOpen
}

// enterThread moves the calling thread (locked, and ending with the
// command: byThread) into the cgroup, so that the bwrap it forks next is
// born inside, and returns the function that moves it back to corral's
// own cgroup, to be called right after the fork; ok false means nothing
// was moved (nil c, v2, not byThread, or the move failed: logged) and
// bwrap is to be moved at its exec stop (enter).
func (c *memCgroup) enterThread(log *slog.Logger) (leave func(), ok bool) {
	if c == nil || !threadEntry(c.version, c.byThread, c.tasks != nil && c.home != nil) {
		return nil, false
	}
	if _, err := c.tasks.WriteString("0"); err != nil {
		// Debug: bwrap is then moved in at its exec stop, as before; a
		// kernel that refuses the thread's move refuses it on every
		// command, which would warn each time.
		if log != nil {
			log.Debug("bwrap.memcg.thread_enter_failed", "dir", c.dir, "error", err)
		}
		return nil, false
	}
	return func() {
		if _, err := c.home.WriteString("0"); err != nil && log != nil {
			// The thread stays inside until it ends with the command.
			log.Warn("bwrap.memcg.thread_leave_failed", "dir", c.dir, "error", err)
		}
	}, true
}

// bornInside records that bwrap was born inside the cgroup
// (enterThread).
func (c *memCgroup) bornInside() { c.joined.Store(true) }

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

// cgroupRemoveWait bounds how long Backend.Close waits for the memory
// cgroups still being removed (memCgroup.remove).
const cgroupRemoveWait = 2 * time.Second

// remove deletes the cgroup once the command's whole tree has left it:
// rmdir(2) of a cgroup refuses (EBUSY) while it has tasks, and the tasks
// of a killed pid namespace may still be on their way out (the sandbox's
// pid 1 leaves its cgroup only after its mount namespace is torn down,
// kernel/exit.c do_exit: exit_task_namespaces, then cgroup_exit). The
// first rmdir is tried at once; when tasks remain, a goroutine counted in
// pending tries again until they have left (for at most a minute, then it
// logs bwrap.memcg.left), so the command's result does not wait for the
// kernel's teardown; Backend.Close waits for pending. What a crashed
// corral leaves, the next one sweeps (sweepMemCgroupsIn). nil c does
// nothing.
func (c *memCgroup) remove(log *slog.Logger, pending *sync.WaitGroup) {
	if c == nil {
		return
	}
	_ = c.procs.Close()
	for _, f := range []*os.File{c.tasks, c.home} {
		if f != nil {
			_ = f.Close()
		}
	}
	try := func() bool {
		err := os.Remove(c.dir)
		return err == nil || errors.Is(err, os.ErrNotExist)
	}
	if try() {
		return
	}
	pending.Add(1)
	go func() {
		defer pending.Done()
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
