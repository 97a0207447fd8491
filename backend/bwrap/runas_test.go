package bwrap

import (
	"reflect"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestOwnedSources(t *testing.T) {
	plan := &Plan{Own: []string{"/w", "/ro-work"}, Mounts: []mount{
		{Kind: mRoBind, Src: "/", Dest: "/"},
		{Kind: mBind, Src: "/w", Dest: "/w"},
		{Kind: mBind, Src: "/w/.git", Dest: "/w/.git", ViaFD: true}, // a pin inside
		{Kind: mBind, Src: "/w b", Dest: "/w b"},
		{Kind: mBind, Src: "/srv/data", Dest: "/data"},
		{Kind: mBind, Src: "/state/scratch/s1", Dest: "/state/scratch/s1"},
		{Kind: mRoBind, Src: "/w/.git/hooks", Dest: "/w/.git/hooks"},
		{Kind: mTmpfs, Dest: "/tmp"},
	}}
	want := []string{"/ro-work", "/srv/data", "/state/scratch/s1", "/w", "/w b"}
	if got := ownedSources(plan); !reflect.DeepEqual(got, want) {
		t.Errorf("ownedSources = %q, want %q", got, want)
	}
}

func TestNeededPaths(t *testing.T) {
	plan := &Plan{
		Mounts: []mount{
			{Kind: mRoBind, Src: "/", Dest: "/"},
			{Kind: mProc, Dest: "/proc"},
			{Kind: mBind, Src: "/srv/data", Dest: "/data"},
			{Kind: mRoBind, Src: "/p/.git/config", Dest: "/p/.git/config", ViaFD: true},
			{Kind: mTmpfs, Dest: "/root"},
			{Kind: mSymlink, Src: "target", Dest: "/root/link"},
		},
		Chdir: "/p/sub",
		Reach: []string{"/etc/ssl/ca.pem"},
	}
	// A descriptor bind's source is opened by corral, not walked by bwrap.
	want := []string{"/", "/proc", "/srv/data", "/data", "/p/.git/config", "/root", "/root/link", "/p/sub", "/etc/ssl/ca.pem"}
	if got := neededPaths(plan); !reflect.DeepEqual(got, want) {
		t.Errorf("neededPaths = %q\nwant %q", got, want)
	}
}

func TestCanEnter(t *testing.T) {
	ra := sandbox.RunAs{UID: 1000, GID: 1000}
	for _, c := range []struct {
		d    dirInfo
		want bool
	}{
		{dirInfo{0o755, 0, 0}, true},
		{dirInfo{0o700, 0, 0}, false},
		{dirInfo{0o750, 0, 1000}, true},     // group
		{dirInfo{0o705, 0, 1000}, false},    // group bits rule for the group, not other's
		{dirInfo{0o700, 1000, 0}, true},     // owner
		{dirInfo{0o077, 1000, 1000}, false}, // owner bits rule for the owner
		{dirInfo{0o711, 0, 0}, true},
		{dirInfo{0o744, 0, 0}, false}, // readable is not enterable
	} {
		if got := canEnter(c.d, ra); got != c.want {
			t.Errorf("canEnter(%+v) = %v, want %v", c.d, got, c.want)
		}
	}
}

func TestBlockedDirs(t *testing.T) {
	ra := sandbox.NobodyRunAs
	tree := map[string]dirInfo{
		"/":                  {0o755, 0, 0},
		"/root":              {0o700, 0, 0},
		"/root/proj":         {0o755, 0, 0},
		"/root/.local":       {0o700, 0, 0},
		"/root/.local/state": {0o755, 0, 0},
		"/var":               {0o755, 0, 0},
		"/var/tmp":           {0o1777, 0, 0},
		"/var/tmp/t1":        {0o700, 0, 0},
		"/var/tmp/t1/a":      {0o700, 0, 0},
		"/var/tmp/t1/a/ws":   {0o700, 0, 0},
		"/home":              {0o755, 0, 0},
		"/home/u":            {0o750, 1000, 1000},
	}
	stat := func(d string) (dirInfo, bool) { v, ok := tree[d]; return v, ok }
	got := blockedDirs([]string{
		"/", "/root/proj", "/root/.local/state/corral/empty", "/var/tmp/t1/a/ws", "/var/tmp/t1/b.pem",
		"/home/u/project", "/usr/bin", "/root",
	}, ra, stat)
	want := []traversal{
		{Dir: "/root", Entries: []string{".local", "proj"}},
		{Dir: "/home/u", Entries: []string{"project"}},
		{Dir: "/root/.local", Entries: []string{"state"}},
		{Dir: "/var/tmp/t1", Entries: []string{"a", "b.pem"}},
		{Dir: "/var/tmp/t1/a", Entries: []string{"ws"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("blockedDirs =\n%+v\nwant\n%+v", got, want)
	}
	// The owner of a home enters it: nothing to cover on the way there.
	if got := blockedDirs([]string{"/home/u/project"}, sandbox.RunAs{UID: 1000, GID: 1000}, stat); len(got) != 0 {
		t.Errorf("blockedDirs for the owner = %+v, want none", got)
	}
	// Inside a directory that is idmapped (the root-owned 0700 tool cache
	// in root's state directory, with the cargo configuration bound below
	// it) the identity is the owner: the way is covered up to the owned
	// directory, not inside it.
	tree["/root/.local/state/corral/cache"] = dirInfo{0o700, 0, 0}
	tree["/root/.local/state/corral/cache/cargo"] = dirInfo{0o755, 0, 0}
	owned := []string{"/root/.local/state/corral/cache"}
	got = blockedDirs([]string{"/root/.local/state/corral/cache", "/root/.local/state/corral/cache/cargo/config.toml"}, ra, idmappedStat(owned, ra, stat))
	want = []traversal{
		{Dir: "/root", Entries: []string{".local"}},
		{Dir: "/root/.local", Entries: []string{"state"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("blockedDirs with an idmapped directory =\n%+v\nwant\n%+v", got, want)
	}
}
