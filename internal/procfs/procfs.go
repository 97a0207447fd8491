// Package procfs reads the few fields of /proc/PID/stat that corral needs
// (proc(5)): the session id and the start time of a process; and it tells
// whether a process is gone, to sweep what dead corral processes left.
package procfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/rmtree"
)

// statFields returns the fields of /proc/PID/stat after the command name:
// [0] is field 3 (state), [3] field 6 (session), [19] field 22
// (starttime). The command name (field 2) is in parentheses and may hold
// spaces and parentheses, so the fields are taken after its last ')'.
func statFields(pid int) ([]string, bool) {
	f, err := readStat(pid)
	return f, err == nil
}

// readStat is statFields with the error of the read: a process that is
// gone (ENOENT, ESRCH) or a file that cannot be opened now (EMFILE).
func readStat(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errors.New("/proc/" + strconv.Itoa(pid) + "/stat: no command name")
	}
	return strings.Fields(s[i+1:]), nil
}

// SessionID returns the session id of pid (field 6 of /proc/PID/stat).
func SessionID(pid int) (int, bool) {
	f, ok := statFields(pid)
	if !ok || len(f) < 4 {
		return 0, false
	}
	n, err := strconv.Atoi(f[3])
	return n, err == nil
}

// ParentOf is ParentID with the reason it could not be read: the
// process is gone (ENOENT, ESRCH), or the file cannot be opened now
// (EMFILE), which says nothing of the process.
func ParentOf(pid int) (int, error) {
	f, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 2 {
		return 0, errors.New("/proc/" + strconv.Itoa(pid) + "/stat: too few fields")
	}
	return strconv.Atoi(f[1])
}

// ParentID returns the parent process id of pid as this process's pid
// namespace sees it (field 4 of /proc/PID/stat; 0 for a parent outside
// it).
func ParentID(pid int) (int, bool) {
	n, err := ParentOf(pid)
	return n, err == nil
}

// Zombie reports whether pid has exited and waits for its parent to reap
// it (state Z, field 3 of /proc/PID/stat): such a process runs no more.
func Zombie(pid int) bool {
	f, ok := statFields(pid)
	return ok && len(f) > 0 && f[0] == "Z"
}

// StartTime returns the start time of pid in clock ticks since boot (field
// 22 of /proc/PID/stat); with the pid it identifies a process across pid
// reuse.
func StartTime(pid int) (uint64, bool) {
	f, ok := statFields(pid)
	if !ok || len(f) < 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(f[19], 10, 64)
	return n, err == nil
}

// ParentAndStart returns ParentID and StartTime of pid from one read of
// /proc/PID/stat, so that both are of the same process.
func ParentAndStart(pid int) (ppid int, start uint64, ok bool) {
	f, ok := statFields(pid)
	if !ok || len(f) < 20 {
		return 0, 0, false
	}
	pp, err1 := strconv.Atoi(f[1])
	st, err2 := strconv.ParseUint(f[19], 10, 64)
	return pp, st, err1 == nil && err2 == nil
}

// Gone reports whether no process pid exists (kill(2) with signal 0 says
// ESRCH). A process that exists but may not be signalled (EPERM) is not
// gone.
func Gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// SweepDead removes the entries of dir that belong to processes that are
// gone and returns their paths. pidOf reads the owning pid from an entry's
// name, reporting false for names that are not of that kind (which are
// kept); entries of this process and of live ones are kept too. Read-only
// directories inside an entry (a Go module cache) are removed as well
// (rmtree.RemoveAll). Errors
// reading dir or removing an entry are not reported: the entry stays for a
// later sweep.
func SweepDead(dir string, pidOf func(name string) (int, bool)) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		pid, ok := pidOf(e.Name())
		if !ok || pid <= 0 || pid == os.Getpid() || !Gone(pid) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if rmtree.RemoveAll(p) == nil {
			removed = append(removed, p)
		}
	}
	return removed
}
