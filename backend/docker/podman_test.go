package docker

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
)

func TestFlavorOf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		components []string
		secopts    []string
		rootless   bool
		want       Flavor
	}{
		{"docker", []string{"Engine", "containerd", "runc", "docker-init"}, []string{"name=seccomp,profile=builtin", "name=cgroupns"}, false, Flavor{}},
		{"rootless docker", []string{"Engine", "containerd"}, []string{"name=seccomp,profile=builtin", "name=rootless", "name=cgroupns"}, false, Flavor{Rootless: true}},
		// Podman 4.3.1's answers, rootful and rootless.
		{"podman", []string{"Podman Engine", "Conmon", "OCI Runtime (runc)"}, []string{"name=seccomp,profile=default"}, false, Flavor{Podman: true}},
		{"rootless podman", []string{"Podman Engine", "Conmon", "OCI Runtime (runc)"}, []string{"name=seccomp,profile=default"}, true, Flavor{Podman: true, Rootless: true}},
		{"nothing said", nil, nil, false, Flavor{}},
		{"a name that only looks rootless", []string{"Engine"}, []string{"name=seccomp,profile=/etc/rootless.json"}, false, Flavor{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := flavorOf(tc.components, tc.secopts, tc.rootless); got != tc.want {
				t.Errorf("flavorOf(%q, %q, %v) = %+v, want %+v", tc.components, tc.secopts, tc.rootless, got, tc.want)
			}
		})
	}
}

func TestAdaptHost(t *testing.T) {
	const profile = `{"defaultAction":"SCMP_ACT_ERRNO"}`
	dir := filepath.Join(t.TempDir(), "seccomp")
	file := filepath.Join(dir, profileFileName([]byte(profile)))
	for _, tc := range []struct {
		name       string
		f          Flavor
		userns     string // set before, as extra_run_args would
		dir        string
		wantSec    []string
		wantUserns string
		wantErr    string
	}{
		{"docker keeps the JSON", Flavor{}, "", "", []string{"no-new-privileges", "seccomp=" + profile}, "", ""},
		{"rootless docker keeps everything", Flavor{Rootless: true}, "", "", []string{"no-new-privileges", "seccomp=" + profile}, "", ""},
		{"podman takes a file", Flavor{Podman: true}, "", dir, []string{"no-new-privileges", "seccomp=" + file}, "", ""},
		{"rootless podman maps the caller", Flavor{Podman: true, Rootless: true}, "", dir, []string{"no-new-privileges", "seccomp=" + file}, "keep-id", ""},
		{"extra_run_args' user namespace stays", Flavor{Podman: true, Rootless: true}, "host", dir, []string{"no-new-privileges", "seccomp=" + file}, "host", ""},
		{"podman without a directory refuses", Flavor{Podman: true}, "", "", nil, "", "no directory"},
		{"podman with a relative directory refuses", Flavor{Podman: true}, "", "seccomp", nil, "", "no directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := &container.HostConfig{SecurityOpt: []string{"no-new-privileges", "seccomp=" + profile}, UsernsMode: container.UsernsMode(tc.userns)}
			err := adaptHost(hc, tc.f, tc.dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("adaptHost: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(hc.SecurityOpt, tc.wantSec) || string(hc.UsernsMode) != tc.wantUserns {
				t.Errorf("adaptHost: %q userns %q, want %q userns %q", hc.SecurityOpt, hc.UsernsMode, tc.wantSec, tc.wantUserns)
			}
		})
	}
	// The file holds the profile, readable by the engine (root or the
	// user), written by no one else.
	b, err := os.ReadFile(file)
	if err != nil || string(b) != profile {
		t.Fatalf("%s: %q, %v", file, b, err)
	}
	st, _ := os.Stat(file)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode %v, want 0644", file, st.Mode().Perm())
	}
	dst, _ := os.Stat(dir)
	if dst.Mode().Perm()&0o022 != 0 {
		t.Errorf("%s: mode %v: others may write it", dir, dst.Mode().Perm())
	}
}

// TestWriteProfileRepairs: a file of the profile's name that holds
// something else (changed behind corral's back) or has another mode is
// written again before a container names it; unconfined and paths pass.
func TestWriteProfileRepairs(t *testing.T) {
	dir := t.TempDir()
	prof := []byte(`{"defaultAction":"SCMP_ACT_ERRNO"}`)
	p := filepath.Join(dir, profileFileName(prof))
	if err := os.WriteFile(p, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o666)
	got, err := writeProfile(dir, prof)
	if err != nil || got != p {
		t.Fatalf("writeProfile = %q, %v; want %q", got, err, p)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(b) != string(prof) || st.Mode().Perm() != 0o644 {
		t.Errorf("%s: %q mode %v after writeProfile", p, b, st.Mode().Perm())
	}
	if a, b := profileFileName([]byte("a")), profileFileName([]byte("b")); a == b {
		t.Errorf("two profiles share the name %s", a)
	}
	out, err := forPodman([]string{"seccomp=unconfined", "seccomp=/etc/p.json", "label=disable"}, "")
	if err != nil || !slices.Equal(out, []string{"seccomp=unconfined", "seccomp=/etc/p.json", "label=disable"}) {
		t.Errorf("forPodman changed what needs no file: %q, %v", out, err)
	}
}

func TestPodmanFix(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		// Podman 4.3.1's messages, as the issue met them.
		{"Error response from daemon: container create: container-init binary not found on the host: stat /usr/libexec/podman/catatonit: no such file or directory", "install it"},
		{"Error response from daemon: runc: runc create failed: unable to start container process: error during container init: error setting rlimits for ready process: error setting rlimit type 7: operation not permitted: OCI permission denied", "default_ulimits"},
		{"cannot find newuidmap: exec: \"newuidmap\": executable file not found in $PATH", "uidmap"},
		{"Error response from daemon: no such image", ""},
	} {
		if got := podmanFix(tc.msg); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("podmanFix(%q) = %q, want one with %q", tc.msg, got, tc.want)
		}
	}
}

func TestPodmanTmpfs(t *testing.T) {
	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: "/home/bob", Target: "/home/bob", ReadOnly: true},
		{Type: mount.TypeTmpfs, Target: "/home/bob/.ssh", ReadOnly: true, TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 64 << 10, Mode: coverMode}},
		{Type: mount.TypeBind, Source: "/var/empty", Target: "/home/bob/.netrc", ReadOnly: true},
	}
	kept, tmpfs := podmanTmpfs(mounts, map[string]string{"/tmp": "rw,nosuid,nodev,exec,mode=1777,size=512"})
	if len(kept) != 2 || kept[0].Target != "/home/bob" || kept[1].Target != "/home/bob/.netrc" {
		t.Errorf("kept %+v, want the two binds", kept)
	}
	want := map[string]string{
		"/tmp":           "rw,nosuid,nodev,exec,mode=1777,size=512,notmpcopyup",
		"/home/bob/.ssh": "ro,size=65536,mode=0700,nosuid,nodev,notmpcopyup",
	}
	if !maps.Equal(tmpfs, want) {
		t.Errorf("tmpfs %q, want %q", tmpfs, want)
	}
	if _, tmpfs := podmanTmpfs(nil, map[string]string{"/x": "notmpcopyup"}); tmpfs["/x"] != "notmpcopyup" {
		t.Errorf("notmpcopyup twice: %q", tmpfs["/x"])
	}
	if _, tmpfs := podmanTmpfs(nil, nil); tmpfs != nil {
		t.Errorf("no tmpfs made %q", tmpfs)
	}
}

func TestChooseHost(t *testing.T) {
	const docker, rootless, rootful = "/var/run/docker.sock", "/run/user/1000/podman/podman.sock", "/run/podman/podman.sock"
	for _, tc := range []struct {
		name, env, xdg string
		socks          []string
		want           string
	}{
		{"DOCKER_HOST wins", "tcp://10.0.0.1:2376", "/run/user/1000", []string{docker, rootless, rootful}, "tcp://10.0.0.1:2376"},
		{"docker's socket", "", "/run/user/1000", []string{docker, rootless}, "unix://" + docker},
		{"rootless podman", "", "/run/user/1000", []string{rootless, rootful}, "unix://" + rootless},
		{"rootful podman", "", "/run/user/1000", []string{rootful}, "unix://" + rootful},
		{"no XDG_RUNTIME_DIR", "", "", []string{rootless, rootful}, "unix://" + rootful},
		{"a relative XDG_RUNTIME_DIR is no one's", "", "run/user/1000", []string{"run/user/1000/podman/podman.sock"}, "unix://" + docker},
		{"nothing: docker's, to be reported", "", "/run/user/1000", nil, "unix://" + docker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := chooseHost(tc.env, tc.xdg, func(p string) bool { return slices.Contains(tc.socks, p) }); got != tc.want {
				t.Errorf("chooseHost = %q, want %q", got, tc.want)
			}
		})
	}
}
