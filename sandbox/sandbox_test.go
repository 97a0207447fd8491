package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

func TestParseProfile(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Profile
		wantErr bool
	}{
		{in: "restricted", want: ProfileRestricted},
		{in: "workspace", want: ProfileWorkspace},
		{in: "allowlist", want: ProfileAllowlist},
		{in: "network", want: ProfileNetwork},
		{in: "", wantErr: true},
		{in: "Network", wantErr: true},
		{in: " network", wantErr: true},
		{in: "host", wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseProfile(tc.in)
			if got != tc.want {
				t.Errorf("ParseProfile(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseProfile(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if err != nil {
				if !errors.Is(err, ErrBadRequest) {
					t.Errorf("ParseProfile(%q) error = %v, want it to wrap ErrBadRequest", tc.in, err)
				}
				for _, name := range []string{"restricted", "workspace", "allowlist", "network"} {
					if !strings.Contains(err.Error(), name) {
						t.Errorf("ParseProfile(%q) error = %q, want it to list %q", tc.in, err, name)
					}
				}
			}
		})
	}
}

func TestProfileAccess(t *testing.T) {
	for _, tc := range []struct {
		p           Profile
		writable    bool
		hostNetwork bool
		denyUnix    bool
		inProfiles  bool
		isDefault   bool
	}{
		{p: ProfileRestricted, writable: false, hostNetwork: false, denyUnix: true, inProfiles: true},
		{p: ProfileWorkspace, writable: true, hostNetwork: false, denyUnix: true, inProfiles: true},
		{p: ProfileAllowlist, writable: true, hostNetwork: false, denyUnix: true, inProfiles: true},
		{p: ProfileNetwork, writable: true, hostNetwork: true, inProfiles: true, isDefault: true},
		{p: "", writable: true, hostNetwork: false, denyUnix: false},
	} {
		t.Run(string(tc.p), func(t *testing.T) {
			if got := tc.p.Writable(); got != tc.writable {
				t.Errorf("%q.Writable() = %v, want %v", tc.p, got, tc.writable)
			}
			if got := tc.p.HostNetwork(); got != tc.hostNetwork {
				t.Errorf("%q.HostNetwork() = %v, want %v", tc.p, got, tc.hostNetwork)
			}
			if got := tc.p.DeniesUnixSockets(); got != tc.denyUnix {
				t.Errorf("%q.DeniesUnixSockets() = %v, want %v", tc.p, got, tc.denyUnix)
			}
			in := false
			for _, p := range Profiles {
				in = in || p == tc.p
			}
			if in != tc.inProfiles {
				t.Errorf("%q in Profiles = %v, want %v", tc.p, in, tc.inProfiles)
			}
			if got := DefaultProfile == tc.p; got != tc.isDefault {
				t.Errorf("DefaultProfile == %q is %v, want %v", tc.p, got, tc.isDefault)
			}
		})
	}
}

// TestProfilesOrder: Profiles is documented in order of increasing access.
func TestProfilesOrder(t *testing.T) {
	access := func(p Profile) int {
		n := 0
		if p.Writable() {
			n += 2
		}
		switch {
		case p.HostNetwork():
			n += 2
		case p == ProfileAllowlist: // some hosts, through the proxy
			n++
		}
		return n
	}
	for i := 1; i < len(Profiles); i++ {
		t.Run(string(Profiles[i]), func(t *testing.T) {
			if a, b := access(Profiles[i-1]), access(Profiles[i]); a >= b {
				t.Errorf("access(%q) = %d, access(%q) = %d, want increasing", Profiles[i-1], a, Profiles[i], b)
			}
		})
	}
}

func TestBindTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    Bind
		want string
	}{
		{name: "no dest", b: Bind{Src: "/data"}, want: "/data"},
		{name: "dest", b: Bind{Src: "/data", Dest: "/mnt/d"}, want: "/mnt/d"},
		{name: "dest equal to src", b: Bind{Src: "/data", Dest: "/data", ReadOnly: true}, want: "/data"},
		{name: "empty", b: Bind{}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Target(); got != tc.want {
				t.Errorf("%+v.Target() = %q, want %q", tc.b, got, tc.want)
			}
		})
	}
}

func TestLimitMessage(t *testing.T) {
	lim := Limits{MemoryMB: 321, CPUSeconds: 17, MaxProcs: 99}
	for _, tc := range []struct {
		hit     string
		want    []string // substrings
		notWant []string
	}{
		{hit: LimitCPU, want: []string{"CPU", "cpu_seconds", "--cpu-seconds", strconv.Itoa(lim.CPUSeconds) + " s"}, notWant: []string{"memory_mb", "max_procs"}},
		{hit: LimitMemory, want: []string{"memory", "memory_mb", "--memory-mb", strconv.Itoa(lim.MemoryMB) + " MiB of memory per process: RLIMIT_DATA"}, notWant: []string{"cpu_seconds", "max_procs", "address space"}},
		{hit: LimitCommandMemory, want: []string{"killed by its memory limit", "memory_mb", "--memory-mb", strconv.Itoa(lim.MemoryMB) + " MiB for the whole command"}, notWant: []string{"cpu_seconds", "max_procs", "address space"}},
		{hit: LimitProcs, want: []string{"process", "max_procs", "--max-procs", strconv.Itoa(lim.MaxProcs) + " processes"}, notWant: []string{"cpu_seconds", "memory_mb"}},
		{hit: LimitContainerProcessMemory, want: []string{"ran out of memory", "docker.memory", "per process, not in total", "RLIMIT_DATA"}, notWant: []string{"memory_mb", "cpu_seconds", "max_procs", "address space"}},
		{hit: LimitContainerProcs, want: []string{"process limit", "docker.pids_limit", "RLIMIT_NPROC"}, notWant: []string{"memory_mb", "cpu_seconds", "max_procs"}},
		{hit: ""},
		{hit: "disk"},
	} {
		t.Run(tc.hit, func(t *testing.T) {
			got := LimitMessage(&Result{LimitHit: tc.hit, ExitCode: 137}, lim)
			if len(tc.want) == 0 {
				if got != "" {
					t.Errorf("LimitMessage(%q) = %q, want \"\"", tc.hit, got)
				}
				return
			}
			if !strings.HasPrefix(got, "corral: ") {
				t.Errorf("LimitMessage(%q) = %q, want a \"corral: \" prefix", tc.hit, got)
			}
			if strings.Contains(got, "\n") {
				t.Errorf("LimitMessage(%q) = %q, want one line", tc.hit, got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("LimitMessage(%q) = %q, want it to contain %q", tc.hit, got, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("LimitMessage(%q) = %q, want it not to mention %q", tc.hit, got, w)
				}
			}
		})
	}
}

func TestLimitNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{LimitCPU, "cpu"},
		{LimitMemory, "memory"},
		{LimitProcs, "procs"},
		{LimitCommandMemory, "command-memory"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("limit name = %q, want %q", tc.got, tc.want)
			}
		})
	}
}

func TestSameWriter(t *testing.T) {
	var a, b bytes.Buffer
	f := func(p []byte) (int, error) { return len(p), nil }
	for _, tc := range []struct {
		x, y io.Writer
		same bool
	}{
		{&a, &a, true}, {&a, &b, false}, {nil, nil, false}, {&a, nil, false},
		{writerFunc(f), writerFunc(f), false}, // uncomparable: not the same, no panic
	} {
		if got := SameWriter(tc.x, tc.y); got != tc.same {
			t.Errorf("SameWriter(%T, %T) = %v", tc.x, tc.y, got)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestTraitsOf: a backend that states no Traits has the zero value.
func TestTraitsOf(t *testing.T) {
	if got := TraitsOf(nameOnly{}); got != (Traits{}) {
		t.Errorf("TraitsOf a backend without Traits = %+v", got)
	}
	if got := TraitsOf(withTraits{}); !got.HostPaths {
		t.Errorf("TraitsOf a Traiter = %+v", got)
	}
}

type nameOnly struct{}

func (nameOnly) Name() string                                   { return "x" }
func (nameOnly) DefaultCwd() string                             { return "" }
func (nameOnly) Run(context.Context, *Request) (*Result, error) { return nil, nil }

type withTraits struct{ nameOnly }

func (withTraits) Traits() Traits { return Traits{HostPaths: true} }

// TestRanOutOfMemory and TestForkRefused: what programs print when an
// allocation fails under RLIMIT_DATA, or a fork at RLIMIT_NPROC.
func TestRanOutOfMemory(t *testing.T) {
	for text, want := range map[string]bool{
		"Traceback (most recent call last):\n  File \"<string>\", line 1\nMemoryError\n":    true,
		"fatal error: runtime: out of memory":                                               true,
		"FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory": true,
		"cc1: out of memory allocating 4072 bytes":                                          true,
		"java.lang.OutOfMemoryError: Java heap space":                                       true,
		"bash: xmalloc: cannot allocate 8 bytes":                                            true,
		"":                                                                                  false,
		"error: file not found":                                                             false,
		"bash: fork: Resource temporarily unavailable":                                      false,
	} {
		if got := RanOutOfMemory(text); got != want {
			t.Errorf("RanOutOfMemory(%q) = %v, want %v", text, got, want)
		}
	}
}

func TestForkRefused(t *testing.T) {
	for text, want := range map[string]bool{
		"bash: fork: Resource temporarily unavailable":        true,
		"bash: fork: retry: Resource temporarily unavailable": true,
		"sh: 1: Cannot fork":                                  true,
		"sh: can't fork: Resource temporarily unavailable":    true,
		"":            false,
		"MemoryError": false,
		"BlockingIOError: [Errno 11] Resource temporarily unavailable": false,
	} {
		if got := ForkRefused(text); got != want {
			t.Errorf("ForkRefused(%q) = %v, want %v", text, got, want)
		}
	}
}
