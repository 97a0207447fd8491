package bwrap

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/procfs"
)

// ownerVar names, in bwrap's own environment (never the command's: bwrap
// runs it after --clearenv), the corral process that started the sandbox,
// as "PID:STARTTIME" (procfs.StartTime), so that a sandbox whose corral is
// gone can be found and ended (SweepOrphans).
const ownerVar = "CORRAL_BWRAP_OWNER"

var (
	ownerOnce sync.Once
	ownerKV   string
)

// bwrapProcessEnv is bwrapEnv with this process named as the owner.
func bwrapProcessEnv() []string {
	ownerOnce.Do(func() {
		st, _ := procfs.StartTime(os.Getpid())
		ownerKV = fmt.Sprintf("%s=%d:%d", ownerVar, os.Getpid(), st)
	})
	return append(append([]string{}, bwrapEnv...), ownerKV)
}

// SweepOrphans ends the sandboxes whose corral process is gone and returns
// how many. bwrap arms its sandbox's parent-death signal only after the
// sandbox's mounts (bubblewrap issue #633). Through the limits gate
// corral arms it at the sandbox's birth, and until then holds bwrap and
// the child with PTRACE_O_EXITKILL (exitKillOptions), so a corral killed
// with -9 takes them along at any instant; where the gate is not used (a
// setuid bwrap, ptrace refused, no system call injection on this
// architecture) a corral killed while a sandbox starts leaves that one
// behind, waiting for ever or running its command with nobody to end it. Such a bwrap carries ownerVar
// naming a process that no longer exists (or whose pid now belongs to
// another start time); it is killed through a pidfd opened before its
// environment is read, so a reused pid is never signalled. Processes this
// caller may not read are left alone (they are not its sandboxes).
//
// Who sweeps: `corral cleanup` always; every other corral process at its
// first sandbox, a long-lived one (the MCP server) every time, a one-shot
// CLI command only when Options.SweepEvery has passed since the last
// sweep of this user (the stamp in the state directory). So a crashed
// corral's sandboxes end at the next cleanup or MCP server start, or at
// the first one-shot command SweepEvery or more after the last sweep.
func SweepOrphans() int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err != nil || strings.TrimSpace(string(comm)) != "bwrap" {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if orphaned(pid) {
			if unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil {
				n++
			}
		}
		unix.Close(fd)
	}
	return n
}

// orphaned reports whether process pid is a bwrap whose ownerVar names a
// corral process that is gone.
func orphaned(pid int) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		v, ok := bytes.CutPrefix(kv, []byte(ownerVar+"="))
		if !ok {
			continue
		}
		p, s, ok := strings.Cut(string(v), ":")
		opid, err1 := strconv.Atoi(p)
		ostart, err2 := strconv.ParseUint(s, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return false
		}
		start, alive := procfs.StartTime(opid)
		return !alive || start != ostart || procfs.Zombie(opid)
	}
	return false
}

// sweepOnce runs SweepOrphans once per process, at its first sandbox
// (when due: sweepIfDue).
var sweepOnce sync.Once

// sweepStamp is the file in the state directory whose modification time
// is when a process of this user last swept (Options.SweepEvery).
const sweepStamp = "orphan-sweep"

// sweepDue reports whether a sweep is due at now when the last one was at
// last (ok false: never, or unknown). A stamp from the future (a clock
// set back) does not postpone the sweep: it is due.
func sweepDue(last time.Time, ok bool, now time.Time, every time.Duration) bool {
	if every <= 0 || !ok || last.After(now) {
		return true
	}
	return now.Sub(last) >= every
}

// sweepIfDue calls sweep when sweepDue says so for stateDir's stamp, and
// then sets the stamp to now (before sweeping, so that processes starting
// meanwhile skip; two that race both sweep, which is harmless). It returns
// sweep's count and whether it ran. A stamp that cannot be written leaves
// every process sweeping, as without SweepEvery.
func sweepIfDue(stateDir string, every time.Duration, now time.Time, sweep func() int) (int, bool) {
	if every > 0 && stateDir != "" {
		p := filepath.Join(stateDir, sweepStamp)
		fi, err := os.Stat(p)
		var last time.Time
		if err == nil {
			last = fi.ModTime()
		}
		if !sweepDue(last, err == nil, now, every) {
			return 0, false
		}
		if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600); err == nil {
			f.Close()
			_ = os.Chtimes(p, now, now)
		}
	}
	return sweep(), true
}
