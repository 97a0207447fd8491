package mcpserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// fakeBackend is a backend that runs nothing, for the instructions.
type fakeBackend struct{ name, cwd string }

func (b fakeBackend) Name() string       { return b.name }
func (b fakeBackend) DefaultCwd() string { return b.cwd }

// Traits are those the real backend of b's name states.
func (b fakeBackend) Traits() sandbox.Traits {
	switch b.name {
	case "bwrap":
		return sandbox.Traits{HostPaths: true}
	case "local":
		return sandbox.Traits{Unsandboxed: true}
	case "docker":
		return sandbox.Traits{Where: "a container", CacheDir: "/tmp/.toolcache"}
	case "kubernetes":
		return sandbox.Traits{Where: "a pod on a Kubernetes cluster", OwnWorkspace: true}
	}
	return sandbox.Traits{}
}
func (b fakeBackend) Run(context.Context, *sandbox.Request) (*sandbox.Result, error) {
	return nil, errors.New("fake")
}

// memcgBackend is a fakeBackend that says how memory_mb holds.
type memcgBackend struct {
	fakeBackend
	whole bool
}

func (b memcgBackend) MemoryPerCommand(_ context.Context, memoryMB int) bool {
	return b.whole && memoryMB > 0
}

// layoutBackend is a fakeBackend with a layout of its own, as a
// container's (sandbox.Layout).
type layoutBackend struct {
	fakeBackend
	roots []string
}

func (layoutBackend) HelperPath() string                        { return "/.corral/corral" }
func (b layoutBackend) WritableRoots(*sandbox.Request) []string { return b.roots }

// TestInstructionsMemoryOfBwrap: with a real bwrap backend the instructions
// say what `corral doctor` says of memory_mb on this machine.
func TestInstructionsMemoryOfBwrap(t *testing.T) {
	requireBwrap(t)
	be := bwrap.New(bwrap.Options{StateDir: t.TempDir()})
	bin, err := be.Binary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	doctor := bwrap.DiagnoseMemory(bin, 256)
	got := Instructions("s1", &session.Spec{Backend: be, Policy: sandbox.Policy{Workdir: "/src", Limits: sandbox.DefaultLimits}, Timeout: time.Minute}, nil)
	whole := doctor.Kind == bwrap.MemoryCgroupV1 || doctor.Kind == bwrap.MemoryCgroupV2
	if whole != strings.Contains(got, "1024 MiB of memory for the whole command") || whole == strings.Contains(got, "1024 MiB of memory per process") {
		t.Errorf("doctor says %q, instructions say:\n%s", doctor.Line, got)
	}
	t.Logf("doctor: %s", doctor.Line)
}

func TestInstructions(t *testing.T) {
	base := session.Spec{
		Backend: fakeBackend{name: "bwrap"}, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: "/src/proj", Limits: sandbox.DefaultLimits, TmpSizeMB: 512}, Timeout: 180 * time.Second, OutputLimit: 64 << 10}
	with := func(edit func(*session.Spec)) *session.Spec {
		sp := base
		edit(&sp)
		return &sp
	}
	tests := []struct {
		name    string
		spec    *session.Spec
		err     error
		want    []string
		notWant []string
	}{
		{"review mode", with(func(sp *session.Spec) { sp.Review = true }), nil, []string{
			"Review mode: what you change in the working directory lands in this session's own layer",
			"Nothing you do applies them.",
		}, nil},
		{"workspace", &base, nil, []string{
			`inside a bwrap sandbox, in the session "s1", under the workspace profile`,
			"Working directory: /src/proj. It is writable",
			"Writable: $TMPDIR (this session's scratch directory), /tmp and /dev/shm.",
			"/tmp is fresh and empty for every command (512 MiB)",
			"$TMPDIR persists between this session's commands",
			"Network: none",
			"3 min of wall-clock time per command",
			"1024 MiB of memory per process, 30 s of CPU time per process, 256 processes and threads",
			"Output beyond 64 KiB is cut",
			"background: true returns an id",
			"bash_output {id}", "bash_kill {id}", "run_code",
			"cd and exported variables carry over",
		}, []string{"host's network", "read-only under the restricted profile"}},
		{"network", with(func(s *session.Spec) { s.Profile = sandbox.ProfileNetwork }), nil,
			[]string{"under the network profile", "Network: the host's network"}, []string{"Network: none"}},
		{"allowlist", with(func(s *session.Spec) {
			s.Profile = sandbox.ProfileAllowlist
			s.NetworkAllow, s.NetworkDeny = []string{"pypi.org", "*.pythonhosted.org"}, []string{"upload.pypi.org"}
		}), nil,
			[]string{"under the allowlist profile", "It is writable", "Network: only through corral's proxy, to pypi.org, *.pythonhosted.org (but not upload.pypi.org)", "blocked by corral network allowlist: HOST"},
			[]string{"Network: none", "host's network"}},
		{"allowlist with secrets", with(func(s *session.Spec) {
			s.Profile = sandbox.ProfileAllowlist
			s.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL_SOURCE", Hosts: []string{"github.com", "api.github.com"}}}
		}), nil,
			[]string{"Credentials: $GITHUB_TOKEN (for github.com, api.github.com) hold stand-ins, not the real values"},
			[]string{"GH_REAL_SOURCE"}},
		{"allowlist without hosts", with(func(s *session.Spec) { s.Profile = sandbox.ProfileAllowlist }), nil,
			[]string{"to no host at all (network.allow is empty)"}, nil},
		{"restricted", with(func(s *session.Spec) { s.Profile = sandbox.ProfileRestricted }), nil,
			[]string{"It is read-only under the restricted profile", "Writable: /tmp and /dev/shm.", "$TMPDIR is /tmp", "This session's scratch directory is read-only", "Network: none"},
			[]string{"$TMPDIR persists", "It is writable"}},
		{"binds and session home", with(func(s *session.Spec) {
			s.Binds = []sandbox.Bind{{Src: "/data", ReadOnly: true}, {Src: "/srv/out", Dest: "/out"}}
			s.SessionHome = true
		}), nil, []string{"Writable: /out, $TMPDIR (this session's scratch directory), $HOME (a home directory of this session's own), /tmp and /dev/shm.", "Also mounted, read-only: /data."}, nil},
		{"shared tool cache", with(func(s *session.Spec) { s.CacheDir = "/home/u/.local/state/corral/cache" }), nil,
			[]string{"Package and build caches (npm, yarn, pnpm, pip, uv, Go (GOCACHE, GOMODCACHE), cargo", "are in /home/u/.local/state/corral/cache, writable and shared", "never written"}, nil},
		{"session tool cache", with(func(s *session.Spec) { s.SessionCache = true }), nil,
			[]string{"in a writable directory of this session's own"}, []string{"shared"}},
		{"tool caches off", &base, nil, []string{"Package and build caches: the tools' defaults under $HOME, which are read-only here"}, nil},
		{"restricted tool cache", with(func(s *session.Spec) { s.CacheDir = "/c"; s.Profile = sandbox.ProfileRestricted }), nil,
			[]string{"Package and build caches (npm, yarn, pnpm, pip, uv, Go (GOCACHE, GOMODCACHE), Gradle and Maven) are in /tmp/.toolcache under the restricted profile", "fresh for every command"}, []string{"/c"}},
		{"docker tool cache", with(func(s *session.Spec) { s.CacheDir = "/c"; s.Backend = fakeBackend{name: "docker"} }), nil,
			[]string{"are in this container's /tmp/.toolcache"}, []string{"/c"}},
		{"memory for the whole command", with(func(s *session.Spec) { s.Backend = memcgBackend{fakeBackend{name: "bwrap"}, true} }), nil,
			[]string{"1024 MiB of memory for the whole command (all its processes together), 30 s of CPU time per process"}, []string{"address space"}},
		{"memory per process, said by the backend", with(func(s *session.Spec) { s.Backend = memcgBackend{fakeBackend{name: "bwrap"}, false} }), nil,
			[]string{"1024 MiB of memory per process"}, []string{"whole command", "address space"}},
		{"no limits", with(func(s *session.Spec) { s.Limits = sandbox.Limits{}; s.Timeout = 90 * time.Second }), nil,
			[]string{"90 s of wall-clock time", "no memory limit, no CPU time limit, no process limit"}, nil},
		{"default cwd", with(func(s *session.Spec) { s.Workdir = "" }), nil, []string{"Working directory: the directory corral was started in."}, nil},
		{"local backend", with(func(s *session.Spec) { s.Backend = fakeBackend{name: "local"} }), nil,
			[]string{"WITHOUT a sandbox (backend local)", "Working directory: /src/proj.", "3 min per command"}, []string{"Network: none", "under the workspace profile"}},
		{"docker", with(func(s *session.Spec) {
			s.Backend = layoutBackend{fakeBackend{name: "docker"}, []string{"/src/proj", "/tmp"}}
		}), nil,
			[]string{"inside a container of this session's own (docker backend)", "The rest of the filesystem is the container image's", "Writable: /src/proj, /tmp.", "files there carry over between commands", "Network: none"},
			[]string{"fresh and empty for every command", "host's filesystem", "$TMPDIR persists", "pod"}},
		{"kubernetes network", with(func(s *session.Spec) {
			s.Backend = layoutBackend{fakeBackend{name: "kubernetes"}, []string{"/src/proj", "/tmp"}}
			s.Profile = sandbox.ProfileNetwork
		}), nil,
			[]string{"inside a pod on a Kubernetes cluster", "the pod's own volume", "corral cp", "Network: open", "not the host's"},
			[]string{"fresh and empty for every command", "host's filesystem", "host's 127.0.0.1 are reachable"}},
		{"settings cannot be read", nil, errors.New("memory_mb: \"lots\" is not a whole number"), []string{`in the session "s1"`, "settings cannot be read right now (memory_mb", "bash_output"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Instructions("s1", tc.spec, tc.err)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("instructions lack %q:\n%s", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("instructions hold %q:\n%s", w, got)
				}
			}
			if len(got) > 4000 {
				t.Errorf("instructions are %d bytes; keep them short, the model reads them on every connection", len(got))
			}
		})
	}
}

// TestInstructionsOverMCP: the client receives the instructions of the
// live settings, and a change of the settings shows in the next server.
func TestInstructionsOverMCP(t *testing.T) {
	f := newFixture(t)
	got := f.connect(nil).InitializeResult().Instructions
	for _, w := range []string{"under the workspace profile", "Working directory: " + f.work, "1 min of wall-clock time", "Output beyond 16 KiB"} {
		if !strings.Contains(got, w) {
			t.Errorf("instructions lack %q:\n%s", w, got)
		}
	}
	f.mu.Lock()
	f.spec.Profile = sandbox.ProfileNetwork
	f.mu.Unlock()
	if got := f.connect(nil).InitializeResult().Instructions; !strings.Contains(got, "under the network profile") {
		t.Errorf("instructions after the settings changed:\n%s", got)
	}
}

func TestHuman(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "no limit"}, {90 * time.Second, "90 s"}, {3 * time.Minute, "3 min"}, {time.Hour, "1 h"},
		{90 * time.Minute, "1 h 30 min"}, {1500 * time.Millisecond, "1.5s"},
	} {
		if got := human(tc.d); got != tc.want {
			t.Errorf("human(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
