package docker

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/procfs"
)

// ownerID identifies a process across PID reuse and reboots: host name,
// boot id (/proc/sys/kernel/random/boot_id), pid and the process's start
// time in clock ticks since boot (field 22 of /proc/PID/stat, proc(5)).
type ownerID struct {
	Host, Boot string
	PID        int
	Start      uint64
}

// String is the LabelOwner value: HOST/BOOT/PID/START.
func (o ownerID) String() string {
	return fmt.Sprintf("%s/%s/%d/%d", o.Host, o.Boot, o.PID, o.Start)
}

// parseOwner reads a LabelOwner value.
func parseOwner(s string) (ownerID, bool) {
	f := strings.Split(s, "/")
	if len(f) != 4 {
		return ownerID{}, false
	}
	pid, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return ownerID{}, false
	}
	return ownerID{Host: f[0], Boot: f[1], PID: pid, Start: start}, true
}

// selfOwner is the ownerID of this process.
func selfOwner() ownerID {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	start, _ := procfs.StartTime(os.Getpid())
	return ownerID{Host: host, Boot: strings.TrimSpace(string(boot)), PID: os.Getpid(), Start: start}
}

// ownerState is what is known of a container's owner from this machine.
type ownerState int

const (
	ownerAlive   ownerState = iota // the owning corral process runs here
	ownerDead                      // it ran here and has exited (or the machine rebooted)
	ownerUnknown                   // another machine's, or no valid label
)

// state tells whether o still runs, as far as this machine can tell.
func (o ownerID) state(self ownerID) ownerState {
	if o.Host != self.Host || o.Boot == "" {
		return ownerUnknown
	}
	if o.Boot != self.Boot {
		return ownerDead
	}
	st, ok := procfs.StartTime(o.PID)
	if !ok || st != o.Start || procfs.Zombie(o.PID) {
		return ownerDead
	}
	return ownerAlive
}
