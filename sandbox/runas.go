package sandbox

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
)

// RunAs is the host identity a sandbox holds when corral itself runs as
// root: the uid and gid its processes have on the host, whatever they see
// inside.
//
// A sandbox must never hold host uid 0. The kernel judges much by uid rather
// than by capability: writes to /proc/sys (proc_sys_permission compares the
// euid with GLOBAL_ROOT_UID, so kernel.core_pattern can be set from a
// sandbox whose uid 0 is the host's), connect(2) to a root-only Unix socket
// at any path (an engine API corral never heard of), reads of every
// root-only file of the host. Capabilities dropped do not help against
// these; an identity without them does.
type RunAs struct {
	UID, GID int
}

// NobodyRunAs is the identity a root caller's sandbox gets when its working
// directory belongs to root too: the kernel's overflow uid and gid (65534,
// /proc/sys/kernel/overflowuid), "nobody" and "nogroup" on Debian.
var NobodyRunAs = RunAs{UID: 65534, GID: 65534}

// String returns "UID:GID".
func (r RunAs) String() string { return fmt.Sprintf("%d:%d", r.UID, r.GID) }

// ParseRunAs checks the run_as setting: "" (automatic, see ResolveRunAs),
// "UID", "UID:GID", "NAME" or "NAME:GROUP" (user and group names looked up
// in the system's databases; a user alone takes its primary group). The uid
// and gid must not be 0. It returns the identity and whether it is fixed
// (false for ""). Errors wrap ErrBadRequest and say what is accepted.
func ParseRunAs(s string) (RunAs, bool, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return RunAs{}, false, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%w: run_as %q %s (want empty, UID[:GID] or USER[:GROUP], not root)", ErrBadRequest, s, why)
	}
	u, g, hasGroup := strings.Cut(s, ":")
	var r RunAs
	if n, err := strconv.Atoi(u); err == nil {
		if n < 0 {
			return RunAs{}, false, bad("is not a uid")
		}
		r.UID, r.GID = n, n
	} else {
		pw, err := user.Lookup(u)
		if err != nil {
			return RunAs{}, false, bad("names no user")
		}
		r.UID, _ = strconv.Atoi(pw.Uid)
		r.GID, _ = strconv.Atoi(pw.Gid)
	}
	if hasGroup {
		if n, err := strconv.Atoi(g); err == nil && n >= 0 {
			r.GID = n
		} else if gr, err := user.LookupGroup(g); err == nil {
			r.GID, _ = strconv.Atoi(gr.Gid)
		} else {
			return RunAs{}, false, bad("names no group")
		}
	}
	if r.UID == 0 || r.GID == 0 {
		return RunAs{}, false, bad("is root: a sandbox holding host uid or gid 0 could change the host's kernel settings")
	}
	if r.UID > maxID || r.GID > maxID {
		return RunAs{}, false, bad(fmt.Sprintf("is above %d (ids from 2^31 are refused, as systemd refuses them: (uid_t)-1 is no id and many tools take ids as signed)", maxID))
	}
	return r, true, nil
}

// maxID is the largest uid or gid run_as takes.
const maxID = 1<<31 - 2

// MinPersonUID is the smallest uid of a person's account (UID_MIN of
// login.defs on Debian and Fedora); below it are system accounts.
const MinPersonUID = 1000

// ResolveRunAs picks the identity of a root caller's sandbox: the fixed
// run_as when set; otherwise the owner of the working directory (uid, gid as
// stat(2) gives them) when that is a person (uid from MinPersonUID, not
// nobody), so that the sandbox acts as the person who owns the project;
// otherwise NobodyRunAs, also for a directory of a system account (www-data,
// postgres): the sandbox must not get that service's sockets and files.
// Files written there keep their owner either way (the directory is
// idmapped). A gid of 0 is never kept: NobodyRunAs's gid stands in for it.
func ResolveRunAs(fixed RunAs, isFixed bool, ownerUID, ownerGID int) RunAs {
	if isFixed {
		return fixed
	}
	if ownerUID < MinPersonUID || ownerUID == NobodyRunAs.UID || ownerUID > maxID {
		return NobodyRunAs
	}
	r := RunAs{UID: ownerUID, GID: ownerGID}
	if r.GID <= 0 {
		r.GID = NobodyRunAs.GID
	}
	return r
}
