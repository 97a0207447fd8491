package hostview

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// The outputs below are what the tools printed inside a corral sandbox
// (workspace profile) on Debian 12.
func TestExplainDenials(t *testing.T) {
	ws := DenialContext{Profile: sandbox.ProfileWorkspace, Writable: []string{"/home/u/proj", "/home/u/.local/state/corral/scratch/s"}}
	hidden := func(p string) bool { return strings.HasPrefix(p, "/home/u/.ssh") || p == "/home/u/.aws" }
	ws.Hidden = hidden
	// With where the command started and the protected paths
	// (DenialContextFor): a relative path is named, and one that is
	// protected is said to be (it said "a path is read-only", and named
	// the directory it lies in as writable).
	wsp := ws
	wsp.Cwd, wsp.Protected = "/home/u/proj", sandbox.DefaultProtected
	elsewhere := wsp
	elsewhere.Cwd = "/usr/lib"
	for _, c := range []struct {
		name   string
		output string
		ctx    DenialContext
		kind   string
		path   string
		host   string
		says   string
	}{
		{"coreutils touch", "touch: cannot touch '/etc/x': Read-only file system", ws, DenialReadOnly, "/etc/x", "", "/etc/x is read-only in this sandbox (profile workspace); writable: /home/u/.local/state/corral/scratch/s, /home/u/proj"},
		{"coreutils mkdir", "mkdir: cannot create directory ‘/usr/zz’: Read-only file system", ws, DenialReadOnly, "/usr/zz", "", "/usr/zz is read-only"},
		{"python", "OSError: [Errno 30] Read-only file system: '/etc/y'", ws, DenialReadOnly, "/etc/y", "", "/etc/y is read-only"},
		{"node", "Error: EROFS: read-only file system, open '/etc/z'", ws, DenialReadOnly, "/etc/z", "", "/etc/z is read-only"},
		{"npm cache", "npm error code EROFS\nnpm error path /home/u/.npm/_cacache/tmp/3f2a\nnpm error EROFS: read-only file system, open '/home/u/.npm/_cacache/tmp/3f2a'", ws, DenialReadOnly, "/home/u/.npm/_cacache/tmp/3f2a", "", "is read-only"},
		{"go build cache", "failed to initialize build cache at /home/u/.cache/go-build: mkdir /home/u/.cache: read-only file system", ws, DenialReadOnly, "/home/u/.cache/go-build", "", "is read-only"},
		{"restricted writes nothing", "touch: cannot touch 'x': Read-only file system", DenialContext{Profile: sandbox.ProfileRestricted}, DenialReadOnly, "", "", "writable: nothing (profile restricted); the restricted profile writes nothing but /tmp"},
		{"dash, a protected path", "sh: 1: cannot create .git/config: Read-only file system", wsp, DenialReadOnly, "/home/u/proj/.git/config", "", "corral: .git/config is a protected path (protected_paths: **/.git/config), read-only in this sandbox although /home/u/proj is writable"},
		{"bash, a protected path", "bash: .bashrc: Read-only file system", wsp, DenialReadOnly, "/home/u/proj/.bashrc", "", ".bashrc is a protected path"},
		{"git config, renamed over a protected path", "error: could not write config file .git/config: Device or resource busy", wsp, DenialReadOnly, "/home/u/proj/.git/config", "", "corral: .git/config is a protected path (protected_paths: **/.git/config), read-only in this sandbox although /home/u/proj is writable, and cannot be replaced"},
		{"mv over a protected path", "mv: cannot move 'x' to '/home/u/proj/.git/config': Device or resource busy", wsp, DenialReadOnly, "/home/u/proj/.git/config", "", "is a protected path"},
		{"touch, a protected path named whole", "touch: cannot touch '/home/u/proj/.git/hooks/pre-commit': Read-only file system", wsp, DenialReadOnly, "/home/u/proj/.git/hooks/pre-commit", "", "/home/u/proj/.git/hooks/pre-commit is a protected path"},
		{"touch, relative, outside the writable set", "touch: cannot touch 'x.so': Read-only file system", elsewhere, DenialReadOnly, "/usr/lib/x.so", "", "corral: x.so is read-only in this sandbox (profile workspace); writable: "},
		{"go, relative", "open notes.txt: read-only file system", elsewhere, DenialReadOnly, "/usr/lib/notes.txt", "", "notes.txt is read-only"},
		{"relative, where the command started is unknown", "sh: 1: cannot create out.txt: Read-only file system", ws, DenialReadOnly, "", "", "corral: out.txt is read-only"},
		{"hidden ssh key", "cat: /home/u/.ssh/id_rsa: No such file or directory", ws, DenialHidden, "/home/u/.ssh/id_rsa", "", "exists on the host but is hidden"},
		{"hidden dir", "ls: cannot access '/home/u/.aws': No such file or directory", ws, DenialHidden, "/home/u/.aws", "", "hidden"},
		{"curl no network", "curl: (6) Could not resolve host: example.com", ws, DenialNetwork, "", "", "no network (profile workspace)"},
		{"curl to an address, no network", "curl: (7) Failed to connect to 1.1.1.1 port 80 after 0 ms: Couldn't connect to server", ws, DenialNetwork, "", "", "no network (profile workspace)"},
		{"python no network", "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>", ws, DenialNetwork, "", "", "no network"},
		{"node no network", "Error: getaddrinfo EAI_AGAIN example.com", ws, DenialNetwork, "", "", "no network"},
		{"git no network", "fatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com", ws, DenialNetwork, "", "", "no network"},
		{"allowlist refusal", "blocked by corral network allowlist: evil.test", DenialContext{Profile: sandbox.ProfileAllowlist}, DenialNetwork, "", "evil.test", "evil.test is not in network.allow"},
		{"allowlist https refusal", "curl: (56) CONNECT tunnel failed, response 403", DenialContext{Profile: sandbox.ProfileAllowlist}, DenialNetwork, "", "", "not in network.allow"},
		{"go host socket", "Cannot connect to the Docker daemon: dial unix /var/run/docker.sock: connect: permission denied", ws, DenialSyscall, "/var/run/docker.sock", "", "/var/run/docker.sock may be a Unix socket of the host"},
		{"ssh agent", "Error connecting to agent: Permission denied", ws, DenialSyscall, "", "", "connects only to Unix sockets made inside its own sandbox"},
		{"review layer, another group's file", "sh: 1: cannot create /home/u/proj/f.txt: Value too large for defined data type", DenialContext{Profile: sandbox.ProfileWorkspace, Review: true}, DenialLayer, "/home/u/proj/f.txt", "", "review layer (workspace_mode review) cannot take a changed copy"},
		{"python AF_UNIX", "PermissionError: [Errno 1] Operation not permitted", ws, DenialSyscall, "", "", "new Unix sockets (AF_UNIX) are refused"},
		{"network profile: EPERM is the filter's, no socket note", "PermissionError: [Errno 1] Operation not permitted", DenialContext{Profile: sandbox.ProfileNetwork}, DenialSyscall, "", "", "syscall filter"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ExplainDenials(c.output, c.ctx)
			if len(got) == 0 {
				t.Fatalf("no denial found in %q", c.output)
			}
			d := got[0]
			if d.Kind != c.kind || c.path != "" && d.Path != c.path || d.Host != c.host || !strings.Contains(d.Message, c.says) || !strings.HasPrefix(d.Message, "corral: ") {
				t.Errorf("got %+v\nwant kind %s path %q host %q saying %q", d, c.kind, c.path, c.host, c.says)
			}
		})
	}
	// Nothing to explain: ordinary failures, a missing file that is missing
	// on the host too, a network failure where the host's network is shared.
	for _, c := range []struct {
		output string
		ctx    DenialContext
	}{
		{"grep: foo.txt: No such file or directory", ws},
		{"bash: ./agent.sh: Permission denied\ncat: /etc/shadow: Permission denied", ws},
		{"cat: /home/u/proj/missing: No such file or directory", ws},
		{"FAIL\tgithub.com/x/y\t0.01s", ws},
		{"curl: (6) Could not resolve host: example.invalid", DenialContext{Profile: sandbox.ProfileNetwork}},
		{"curl: (7) Failed to connect to localhost port 8080 after 0 ms: Couldn't connect to server", ws},
		{"curl: (7) Failed to connect to 127.0.0.1 port 5432 after 0 ms: Couldn't connect to server", ws},
		{"curl: (7) Failed to connect to ::1 port 80 after 0 ms: Couldn't connect to server", ws},
		{"chmod: changing permissions of '/home/u/proj/f': Operation not permitted", ws},
		{"sh: 1: cannot create /home/u/proj/f.txt: Value too large for defined data type", ws}, // not under review
		{"rm: cannot remove '/home/u/proj/mnt': Device or resource busy", wsp},                 // busy, and not a protected path
		{"error: could not write config file .git/config: Device or resource busy", ws},        // protected paths unknown
	} {
		if got := ExplainDenials(c.output, c.ctx); len(got) != 0 {
			t.Errorf("ExplainDenials(%q) = %+v, want none", c.output, got)
		}
	}
	// At most three, without repeats.
	many := strings.Repeat("touch: cannot touch '/etc/a': Read-only file system\n", 5) +
		"touch: cannot touch '/etc/b': Read-only file system\ntouch: cannot touch '/etc/c': Read-only file system\ntouch: cannot touch '/etc/d': Read-only file system\n"
	if got := ExplainDenials(many, ws); len(got) != 3 || got[0].Path != "/etc/a" || got[1].Path != "/etc/b" || got[2].Path != "/etc/c" {
		t.Errorf("many: %+v", got)
	}
}

// layoutBackend is a Backend whose sandbox has its own layout (as a
// container's): only what DenialContextFor asks of it.
type layoutBackend struct{ roots []string }

func (layoutBackend) Name() string       { return "container" }
func (layoutBackend) DefaultCwd() string { return "" }
func (layoutBackend) Run(context.Context, *sandbox.Request) (*sandbox.Result, error) {
	return nil, sandbox.ErrUnavailable
}
func (layoutBackend) HelperPath() string                        { return "/.corral/corral" }
func (l layoutBackend) WritableRoots(*sandbox.Request) []string { return l.roots }

// plainBackend sees the host's paths (as bwrap and local): no Layout.
type plainBackend struct{}

func (plainBackend) Name() string       { return "plain" }
func (plainBackend) DefaultCwd() string { return "" }
func (plainBackend) Run(context.Context, *sandbox.Request) (*sandbox.Result, error) {
	return nil, sandbox.ErrUnavailable
}

// TestDenialContextFor: the writable paths a read-only denial names are
// the sandbox's: a container's own (its Layout), never the host's scratch
// or home directories, which it does not have; the host's otherwise.
func TestDenialContextFor(t *testing.T) {
	req := &sandbox.Request{Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: "/work/p"},
		ScratchDir: "/home/u/.local/state/corral/sessions/s/scratch", HomeDir: "/home/u/.local/state/corral/sessions/s/home"}
	for _, c := range []struct {
		name    string
		be      sandbox.Backend
		profile sandbox.Profile
		want    []string
	}{
		{"container", layoutBackend{[]string{"/work/p", "/tmp"}}, sandbox.ProfileWorkspace, []string{"/work/p", "/tmp"}},
		{"container restricted", layoutBackend{[]string{"/tmp"}}, sandbox.ProfileRestricted, nil},
		{"host paths", plainBackend{}, sandbox.ProfileWorkspace, []string{"/work/p", req.ScratchDir, req.HomeDir}},
	} {
		r := *req
		r.Profile = c.profile
		got := DenialContextFor(&r, c.be, false)
		if !slices.Equal(got.Writable, c.want) {
			t.Errorf("%s: writable %q, want %q", c.name, got.Writable, c.want)
		}
		msg := ExplainDenials("touch: cannot touch '/usr/x': Read-only file system\n", got)
		if c.be.Name() == "container" && (len(msg) != 1 || strings.Contains(msg[0].Message, "/home/u")) {
			t.Errorf("%s: the denial names the host's directories: %+v", c.name, msg)
		}
	}
}
