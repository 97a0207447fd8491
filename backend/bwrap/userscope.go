package bwrap

import (
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// This file decides when an unprivileged corral asks its systemd user
// manager for a memory cgroup; userscope_linux.go does the asking.
//
// On cgroup v2 a plain user may make cgroups only in a subtree delegated
// to them (Documentation/admin-guide/cgroup-v2.rst "Delegation"): their
// own cgroup, when it is writable, is used as it is (placeMemoryCgroup).
// A login session's scope is not delegated, but the user's systemd
// manager runs in user@UID.service, which is, with the memory controller
// by default, and on request it makes a transient scope with Delegate=yes
// (systemd.resource-control(5)) holding a given process: the scope's
// directory and its cgroup.procs, cgroup.subtree_control and
// cgroup.threads then belong to the user. Corral asks for one holding
// itself (StartTransientUnit, org.freedesktop.systemd1(5)), as rootless
// Podman does for its pause process: moving a process takes write access
// to the common ancestor of its old and new cgroups, which a user lacks
// above their session, so the manager moves it (and, where it cannot
// either, asks the system manager, AttachProcessesToUnit, which allows it
// for the user's own processes). Once inside, corral is the scope's only
// process, enables the memory controller for the scope's children from
// a leaf of its own (cgroup.go, enableWrites) and makes each command's
// memory cgroup there, as root does.
//
// Nothing of this exists where the memory controller is bound to a v1
// hierarchy (a hybrid or legacy machine): systemd delegates v2
// controllers only, and on v1 only root makes cgroups.

// userScopePrefix starts the name of the scope corral asks for:
// systemd.special(7)'s form for an application's scope, app-NAME-ID.scope,
// and not cgroupPrefix, which a sweep would take for a per-command cgroup.
const userScopePrefix = "app-corral-"

// userScopeUnit returns the name of the scope corral process pid asks for.
func userScopeUnit(pid int) string { return userScopePrefix + strconv.Itoa(pid) + ".scope" }

// inUserScope reports whether procCgroup (/proc/self/cgroup) places the
// process in the scope named unit: its cgroup v2 path ends with the unit,
// or with the unit and one cgroup below it (corral's leaf, enableWrites).
func inUserScope(procCgroup, unit string) bool {
	_, own := ownCgroups(procCgroup)
	if own == "" {
		return false
	}
	return path.Base(own) == unit || path.Base(path.Dir(own)) == unit
}

// Fixes that userScopeBlocked and userScopeFits name.
const (
	fixV1 = "on cgroup v1 only root makes cgroups: run corral as root, or boot with the unified hierarchy alone (systemd.unified_cgroup_hierarchy=1), where your systemd user manager can delegate one"
	// fixNoManager is the fix where no user manager answered.
	fixNoManager    = "run corral in a login session that has a systemd user manager (`loginctl enable-linger $USER` keeps one running), or start it in a cgroup v2 subtree delegated to you"
	fixNotDelegated = "delegate memory to user managers (`sudo systemctl edit user@.service`: [Service] Delegate=cpu memory pids) and log in again"
)

// userScopeBlocked returns why corral process pid of user uid does not ask
// its systemd user manager for a scope, and what would give a memory
// cgroup instead ("" when nothing corral knows of would), or "" and ""
// when it should ask. p is placeMemoryCgroup's answer for f (Version 0
// also when enabling the controller in corral's own cgroup failed). Pure.
func userScopeBlocked(f cgroupFacts, uid, pid int, p memPlace) (why, fix string) {
	mv1, mv2 := parseCgroupMounts(f.MountInfo)
	switch {
	case p.Version != 0:
		return "corral's own cgroup serves", ""
	case uid == 0:
		return "root makes its memory cgroups itself", ""
	case mv1 != nil:
		return fmt.Sprintf("the memory controller is on a cgroup v1 hierarchy (%s), where only root makes cgroups and systemd delegates none", mv1.point), fixV1
	case mv2 == nil:
		return "no cgroup v2 hierarchy is mounted", "mount cgroup2 at /sys/fs/cgroup"
	}
	if ctrl, ok := f.Read(path.Join(mv2.point, "cgroup.controllers")); ok && !hasField(ctrl, "memory", " ") {
		return fmt.Sprintf("the cgroup v2 hierarchy at %s offers no memory controller (its cgroup.controllers: %q)", mv2.point, strings.TrimSpace(ctrl)),
			"a kernel with the memory controller (CONFIG_MEMCG, not booted with cgroup_disable=memory)"
	}
	if unit := userScopeUnit(pid); inUserScope(f.ProcCgroup, unit) {
		// Asked already: asking again would change nothing.
		return fmt.Sprintf("corral is in its systemd user scope %s already, and memory cannot be had there", unit), fixNotDelegated
	}
	return "", ""
}

// userScopeFits judges a user manager whose cgroup (its ControlGroup
// property, "/user.slice/user-1000.slice/user@1000.service") was read:
// the controllers a scope of its own gets are among the manager's own
// cgroup.controllers, which must hold memory. Returns "" and "" when it
// does, else why not and the fix. Pure.
func userScopeFits(f cgroupFacts, managerCgroup string) (why, fix string) {
	_, mv2 := parseCgroupMounts(f.MountInfo)
	if mv2 == nil {
		return "no cgroup v2 hierarchy is mounted", "mount cgroup2 at /sys/fs/cgroup"
	}
	if managerCgroup == "" {
		return "your systemd user manager reports no cgroup", fixNoManager
	}
	dir, ok := cgroupDir(mv2, managerCgroup)
	if !ok {
		return fmt.Sprintf("your systemd user manager's cgroup %s is outside the mounted part of cgroup v2 (%s)", managerCgroup, mv2.point), ""
	}
	ctrl, ok := f.Read(path.Join(dir, "cgroup.controllers"))
	if !ok {
		return fmt.Sprintf("%s/cgroup.controllers cannot be read", dir), ""
	}
	if !hasField(ctrl, "memory", " ") {
		return fmt.Sprintf("memory is not delegated to your systemd user manager (%s/cgroup.controllers: %q)", dir, strings.TrimSpace(ctrl)), fixNotDelegated
	}
	return "", ""
}

// busSocket is a Unix socket at which to reach the user manager over
// D-Bus. Hello is set for a message bus, which wants
// org.freedesktop.DBus.Hello before any other call; the manager's own
// private socket is a direct connection and takes none.
type busSocket struct {
	Path  string
	Hello bool
}

// userBusSockets returns where the user manager of uid may be reached,
// best first: its private socket $XDG_RUNTIME_DIR/systemd/private (what
// systemctl --user uses first; it needs no bus daemon), then the session
// bus (DBUS_SESSION_BUS_ADDRESS when it names a Unix socket, else
// $XDG_RUNTIME_DIR/bus). XDG_RUNTIME_DIR defaults to /run/user/UID, where
// pam_systemd(8) makes it. Pure.
func userBusSockets(getenv func(string) string, uid int) []busSocket {
	run := getenv("XDG_RUNTIME_DIR")
	if !path.IsAbs(run) {
		run = "/run/user/" + strconv.Itoa(uid)
	}
	out := []busSocket{{Path: path.Join(run, "systemd", "private")}}
	bus := path.Join(run, "bus")
	if s, ok := unixSocketOfAddress(getenv("DBUS_SESSION_BUS_ADDRESS")); ok {
		bus = s
	}
	return append(out, busSocket{Path: bus, Hello: true})
}

// unixSocketOfAddress returns the socket a D-Bus address names (the
// first of a ';'-separated list that is unix:path= or unix:abstract=,
// the latter as "@name", net.Dial's form of an abstract socket), values
// unescaped as the D-Bus specification's "Server Addresses" says.
func unixSocketOfAddress(addr string) (string, bool) {
	for _, a := range strings.Split(addr, ";") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(a), "unix:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			u, err := url.PathUnescape(v)
			if err != nil || u == "" {
				continue
			}
			switch k {
			case "path":
				return u, true
			case "abstract":
				return "@" + u, true
			}
		}
	}
	return "", false
}

// scopeProperty is one property of the transient unit corral asks for.
type scopeProperty struct {
	Name  string
	Value any
}

// userScopeProperties returns the properties of the scope corral process
// pid asks for: PIDs (the scope is made holding corral), Delegate (the
// scope's cgroup is handed to the user, systemd.resource-control(5)),
// Slice app.slice (where a user manager's applications go,
// systemd.special(7)), CollectMode inactive-or-failed (one whose start
// failed is unloaded, not kept, systemd.unit(5)), and a Description. Pure.
func userScopeProperties(pid int) []scopeProperty {
	return []scopeProperty{
		{"Description", "corral: memory cgroups of its sandboxes"},
		{"PIDs", []uint32{uint32(pid)}},
		{"Delegate", true},
		{"Slice", "app.slice"},
		{"CollectMode", "inactive-or-failed"},
	}
}
