package bwrap

import (
	"reflect"
	"strings"
	"testing"
)

// A login session's cgroup and the user manager's, on a cgroup v2
// machine (/proc/self/cgroup of a process started from ssh, and the
// manager's ControlGroup property).
const (
	pcSession = "0::/user.slice/user-1000.slice/session-3.scope\n"
	userMgr   = "/user.slice/user-1000.slice/user@1000.service"
)

func TestUserScopeBlocked(t *testing.T) {
	none := memPlace{Reason: "cgroup v2: corral's cgroup /sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope is not delegated to it (not writable)"}
	rootCtl := map[string]string{"/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n"}
	inScope := "0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-corral-42.scope/corral-42-self\n"
	for _, tc := range []struct {
		name     string
		f        cgroupFacts
		uid      int
		p        memPlace
		why, fix string // substrings; "" why: ask
	}{
		{"v2, a session scope of a plain user: ask", facts(miUnified, pcSession, rootCtl), 1000, none, "", ""},
		{"v2, no cgroup.controllers readable at the root: ask and see", facts(miUnified, pcSession, nil), 1000, none, "", ""},
		{"root: makes its own", facts(miUnified, pcSession, rootCtl), 0, none, "root makes its memory cgroups itself", ""},
		{"a place already", facts(miUnified, pcSession, rootCtl), 1000, memPlace{Version: 2, Dir: "/d"}, "corral's own cgroup serves", ""},
		{"hybrid: memory on v1", facts(miHybrid, pcHybrid, nil), 1000, none, "the memory controller is on a cgroup v1 hierarchy (/sys/fs/cgroup/memory)", "on cgroup v1 only root makes cgroups"},
		{"no cgroup v2", facts(miNone, "", nil), 1000, none, "no cgroup v2 hierarchy is mounted", "mount cgroup2"},
		{"v2 without a memory controller", facts(miUnified, pcSession, map[string]string{"/sys/fs/cgroup/cgroup.controllers": "cpu io pids\n"}), 1000, none, "offers no memory controller", "CONFIG_MEMCG"},
		{"in its own scope already (its leaf)", facts(miUnified, inScope, rootCtl), 1000, none, "in its systemd user scope app-corral-42.scope already", "Delegate=cpu memory pids"},
		{"in another corral's scope: asks for its own", facts(miUnified, strings.ReplaceAll(inScope, "42", "41"), rootCtl), 1000, none, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, fix := userScopeBlocked(tc.f, tc.uid, 42, tc.p)
			if tc.why == "" && why != "" || !strings.Contains(why, tc.why) {
				t.Errorf("why = %q, want %q", why, tc.why)
			}
			if tc.fix == "" && fix != "" || !strings.Contains(fix, tc.fix) {
				t.Errorf("fix = %q, want %q", fix, tc.fix)
			}
		})
	}
}

func TestUserScopeFits(t *testing.T) {
	dir := "/sys/fs/cgroup" + userMgr
	for _, tc := range []struct {
		name     string
		f        cgroupFacts
		cg       string
		why, fix string
	}{
		{"memory delegated", facts(miUnified, pcSession, map[string]string{dir + "/cgroup.controllers": "cpu memory pids\n"}), userMgr, "", ""},
		{"memory not delegated", facts(miUnified, pcSession, map[string]string{dir + "/cgroup.controllers": "pids\n"}), userMgr, "memory is not delegated to your systemd user manager", "Delegate=cpu memory pids"},
		{"controllers unreadable", facts(miUnified, pcSession, nil), userMgr, "cannot be read", ""},
		{"no cgroup reported", facts(miUnified, pcSession, nil), "", "reports no cgroup", "login session"},
		{"outside the mounted part", facts(`40 30 0:37 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`, "0::/docker/abc\n", nil), userMgr, "outside the mounted part", ""},
		{"hybrid", facts(miNone, "", nil), userMgr, "no cgroup v2", "mount cgroup2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, fix := userScopeFits(tc.f, tc.cg)
			if tc.why == "" && why != "" || !strings.Contains(why, tc.why) {
				t.Errorf("why = %q, want %q", why, tc.why)
			}
			if tc.fix == "" && fix != "" || !strings.Contains(fix, tc.fix) {
				t.Errorf("fix = %q, want %q", fix, tc.fix)
			}
		})
	}
}

func TestInUserScope(t *testing.T) {
	const unit = "app-corral-42.scope"
	for pc, want := range map[string]bool{
		"0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-corral-42.scope\n":                true,
		"0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-corral-42.scope/corral-42-self\n": true,
		"0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-corral-421.scope\n":               false,
		"0::/user.slice/user-1000.slice/session-3.scope\n":                                                false,
		pcHybrid: false,
		"":       false,
	} {
		if got := inUserScope(pc, unit); got != want {
			t.Errorf("inUserScope(%q) = %v, want %v", pc, got, want)
		}
	}
}

func TestUserBusSockets(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, tc := range []struct {
		name string
		env  func(string) string
		want []busSocket
	}{
		{"nothing set: pam_systemd's runtime directory", env(), []busSocket{{"/run/user/1000/systemd/private", false}, {"/run/user/1000/bus", true}}},
		{"XDG_RUNTIME_DIR", env("XDG_RUNTIME_DIR", "/run/user/1000"), []busSocket{{"/run/user/1000/systemd/private", false}, {"/run/user/1000/bus", true}}},
		{"a relative XDG_RUNTIME_DIR is ignored", env("XDG_RUNTIME_DIR", "run"), []busSocket{{"/run/user/1000/systemd/private", false}, {"/run/user/1000/bus", true}}},
		{"the session bus's address, escaped, with a guid", env("XDG_RUNTIME_DIR", "/r", "DBUS_SESSION_BUS_ADDRESS", "unix:path=/tmp/my%20bus,guid=0123"), []busSocket{{"/r/systemd/private", false}, {"/tmp/my bus", true}}},
		{"an abstract socket", env("DBUS_SESSION_BUS_ADDRESS", "unix:abstract=/tmp/dbus-XYZ,guid=1"), []busSocket{{"/run/user/1000/systemd/private", false}, {"@/tmp/dbus-XYZ", true}}},
		{"the first Unix address of a list", env("DBUS_SESSION_BUS_ADDRESS", "tcp:host=localhost,port=1;unix:path=/b"), []busSocket{{"/run/user/1000/systemd/private", false}, {"/b", true}}},
		{"TCP only: the default bus", env("DBUS_SESSION_BUS_ADDRESS", "tcp:host=localhost,port=1"), []busSocket{{"/run/user/1000/systemd/private", false}, {"/run/user/1000/bus", true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := userBusSockets(tc.env, 1000); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("userBusSockets = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestUserScopeProperties: the scope is born holding corral, delegated,
// and unloaded if it fails; its name is not one a sweep of per-command
// cgroups would take.
func TestUserScopeProperties(t *testing.T) {
	got := map[string]any{}
	for _, p := range userScopeProperties(42) {
		got[p.Name] = p.Value
	}
	want := map[string]any{"PIDs": []uint32{42}, "Delegate": true, "Slice": "app.slice", "CollectMode": "inactive-or-failed", "Description": "corral: memory cgroups of its sandboxes"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("userScopeProperties = %v, want %v", got, want)
	}
	if u := userScopeUnit(42); u != "app-corral-42.scope" || strings.HasPrefix(u, cgroupPrefix) || sweepableCgroup(u, 3600, 1) {
		t.Errorf("userScopeUnit = %q: want app-corral-42.scope, never taken for a per-command cgroup", u)
	}
}
