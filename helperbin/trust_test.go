package helperbin

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// The other tests' helpers lie in temporary directories, which no
// sandbox reaches; Trusted itself is TestTrusted's.
func init() { trustHook = func(Source, string) string { return "" } }

// TestTrusted: which helper files corral may run, over a file system
// given as a table of owners and modes.
func TestTrusted(t *testing.T) {
	dir := func(uid int, perm fs.FileMode) owner { return owner{UID: uid, Mode: fs.ModeDir | perm} }
	file := func(uid int, perm fs.FileMode) owner { return owner{UID: uid, Mode: perm} }
	system := map[string]owner{
		"/": dir(0, 0o755), "/usr": dir(0, 0o755), "/usr/local": dir(0, 0o755), "/usr/local/bin": dir(0, 0o755),
		"/usr/local/bin/corral-helper": file(0, 0o755),
	}
	project := map[string]owner{
		"/": dir(0, 0o755), "/home": dir(0, 0o755), "/home/u": dir(1000, 0o700), "/home/u/proj": dir(1000, 0o755),
		"/home/u/proj/corral-helper": file(1000, 0o755),
		"/root":                      dir(0, 0o700), "/root/proj": dir(0, 0o755), "/root/proj/corral-helper": file(0, 0o755),
		"/home/u/.cache": dir(1000, 0o755), "/home/u/.cache/corral": dir(1000, 0o700), "/home/u/.cache/corral/helper": dir(1000, 0o755),
		"/home/u/.cache/corral/helper/k": dir(1000, 0o755), "/home/u/.cache/corral/helper/k/corral-helper": file(1000, 0o755),
	}
	with := func(base map[string]owner, p string, o owner) map[string]owner {
		m := map[string]owner{}
		for k, v := range base {
			m[k] = v
		}
		m[p] = o
		return m
	}
	for _, tc := range []struct {
		name string
		fs   map[string]owner
		src  Source
		path string
		euid int
		ok   bool
		why  string
	}{
		{"packaged, a user", system, SourceNext, "/usr/local/bin/corral-helper", 1000, true, ""},
		{"packaged, root", system, SourceNext, "/usr/local/bin/corral-helper", 0, true, ""},
		{"packaged, group-writable directory", with(system, "/usr/local/bin", dir(0, 0o775)), SourceNext, "/usr/local/bin/corral-helper", 1000, false, "writable by its group"},
		{"packaged, a user's file", with(system, "/usr/local/bin/corral-helper", file(1000, 0o755)), SourceNext, "/usr/local/bin/corral-helper", 1000, false, "belongs to uid 1000"},
		{"packaged, a symlink", with(system, "/usr/local/bin/corral-helper", owner{Mode: fs.ModeSymlink | 0o777}), SourceNext, "/usr/local/bin/corral-helper", 1000, false, "not a regular file"},
		{"README's build, a user", project, SourceNext, "/home/u/proj/corral-helper", 1000, false, "belongs to uid 1000"},
		{"README's build, root", project, SourceNext, "/root/proj/corral-helper", 0, false, "outside the system's directories"},
		{"cache, its user", project, SourceCache, "/home/u/.cache/corral/helper/k/corral-helper", 1000, true, ""},
		{"cache, another user's (sudo -E)", project, SourceCache, "/home/u/.cache/corral/helper/k/corral-helper", 0, false, "not to corral's user"},
		{"cache, world-writable file", with(project, "/home/u/.cache/corral/helper/k/corral-helper", file(1000, 0o777)), SourceCache, "/home/u/.cache/corral/helper/k/corral-helper", 1000, false, "writable by its group or others"},
		{"missing", system, SourceNext, "/usr/bin/corral-helper", 1000, false, "no such"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stat := func(p string) (owner, error) {
				o, ok := tc.fs[p]
				if !ok {
					return owner{}, &fs.PathError{Op: "lstat", Path: p, Err: errors.New("no such file or directory")}
				}
				return o, nil
			}
			why := Trusted(tc.src, tc.path, tc.euid, stat)
			if (why == "") != tc.ok || !strings.Contains(why, tc.why) {
				t.Errorf("Trusted = %q, want ok=%v containing %q", why, tc.ok, tc.why)
			}
		})
	}
	// And on this machine's own files: a temporary directory is never a
	// place a helper beside corral is taken from.
	d := t.TempDir()
	p := d + "/corral-helper"
	os.WriteFile(p, []byte("x"), 0o755)
	if why := Trusted(SourceNext, p, os.Geteuid(), lstatOwner); why == "" {
		t.Errorf("a helper in %s was trusted", d)
	}
}
