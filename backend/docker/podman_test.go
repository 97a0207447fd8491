package docker

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
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
	const mask = "mask=/proc/kcore:/proc/interrupts"
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
		{"podman takes a file and the masks as an option", Flavor{Podman: true}, "", dir, []string{"no-new-privileges", "seccomp=" + file, mask}, "", ""},
		{"rootless podman maps the caller", Flavor{Podman: true, Rootless: true}, "", dir, []string{"no-new-privileges", "seccomp=" + file, mask}, "keep-id", ""},
		{"extra_run_args' user namespace stays", Flavor{Podman: true, Rootless: true}, "host", dir, []string{"no-new-privileges", "seccomp=" + file, mask}, "host", ""},
		{"per-process limits want keep-id", Flavor{Podman: true, Rootless: true, PerProcess: "runs on cgroup v1"}, "", dir, []string{"no-new-privileges", "seccomp=" + file, mask}, "keep-id", ""},
		{"per-process limits refuse another user namespace", Flavor{Podman: true, Rootless: true, PerProcess: "runs on cgroup v1"}, "host", dir, nil, "", "RLIMIT_NPROC"},
		{"per-process limits want memory for the helpers", Flavor{Podman: true, Rootless: true, PerProcess: "runs on cgroup v1"}, "", dir, nil, "", "need 128 MiB"},
		{"podman without a directory refuses", Flavor{Podman: true}, "", "", nil, "", "no directory"},
		{"podman with a relative directory refuses", Flavor{Podman: true}, "", "seccomp", nil, "", "no directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := &container.HostConfig{SecurityOpt: []string{"no-new-privileges", "seccomp=" + profile}, UsernsMode: container.UsernsMode(tc.userns), MaskedPaths: []string{"/proc/kcore", "/proc/interrupts"}}
			pids := int64(256)
			hc.PidsLimit, hc.Memory = &pids, 1<<30
			if strings.Contains(tc.name, "memory for the helpers") {
				hc.Memory = 127 << 20
			}
			cfg := &container.Config{Env: []string{"HOME=/tmp", reexec.RlimitsEnv + "=nproc=100000:100000"}}
			_, err := adaptHost(cfg, hc, tc.f, tc.dir, "corral-0123456789ab", "", 30)
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
			// Rlimits only where cgroups cannot limit the container,
			// and then corral's alone (one an image or extra_run_args
			// gave is replaced).
			want := []string{"HOME=/tmp", reexec.RlimitsEnv + "=nproc=100000:100000"}
			if tc.f.PerProcess != "" {
				want = []string{"HOME=/tmp", reexec.RlimitsEnv + "=data=1073741824:1073741824,nproc=256:256,cpu=30:-1"}
			}
			if !slices.Equal(cfg.Env, want) {
				t.Errorf("adaptHost: env %q, want %q", cfg.Env, want)
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

// TestResolveHost: DOCKER_HOST, then docker.host, then Docker's socket,
// then Podman's rootless one, then its rootful one, then Docker's
// default; each answer says where it came from.
func TestResolveHost(t *testing.T) {
	const docker, rootless, rootful = "/var/run/docker.sock", "/run/user/1000/podman/podman.sock", "/run/podman/podman.sock"
	for _, tc := range []struct {
		name, env, setting, xdg string
		socks                   []string
		want                    HostChoice
	}{
		{"DOCKER_HOST wins", "tcp://10.0.0.1:2376", "unix:///run/podman/podman.sock", "/run/user/1000", []string{docker, rootless, rootful}, HostChoice{"tcp://10.0.0.1:2376", FromEnv}},
		{"DOCKER_HOST wins where nothing is", "unix:///nowhere.sock", "", "", nil, HostChoice{"unix:///nowhere.sock", FromEnv}},
		{"a blank DOCKER_HOST is unset", "  ", "unix:///run/podman/podman.sock", "", []string{docker}, HostChoice{"unix:///run/podman/podman.sock", FromSetting}},
		{"docker.host over the sockets", "", "unix:///srv/podman.sock", "/run/user/1000", []string{docker, rootless, rootful}, HostChoice{"unix:///srv/podman.sock", FromSetting}},
		{"docker.host that is not there yet", "", "ssh://me@build", "", nil, HostChoice{"ssh://me@build", FromSetting}},
		{"docker's socket", "", "", "/run/user/1000", []string{docker, rootless}, HostChoice{"unix://" + docker, FromSearch}},
		{"rootless podman", "", "", "/run/user/1000", []string{rootless, rootful}, HostChoice{"unix://" + rootless, FromSearch}},
		{"rootful podman", "", "", "/run/user/1000", []string{rootful}, HostChoice{"unix://" + rootful, FromSearch}},
		{"no XDG_RUNTIME_DIR", "", "", "", []string{rootless, rootful}, HostChoice{"unix://" + rootful, FromSearch}},
		{"a relative XDG_RUNTIME_DIR is no one's", "", "", "run/user/1000", []string{"run/user/1000/podman/podman.sock"}, HostChoice{"unix://" + docker, FromDefault}},
		{"nothing: docker's, to be reported", "", "", "/run/user/1000", nil, HostChoice{"unix://" + docker, FromDefault}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolveHost(tc.env, tc.setting, tc.xdg, func(p string) bool { return slices.Contains(tc.socks, p) }); got != tc.want {
				t.Errorf("resolveHost = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestEngineProblems: what doctor names of an engine's answers, with the
// fix, and nothing for an engine that lacks nothing.
func TestEngineProblems(t *testing.T) {
	const (
		v1       = "cgroup v1"
		catatoni = "catatonit"
		subids   = "subordinate ids"
	)
	podman := Flavor{Podman: true}
	rootless := Flavor{Podman: true, Rootless: true}
	noLimits := func(f Flavor) Flavor {
		f.NoLimits = "runs on cgroup v1, where a rootless engine ignores every container limit"
		return f
	}
	ok := func(f Flavor, cg string) EngineFacts {
		return EngineFacts{Flavor: f, CgroupVersion: cg, UIDRanges: -1, GIDRanges: -1, Local: true, InitFound: true}
	}
	with := func(f EngineFacts, change func(*EngineFacts)) EngineFacts { change(&f); return f }
	for _, tc := range []struct {
		name  string
		facts EngineFacts
		want  []string // one substring per problem, in order
		fixes []string
	}{
		{"docker", EngineFacts{CgroupVersion: "1", UIDRanges: -1, GIDRanges: -1, Local: true}, nil, nil},
		{"docker without catatonit needs none", EngineFacts{CgroupVersion: "2", Local: true}, nil, nil},
		{"rootless docker on v2", EngineFacts{Flavor: Flavor{Rootless: true}, CgroupVersion: "2", UIDRanges: -1, GIDRanges: -1}, nil, nil},
		{"rootless docker on v1", EngineFacts{Flavor: noLimits(Flavor{Rootless: true}), CgroupVersion: "1", UIDRanges: -1, GIDRanges: -1}, []string{v1}, []string{"rootful"}},
		{"rootful podman on v1", ok(podman, "1"), nil, nil},
		{"rootless podman on v2", with(ok(rootless, "2"), func(f *EngineFacts) { f.UIDRanges, f.GIDRanges = 2, 2 }), nil, nil},
		{"rootless podman on v1", with(ok(noLimits(rootless), "1"), func(f *EngineFacts) { f.UIDRanges, f.GIDRanges = 2, 2 }), []string{v1}, []string{"systemd.unified_cgroup_hierarchy=1"}},
		{"rootless podman on v2 without controllers", with(ok(rootless, "2"), func(f *EngineFacts) {
			f.UIDRanges, f.GIDRanges, f.Flavor.NoLimits = 2, 2, "has no memory, pids cgroup controller delegated to its user, so it cannot limit containers"
		}), []string{"no memory, pids cgroup controller"}, []string{"systemd user session"}},
		{"podman without catatonit", with(ok(podman, "2"), func(f *EngineFacts) { f.InitFound = false }), []string{catatoni}, []string{"apt-get install catatonit"}},
		{"podman without the init containers.conf names", with(ok(podman, "2"), func(f *EngineFacts) { f.InitFound, f.InitPath = false, "/opt/init/catatonit" }), []string{"not at /opt/init/catatonit, the init_path containers.conf sets"}, []string{"set init_path in containers.conf"}},
		{"podman with the init containers.conf names", with(ok(podman, "2"), func(f *EngineFacts) { f.InitPath = "/opt/init/catatonit" }), nil, nil},
		{"a remote podman's init is not judged", with(ok(podman, "2"), func(f *EngineFacts) { f.InitFound, f.Local = false, false }), nil, nil},
		{"rootless podman without subuids", with(ok(rootless, "2"), func(f *EngineFacts) { f.UIDRanges, f.GIDRanges = 1, 2 }), []string{subids}, []string{"usermod --add-subuids"}},
		{"rootless podman without subgids", with(ok(rootless, "2"), func(f *EngineFacts) { f.UIDRanges, f.GIDRanges = 2, 1 }), []string{subids}, []string{"--add-subgids"}},
		{"rootless podman, ranges unknown", ok(rootless, "2"), nil, nil},
		{"everything missing", with(ok(noLimits(rootless), "1"), func(f *EngineFacts) { f.InitFound, f.UIDRanges, f.GIDRanges = false, 1, 1 }), []string{v1, catatoni, subids}, []string{"rootful", "catatonit", "migrate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := engineProblems(tc.facts)
			if len(got) != len(tc.want) {
				t.Fatalf("engineProblems(%+v) = %+v, want %d problems", tc.facts, got, len(tc.want))
			}
			for i, p := range got {
				if !strings.Contains(p.What, tc.want[i]) || !strings.Contains(p.Fix, tc.fixes[i]) {
					t.Errorf("problem %d: %+v, want %q with the fix %q", i, p, tc.want[i], tc.fixes[i])
				}
			}
		})
	}
}

// TestIgnoresLimits: which engines corral refuses for ignoring
// containers' limits, and why.
func TestIgnoresLimits(t *testing.T) {
	all := engineInfo{MemoryLimit: true, PidsLimit: true, CpuCfsQuota: true}
	v := func(in engineInfo, cg string) engineInfo { in.CgroupVersion = cg; return in }
	full := []string{"cpuset", "cpu", "io", "memory", "pids"}
	for _, tc := range []struct {
		name        string
		f           Flavor
		in          engineInfo
		controllers []string
		want        string // a substring of the reason; "" for none
	}{
		{"docker", Flavor{}, v(all, "1"), nil, ""},
		{"docker says it cannot, but is rootful", Flavor{}, v(engineInfo{}, "2"), nil, ""},
		{"rootful podman on v1", Flavor{Podman: true}, v(all, "1"), []string{}, ""},
		{"rootless podman on v1, whatever it says", Flavor{Podman: true, Rootless: true}, v(all, "1"), full, "cgroup v1"},
		{"rootless docker on v1", Flavor{Rootless: true}, v(all, "1"), nil, "cgroup v1"},
		{"rootless podman on v2, delegated", Flavor{Podman: true, Rootless: true}, v(all, "2"), full, ""},
		{"rootless podman on v2, cpu and io only", Flavor{Podman: true, Rootless: true}, v(all, "2"), []string{"cpu", "io"}, "no memory, pids cgroup controller"},
		{"rootless podman on v2, nothing delegated", Flavor{Podman: true, Rootless: true}, v(all, "2"), []string{}, "no memory, pids, cpu"},
		{"rootless docker on v2, delegated", Flavor{Rootless: true}, v(all, "2"), nil, ""},
		{"rootless docker on v2 without pids", Flavor{Rootless: true}, v(engineInfo{MemoryLimit: true, CpuCfsQuota: true}, "2"), nil, "no pids cgroup controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ignoresLimits(tc.f, tc.in, tc.controllers)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("ignoresLimits = %q, want %q", got, tc.want)
			}
			if got != "" {
				err := noLimitsErr(got)
				for _, w := range []string{got, "nothing was run", "rootful engine", "systemd user session"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("the refusal lacks %q: %v", w, err)
					}
				}
			}
		})
	}
}

// TestPodmanVolumes: review mode's inline overlay volumes (Docker's form,
// overlayVolume) become named volumes to make first, mounted by name; a
// lower-only overlay gets a throwaway upper under the review directory
// and a read-only mount (Podman chowns a volume's root at first mount);
// other mounts pass unchanged.
func TestPodmanVolumes(t *testing.T) {
	const ctr = "corral-0123456789ab"
	ws := overlayVolume("/w/p", "lowerdir=/w/p,upperdir=/s/l/upper,workdir=/s/l/work,userxattr", map[string]string{LabelEnv: "1", LabelLayer: "/s/l", LabelGeneration: "3"})
	prot := overlayVolume("/w/p/.git/hooks", "ro,lowerdir=/s/l/upper/.git/hooks:/w/p/.git/hooks,userxattr", map[string]string{LabelEnv: "1", LabelLayer: "/s/l"})
	bind := mount.Mount{Type: mount.TypeBind, Source: "/w/p/.git/config", Target: "/w/p/.git/config", ReadOnly: true}
	named := mount.Mount{Type: mount.TypeVolume, Source: "cache", Target: "/cache"}
	got, vols, err := podmanVolumes([]mount.Mount{ws, bind, prot, named}, ctr, "/st/podman-review")
	if err != nil {
		t.Fatal(err)
	}
	wantMounts := []mount.Mount{
		{Type: mount.TypeVolume, Source: ctr + "-v0", Target: "/w/p", VolumeOptions: &mount.VolumeOptions{NoCopy: true}},
		bind,
		{Type: mount.TypeVolume, Source: ctr + "-v1", Target: "/w/p/.git/hooks", ReadOnly: true, VolumeOptions: &mount.VolumeOptions{NoCopy: true}},
		named,
	}
	if len(got) != len(wantMounts) {
		t.Fatalf("mounts %+v, want %+v", got, wantMounts)
	}
	for i := range got {
		g, w := got[i], wantMounts[i]
		if g.Type != w.Type || g.Source != w.Source || g.Target != w.Target || g.ReadOnly != w.ReadOnly || (w.VolumeOptions != nil) != (g.VolumeOptions != nil) ||
			(w.VolumeOptions != nil && (g.VolumeOptions.NoCopy != w.VolumeOptions.NoCopy || g.VolumeOptions.DriverConfig != nil)) {
			t.Errorf("mount %d = %+v, want %+v", i, g, w)
		}
	}
	wantVols := []podmanVolume{
		{Name: ctr + "-v0", Options: map[string]string{"type": "overlay", "device": "overlay", "o": "lowerdir=/w/p,upperdir=/s/l/upper,workdir=/s/l/work,userxattr"},
			Labels: map[string]string{LabelEnv: "1", LabelLayer: "/s/l", LabelGeneration: "3", LabelContainer: ctr}},
		{Name: ctr + "-v1", Options: map[string]string{"type": "overlay", "device": "overlay", "o": "lowerdir=/s/l/upper/.git/hooks:/w/p/.git/hooks,upperdir=/st/podman-review/" + ctr + "-v1/upper,workdir=/st/podman-review/" + ctr + "-v1/work,userxattr"},
			Labels: map[string]string{LabelEnv: "1", LabelLayer: "/s/l", LabelContainer: ctr}, Scratch: "/st/podman-review/" + ctr + "-v1"},
	}
	if len(vols) != len(wantVols) {
		t.Fatalf("volumes %+v, want %+v", vols, wantVols)
	}
	for i := range vols {
		g, w := vols[i], wantVols[i]
		if g.Name != w.Name || g.Scratch != w.Scratch || !maps.Equal(g.Options, w.Options) || !maps.Equal(g.Labels, w.Labels) {
			t.Errorf("volume %d = %+v, want %+v", i, g, w)
		}
	}
	// Docker's form is left as it was (the labels are the mount's own).
	if _, ok := ws.VolumeOptions.Labels[LabelContainer]; ok || ws.VolumeOptions.DriverConfig == nil {
		t.Error("podmanVolumes changed its input")
	}
	// A read-only overlay without a review directory, or with one a
	// volume's options cannot carry, is refused, nothing made.
	for _, dir := range []string{"", "rel", "/st:x"} {
		if _, vols, err := podmanVolumes([]mount.Mount{prot}, ctr, dir); err == nil || vols != nil {
			t.Errorf("review directory %q: %v, %v; want an error", dir, vols, err)
		}
	}
	// The read-write overlay needs none.
	if _, vols, err := podmanVolumes([]mount.Mount{ws}, ctr, ""); err != nil || len(vols) != 1 {
		t.Errorf("the workspace's overlay without a review directory: %v, %v", vols, err)
	}
	if _, _, err := podmanVolumes([]mount.Mount{{Type: mount.TypeVolume, Target: "/x", VolumeOptions: &mount.VolumeOptions{DriverConfig: &mount.Driver{Name: "nfs"}}}}, ctr, ""); err == nil {
		t.Error("another driver's inline volume passed")
	}
}

func TestValidVolumeName(t *testing.T) {
	for name, want := range map[string]bool{
		"corral-0123456789ab-v0": true, "corral-0123456789ab-v12": true,
		"corral-0123456789ab": false, "corral--v0": false, "corral-0123456789ab-v": false,
		"corral-0123456789ab-v0/..": false, "../corral-ab-v0": false, "corral-AB-v0": false,
		"other-ab-v0": false, "corral-ab-v0x": false,
	} {
		if got := validVolumeName(name); got != want {
			t.Errorf("validVolumeName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestPerProcessRlimits: the container's rlimits where its engine's
// cgroups cannot limit it, as the helpers parse them.
func TestPerProcessRlimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		memory int64
		pids   int64
		cpu    int
		want   string
	}{
		{"defaults", 1 << 30, 256, 30, "data=1073741824:1073741824,nproc=256:256,cpu=30:-1"},
		{"cpu_seconds 0", 512 << 20, 64, 0, "data=536870912:536870912,nproc=64:64"},
		{"memory and pids unset", 0, 0, 5, "cpu=5:-1"},
		{"nothing to set", 0, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := perProcessRlimits(tc.memory, tc.pids, tc.cpu)
			if got != tc.want {
				t.Errorf("perProcessRlimits = %q, want %q", got, tc.want)
			}
			if ls, err := reexec.ParseRlimits(got); err != nil || len(ls) != strings.Count(got, "=") {
				t.Errorf("the helpers read %q as %+v, %v", got, ls, err)
			}
		})
	}
}

// TestLimitsPlan: which engines that cannot limit containers by cgroups
// run with per-process limits, and which corral still refuses, and why.
func TestLimitsPlan(t *testing.T) {
	const v1 = "runs on cgroup v1, where a rootless engine ignores every container limit"
	rl := Flavor{Podman: true, Rootless: true}
	for _, tc := range []struct {
		name        string
		f           Flavor
		why, kernel string
		perProcess  bool
		refusal     string // a substring of NoLimits; "" for none
	}{
		{"cgroups hold them", rl, "", "6.1.0-13-amd64", false, ""},
		{"rootful docker", Flavor{}, "", "4.19.0", false, ""},
		{"rootless podman on v1", rl, v1, "6.18.44-fc-v1147", true, ""},
		{"rootless podman on v1, 5.14 exactly", rl, v1, "5.14.0-70.el9.x86_64", true, ""},
		{"rootless podman on v1, 5.13", rl, v1, "5.13.19", false, "older than Linux 5.14"},
		{"rootless podman on v1, 4.19", rl, v1, "4.19.0-25-amd64", false, "RLIMIT_NPROC"},
		{"kernel not said", rl, v1, "", false, "older than Linux 5.14"},
		{"kernel not understood", rl, v1, "linux", false, "older than Linux 5.14"},
		{"rootless docker on v1", Flavor{Rootless: true}, v1, "6.1.0", false, "share one user namespace"},
		{"rootless podman on v2 without controllers", rl, "has no memory cgroup controller delegated to its user, so it cannot limit containers", "6.1.0", true, ""},
		{"an earlier reading is replaced", Flavor{Podman: true, Rootless: true, NoLimits: "old", PerProcess: "old"}, "", "6.1", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := limitsPlan(tc.f, tc.why, tc.kernel)
			if (got.PerProcess != "") != tc.perProcess || tc.perProcess && got.PerProcess != tc.why {
				t.Errorf("PerProcess = %q, want %v (%q)", got.PerProcess, tc.perProcess, tc.why)
			}
			if tc.refusal == "" && got.NoLimits != "" || tc.refusal != "" && (!strings.Contains(got.NoLimits, tc.refusal) || !strings.HasPrefix(got.NoLimits, tc.why)) {
				t.Errorf("NoLimits = %q, want %q after %q", got.NoLimits, tc.refusal, tc.why)
			}
			if got.PerProcess != "" && got.NoLimits != "" {
				t.Errorf("both refused and per process: %+v", got)
			}
			if got.Podman != tc.f.Podman || got.Rootless != tc.f.Rootless {
				t.Errorf("flavor changed: %+v from %+v", got, tc.f)
			}
		})
	}
}

// TestDescribePerProcess: doctor's line says the limits hold per
// process, not in total, and which setting each comes from.
func TestDescribePerProcess(t *testing.T) {
	for _, tc := range []struct {
		memory, pids int64
		cpu          int
		want, not    []string
	}{
		{1 << 30, 256, 30, []string{"per process, not in total", "cgroup v1", "RLIMIT_DATA 1024 MiB per process (docker.memory)", "RLIMIT_NPROC 256", "docker.pids_limit", "RLIMIT_CPU 30 s", "cpu_seconds", "docker.cpus is not held"}, []string{"RLIMIT_AS", "none set"}},
		{0, 0, 0, []string{"none set"}, []string{"RLIMIT_DATA", "RLIMIT_NPROC", "RLIMIT_CPU"}},
	} {
		got := describePerProcess("runs on cgroup v1", tc.memory, tc.pids, tc.cpu)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%q lacks %q", got, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(got, w) {
				t.Errorf("%q has %q", got, w)
			}
		}
	}
}

// TestPerProcessLimitHit: which per-process limit ended a command in a
// container its engine cannot limit by cgroups.
func TestPerProcessLimitHit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		res    sandbox.Result
		cpu    int
		stderr string
		want   string
	}{
		{"success", sandbox.Result{}, 30, "", ""},
		{"a refused fork, though the command went on", sandbox.Result{}, 30, "bash: fork: retry: Resource temporarily unavailable", sandbox.LimitContainerProcs},
		{"a refused fork, and it failed", sandbox.Result{ExitCode: 2}, 30, "sh: 1: Cannot fork", sandbox.LimitContainerProcs},
		{"SIGXCPU", sandbox.Result{ExitCode: 152, Signal: int(syscall.SIGXCPU)}, 30, "", sandbox.LimitCPU},
		{"SIGXCPU without cpu_seconds is not the limit", sandbox.Result{ExitCode: 152, Signal: int(syscall.SIGXCPU)}, 0, "", ""},
		{"MemoryError", sandbox.Result{ExitCode: 1}, 30, "Traceback (most recent call last):\nMemoryError\n", sandbox.LimitContainerProcessMemory},
		{"MemoryError printed by a command that succeeded", sandbox.Result{}, 30, "MemoryError", ""},
		{"timed out", sandbox.Result{ExitCode: 137, TimedOut: true, Signal: int(syscall.SIGKILL)}, 30, "MemoryError bash: fork: retry", ""},
		{"a plain failure", sandbox.Result{ExitCode: 1}, 30, "error: no such file", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := perProcessLimitHit(&tc.res, tc.cpu, tc.stderr); got != tc.want {
				t.Errorf("perProcessLimitHit = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestContainersConfFiles: the containers.conf files Podman reads, in
// the order their settings apply.
func TestContainersConfFiles(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	dirs := map[string][]string{
		"/etc/containers/containers.conf.d":            {"10-a.conf", "20-b.conf", "README"},
		"/home/u/.config/containers/containers.conf.d": {"x.conf"},
		"/xdg/containers/containers.conf.d":            {"y.conf"},
	}
	names := func(d string) []string { return dirs[d] }
	system := []string{"/usr/share/containers/containers.conf", "/etc/containers/containers.conf", "/etc/containers/containers.conf.d/10-a.conf", "/etc/containers/containers.conf.d/20-b.conf"}
	for _, tc := range []struct {
		name     string
		rootless bool
		env      func(string) string
		want     []string
	}{
		{"rootful", false, env("HOME", "/root"), system},
		{"rootless, HOME", true, env("HOME", "/home/u"), append(slices.Clone(system), "/home/u/.config/containers/containers.conf", "/home/u/.config/containers/containers.conf.d/x.conf")},
		{"rootless, XDG_CONFIG_HOME", true, env("HOME", "/home/u", "XDG_CONFIG_HOME", "/xdg"), append(slices.Clone(system), "/xdg/containers/containers.conf", "/xdg/containers/containers.conf.d/y.conf")},
		{"rootless, a relative XDG_CONFIG_HOME and no HOME", true, env("XDG_CONFIG_HOME", "rel"), system},
		{"CONTAINERS_CONF alone", true, env("HOME", "/home/u", "CONTAINERS_CONF", "/ci/containers.conf"), []string{"/ci/containers.conf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := containersConfFiles(tc.rootless, tc.env, names); !slices.Equal(got, tc.want) {
				t.Errorf("containersConfFiles = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestInitPathOf: containers.conf's init_path, the last file that sets it
// winning.
func TestInitPathOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		confs []string
		want  string
	}{
		{"none", nil, ""},
		{"Debian's, all commented", []string{"[containers]\n# init_path = \"/usr/libexec/podman/catatonit\"\n"}, ""},
		{"set", []string{"[containers]\ninit_path = \"/opt/catatonit\"\n"}, "/opt/catatonit"},
		{"another table's key", []string{"[engine]\ninit_path = \"/opt/x\"\n"}, ""},
		{"a later file wins", []string{"[containers]\ninit_path = \"/a\"\n", "[containers]\ninit_path = '/b'\n"}, "/b"},
		{"a later file that does not set it keeps it", []string{"[containers]\ninit_path = \"/a\"\n", "[containers]\ndefault_ulimits = [\"nofile=1:1\"]\n"}, "/a"},
		{"a file that is not TOML is passed over", []string{"[containers]\ninit_path = \"/a\"\n", "[containers\ninit_path = /b"}, "/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var confs [][]byte
			for _, c := range tc.confs {
				confs = append(confs, []byte(c))
			}
			if got := initPathOf(confs); got != tc.want {
				t.Errorf("initPathOf = %q, want %q", got, tc.want)
			}
		})
	}
}
