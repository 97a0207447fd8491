package docker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/mount"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/sandbox"
)

// TestJudgeBinds: docker.binds go through the bind policy every backend
// shares (hostview.DecideBind) on facts read from this machine: the rules
// docker had (/, engine sockets and state, read-write system trees, the
// kernel's trees as destinations) and bwrap's (homes, dot entries,
// credential stores, sockets found by type).
func TestJudgeBinds(t *testing.T) {
	base := dockertest.TestDir(t)
	bob := filepath.Join(base, "homes", "bob")
	for rel, body := range map[string]string{".docker/config.json": "{}", ".ssh/id_rsa": "KEY", ".bashrc": "x", ".secret": "x", "project/a": "x"} {
		p := filepath.Join(bob, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sockDir := filepath.Join(base, "srv", "x", "deep")
	os.MkdirAll(sockDir, 0o755)
	l, err := net.Listen("unix", filepath.Join(sockDir, "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Chmod(filepath.Join(sockDir, "api.sock"), 0o600)
	ws := filepath.Join(base, "ws")
	os.MkdirAll(filepath.Join(ws, "sub", "deep"), 0o755)
	os.MkdirAll(filepath.Join(base, "state"), 0o700)

	e := NewEngine(Options{HiddenDirs: []string{filepath.Join(base, "state")}})
	e.peopleHomes = func(ex string) []string { return append(hostview.PeopleHomes(ex), bob) }
	own := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	for _, tc := range []struct {
		name  string
		bind  sandbox.Bind
		err   error
		msg   string // in the error, or in the warning of an ignored bind
		check func(d hostview.BindDecision) bool
	}{
		{name: "bind / refused", bind: sandbox.Bind{Src: "/", Dest: "/host", ReadOnly: true}, err: sandbox.ErrPolicy, msg: "whole host"},
		{name: "bind /etc rw refused", bind: sandbox.Bind{Src: "/etc"}, err: sandbox.ErrPolicy, msg: "system tree"},
		{name: "bind /etc/ssl ro allowed", bind: sandbox.Bind{Src: "/etc/ssl", ReadOnly: true}, check: func(d hostview.BindDecision) bool { return d.Src == "/etc/ssl" }},
		{name: "docker socket refused", bind: sandbox.Bind{Src: "/var/run/docker.sock", ReadOnly: true}, err: sandbox.ErrPolicy, msg: "engine"},
		{name: "docker state refused", bind: sandbox.Bind{Src: "/var/lib/docker", ReadOnly: true}, err: sandbox.ErrPolicy, msg: "engine"},
		{name: "/run refused (holds docker.sock)", bind: sandbox.Bind{Src: "/run", Dest: "/mnt/run", ReadOnly: true}, err: sandbox.ErrPolicy, msg: "engine"},
		{name: "/var/run refused", bind: sandbox.Bind{Src: "/var/run", ReadOnly: true}, err: sandbox.ErrPolicy, msg: "engine"},
		{name: "bind into /proc refused", bind: sandbox.Bind{Src: "/srv/x", Dest: "/proc/x", ReadOnly: true}, err: sandbox.ErrPolicy, msg: "kernel"},
		{name: "bind into /dev refused", bind: sandbox.Bind{Src: "/dev/null", ReadOnly: true}, err: sandbox.ErrPolicy, msg: "/dev"},
		{name: "missing read-only source refused", bind: sandbox.Bind{Src: filepath.Join(base, "no-such"), ReadOnly: true}, err: sandbox.ErrPolicy, msg: "cannot be used"},
		{name: "missing read-write source skipped", bind: sandbox.Bind{Src: filepath.Join(base, "no-such")}, msg: "skipped"},
		{name: "corral's state ignored", bind: sandbox.Bind{Src: filepath.Join(base, "state"), Dest: "/s", ReadOnly: true}, msg: "hidden"},
		{name: "another person's home covered at its own path", bind: sandbox.Bind{Src: filepath.Join(base, "homes"), ReadOnly: true},
			check: func(d hostview.BindDecision) bool {
				return slices.Equal(d.HideDirs, []string{filepath.Join(bob, ".docker"), filepath.Join(bob, ".ssh")}) &&
					slices.Equal(d.EmptyFiles, []string{filepath.Join(bob, ".secret")})
			}},
		{name: "another person's home elsewhere ignored", bind: sandbox.Bind{Src: bob, Dest: "/mnt/bob", ReadOnly: true}, msg: "home directory"},
		{name: "another person's home read-write refused", bind: sandbox.Bind{Src: bob}, err: sandbox.ErrPolicy, msg: "plant"},
		{name: "another person's credential store ignored", bind: sandbox.Bind{Src: filepath.Join(bob, ".docker"), ReadOnly: true}, msg: "hidden"},
		{name: "a root-only socket refused", bind: sandbox.Bind{Src: filepath.Join(base, "srv"), ReadOnly: true}, err: sandbox.ErrPolicy, msg: filepath.Join(sockDir, "api.sock")},
		{name: "inside the writable workspace refused", bind: sandbox.Bind{Src: filepath.Join(ws, "sub", "deep"), ReadOnly: true}, err: sandbox.ErrPolicy, msg: "can write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := DefaultSettings
			st.Binds = []sandbox.Bind{tc.bind}
			b := e.Backend(st)
			req := &sandbox.Request{Policy: sandbox.Policy{Workdir: ws, Profile: sandbox.ProfileWorkspace}}
			got, warns, err := b.judgeBinds(req, workspace{Host: ws, Source: ws, Target: ws, Writable: true}, &parsed{user: own})
			switch {
			case tc.err != nil:
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "docker.binds") {
					t.Fatalf("judgeBinds = %+v, %v; want %v naming docker.binds and %q", got, err, tc.err, tc.msg)
				}
			case tc.check == nil:
				if err != nil || len(got) != 0 || len(warns) != 1 || !strings.Contains(warns[0], tc.msg) {
					t.Fatalf("judgeBinds = %+v, %q, %v; want the bind ignored with a warning mentioning %q", got, warns, err, tc.msg)
				}
			default:
				if err != nil || len(got) != 1 || !tc.check(got[0]) {
					t.Fatalf("judgeBinds = %+v, %q, %v", got, warns, err)
				}
			}
		})
	}
}

func TestHostRoot(t *testing.T) {
	own := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	for user, want := range map[string]bool{
		"":    true, // the image's user: unknown
		"0:0": true,
		own:   os.Getuid() == 0,
		// Another uid: rights corral's uid may lack, unless corral is
		// root (a root caller's container runs as the workspace's owner).
		fmt.Sprintf("%d:0", os.Getuid()+4242): os.Getuid() != 0,
	} {
		if got := hostRoot(user); got != want {
			t.Errorf("hostRoot(%q) = %v, want %v", user, got, want)
		}
	}
}

// TestSpecBindCovers: what the bind policy covers inside a bind becomes
// mounts of the container: an empty read-only tmpfs over a directory, the
// empty file bound read-only over a file; and it enters the hash, so a
// container made before a cover was needed is replaced.
func TestSpecBindCovers(t *testing.T) {
	st := DefaultSettings
	p, err := st.check(1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	filter := &filterSpec{profile: "{}", denyUnix: true}
	d := hostview.BindDecision{Mount: true, Src: "/home", Dest: "/home", ReadOnly: true,
		HideDirs: []string{"/home/bob/.ssh"}, EmptyFiles: []string{"/home/bob/.secret"}}
	s, err := buildSpec(&st, p, testWS, "/opt/corral", nil, []hostview.BindDecision{d}, "/state/empty", nil, filter, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []mount.Mount{
		{Type: mount.TypeBind, Source: "/home/u/proj", Target: "/home/u/proj"},
		{Type: mount.TypeBind, Source: "/opt/corral", Target: "/.corral/corral", ReadOnly: true},
		{Type: mount.TypeBind, Source: "/home", Target: "/home", ReadOnly: true},
		{Type: mount.TypeBind, Source: "/state/empty", Target: "/home/bob/.secret", ReadOnly: true},
	}
	ms := s.Host.Mounts
	if len(ms) != 5 || !slices.EqualFunc(ms[:4], want, func(a, b mount.Mount) bool {
		return a.Type == b.Type && a.Source == b.Source && a.Target == b.Target && a.ReadOnly == b.ReadOnly
	}) || ms[4].Type != mount.TypeTmpfs || ms[4].Target != "/home/bob/.ssh" || !ms[4].ReadOnly || ms[4].TmpfsOptions == nil {
		t.Errorf("mounts %+v", ms)
	}
	plain := d
	plain.HideDirs, plain.EmptyFiles = nil, nil
	s2, err := buildSpec(&st, p, testWS, "/opt/corral", nil, []hostview.BindDecision{plain}, "", nil, filter, nil, nil, nil)
	if err != nil || s2.Hash == s.Hash {
		t.Errorf("the covers do not change the hash (%v)", err)
	}
	if _, err := buildSpec(&st, p, testWS, "/opt/corral", nil, []hostview.BindDecision{d}, "", nil, filter, nil, nil, nil); err == nil {
		t.Error("a file to cover and no empty file: no error")
	}
	st.MountOptions = "z"
	s3, err := buildSpec(&st, p, testWS, "/opt/corral", nil, []hostview.BindDecision{d}, "/state/empty", nil, filter, nil, nil, nil)
	if err != nil || !slices.Contains(s3.Host.Binds, "/state/empty:/home/bob/.secret:ro,z") || len(s3.Host.Mounts) != 1 || s3.Host.Mounts[0].Type != mount.TypeTmpfs {
		t.Errorf("with mount_options: binds %q mounts %+v (%v)", s3.Host.Binds, s3.Host.Mounts, err)
	}
}

// TestEmptyFile: Options.EmptyFile is made empty and read-only when
// missing; "" is /dev/null.
func TestEmptyFile(t *testing.T) {
	if p, err := NewEngine(Options{}).emptyFile(); p != "/dev/null" || err != nil {
		t.Errorf("emptyFile() = %q, %v; want /dev/null", p, err)
	}
	f := filepath.Join(dockertest.TestDir(t), "state", "empty")
	p, err := NewEngine(Options{EmptyFile: f}).emptyFile()
	st, serr := os.Stat(f)
	if p != f || err != nil || serr != nil || st.Size() != 0 || st.Mode().Perm() != 0o444 {
		t.Errorf("emptyFile() = %q, %v; file %v %v", p, err, st, serr)
	}
}
