package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/internal/owner"
	"github.com/corralhq/corral/sandbox"
)

func TestSettingsCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Settings)
		err    error
		msg    string
	}{
		{"defaults", func(*Settings) {}, nil, ""},
		{"scope", func(s *Settings) { s.Scope = "global" }, sandbox.ErrBadRequest, "docker.scope"},
		{"empty image", func(s *Settings) { s.Image = " " }, sandbox.ErrBadRequest, "docker.image"},
		{"host network refused", func(s *Settings) { s.Network = "host" }, sandbox.ErrPolicy, "host"},
		{"container network refused", func(s *Settings) { s.Network = "container:abc" }, sandbox.ErrPolicy, "another container"},
		{"memory word", func(s *Settings) { s.Memory = "lots" }, sandbox.ErrBadRequest, "docker.memory"},
		{"memory tiny", func(s *Settings) { s.Memory = "1m" }, sandbox.ErrBadRequest, "at least 6m"},
		{"cpus zero", func(s *Settings) { s.CPUs = "0" }, sandbox.ErrBadRequest, "docker.cpus"},
		{"pids low", func(s *Settings) { s.PidsLimit = 15 }, sandbox.ErrBadRequest, "below 16"},
		{"user name", func(s *Settings) { s.User = "alice" }, sandbox.ErrBadRequest, "uid:gid"},
		{"user none", func(s *Settings) { s.User = UserNone }, nil, ""},
		{"workdir relative", func(s *Settings) { s.Workdir = "work" }, sandbox.ErrBadRequest, "docker.workdir"},
		{"workdir root", func(s *Settings) { s.Workdir = "/" }, sandbox.ErrBadRequest, "docker.workdir"},
		{"tmp size", func(s *Settings) { s.TmpSize = "x" }, sandbox.ErrBadRequest, "docker.tmp_size"},
		{"tmp size ignored when writable", func(s *Settings) { s.ReadOnly = false; s.TmpSize = "x" }, nil, ""},
		{"mount option", func(s *Settings) { s.MountOptions = "z,exec" }, sandbox.ErrBadRequest, "exec"},
		{"host workspace relative", func(s *Settings) { s.HostWorkspace = "w" }, sandbox.ErrBadRequest, "host_workspace"},
		{"host workspace /etc", func(s *Settings) { s.HostWorkspace = "/etc" }, sandbox.ErrPolicy, "system tree"},
		{"workdir /etc", func(s *Settings) { s.Workdir = "/etc/x" }, sandbox.ErrPolicy, "/etc"},
		{"workdir /tmp", func(s *Settings) { s.Workdir = "/tmp" }, sandbox.ErrPolicy, "/tmp"},
		{"workdir /work", func(s *Settings) { s.Workdir = "/work" }, nil, ""},
		// The bind policy itself: TestJudgeBinds.
		{"bind relative", func(s *Settings) { s.Binds = []sandbox.Bind{{Src: "data", ReadOnly: true}} }, sandbox.ErrBadRequest, "absolute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := DefaultSettings
			tc.mutate(&st)
			_, err := st.check(1000, 1000)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("check = %v, want %v mentioning %q", err, tc.err, tc.msg)
			}
		})
	}
}

// specFor builds the spec of DefaultSettings changed by mutate.
func specFor(t *testing.T, mutate func(*Settings), ws workspace, protected []string, extra string) (*containerSpec, error) {
	t.Helper()
	st := DefaultSettings
	if mutate != nil {
		mutate(&st)
	}
	p, err := st.check(1000, 1001)
	if err != nil {
		t.Fatal(err)
	}
	x, err := ParseExtraRunArgs(extra)
	if err != nil {
		return nil, err
	}
	// The binds as the policy would mount them (judgeBinds has tests of
	// its own): at their paths, as given.
	var binds []hostview.BindDecision
	for _, b := range st.Binds {
		binds = append(binds, hostview.BindDecision{Mount: true, Src: b.Src, Dest: b.Target(), ReadOnly: b.ReadOnly})
	}
	return buildSpec(&st, p, ws, "/opt/corral", x, binds, "", protected, &filterSpec{profile: "{}", denyUnix: true}, nil, nil, nil)
}

var testWS = workspace{Host: "/home/u/proj", Source: "/home/u/proj", Target: "/home/u/proj", Writable: true}

// TestSpecDefaults: the default container is locked down.
func TestSpecDefaults(t *testing.T) {
	s, err := specFor(t, nil, testWS, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	hc, cfg := s.Host, s.Config
	checks := []struct {
		what string
		ok   bool
	}{
		{"network none", hc.NetworkMode == "none"},
		{"caps dropped", slices.Equal(hc.CapDrop, []string{"ALL"}) && len(hc.CapAdd) == 0},
		{"no-new-privileges", slices.Contains(hc.SecurityOpt, "no-new-privileges")},
		{"seccomp profile", slices.Contains(hc.SecurityOpt, "seccomp={}")},
		{"read-only root", hc.ReadonlyRootfs},
		{"tmpfs /tmp 512m", strings.Contains(hc.Tmpfs["/tmp"], "size=536870912") && strings.Contains(hc.Tmpfs["/tmp"], "mode=1777")},
		{"init", hc.Init != nil && *hc.Init},
		{"memory 1g, no swap", hc.Memory == 1<<30 && hc.MemorySwap == 1<<30},
		{"one cpu", hc.NanoCPUs == 1e9},
		{"pids 256", hc.PidsLimit != nil && *hc.PidsLimit == 256},
		{"not privileged", !hc.Privileged},
		{"host user", cfg.User == "1000:1001"},
		{"HOME /tmp", slices.Contains(cfg.Env, "HOME=/tmp")},
		{"workdir", cfg.WorkingDir == testWS.Target},
		{"entrypoint is the helper", slices.Equal(cfg.Entrypoint, []string{inside.Path}) && slices.Equal(cfg.Cmd, []string{inside.ModePause})},
		{"label", cfg.Labels[LabelEnv] == "1"},
		{"no Binds strings", len(hc.Binds) == 0},
		{"two mounts", len(hc.Mounts) == 2},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: %+v %+v", c.what, hc, cfg)
		}
	}
	want := []mount.Mount{
		{Type: mount.TypeBind, Source: "/home/u/proj", Target: "/home/u/proj"},
		{Type: mount.TypeBind, Source: "/opt/corral", Target: inside.Path, ReadOnly: true},
	}
	if !slices.Equal(hc.Mounts, want) {
		t.Errorf("mounts %+v, want %+v", hc.Mounts, want)
	}
}

func TestSpecVariants(t *testing.T) {
	odd := workspace{Host: "/w/a b:c", Source: "/w/a b:c", Target: "/w/a b:c", Writable: true}
	for _, tc := range []struct {
		name      string
		mutate    func(*Settings)
		ws        workspace
		protected []string
		extra     string
		check     func(*containerSpec) bool
		errMsg    string
	}{
		{"restricted: workspace read-only", nil, workspace{Host: "/p", Source: "/p", Target: "/p"}, nil, "",
			func(s *containerSpec) bool { return s.Host.Mounts[0].ReadOnly }, ""},
		{"colon and space in the path: mount API", nil, odd, nil, "",
			func(s *containerSpec) bool { return s.Host.Mounts[0].Source == "/w/a b:c" && len(s.Host.Binds) == 0 }, ""},
		{"mount_options refuse a colon", func(s *Settings) { s.MountOptions = "z" }, odd, nil, "", nil, "cannot carry the ':'"},
		{"mount_options: Binds strings", func(s *Settings) { s.MountOptions = "z" }, testWS, nil, "",
			func(s *containerSpec) bool {
				return len(s.Host.Mounts) == 0 && s.Host.Binds[0] == "/home/u/proj:/home/u/proj:rw,z" && s.Host.Binds[1] == "/opt/corral:"+inside.Path+":ro,z"
			}, ""},
		{"host_workspace and workdir", nil, workspace{Host: "/a", Source: "/daemon/a", Target: "/work", Writable: true}, nil, "",
			func(s *containerSpec) bool {
				return s.Host.Mounts[0].Source == "/daemon/a" && s.Host.Mounts[0].Target == "/work" && s.Config.WorkingDir == "/work"
			}, ""},
		{"writable root: no tmpfs", func(s *Settings) { s.ReadOnly = false }, testWS, nil, "",
			func(s *containerSpec) bool { return !s.Host.ReadonlyRootfs && s.Host.Tmpfs == nil }, ""},
		{"user none", func(s *Settings) { s.User = UserNone }, testWS, nil, "",
			func(s *containerSpec) bool { return s.Config.User == "" }, ""},
		{"protected paths read-only, not in the hash", nil, testWS, []string{".git/hooks", ".vscode"}, "",
			func(s *containerSpec) bool {
				n := len(s.Host.Mounts)
				plain, _ := specFor(t, nil, testWS, nil, "")
				// .git pinned (read-write onto itself), then the two protected paths.
				return n == 5 && !s.Host.Mounts[2].ReadOnly && s.Host.Mounts[2].Target == "/home/u/proj/.git" &&
					s.Host.Mounts[3].ReadOnly && s.Host.Mounts[3].Target == "/home/u/proj/.git/hooks" && s.Hash == plain.Hash
			}, ""},
		{"binds", func(s *Settings) { s.Binds = []sandbox.Bind{{Src: "/data", ReadOnly: true}} }, testWS, nil, "",
			func(s *containerSpec) bool { return s.Host.Mounts[2].Source == "/data" && s.Host.Mounts[2].ReadOnly }, ""},
		{"bind over the helper refused", func(s *Settings) { s.Binds = []sandbox.Bind{{Src: "/x", Dest: inside.Path}} }, testWS, nil, "", nil, "would cover"},
		{"extra args mapped", nil, testWS, nil, `--runtime=runsc --userns keep-id -e A=1 --add-host h:1.2.3.4 --ulimit nofile=10:20 --dns 9.9.9.9 --label x=y`,
			func(s *containerSpec) bool {
				return s.Host.Runtime == "runsc" && s.Host.UsernsMode == "keep-id" && slices.Contains(s.Config.Env, "A=1") &&
					s.Host.ExtraHosts[0] == "h:1.2.3.4" && s.Host.Ulimits[0].Hard == 20 && s.Host.DNS[0].String() == "9.9.9.9" && s.Config.Labels["x"] == "y"
			}, ""},
		{"settings change the hash", func(s *Settings) { s.PidsLimit = 99 }, testWS, nil, "",
			func(s *containerSpec) bool {
				plain, _ := specFor(t, nil, testWS, nil, "")
				return s.Hash != plain.Hash
			}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := specFor(t, tc.mutate, tc.ws, tc.protected, tc.extra)
			if tc.errMsg != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errMsg) {
					t.Fatalf("err = %v, want %q", err, tc.errMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("spec %+v\n%+v", s.Host, s.Config)
			}
		})
	}
}

func TestParseExtraRunArgs(t *testing.T) {
	for _, tc := range []struct {
		in  string
		err error
		msg string
	}{
		{"", nil, ""},
		{"--runtime=runsc", nil, ""},
		{"--privileged", sandbox.ErrPolicy, "every capability"},
		{"--cap-add SYS_ADMIN", sandbox.ErrPolicy, "capabilities dropped"},
		{"--network=host", sandbox.ErrPolicy, "docker.network"},
		{"-v /:/host", sandbox.ErrPolicy, "docker.binds"},
		{"--mount type=bind,src=/,dst=/h", sandbox.ErrPolicy, "docker.binds"},
		{"--pid host", sandbox.ErrPolicy, "process namespace"},
		{"--security-opt no-new-privileges=false", sandbox.ErrPolicy, "no-new-privileges"},
		{"--security-opt seccomp=unconfined", sandbox.ErrPolicy, "seccomp"},
		{"--security-opt seccomp:/p.json", sandbox.ErrPolicy, "seccomp"},
		{"--security-opt apparmor=unconfined", sandbox.ErrPolicy, "protection"},
		{"--security-opt label=disable", sandbox.ErrPolicy, "protection"},
		{"--security-opt label=level:s0", nil, ""},
		{"--userns=host", sandbox.ErrPolicy, "userns=host is refused"},
		{"--userns HOST", sandbox.ErrPolicy, "userns=host is refused"},
		{"--device /dev/kvm", sandbox.ErrPolicy, "no host devices"},
		{"--device=/dev/sda:/dev/xvda:rwm", sandbox.ErrPolicy, "no host devices"},
		{"--dns 1.1.1.1 --device /dev/fuse", sandbox.ErrPolicy, "no host devices"},
		{"--device-cgroup-rule 'c 1:3 mr'", sandbox.ErrPolicy, "no host devices"},
		{"--device-cgroup-rule='b *:* rwm'", sandbox.ErrPolicy, "no host devices"},
		{"--gpus all", sandbox.ErrPolicy, "no host devices"},
		{"--gpus=device=0", sandbox.ErrPolicy, "no host devices"},
		{"--device-read-bps /dev/sda:1mb", sandbox.ErrBadRequest, "understood"},
		{"--blkio-weight 10", sandbox.ErrBadRequest, "understood"},
		{"image", sandbox.ErrBadRequest, "unexpected argument"},
		{`--label "unterminated`, sandbox.ErrBadRequest, "extra_run_args"},
	} {
		_, err := ParseExtraRunArgs(tc.in)
		if tc.err == nil {
			if err != nil {
				t.Errorf("%q: %v", tc.in, err)
			}
			continue
		}
		if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: err = %v, want %v mentioning %q", tc.in, err, tc.err, tc.msg)
		}
	}
}

func TestEnvAndDirs(t *testing.T) {
	b := &Backend{st: DefaultSettings}
	req := &sandbox.Request{
		Env:       []string{"PATH=/host/bin", "HOME=/root", "LANG=C.UTF-8", "OPENAI_API_KEY=sk", "MINE=session", "USER=root"},
		PolicyEnv: []string{"PATH=/host/bin", "HOME=/root", "LANG=C.UTF-8", "OPENAI_API_KEY=sk", "USER=root"},
	}
	got, _ := b.env(req)
	want := []string{"LANG=C.UTF-8", "MINE=session", "HOME=/tmp", "TMPDIR=/tmp", "TMP=/tmp", "TEMP=/tmp"}
	if !slices.Equal(got, want) {
		t.Errorf("env = %q, want %q", got, want)
	}
	ws := workspace{Host: "/h/p", Target: "/work"}
	for in, out := range map[string]string{"": "/work", "/h/p": "/work", "/h/p/a/b": "/work/a/b", "/h/pp": "/h/pp", "/tmp/x": "/tmp/x"} {
		if got := dirIn(ws, in); got != out {
			t.Errorf("dirIn(%q) = %q, want %q", in, got, out)
		}
	}
}

func TestOwnerLabel(t *testing.T) {
	self := owner.Self()
	o, ok := owner.Parse(self.String())
	if !ok || o != self || o.State(self) != owner.Alive {
		t.Fatalf("self %v parsed %v %v", self, o, ok)
	}
	dead := self
	dead.Start++
	if dead.State(self) != owner.Dead {
		t.Error("a pid with another start time is alive")
	}
	other := self
	other.Host = "elsewhere"
	if other.State(self) != owner.Unknown {
		t.Error("another machine's owner is known")
	}
	if _, ok := owner.Parse("garbage"); ok {
		t.Error("garbage parsed")
	}
}

// TestFilterProfiles: under workspace (and restricted) the container's own
// seccomp profile denies AF_UNIX sockets, so no process in it (init, pause)
// can make one for a command that writes code into it; under allowlist the
// forwarder needs them, and the helpers deny them to commands only.
func TestFilterProfiles(t *testing.T) {
	e := NewEngine(Options{})
	w, err1 := e.filter(sandbox.ProfileWorkspace)
	r, err2 := e.filter(sandbox.ProfileRestricted)
	n, err3 := e.filter(sandbox.ProfileNetwork)
	a, err4 := e.filter(sandbox.ProfileAllowlist)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		t.Fatal(err)
	}
	if w.profile == n.profile || r.profile != w.profile || a.profile != n.profile {
		t.Error("profiles: workspace and restricted must differ from network; allowlist must be network's")
	}
	if !w.denyUnix || !r.denyUnix || !a.denyUnix || n.denyUnix {
		t.Errorf("denyUnix: workspace %v restricted %v allowlist %v network %v", w.denyUnix, r.denyUnix, a.denyUnix, n.denyUnix)
	}
	if !strings.Contains(w.profile, `"socket"`) || strings.Contains(n.profile, `"socket"`) {
		t.Error("the AF_UNIX rule is not where it belongs")
	}
}

// TestEnvToolCaches: with a tool cache (tool_caches not off) the tools'
// variables point into the container's CacheDir, unless a variable already
// points at a path the container can write; an image's read-only location
// (CARGO_HOME=/usr/local/cargo) is replaced. Without one, nothing is set.
func TestEnvToolCaches(t *testing.T) {
	b := &Backend{st: DefaultSettings}
	req := &sandbox.Request{
		// Exported by the session's commands, not the host's own.
		Env:       []string{"GOCACHE=/tmp/mine", "CARGO_HOME=/usr/local/cargo", "MAVEN_OPTS=-Xmx1g"},
		PolicyEnv: []string{"PATH=/host/bin"},
		CacheDir:  "/host/state/cache",
	}
	got, _ := b.env(req)
	for name, want := range map[string]string{
		"GOCACHE": "/tmp/mine", "CARGO_HOME": CacheDir + "/cargo", "GOMODCACHE": CacheDir + "/go-mod",
		"npm_config_cache": CacheDir + "/npm", "PIP_CACHE_DIR": CacheDir + "/pip",
		"MAVEN_OPTS": "-Xmx1g -Dmaven.repo.local=" + CacheDir + "/m2",
	} {
		if v, _ := hostview.LookupEnv(got, name); v != want {
			t.Errorf("%s = %q, want %q", name, v, want)
		}
	}
	req.CacheDir = ""
	got, _ = b.env(req)
	if v, ok := hostview.LookupEnv(got, "GOMODCACHE"); ok {
		t.Errorf("GOMODCACHE = %q without a tool cache", v)
	}
}

// TestEngineSocketRefused: an engine whose socket refuses this user (not
// in the docker group) is met with how to be let in, and what the docker
// group grants, in doctor's fix and in a command's error, besides how to
// start an engine or name another.
func TestEngineSocketRefused(t *testing.T) {
	refused := func(context.Context, string, string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}
	}
	e := NewEngine(Options{ClientOpts: []client.Opt{client.WithHost("unix:///var/run/docker.sock"), client.WithDialContext(refused), client.WithAPIVersionNegotiation()}})
	d := e.Diagnose(t.Context(), Settings{Image: "x"})
	cli, _ := e.client()
	_, err := cli.Ping(t.Context(), client.PingOptions{})
	err = e.engineErr("ping", err)
	for what, s := range map[string]string{"doctor's fix": d.Fix, "the error": fmt.Sprint(err)} {
		for _, want := range []string{"docker group", "usermod -aG docker", "root-equivalent", "rootless", "DOCKER_HOST", "systemctl start docker"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s lacks %q: %s", what, want, s)
			}
		}
	}
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("not unavailable: %v", err)
	}
}

// TestScanErrIsPassing: a protected-path scan kept from finishing by a
// full descriptor table is a passing refusal (nothing ran, retry), not the
// tree's size (which tells the person to turn protection off): under
// EMFILE docker said the latter.
func TestScanErrIsPassing(t *testing.T) {
	err := scanErr("/w", &os.PathError{Op: "open", Path: "/w/x", Err: syscall.EMFILE})
	if !sandbox.IsTransient(err) || !errors.Is(err, sandbox.ErrNotStarted) || strings.Contains(err.Error(), "protected_paths") {
		t.Errorf("scanErr: %v (transient %v)", err, sandbox.IsTransient(err))
	}
	if n := scanFailedNote("/w", syscall.EMFILE); strings.Contains(n, "protected_paths") || !strings.Contains(n, "passes by itself") {
		t.Errorf("scanFailedNote: %s", n)
	}
}
