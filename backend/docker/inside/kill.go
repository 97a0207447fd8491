package inside

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
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
		if s, ok := sessionOf(pid); ok && s == sid {
			_ = unix.Kill(pid, sig)
		}
	}
}

// sessionOf returns the session id of pid from /proc/PID/stat.
func sessionOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields after the last ')' are state, ppid, pgrp, session, ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 {
		return 0, false
	}
	sid, err := strconv.Atoi(f[3])
	return sid, err == nil
}
