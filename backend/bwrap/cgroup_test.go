package bwrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// Mount tables of the machines the decision must tell apart (proc(5)
// mountinfo lines, cut to what matters).
const (
	miHybrid = `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	miUnified = `30 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	miNone = `22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw
`
	pcHybrid  = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/b3\n1:cpu:/\n0::/\n"
	pcService = "0::/system.slice/corral.service\n"
	pcUser    = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/corral.scope\n"
)

// facts builds cgroupFacts from a mount table, /proc/self/cgroup, the
// files that exist (with contents) and the paths that are writable.
func facts(mi, pc string, files map[string]string, writable ...string) cgroupFacts {
	w := map[string]bool{}
	for _, p := range writable {
		w[p] = true
	}
	return cgroupFacts{
		ProcCgroup: pc,
		MountInfo:  mi,
		Read: func(p string) (string, bool) {
			s, ok := files[p]
			return s, ok
		},
		Writable: func(p string) bool { return w[p] },
	}
}

func TestPlaceMemoryCgroup(t *testing.T) {
	v1dir := "/sys/fs/cgroup/memory/process_api/b3"
	v1files := map[string]string{v1dir + "/memory.limit_in_bytes": "9223372036854771712\n", v1dir + "/memory.memsw.limit_in_bytes": "9223372036854771712\n", "/sys/fs/cgroup/unified/cgroup.controllers": "\n"}
	svc := "/sys/fs/cgroup/system.slice/corral.service"
	user := "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/corral.scope"
	for _, tc := range []struct {
		name       string
		f          cgroupFacts
		want       memPlace
		wantReason []string // substrings of Reason when Version is 0
	}{
		{
			name: "v1 hybrid, root",
			f:    facts(miHybrid, pcHybrid, v1files, v1dir),
			want: memPlace{Version: 1, Dir: v1dir, Swap: true},
		},
		{
			name: "v1 hybrid without swap accounting",
			f:    facts(miHybrid, pcHybrid, map[string]string{v1dir + "/memory.limit_in_bytes": "1\n"}, v1dir),
			want: memPlace{Version: 1, Dir: v1dir},
		},
		{
			name:       "v1 hybrid, unprivileged: v1 not writable and no controller in v2",
			f:          facts(miHybrid, pcHybrid, v1files),
			wantReason: []string{"cgroup v1 memory hierarchy: corral's cgroup " + v1dir + " is not writable", "memory is not among the controllers of /sys/fs/cgroup/unified"},
		},
		{
			name: "v2 root cgroup (a container with its own cgroup namespace, as root)",
			f: facts(miUnified, "0::/\n", map[string]string{"/sys/fs/cgroup/cgroup.controllers": "cpu io memory pids\n", "/sys/fs/cgroup/cgroup.subtree_control": "memory pids\n"},
				"/sys/fs/cgroup", "/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/cgroup.subtree_control"),
			want: memPlace{Version: 2, Dir: "/sys/fs/cgroup", Swap: true},
		},
		{
			name: "v2 root in a service cgroup: memory must be enabled below it",
			f: facts(miUnified, pcService, map[string]string{svc + "/cgroup.controllers": "cpu memory pids\n", svc + "/cgroup.subtree_control": "\n"},
				svc, svc+"/cgroup.procs", svc+"/cgroup.subtree_control"),
			want: memPlace{Version: 2, Dir: svc, Swap: true, Enable: true},
		},
		{
			name: "v2 delegated to the user",
			f: facts(miUnified, pcUser, map[string]string{user + "/cgroup.controllers": "memory pids\n", user + "/cgroup.subtree_control": ""},
				user, user+"/cgroup.procs", user+"/cgroup.subtree_control"),
			want: memPlace{Version: 2, Dir: user, Swap: true, Enable: true},
		},
		{
			name:       "v2 not delegated",
			f:          facts(miUnified, pcUser, map[string]string{user + "/cgroup.controllers": "memory pids\n"}),
			wantReason: []string{"not delegated"},
		},
		{
			name:       "v2 delegated, subtree_control not writable",
			f:          facts(miUnified, pcUser, map[string]string{user + "/cgroup.controllers": "memory pids\n"}, user, user+"/cgroup.procs"),
			wantReason: []string{"memory is not enabled in " + user + "/cgroup.subtree_control"},
		},
		{
			name:       "v2 without the memory controller",
			f:          facts(miUnified, pcUser, map[string]string{user + "/cgroup.controllers": "pids\n"}, user, user+"/cgroup.procs", user+"/cgroup.subtree_control"),
			wantReason: []string{"memory is not among the controllers"},
		},
		{
			name:       "nothing mounted",
			f:          facts(miNone, "0::/\n", nil),
			wantReason: []string{"no cgroup filesystem is mounted"},
		},
		{
			name: "a bound subtree that corral's cgroup lies outside",
			f: facts(`40 30 0:37 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`, "0::/other\n", nil, "/sys/fs/cgroup"),
			wantReason: []string{"outside the mounted part"},
		},
		{
			name: "a bound subtree that corral's cgroup lies in",
			f: facts(`40 30 0:37 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`, "0::/docker/abc/inner\n", map[string]string{"/sys/fs/cgroup/inner/cgroup.controllers": "memory", "/sys/fs/cgroup/inner/cgroup.subtree_control": "memory"},
				"/sys/fs/cgroup/inner", "/sys/fs/cgroup/inner/cgroup.procs"),
			want: memPlace{Version: 2, Dir: "/sys/fs/cgroup/inner", Swap: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := placeMemoryCgroup(tc.f)
			if len(tc.wantReason) > 0 {
				if got.Version != 0 {
					t.Fatalf("placeMemoryCgroup = %+v, want none", got)
				}
				for _, w := range tc.wantReason {
					if !strings.Contains(got.Reason, w) {
						t.Errorf("Reason = %q, want it to contain %q", got.Reason, w)
					}
				}
				return
			}
			if got != tc.want {
				t.Errorf("placeMemoryCgroup = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMemoryCgroupWrites(t *testing.T) {
	const d = "/cg/corral-1-1"
	for _, tc := range []struct {
		name string
		p    memPlace
		want []cgWrite
	}{
		{"v1 with swap: memory first, then memory+swap", memPlace{Version: 1, Dir: "/cg", Swap: true}, []cgWrite{
			{Path: d, Mkdir: true},
			{Path: d + "/memory.limit_in_bytes", Data: "209715200"},
			{Path: d + "/memory.memsw.limit_in_bytes", Data: "209715200"},
		}},
		{"v1 without swap accounting", memPlace{Version: 1, Dir: "/cg"}, []cgWrite{
			{Path: d, Mkdir: true},
			{Path: d + "/memory.limit_in_bytes", Data: "209715200"},
		}},
		{"v2: max, no swap, the whole command killed together", memPlace{Version: 2, Dir: "/cg", Swap: true}, []cgWrite{
			{Path: d, Mkdir: true},
			{Path: d + "/memory.max", Data: "209715200"},
			{Path: d + "/memory.swap.max", Data: "0", Optional: true},
			{Path: d + "/memory.oom.group", Data: "1", Optional: true},
		}},
		{"none", memPlace{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := memoryCgroupWrites(tc.p, d, mib(200)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("memoryCgroupWrites = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestEnableWrites(t *testing.T) {
	p := memPlace{Version: 2, Dir: "/cg/svc", Enable: true}
	want := []cgWrite{
		{Path: "/cg/svc/corral-7-self", Mkdir: true},
		{Path: "/cg/svc/corral-7-self/cgroup.procs", Data: "7"},
		{Path: "/cg/svc/cgroup.subtree_control", Data: "+memory"},
	}
	if got := enableWrites(p, "/cg/svc/corral-7-self", 7); !reflect.DeepEqual(got, want) {
		t.Errorf("enableWrites = %+v, want %+v", got, want)
	}
	for _, p := range []memPlace{{Version: 2, Dir: "/cg"}, {Version: 1, Dir: "/cg", Enable: true}} {
		if got := enableWrites(p, "/cg/x", 7); got != nil {
			t.Errorf("enableWrites(%+v) = %+v, want none", p, got)
		}
	}
}

func TestParseOOMKills(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3},                // v1 memory.oom_control
		{"low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n", 1}, // v2 memory.events
		{"oom_kill_disable 0\nunder_oom 0\n", 0},                            // before Linux 4.13
		{"", 0},
	} {
		if got := parseOOMKills(tc.in); got != tc.want {
			t.Errorf("parseOOMKills(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
	if oomKillsFile(1) != "memory.oom_control" || oomKillsFile(2) != "memory.events" {
		t.Errorf("oomKillsFile: %q %q", oomKillsFile(1), oomKillsFile(2))
	}
}

func TestSweepableCgroup(t *testing.T) {
	for _, tc := range []struct {
		name string
		age  float64
		want bool
	}{
		{"corral-99-3", 61, true},
		{"corral-99-self", 3600, true},
		{"corral-99-3", 59, false},   // may be about to take a bwrap
		{"corral-42-3", 3600, false}, // this process's own
		{"docker", 3600, false},
		{"sbx-1", 3600, false},
	} {
		if got := sweepableCgroup(tc.name, tc.age, 42); got != tc.want {
			t.Errorf("sweepableCgroup(%q, %v) = %v, want %v", tc.name, tc.age, got, tc.want)
		}
	}
}

// TestSweepMemCgroupsIn: corral's old empty cgroups go; young ones, other
// names and ones that still hold something stay (a plain directory with a
// file refuses rmdir as a cgroup with tasks does).
func TestSweepMemCgroupsIn(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-2 * time.Minute)
	for _, n := range []string{"corral-1-1", "corral-1-2", "other", "corral-1-busy"} {
		if err := os.Mkdir(filepath.Join(root, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "corral-1-busy", "task"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"corral-1-1", "other", "corral-1-busy"} {
		if err := os.Chtimes(filepath.Join(root, n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if got := sweepMemCgroupsIn(root); len(got) != 1 || filepath.Base(got[0]) != "corral-1-1" {
		t.Errorf("sweepMemCgroupsIn removed %v, want corral-1-1", got)
	}
	for n, gone := range map[string]bool{"corral-1-1": true, "corral-1-2": false, "other": false, "corral-1-busy": false} {
		if _, err := os.Stat(filepath.Join(root, n)); (err != nil) != gone {
			t.Errorf("%s: gone %v, want %v", n, err != nil, gone)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/end\04`: `/end\04`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// holdScript is a Python program that forks n children which each fill
// size bytes (every page touched) and then hold them; one byte on a pipe
// per child says it holds its memory. The parent waits for every child to
// either say so or die (its pipe ends), so all n hold their memory at the
// same moment unless something killed one: no timing decides. It prints
// HELD-ALL and exits 0 when all n held at once, else ends the rest and
// exits 137, as a shell reports a SIGKILL.
func holdScript(n int, size uint64) string {
	return fmt.Sprintf(`python3 -c '
import os, signal
fds, pids = [], []
for i in range(%d):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        b = bytearray(%d)
        b[::4096] = b"\x01" * len(range(0, len(b), 4096))
        os.write(w, b"x")
        signal.pause()
        os._exit(0)
    os.close(w)
    fds.append(r)
    pids.append(pid)
held = sum(1 for r in fds if os.read(r, 1) == b"x")
for p in pids:
    os.kill(p, signal.SIGKILL)
print("HELD", held)
if held == len(pids):
    print("HELD-ALL")
    raise SystemExit(0)
raise SystemExit(137)
'`, n, size)
}

// corralCgroups lists the cgroups of this process below dir.
func corralCgroups(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), fmt.Sprintf("%s%d-", cgroupPrefix, os.Getpid())) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestMemoryWholeCommand: where corral can use a memory cgroup (root on
// this machine's cgroup v1), memory_mb bounds the whole command: four
// children at 0.6 of it each are killed and reported as a memory kill of
// the whole command, one alone runs, no rlimit holds memory, and no
// cgroup is left behind. Elsewhere (an unprivileged caller here) memory_mb
// is RLIMIT_DATA per process, and MemoryLimit says which holds.
func TestMemoryWholeCommand(t *testing.T) {
	e := newEnv(t)
	requireTool(t, "python3", "apt-get install python3")
	const mb = 200
	// What the backend decides at its first command with a limit.
	p := processMemCgroups.get(e.backend.log)
	text := MemoryLimit(nil, mb)
	lim := func(r *sandbox.Request) { r.Limits = sandbox.Limits{MemoryMB: mb, CPUSeconds: 60, MaxProcs: 64} }
	if p.Version == 0 {
		if os.Getuid() == 0 {
			t.Skipf("root, but no memory cgroup corral can use here (%s): the whole-command limit cannot be exercised", p.Reason)
		}
		// The per-process path: RLIMIT_DATA, never RLIMIT_AS, and
		// doctor's line says so.
		if !strings.Contains(text, fmt.Sprintf("RLIMIT_DATA %d MiB per process", mb)) || !strings.Contains(text, p.Reason) {
			t.Errorf("MemoryLimit = %q, want RLIMIT_DATA and the reason %q", text, p.Reason)
		}
		o := e.sh(`ulimit -d; ulimit -v`, lim)
		if want := fmt.Sprintf("%d\nunlimited\n", mb*1024); o.stdout != want {
			t.Errorf("ulimit -d; ulimit -v = %q, want %q (KiB)\n%s", o.stdout, want, o)
		}
		return
	}
	if p.Version == 2 {
		t.Logf("cgroup v2 at %s", p.Dir)
	}
	want := fmt.Sprintf("memory: cgroup v%d ", p.Version)
	if !strings.HasPrefix(text, want) || !strings.Contains(text, fmt.Sprintf(" %d MiB for the whole sandbox", mb)) || !strings.Contains(text, p.Dir) {
		t.Errorf("MemoryLimit = %q, want %q..., %d MiB for the whole sandbox, and %s", text, want, mb, p.Dir)
	}
	// No rlimit holds memory: the cgroup holds the real bound.
	if o := e.sh(`ulimit -d; ulimit -v`, lim); o.stdout != "unlimited\nunlimited\n" {
		t.Errorf("ulimit -d; ulimit -v = %q, want unlimited under the cgroup\n%s", o.stdout, o)
	}
	size := uint64(mb) << 20 * 6 / 10
	one := e.sh(holdScript(1, size), lim)
	if one.res.ExitCode != 0 || one.res.LimitHit != "" || !strings.Contains(one.stdout, "HELD-ALL") {
		t.Errorf("one child at 0.6 of memory_mb: want it to run\n%s", one)
	}
	four := e.sh(holdScript(4, size), lim)
	if four.res.ExitCode == 0 || strings.Contains(four.stdout, "HELD-ALL") {
		t.Errorf("four children at 0.6 of memory_mb each all held their memory: the limit is not for the whole command\n%s", four)
	}
	if four.res.LimitHit != sandbox.LimitCommandMemory {
		t.Errorf("LimitHit = %q, want %q\n%s", four.res.LimitHit, sandbox.LimitCommandMemory, four)
	}
	msg := sandbox.LimitMessage(four.res, sandbox.Limits{MemoryMB: mb})
	if !strings.Contains(msg, fmt.Sprintf("killed by its memory limit (%d MiB for the whole command", mb)) || !strings.Contains(msg, "memory_mb") {
		t.Errorf("LimitMessage = %q", msg)
	}
	// A command that outlives the processes the limit killed (a parent
	// that only waits for its children) exits 0, and is still told why
	// they died (found by a fresh-user trial: nothing said it).
	went := e.sh(holdScript(4, size)+"; exit 0", lim)
	if went.res.ExitCode != 0 || went.res.LimitHit != "" || went.res.MemoryKills == 0 {
		t.Errorf("a command whose children the limit killed: want exit 0, no LimitHit, MemoryKills > 0; got %d %q %d\n%s", went.res.ExitCode, went.res.LimitHit, went.res.MemoryKills, went)
	}
	if msg := sandbox.LimitMessage(went.res, sandbox.Limits{MemoryMB: mb}); !strings.Contains(msg, "killed by its memory limit") || !strings.Contains(msg, "the command itself went on") {
		t.Errorf("LimitMessage for children killed = %q", msg)
	}
	// Every cgroup of this process is gone (removal may finish in the
	// background: wait for it, with a generous deadline).
	if !waitFor(time.Minute, func() bool { return len(corralCgroups(p.Dir)) == 0 }) {
		t.Errorf("cgroups left under %s: %v", p.Dir, corralCgroups(p.Dir))
	}
}

// memoryLimitName is the LimitHit a gated command that exceeds memory_mb
// gets on this machine for this caller: the whole-command memory cgroup's
// where corral can use one, else RLIMIT_DATA's.
func memoryLimitName() string {
	if processMemCgroups.get(slog.New(slog.DiscardHandler)).Version != 0 {
		return sandbox.LimitCommandMemory
	}
	return sandbox.LimitMemory
}

// TestThreadEntry: bwrap is born inside its memory cgroup only on cgroup
// v1, from a thread that ends with the command, with both tasks files
// open; everything else moves bwrap in at its exec stop.
func TestThreadEntry(t *testing.T) {
	for _, c := range []struct {
		version          int
		throwaway, files bool
		want             bool
	}{
		{1, true, true, true},
		{1, false, true, false}, // a thread that goes back to the runtime's pool
		{1, true, false, false}, // tasks files not opened
		{2, true, true, false},  // v2 cgroups are domains: no thread moves alone
		{0, true, true, false},
	} {
		if got := threadEntry(c.version, c.throwaway, c.files); got != c.want {
			t.Errorf("threadEntry(%d, %v, %v) = %v, want %v", c.version, c.throwaway, c.files, got, c.want)
		}
	}
}

// TestMemoryCgroupBornInside: on cgroup v1 (root, on this machine), a command with a
// memory limit runs in its own memory cgroup (its processes listed there
// while it runs) and, the starting thread having moved back out right
// after the fork, every thread of corral's is in corral's own cgroup; no
// cgroup is left after it.
func TestMemoryCgroupBornInside(t *testing.T) {
	e := newEnv(t)
	p := processMemCgroups.get(e.backend.log)
	if p.Version != 1 {
		// Elsewhere (v2, or no cgroup corral can use: an unprivileged
		// caller on this machine) bwrap is moved in at its exec stop, or
		// memory_mb is per process (TestMemoryWholeCommand).
		if threadEntry(p.Version, true, true) {
			t.Errorf("threadEntry(%d, ...) = true: only cgroup v1 moves a thread alone", p.Version)
		}
		return
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inR.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	req := &sandbox.Request{
		Argv:    []string{"/bin/sh", "-c", "echo ready; read x; exit 0"},
		Env:     e.envv,
		Policy:  sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.Limits{MemoryMB: 200}},
		Stdin:   inR,
		Stdout:  outW,
		Stderr:  io.Discard,
		Timeout: 60 * time.Second,
	}
	done := make(chan error, 1)
	go func() {
		res, err := e.backend.Run(context.Background(), req)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		outW.Close()
		done <- err
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || line != "ready\n" {
		inW.Close()
		t.Fatalf("the command did not start: %q, %v (%v)", line, err, <-done)
	}
	// The command is blocked reading stdin: its cgroup has its
	// processes, and no thread of corral's is in it.
	cgs := corralCgroups(p.Dir)
	if len(cgs) != 1 {
		t.Errorf("cgroups of this process under %s while a command runs: %v, want one", p.Dir, cgs)
	} else if b, err := os.ReadFile(filepath.Join(p.Dir, cgs[0], "tasks")); err != nil || len(strings.Fields(string(b))) == 0 {
		t.Errorf("tasks of %s: %q, %v; want the command's processes", cgs[0], b, err)
	} else {
		own := map[string]bool{}
		for _, tid := range strings.Fields(string(b)) {
			own[tid] = true
		}
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, tk := range tasks {
			if own[tk.Name()] {
				t.Errorf("corral's thread %s is in the command's memory cgroup %s", tk.Name(), cgs[0])
			}
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !waitFor(time.Minute, func() bool { return len(corralCgroups(p.Dir)) == 0 }) {
		t.Errorf("cgroups left under %s: %v", p.Dir, corralCgroups(p.Dir))
	}
}

// TestMemoryCgroupRemovedLater: a cgroup whose last task has not left
// when the command's result is ready is not waited for there: remove
// returns at once, and a goroutine counted in pending removes it once the
// task is gone (Backend.Close waits on pending). Where corral can make no
// memory cgroup (an unprivileged caller here), a command has none, and its
// removal is nothing at all.
func TestMemoryCgroupRemovedLater(t *testing.T) {
	e := newEnv(t)
	p := processMemCgroups.get(e.backend.log)
	if p.Version == 0 {
		if os.Getuid() == 0 {
			t.Skipf("root, but no memory cgroup corral can use here (%s)", p.Reason)
		}
		var none *memCgroup
		var pending sync.WaitGroup
		none.remove(e.backend.log, &pending)
		pending.Wait()
		return
	}
	var m memCgroups
	cg, err := m.newMemCgroup(p, 100)
	if err != nil {
		t.Fatal(err)
	}
	// A task that stays until killed: the cgroup cannot be removed yet.
	sleeper := exec.Command("/bin/sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	if !cg.enter(sleeper.Process.Pid, e.backend.log) {
		t.Fatal("could not move the sleeper into the cgroup")
	}
	var pending sync.WaitGroup
	cg.remove(e.backend.log, &pending)
	if _, err := os.Stat(cg.dir); err != nil {
		t.Fatalf("the cgroup is gone with a task inside: %v", err)
	}
	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()
	pending.Wait() // returns once removed (or after a minute: then the check below fails)
	if _, err := os.Stat(cg.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after its last task left and the removal ended: %v", cg.dir, err)
	}
}
