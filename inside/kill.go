package inside

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/procfs"
)

// killMain is `__corral-kill SIGNAL PGID` (or `SIGNAL @FILE`, PGID read
// from FILE): it sends SIGNAL (a number) to
// every process of process group PGID and to every process of the session
// PGID leads (which also catches members that moved to a process group of
// their own with setpgid, as shells do for background jobs). A group that
// is already gone is not an error.
func killMain(args []string) int {
	if len(args) != 2 {
		return fail(ModeKill, errors.New("usage: __corral-kill SIGNAL PGID"))
	}
	sig, err1 := strconv.Atoi(args[0])
	target := args[1]
	if f, ok := strings.CutPrefix(target, "@"); ok {
		// @FILE: the pid a terminal-mode relay wrote there.
		b, err := os.ReadFile(f)
		if err != nil {
			return fail(ModeKill, err)
		}
		target = strings.TrimSpace(string(b))
	}
	pgid, err2 := strconv.Atoi(target)
	if err1 != nil || err2 != nil || sig <= 0 || sig > 64 || pgid <= 1 {
		return fail(ModeKill, fmt.Errorf("bad arguments %q", args))
	}
	KillSession(pgid, syscall.Signal(sig))
	return 0
}

// KillSession sends sig to process group sid and to every process whose
// session id is sid (read from /proc/PID/stat, field 6 of proc(5)). Errors
// for processes that are gone are ignored.
func KillSession(sid int, sig syscall.Signal) {
	_ = unix.Kill(-sid, sig)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		if s, ok := procfs.SessionID(pid); ok && s == sid {
			_ = unix.Kill(pid, sig)
		}
	}
}
