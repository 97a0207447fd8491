package hostview

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// bindTestHost is the host of TestDecideBind: the caller's home /u/me (so
// /home is not its parent), Bob's home /home/bob and root's /root, corral's
// state directory in the caller's home, a writable working directory
// /work, a credential store of Bob's that is a symlink to /keys/bob-ssh,
// an engine socket that the bwrap backend masks at /srv/r/fake.sock, and
// /etc/shadow.
func bindTestHost() *BindHost {
	return &BindHost{
		Home:          "/u/me",
		OtherHomes:    []string{"/home/bob", "/root"},
		HiddenDirs:    []string{"/u/me/.local/state/corral", "/srv/corral-state"},
		WritableRoots: []string{"/work"},
		Allow:         slices.Concat(DefaultHomeAllow, DefaultNestedAllow, []string{".zz-tool"}),
		AllowPaths:    []string{"/u/me/.tool/bin"},
		CredentialTargets: []string{
			"/u/me/.ssh", "/u/me/.cargo/credentials.toml",
			"/home/bob/.ssh", "/keys/bob-ssh", "/home/bob/.docker", "/home/bob/.cargo/credentials.toml",
			"/root/.ssh",
		},
		MaskFiles:   []string{"/srv/r/fake.sock"},
		Secrets:     []string{"/etc/shadow"},
		DeviceBinds: true,
	}
}

const (
	dir  = fs.ModeDir | 0o755
	file = fs.FileMode(0o644)
	link = fs.ModeSymlink | 0o777
)

// tree makes the facts about a source at root of the given mode holding
// the paths of kinds (absolute, with their modes): Kinds from them, and a
// listing of every directory among them and of root.
func tree(root string, mode fs.FileMode, kinds map[string]fs.FileMode) *BindSource {
	s := &BindSource{Resolved: root, Mode: mode, Kinds: map[string]fs.FileMode{}, Listings: map[string][]string{}}
	if mode.IsDir() {
		s.Listings[root] = []string{}
	}
	for p, k := range kinds {
		s.Kinds[p] = k.Type()
		if k.IsDir() {
			if _, ok := s.Listings[p]; !ok {
				s.Listings[p] = []string{}
			}
		}
	}
	for p := range kinds {
		if d := filepath.Dir(p); Within(d, root) {
			s.Listings[d] = append(s.Listings[d], filepath.Base(p))
		}
	}
	for _, names := range s.Listings {
		sort.Strings(names)
	}
	return s
}

// bobHome is Bob's home as a source below /home: visible entries, dot
// entries that are not allowed, credential stores and files, a symlink, an
// allowed entry of home_allow, nested directories with allowed and other
// children.
func bobHome() map[string]fs.FileMode {
	return map[string]fs.FileMode{
		"/home/bob":                          dir,
		"/home/bob/project":                  dir,
		"/home/bob/notes.txt":                file,
		"/home/bob/.bashrc":                  file,
		"/home/bob/.secret-file":             file,
		"/home/bob/.secretdir":               dir,
		"/home/bob/.ssh":                     link, // -> /keys/bob-ssh
		"/home/bob/.docker":                  dir,
		"/home/bob/.docker/config.json":      file,
		"/home/bob/.cargo":                   dir,
		"/home/bob/.cargo/credentials.toml":  file,
		"/home/bob/.zz-tool":                 dir,
		"/home/bob/.dotlink":                 link,
		"/home/bob/.config":                  dir,
		"/home/bob/.config/nvim":             dir,
		"/home/bob/.config/gh":               dir,
		"/home/bob/.config/unlisted":         dir,
		"/home/bob/.local":                   dir,
		"/home/bob/.local/bin":               dir,
		"/home/bob/.local/state":             dir,
		"/home/bob/.local/share":             dir,
		"/home/bob/.local/share/fonts":       dir,
		"/home/bob/.local/share/keyrings":    dir,
		"/home/bob/.local/share/other-app":   dir,
		"/home/bob/.local/share/recent.xbel": file,
	}
}

// bobCovers are what a bind of Bob's home (or a directory holding it) at
// its own path must cover.
var (
	bobHide = []string{
		"/home/bob/.config/gh", "/home/bob/.config/unlisted", "/home/bob/.docker",
		"/home/bob/.local/share/keyrings", "/home/bob/.local/share/other-app", "/home/bob/.local/state", "/home/bob/.secretdir",
	}
	bobEmpty = []string{"/home/bob/.cargo/credentials.toml", "/home/bob/.local/share/recent.xbel", "/home/bob/.secret-file"}
)

func withSockets(s *BindSource, socks ...Socket) *BindSource {
	s.Sockets = append(s.Sockets, socks...)
	return s
}

func sock(p string, perm fs.FileMode, uid uint32) Socket {
	return Socket{Path: p, Mode: fs.ModeSocket | perm, UID: uid, GID: uid}
}

type bindWant struct {
	// what is "mount", "ignore", "refuse" (ErrPolicy) or "bad"
	// (ErrBadRequest); msg a part of the error or warning.
	what, msg   string
	dest        string // for "mount": the destination ("" means the source)
	hide, empty []string
	warn        bool // for "mount": a warning is expected
}

// TestDecideBind is the bind policy's table: every rule, for a sandbox
// that holds host root (the bwrap backend as root, a docker container of
// uid 0) and for one that does not; root differs only where corral could
// not see everything (a cut scan, a directory it cannot list).
func TestDecideBind(t *testing.T) {
	missing := &BindSource{Err: &fs.PathError{Op: "lstat", Path: "/no/such", Err: fs.ErrNotExist}}
	for _, tc := range []struct {
		name string
		host func(*BindHost)
		bind sandbox.Bind
		src  *BindSource
		want bindWant
		root *bindWant // when host root changes the answer
	}{
		// Form and the kernel's trees.
		{name: "relative source", bind: sandbox.Bind{Src: "data", ReadOnly: true}, src: tree("/data", dir, nil), want: bindWant{what: "bad", msg: "absolute"}},
		{name: "relative destination", bind: sandbox.Bind{Src: "/data", Dest: "d", ReadOnly: true}, src: tree("/data", dir, nil), want: bindWant{what: "bad", msg: "absolute"}},
		{name: "destination /", bind: sandbox.Bind{Src: "/data", Dest: "/", ReadOnly: true}, src: tree("/data", dir, nil), want: bindWant{what: "refuse", msg: "destination /"}},
		{name: "source /", bind: sandbox.Bind{Src: "/", Dest: "/host", ReadOnly: true}, src: tree("/", dir, nil), want: bindWant{what: "refuse", msg: "whole host"}},
		{name: "source resolving to /", bind: sandbox.Bind{Src: "/rootlink", Dest: "/host", ReadOnly: true}, src: tree("/", dir, nil), want: bindWant{what: "refuse", msg: "whole host"}},
		{name: "destination in /proc", bind: sandbox.Bind{Src: "/srv/x", Dest: "/proc/x", ReadOnly: true}, src: missing, want: bindWant{what: "refuse", msg: "kernel"}},
		{name: "destination in /sys", bind: sandbox.Bind{Src: "/data", Dest: "/sys/x", ReadOnly: true}, src: tree("/data", dir, nil), want: bindWant{what: "refuse", msg: "kernel"}},
		{name: "source in /proc", bind: sandbox.Bind{Src: "/proc/1", Dest: "/tmp/p", ReadOnly: true}, src: tree("/proc/1", dir, nil), want: bindWant{what: "refuse", msg: "/proc and /sys"}},
		{name: "source in /sys via a symlink", bind: sandbox.Bind{Src: "/srv/sys", Dest: "/tmp/s", ReadOnly: true}, src: tree("/sys/kernel", dir, nil), want: bindWant{what: "refuse", msg: "/proc and /sys"}},
		{name: "device under /dev (bwrap)", bind: sandbox.Bind{Src: "/dev/null", ReadOnly: true}, src: tree("/dev/null", fs.ModeDevice|fs.ModeCharDevice|0o666, nil), want: bindWant{what: "mount"}},
		{name: "read-write device under /dev (bwrap)", bind: sandbox.Bind{Src: "/dev/fuse"}, src: tree("/dev/fuse", fs.ModeDevice|fs.ModeCharDevice|0o666, nil), want: bindWant{what: "mount"}},
		{name: "device under /dev (docker)", host: func(h *BindHost) { h.DeviceBinds = false }, bind: sandbox.Bind{Src: "/dev/null", ReadOnly: true}, src: tree("/dev/null", fs.ModeDevice|fs.ModeCharDevice|0o666, nil), want: bindWant{what: "refuse", msg: "under /dev"}},
		{name: "directory under /dev", bind: sandbox.Bind{Src: "/data", Dest: "/dev/data", ReadOnly: true}, src: tree("/data", dir, nil), want: bindWant{what: "refuse", msg: "directory cannot be bound under /dev"}},

		// Missing sources.
		{name: "missing read-only source", bind: sandbox.Bind{Src: "/no/such", ReadOnly: true}, src: missing, want: bindWant{what: "refuse", msg: "cannot be used"}},
		{name: "missing read-write source", bind: sandbox.Bind{Src: "/no/such"}, src: missing, want: bindWant{what: "ignore", msg: "skipped"}},

		// Hidden paths: ignored.
		{name: "corral's state directory", bind: sandbox.Bind{Src: "/srv/corral-state/x", Dest: "/tmp/x", ReadOnly: true}, src: tree("/srv/corral-state/x", dir, nil), want: bindWant{what: "ignore", msg: "hidden path"}},
		{name: "the caller's credential store", bind: sandbox.Bind{Src: "/u/me/.ssh", Dest: "/tmp/k", ReadOnly: true}, src: tree("/u/me/.ssh", dir, nil), want: bindWant{what: "ignore", msg: "hidden path"}},
		{name: "the caller's dot entry not allowed", bind: sandbox.Bind{Src: "/u/me/.secret", ReadOnly: true}, src: tree("/u/me/.secret", dir, nil), want: bindWant{what: "ignore", msg: "hidden path"}},
		{name: "another user's credential store", bind: sandbox.Bind{Src: "/home/bob/.docker", ReadOnly: true}, src: tree("/home/bob/.docker", dir, nil), want: bindWant{what: "ignore", msg: "hidden path"}},
		{name: "another user's credential file", bind: sandbox.Bind{Src: "/home/bob/.docker/config.json", Dest: "/tmp/c", ReadOnly: true}, src: tree("/home/bob/.docker/config.json", file, nil), want: bindWant{what: "ignore", msg: "hidden path"}},
		{name: "another user's dot entry not allowed", bind: sandbox.Bind{Src: "/home/bob/.secretdir", ReadOnly: true}, src: tree("/home/bob/.secretdir", dir, nil), want: bindWant{what: "ignore", msg: "hidden path"}},
		{name: "root's credential store", bind: sandbox.Bind{Src: "/root/.ssh", ReadOnly: true}, src: tree("/root/.ssh", dir, nil), want: bindWant{what: "ignore", msg: "hidden path"}},
		{name: "where a credential store leads", bind: sandbox.Bind{Src: "/keys/bob-ssh", Dest: "/tmp/k", ReadOnly: true}, src: tree("/keys/bob-ssh", dir, nil), want: bindWant{what: "ignore", msg: "credential store"}},
		{name: "a nested directory whole", bind: sandbox.Bind{Src: "/home/bob/.config", ReadOnly: true}, src: tree("/home/bob/.config", dir, nil), want: bindWant{what: "ignore", msg: "not allowed"}},

		// Homes.
		{name: "the caller's home", bind: sandbox.Bind{Src: "/u/me", ReadOnly: true}, src: tree("/u/me", dir, nil), want: bindWant{what: "refuse", msg: "home directory or holds it"}},
		{name: "a parent of the caller's home", bind: sandbox.Bind{Src: "/u", Dest: "/tmp/u", ReadOnly: true}, src: tree("/u", dir, nil), want: bindWant{what: "refuse", msg: "home directory or holds it"}},
		{name: "an allowed dot entry read-write", bind: sandbox.Bind{Src: "/u/me/.cargo"}, src: tree("/u/me/.cargo", dir, nil), want: bindWant{what: "refuse", msg: "always read-only"}},
		{name: "root's allowed dot file read-write", bind: sandbox.Bind{Src: "/root/.profile"}, src: tree("/root/.profile", file, nil), want: bindWant{what: "refuse", msg: "always read-only"}},
		{name: "an allowed dot entry: its credential file covered", bind: sandbox.Bind{Src: "/u/me/.cargo", ReadOnly: true},
			src:  tree("/u/me/.cargo", dir, map[string]fs.FileMode{"/u/me/.cargo/bin": dir, "/u/me/.cargo/credentials.toml": file}),
			want: bindWant{what: "mount", empty: []string{"/u/me/.cargo/credentials.toml"}}},
		{name: "an allowed dot entry elsewhere", bind: sandbox.Bind{Src: "/u/me/.cargo", Dest: "/tmp/cargo", ReadOnly: true},
			src:  tree("/u/me/.cargo", dir, map[string]fs.FileMode{"/u/me/.cargo/bin": dir}),
			want: bindWant{what: "ignore", msg: "dot entry"}},
		{name: "a home_allow entry of another home", bind: sandbox.Bind{Src: "/home/bob/.zz-tool", ReadOnly: true}, src: tree("/home/bob/.zz-tool", dir, nil), want: bindWant{what: "mount"}},
		{name: "a PATH directory of the caller's", bind: sandbox.Bind{Src: "/u/me/.tool/bin", ReadOnly: true}, src: tree("/u/me/.tool/bin", dir, nil), want: bindWant{what: "mount"}},
		{name: "an allowed child of .local/share: the rest covered", bind: sandbox.Bind{Src: "/home/bob/.local/share", ReadOnly: true},
			src: tree("/home/bob/.local/share", dir, map[string]fs.FileMode{
				"/home/bob/.local/share/fonts": dir, "/home/bob/.local/share/keyrings": dir, "/home/bob/.local/share/other-app": dir, "/home/bob/.local/share/recent.xbel": file,
			}),
			want: bindWant{what: "mount", hide: []string{"/home/bob/.local/share/keyrings", "/home/bob/.local/share/other-app"}, empty: []string{"/home/bob/.local/share/recent.xbel"}}},
		{name: "a non-dot entry of another home", bind: sandbox.Bind{Src: "/home/bob/project"}, src: tree("/home/bob/project", dir, nil), want: bindWant{what: "mount"}},
		{name: "another user's home at its own path", bind: sandbox.Bind{Src: "/home/bob", ReadOnly: true}, src: tree("/home/bob", dir, bobHome()),
			want: bindWant{what: "mount", hide: bobHide, empty: bobEmpty}},
		{name: "/home at its own path", bind: sandbox.Bind{Src: "/home", ReadOnly: true}, src: tree("/home", dir, bobHome()),
			want: bindWant{what: "mount", hide: bobHide, empty: bobEmpty}},
		{name: "/home through a symlink at its own (resolved) path", bind: sandbox.Bind{Src: "/homes-link", ReadOnly: true}, src: tree("/home", dir, bobHome()),
			want: bindWant{what: "mount", dest: "/home", hide: bobHide, empty: bobEmpty}},
		{name: "another user's home elsewhere", bind: sandbox.Bind{Src: "/home/bob", Dest: "/tmp/bob", ReadOnly: true}, src: tree("/home/bob", dir, bobHome()), want: bindWant{what: "ignore", msg: "home directory /home/bob"}},
		{name: "/home elsewhere", bind: sandbox.Bind{Src: "/home", Dest: "/mnt/h", ReadOnly: true}, src: tree("/home", dir, bobHome()), want: bindWant{what: "ignore", msg: "home directory /home/bob"}},
		{name: "another user's home read-write", bind: sandbox.Bind{Src: "/home/bob"}, src: tree("/home/bob", dir, bobHome()), want: bindWant{what: "refuse", msg: "plant"}},
		{name: "/root at its own path", bind: sandbox.Bind{Src: "/root", ReadOnly: true},
			src:  tree("/root", dir, map[string]fs.FileMode{"/root/.bashrc": file, "/root/.ssh": dir, "/root/.ssh/id_rsa": file, "/root/.lesshst": file, "/root/go": dir}),
			want: bindWant{what: "mount", hide: []string{"/root/.ssh"}, empty: []string{"/root/.lesshst"}}},
		{name: "/root elsewhere", bind: sandbox.Bind{Src: "/root", Dest: "/tmp/r", ReadOnly: true}, src: tree("/root", dir, map[string]fs.FileMode{"/root/.bashrc": file}), want: bindWant{what: "ignore", msg: "home directory /root"}},
		{name: "a home that cannot be listed", bind: sandbox.Bind{Src: "/home", ReadOnly: true},
			src: func() *BindSource {
				s := tree("/home", dir, map[string]fs.FileMode{"/home/bob": dir})
				delete(s.Listings, "/home/bob")
				s.Unread = []string{"/home/bob"}
				return s
			}(),
			want: bindWant{what: "mount"}, root: &bindWant{what: "refuse", msg: "cannot list /home/bob"}},

		// Engines.
		{name: "an engine socket", bind: sandbox.Bind{Src: "/var/run/docker.sock", ReadOnly: true}, src: tree("/run/docker.sock", fs.ModeSocket|0o660, nil), want: bindWant{what: "refuse", msg: "engine"}},
		{name: "an engine's state", bind: sandbox.Bind{Src: "/var/lib/docker", ReadOnly: true}, src: tree("/var/lib/docker", dir, nil), want: bindWant{what: "refuse", msg: "engine"}},
		{name: "inside an engine's state", bind: sandbox.Bind{Src: "/var/lib/containerd/io.containerd.content.v1.content", ReadOnly: true}, src: tree("/var/lib/containerd/io.containerd.content.v1.content", dir, nil), want: bindWant{what: "refuse", msg: "engine"}},
		{name: "a directory holding an engine's state", bind: sandbox.Bind{Src: "/var", ReadOnly: true}, src: tree("/var", dir, nil), want: bindWant{what: "refuse", msg: "engine"}},
		{name: "/run elsewhere", bind: sandbox.Bind{Src: "/run", Dest: "/mnt/run", ReadOnly: true}, src: tree("/run", dir, nil), want: bindWant{what: "refuse", msg: "engine"}},
		{name: "a source named as an engine socket", bind: sandbox.Bind{Src: "/srv/x/podman.sock", ReadOnly: true}, src: tree("/srv/x/podman.sock", fs.ModeSocket|0o666, nil), want: bindWant{what: "refuse", msg: "engine"}},

		// System trees.
		{name: "a system tree read-write", bind: sandbox.Bind{Src: "/etc"}, src: tree("/etc", dir, nil), want: bindWant{what: "refuse", msg: "system tree"}},
		{name: "a file in a system tree read-write", bind: sandbox.Bind{Src: "/etc/hosts"}, src: tree("/etc/hosts", file, nil), want: bindWant{what: "refuse", msg: "system tree"}},
		{name: "a system tree read-only: its secrets read as empty", bind: sandbox.Bind{Src: "/etc", ReadOnly: true}, src: tree("/etc", dir, map[string]fs.FileMode{"/etc/shadow": file, "/etc/hosts": file}),
			want: bindWant{what: "mount", empty: []string{"/etc/shadow"}}},
		{name: "a system tree elsewhere", bind: sandbox.Bind{Src: "/etc", Dest: "/tmp/etc", ReadOnly: true}, src: tree("/etc", dir, map[string]fs.FileMode{"/etc/shadow": file}), want: bindWant{what: "ignore", msg: "system secret"}},
		{name: "a subtree of a system tree read-only", bind: sandbox.Bind{Src: "/etc/ssl", ReadOnly: true}, src: tree("/etc/ssl", dir, nil), want: bindWant{what: "mount"}},
		{name: "/tmp itself read-write", bind: sandbox.Bind{Src: "/tmp"}, src: tree("/tmp", dir, nil), want: bindWant{what: "refuse", msg: "system tree"}},

		// Masked engine sockets and corral's directories inside a source.
		{name: "a masked socket at its own path", bind: sandbox.Bind{Src: "/srv/r", ReadOnly: true}, src: tree("/srv/r", dir, map[string]fs.FileMode{"/srv/r/fake.sock": file}), want: bindWant{what: "mount", empty: []string{"/srv/r/fake.sock"}}},
		{name: "a masked socket elsewhere", bind: sandbox.Bind{Src: "/srv/r", Dest: "/tmp/r", ReadOnly: true}, src: tree("/srv/r", dir, map[string]fs.FileMode{"/srv/r/fake.sock": file}), want: bindWant{what: "ignore", msg: "engine socket"}},
		{name: "corral's directory inside", bind: sandbox.Bind{Src: "/srv", ReadOnly: true}, src: tree("/srv", dir, map[string]fs.FileMode{"/srv/corral-state": dir, "/srv/data": dir}), want: bindWant{what: "mount", hide: []string{"/srv/corral-state"}}},
		{name: "corral's directory inside, elsewhere", bind: sandbox.Bind{Src: "/srv", Dest: "/tmp/srv", ReadOnly: true}, src: tree("/srv", dir, map[string]fs.FileMode{"/srv/corral-state": dir}), want: bindWant{what: "ignore", msg: "corral's own directory"}},

		// Writable roots: a source a command could swap.
		{name: "nested in the writable workdir", bind: sandbox.Bind{Src: "/work/a/b", ReadOnly: true}, src: tree("/work/a/b", dir, nil), want: bindWant{what: "refuse", msg: "lies inside /work"}},
		{name: "directly under the writable workdir at its own path", bind: sandbox.Bind{Src: "/work/sub", ReadOnly: true}, src: tree("/work/sub", dir, nil), want: bindWant{what: "mount"}},
		{name: "directly under the writable workdir elsewhere", bind: sandbox.Bind{Src: "/work/sub", Dest: "/tmp/sub", ReadOnly: true}, src: tree("/work/sub", dir, nil), want: bindWant{what: "refuse", msg: "lies inside /work"}},
		{name: "a symlink in the writable workdir", bind: sandbox.Bind{Src: "/work/sub", ReadOnly: true}, src: tree("/etc", dir, nil), want: bindWant{what: "refuse", msg: "symlink inside /work"}},

		// Sockets found by what they are.
		{name: "a root-only socket at a random path", bind: sandbox.Bind{Src: "/srv/x", ReadOnly: true}, src: withSockets(tree("/srv/x", dir, nil), sock("/srv/x/deep/api.sock", 0o600, 0)),
			want: bindWant{what: "refuse", msg: "/srv/x/deep/api.sock (mode 0600, uid 0"}},
		{name: "a group-only socket", bind: sandbox.Bind{Src: "/srv/x", ReadOnly: true}, src: withSockets(tree("/srv/x", dir, nil), sock("/srv/x/k3s/containerd.sock2", 0o660, 0)),
			want: bindWant{what: "refuse", msg: "accepts only its owner or group"}},
		{name: "the caller's own socket, owner only", bind: sandbox.Bind{Src: "/srv/x", ReadOnly: true}, src: withSockets(tree("/srv/x", dir, nil), sock("/srv/x/agent.sock", 0o600, 1000)),
			want: bindWant{what: "refuse", msg: "agent.sock"}},
		{name: "a world-writable socket", bind: sandbox.Bind{Src: "/srv/x", ReadOnly: true}, src: withSockets(tree("/srv/x", dir, nil), sock("/srv/x/pg.sock", 0o777, 0)), want: bindWant{what: "mount"}},
		{name: "a world-writable socket named as an engine's", bind: sandbox.Bind{Src: "/srv/x", ReadOnly: true}, src: withSockets(tree("/srv/x", dir, nil), sock("/srv/x/sub/docker.sock", 0o666, 0)), want: bindWant{what: "refuse", msg: "engine"}},
		{name: "the source is a world-writable socket", bind: sandbox.Bind{Src: "/srv/x/pg.sock", ReadOnly: true}, src: withSockets(tree("/srv/x/pg.sock", fs.ModeSocket|0o777, nil), sock("/srv/x/pg.sock", 0o777, 0)), want: bindWant{what: "mount"}},
		{name: "the source is an owner-only socket", bind: sandbox.Bind{Src: "/srv/x/api.sock", ReadOnly: true}, src: withSockets(tree("/srv/x/api.sock", fs.ModeSocket|0o600, nil), sock("/srv/x/api.sock", 0o600, 0)), want: bindWant{what: "refuse", msg: "api.sock"}},
		{name: "an owner-only socket in a covered store", bind: sandbox.Bind{Src: "/home", ReadOnly: true}, src: withSockets(tree("/home", dir, bobHome()), sock("/home/bob/.docker/run/agent.sock", 0o600, 1001)),
			want: bindWant{what: "mount", hide: bobHide, empty: bobEmpty}},
		{name: "an owner-only socket in a dot entry that is covered", bind: sandbox.Bind{Src: "/home", ReadOnly: true}, src: withSockets(tree("/home", dir, bobHome()), sock("/home/bob/.secretdir/S.agent", 0o600, 1001)),
			want: bindWant{what: "mount", hide: bobHide, empty: bobEmpty}},
		{name: "an owner-only socket in a visible entry of a home", bind: sandbox.Bind{Src: "/home", ReadOnly: true}, src: withSockets(tree("/home", dir, bobHome()), sock("/home/bob/project/app.sock", 0o600, 1001)),
			want: bindWant{what: "refuse", msg: "/home/bob/project/app.sock"}},
		{name: "the scan cut short", bind: sandbox.Bind{Src: "/srv/big", ReadOnly: true}, src: func() *BindSource { s := tree("/srv/big", dir, nil); s.ScanCut = true; return s }(),
			want: bindWant{what: "mount", warn: true}, root: &bindWant{what: "refuse", msg: "more than corral checks for Unix sockets"}},
		{name: "a directory the scan could not list", bind: sandbox.Bind{Src: "/srv/x", ReadOnly: true}, src: func() *BindSource { s := tree("/srv/x", dir, nil); s.Unread = []string{"/srv/x/private"}; return s }(),
			want: bindWant{what: "mount"}, root: &bindWant{what: "refuse", msg: "cannot list /srv/x/private"}},
		{name: "an unlisted directory under a cover", bind: sandbox.Bind{Src: "/home", ReadOnly: true}, src: func() *BindSource {
			s := tree("/home", dir, bobHome())
			s.Unread = []string{"/home/bob/.docker/private"}
			return s
		}(),
			want: bindWant{what: "mount", hide: bobHide, empty: bobEmpty}},
	} {
		for _, root := range []bool{false, true} {
			name := tc.name + "/unprivileged sandbox"
			want := tc.want
			if root {
				name = tc.name + "/host root"
				if tc.root != nil {
					want = *tc.root
				}
			}
			t.Run(name, func(t *testing.T) {
				h := bindTestHost()
				h.HostRoot = root
				if tc.host != nil {
					tc.host(h)
				}
				d, err := DecideBind(tc.bind, h, tc.src)
				switch want.what {
				case "bad", "refuse":
					sentinel := sandbox.ErrPolicy
					if want.what == "bad" {
						sentinel = sandbox.ErrBadRequest
					}
					if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), want.msg) {
						t.Fatalf("DecideBind = %+v, %v; want %v mentioning %q", d, err, sentinel, want.msg)
					}
				case "ignore":
					if err != nil || d.Mount || len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], want.msg) {
						t.Fatalf("DecideBind = %+v, %v; want ignored with a warning mentioning %q", d, err, want.msg)
					}
				case "mount":
					if err != nil || !d.Mount {
						t.Fatalf("DecideBind = %+v, %v; want mounted", d, err)
					}
					dest := want.dest
					if dest == "" {
						dest = tc.src.Resolved
					}
					if d.Src != tc.src.Resolved || d.Dest != dest || d.ReadOnly != tc.bind.ReadOnly {
						t.Errorf("mounts %s at %s (ro %v), want %s at %s (ro %v)", d.Src, d.Dest, d.ReadOnly, tc.src.Resolved, dest, tc.bind.ReadOnly)
					}
					if !slices.Equal(d.HideDirs, want.hide) {
						t.Errorf("HideDirs\n got %q\nwant %q", d.HideDirs, want.hide)
					}
					if !slices.Equal(d.EmptyFiles, want.empty) {
						t.Errorf("EmptyFiles\n got %q\nwant %q", d.EmptyFiles, want.empty)
					}
					if got := len(d.Warnings) > 0; got != want.warn {
						t.Errorf("warnings %q, want some: %v", d.Warnings, want.warn)
					}
				}
			})
		}
	}
}

// TestDecideBindCoversHide: whatever a bind at its own path shows of a
// home, nothing the home rules hide is left uncovered. Each path of Bob's
// home is either visible by the rules or under a cover.
func TestDecideBindCoversHide(t *testing.T) {
	h := bindTestHost()
	d, err := DecideBind(sandbox.Bind{Src: "/home", ReadOnly: true}, h, tree("/home", dir, bobHome()))
	if err != nil || !d.Mount {
		t.Fatalf("%+v %v", d, err)
	}
	visible := map[string]bool{
		"/home/bob": true, "/home/bob/project": true, "/home/bob/notes.txt": true, "/home/bob/.bashrc": true,
		"/home/bob/.cargo": true, "/home/bob/.zz-tool": true, "/home/bob/.config": true, "/home/bob/.config/nvim": true,
		"/home/bob/.local": true, "/home/bob/.local/bin": true, "/home/bob/.local/share": true, "/home/bob/.local/share/fonts": true,
		"/home/bob/.ssh": true, "/home/bob/.dotlink": true, // symlinks: their targets are covered where they lie
	}
	for p := range bobHome() {
		covered := slices.Contains(d.EmptyFiles, p) || slices.ContainsFunc(d.HideDirs, func(c string) bool { return Within(p, c) })
		if covered == visible[p] {
			t.Errorf("%s: covered %v, visible by the rules %v", p, covered, visible[p])
		}
	}
}

func TestEnginePath(t *testing.T) {
	for p, want := range map[string]string{
		"/run/docker.sock":          "/run/docker.sock",
		"/var/run":                  "/var/run/docker",
		"/var/lib/docker/overlay2":  "/var/lib/docker",
		"/run/k3s/containerd":       "/run/k3s",
		"/srv/x/containerd.sock":    "/srv/x/containerd.sock",
		"/home/me/src/docker":       "",
		"/srv/data":                 "",
		"/var/lib/dockerfile-cache": "",
	} {
		if got := EnginePath(p); got != want {
			t.Errorf("EnginePath(%q) = %q, want %q", p, got, want)
		}
	}
}

func TestParsePasswdHomes(t *testing.T) {
	data := []byte("root:x:0:0:root:/root:/bin/bash\n" +
		"daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n" +
		"www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" +
		"alice:x:1000:1000::/home/alice/:/bin/bash\n" +
		"bob:x:1001:1001::/srv/homes/bob:/bin/sh\n" +
		"alias:x:1002:1002::/home/alice:/bin/sh\n" +
		"broken line\n" +
		"rel:x:1003:1003::home/rel:/bin/sh\n")
	want := []string{"/root", "/home/alice", "/srv/homes/bob"}
	if got := ParsePasswdHomes(data); !slices.Equal(got, want) {
		t.Errorf("ParsePasswdHomes = %q, want %q", got, want)
	}
}
