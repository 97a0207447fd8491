// Package owner identifies the corral process that made a container or a
// pod, so that `corral cleanup` can tell whether it is gone: the docker
// and kubernetes backends write ID.String() into a label or annotation.
package owner

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/procfs"
)

// ID identifies a process across PID reuse and reboots: host name,
// boot id (/proc/sys/kernel/random/boot_id), pid and the process's start
// time in clock ticks since boot (field 22 of /proc/PID/stat, proc(5)).
type ID struct {
	Host, Boot string
	PID        int
	Start      uint64
}

// String is the form written in labels: HOST/BOOT/PID/START.
func (o ID) String() string {
	return fmt.Sprintf("%s/%s/%d/%d", o.Host, o.Boot, o.PID, o.Start)
}

// Parse reads an ID written by String; ok is false for anything else.
func Parse(s string) (id ID, ok bool) {
	f := strings.Split(s, "/")
	if len(f) != 4 {
		return ID{}, false
	}
	pid, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return ID{}, false
	}
	return ID{Host: f[0], Boot: f[1], PID: pid, Start: start}, true
}

// Self is the ID of this process.
func Self() ID {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	start, _ := procfs.StartTime(os.Getpid())
	return ID{Host: host, Boot: strings.TrimSpace(string(boot)), PID: os.Getpid(), Start: start}
}

// State is what is known of an owner from this machine.
type State int

const (
	// Alive: the owning corral process runs here.
	Alive State = iota
	// Dead: it ran here and has exited (or the machine rebooted).
	Dead
	// Unknown: another machine's, or no valid label.
	Unknown
)

// State tells whether o still runs, as far as this machine can tell
// (self is this process's ID, from Self).
func (o ID) State(self ID) State {
	if o.Host != self.Host || o.Boot == "" {
		return Unknown
	}
	if o.Boot != self.Boot {
		return Dead
	}
	st, ok := procfs.StartTime(o.PID)
	if !ok || st != o.Start || procfs.Zombie(o.PID) {
		return Dead
	}
	return Alive
}
