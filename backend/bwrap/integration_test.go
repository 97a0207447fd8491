package bwrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/sandbox"
)

func mustContain(t *testing.T, o out, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(o.stdout+o.stderr, w) {
			t.Errorf("output lacks %q\n%s", w, o)
		}
	}
}

func mustNotContain(t *testing.T, o out, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if strings.Contains(o.stdout+o.stderr, b) {
			t.Errorf("output has %q\n%s", b, o)
		}
	}
}

func profile(p sandbox.Profile) func(*sandbox.Request) {
	return func(r *sandbox.Request) { r.Profile = p }
}

// 1. The host root is read-only; only the working directory, the scratch
// directory and rw binds can be written.
func TestReadOnlyRootWritableSet(t *testing.T) {
	e := newEnv(t)
	scratch := filepath.Join(e.base, "scratch")
	rw := filepath.Join(e.base, "rwbind")
	ro := filepath.Join(e.base, "robind")
	for _, d := range []string{scratch, rw, ro} {
		os.MkdirAll(d, 0o755)
	}
	o := e.sh(`
for p in /etc/corral-x /usr/corral-x /var/corral-x "$HOME/corral-x" `+ro+`/x; do
  if touch "$p" 2>/dev/null; then echo "WROTE $p"; else echo "ro $p"; fi
done
touch /etc/corral-y 2>&1 | grep -q 'Read-only file system' && echo EROFS
echo a > inwork && echo a > "$TMPDIR/inscratch" && echo a > `+rw+`/inrw && echo WRITES-OK`,
		func(r *sandbox.Request) {
			r.ScratchDir = scratch
			r.Binds = []sandbox.Bind{{Src: rw}, {Src: ro, ReadOnly: true}}
			r.Binds[0].ReadOnly = false
		})
	mustContain(t, o, "EROFS", "WRITES-OK")
	mustNotContain(t, o, "WROTE")
	for _, p := range []string{filepath.Join(e.work, "inwork"), filepath.Join(scratch, "inscratch"), filepath.Join(rw, "inrw")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("write did not reach the host: %v", err)
		}
	}
	if o.res.ExitCode != 0 {
		t.Errorf("exit %d", o.res.ExitCode)
	}
}

// 2. Every namespace is unshared; own /proc, fresh /dev and /tmp per command;
// host processes can be neither seen nor signalled.
func TestNamespacesProcDevTmp(t *testing.T) {
	e := newEnv(t)
	hostNS := map[string]string{}
	for _, ns := range []string{"user", "pid", "ipc", "uts", "cgroup", "net", "mnt"} {
		l, _ := os.Readlink("/proc/self/ns/" + ns)
		hostNS[ns] = l
	}
	for _, prof := range []sandbox.Profile{sandbox.ProfileWorkspace, sandbox.ProfileNetwork} {
		o := e.sh(`for ns in user pid ipc uts cgroup net mnt; do echo "$ns $(readlink /proc/self/ns/$ns)"; done`, profile(prof))
		for _, line := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				t.Fatalf("bad line %q", line)
			}
			shared := f[1] == hostNS[f[0]]
			wantShared := f[0] == "net" && prof == sandbox.ProfileNetwork
			if shared != wantShared {
				t.Errorf("profile %s: namespace %s shared=%v, want %v", prof, f[0], shared, wantShared)
			}
		}
	}
	// A host process: this test's own pid and a sleeper.
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	o := e.sh(fmt.Sprintf(`
ls /proc | grep -E '^[0-9]+$' | wc -l
kill -0 %d 2>/dev/null && echo SAW-HOST-PID
kill -9 %d 2>/dev/null && echo KILLED-HOST
test -e /proc/%d && echo PROC-VISIBLE
echo tmpfile > /tmp/leftover
ls /dev | tr '\n' ' '
echo; awk '{print "sid", $6, "pid", $1}' /proc/self/stat`, os.Getpid(), sleeper.Process.Pid, sleeper.Process.Pid))
	mustNotContain(t, o, "SAW-HOST-PID", "KILLED-HOST", "PROC-VISIBLE", "sda", "vda", "kmsg")
	if n := strings.Fields(o.stdout); len(n) == 0 || n[0] > "9" || len(n[0]) > 1 {
		t.Errorf("sandbox sees too many processes: %s", o)
	}
	if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("host sleeper died: %v", err)
	}
	// --new-session: the shell leads its own session.
	if !strings.Contains(o.stdout, "sid ") {
		t.Errorf("no sid line: %s", o)
	}
	o = e.sh(`test -e /tmp/leftover && echo LEFTOVER; echo ok`)
	mustNotContain(t, o, "LEFTOVER")
}

// 3. /run/user/UID is an empty tmpfs; agent and bus sockets leave the
// environment; the Docker socket reads as an empty file.
func TestAgentSocketsAndEnv(t *testing.T) {
	e := newEnv(t)
	sock := filepath.Join(e.base, "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e.backend.opts.MaskFiles = []string{sock}
	// A runtime directory with an agent socket in it (the real
	// /run/user/UID is the default; a planted one keeps tests apart).
	run := filepath.Join(e.base, "run-user")
	os.MkdirAll(run, 0o700)
	agent, err := net.Listen("unix", filepath.Join(run, "corral-test-agent"))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	e.backend.opts.RunUserDir = run
	e.envv = append(e.envv, "SSH_AUTH_SOCK=/run/user/1/ssh", "GPG_AGENT_INFO=x", "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1/bus",
		"OPENAI_API_KEY=sk-1", "ANTHROPIC_API_KEY=sk-2", "MY_SERVICE_API_KEY=k", "CORRAL_TOKEN=t", "KEEP_ME=yes")
	o := e.sh(`env; echo; ls -A ` + run + ` 2>&1; echo "size=$(stat -c %s ` + sock + `) type=$(stat -c %F ` + sock + `)"`)
	mustNotContain(t, o, "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MY_SERVICE_API_KEY", "CORRAL_TOKEN", "corral-test-agent")
	mustContain(t, o, "KEEP_ME=yes", "size=0 type=regular empty file")
}

// 4 and 5. Home: non-dot entries visible read-only, dot entries hidden unless
// allowed, nested dirs one level down, nothing new at the top, credential
// stores hidden always, credential files empty, corral's dirs hidden.
func TestHomeDirectoryRules(t *testing.T) {
	e := newEnv(t)
	e.write("Documents/notes.txt", "notes")
	e.write(".bashrc", "# rc")
	e.write(".gitconfig", "[user]\n")
	e.write(".zz-secret-tool/token", "TOKEN-ZZ")
	e.write(".zz-allowed/data", "ALLOWED-DATA")
	e.write(".ssh/id_ed25519", "SSH-KEY-MATERIAL")
	e.write(".aws/credentials", "AWS-KEY-MATERIAL")
	e.write(".netrc", "NETRC-MATERIAL")
	e.write(".cargo/config.toml", "CARGO-CONFIG")
	e.write(".cargo/credentials.toml", "CARGO-TOKEN")
	e.write(".m2/settings.xml", "MAVEN-PASSWORD")
	e.write(".config/nvim/init.lua", "NVIM-INIT")
	e.write(".config/gh/hosts.yml", "GH-TOKEN")
	e.write(".config/unknown-app/secret", "UNKNOWN-APP")
	e.write(".config/npm/npmrc", "NPM-TOKEN")
	e.write(".config/corral/config.yaml", "CORRAL-CONFIG")
	e.write(".local/share/keyrings/login.keyring", "KEYRING")
	e.write(".local/share/fonts/f.ttf", "FONT")
	e.write(".local/bin/tool", "TOOL")
	e.write(".local/state/other/x", "STATE-OTHER")
	e.write(".mytool/bin/mytool", "MYTOOL")
	e.envv[1] = "PATH=" + filepath.Join(e.home, ".mytool/bin") + ":/usr/bin:/bin"
	o := e.sh(`
cd ~
cat Documents/notes.txt .bashrc .gitconfig .zz-allowed/data .cargo/config.toml .config/nvim/init.lua .local/share/fonts/f.ttf .local/bin/tool .mytool/bin/mytool; echo
cat .zz-secret-tool/token .ssh/id_ed25519 .aws/credentials .netrc .config/gh/hosts.yml .config/unknown-app/secret .config/corral/config.yaml .local/share/keyrings/login.keyring .local/state/other/x 2>/dev/null
echo "cred-file-sizes: $(stat -c %s .cargo/credentials.toml .m2/settings.xml .config/npm/npmrc | tr '\n' ' ')"
cat .cargo/credentials.toml .m2/settings.xml .config/npm/npmrc
ls -A ~ | tr '\n' ' '; echo
ls -A ~/.config | tr '\n' ' '; echo
for p in ~/newfile ~/.bashrc ~/.newdot ~/.config/newapp ~/.local/newthing ~/.local/share/newthing ~/Documents/new ~/.cargo/new; do
  if (echo x >> "$p") 2>/dev/null; then echo "WROTE $p"; fi
done
echo done`, func(r *sandbox.Request) { r.HomeAllow = []string{".zz-allowed", ".ssh", ".config/gh"} })
	mustContain(t, o, "notes", "# rc", "ALLOWED-DATA", "CARGO-CONFIG", "NVIM-INIT", "FONT", "TOOL", "MYTOOL", "cred-file-sizes: 0 0 0", "done")
	mustNotContain(t, o, "TOKEN-ZZ", "SSH-KEY-MATERIAL", "AWS-KEY-MATERIAL", "NETRC", "GH-TOKEN", "UNKNOWN-APP", "CORRAL-CONFIG",
		"KEYRING", "STATE-OTHER", "CARGO-TOKEN", "MAVEN-PASSWORD", "NPM-TOKEN", "WROTE", ".zz-secret-tool", " .ssh ", "unknown-app")
	warned := strings.Join(o.res.Warnings, "\n")
	for _, w := range []string{`".ssh"`, `".config/gh"`} {
		if !strings.Contains(warned, w) {
			t.Errorf("no warning for home_allow %s: %q", w, o.res.Warnings)
		}
	}
	// The host files are untouched.
	if b, _ := os.ReadFile(filepath.Join(e.home, ".bashrc")); string(b) != "# rc" {
		t.Errorf(".bashrc changed on the host: %q", b)
	}
}

// 6. Symlinked dot entries stay symlinks; dangling and directory links do
// not stop the sandbox; a symlinked credential store is hidden at its target;
// a CA bundle in a hidden path is bound back read-only.
func TestSymlinksAndCABundle(t *testing.T) {
	e := newEnv(t)
	e.write("dotfiles/bashrc", "STOW-RC")
	e.write("dotfiles/ssh/id_rsa", "LINKED-KEY")
	e.write("dotfiles/vimdir/vimrc", "VIMDIR")
	e.write(".certs/corp.pem", "CA-BUNDLE")
	for link, target := range map[string]string{".bashrc": "dotfiles/bashrc", ".ssh": "dotfiles/ssh", ".vim": "dotfiles/vimdir", ".profile": "dotfiles/missing"} {
		if err := os.Symlink(target, filepath.Join(e.home, link)); err != nil {
			t.Fatal(err)
		}
	}
	e.envv = append(e.envv, "SSL_CERT_FILE="+filepath.Join(e.home, ".certs/corp.pem"))
	o := e.sh(`cd ~; echo "bashrc->$(readlink .bashrc)"; cat .bashrc; echo; cat .vim/vimrc; echo; echo "profile->$(readlink .profile)"
cat dotfiles/ssh/id_rsa 2>/dev/null; ls dotfiles/ssh | wc -l; cat "$SSL_CERT_FILE"; echo; (echo x >> "$SSL_CERT_FILE") 2>/dev/null && echo CA-WRITABLE; ls .certs`)
	mustContain(t, o, "bashrc->dotfiles/bashrc", "STOW-RC", "VIMDIR", "profile->dotfiles/missing", "CA-BUNDLE")
	mustNotContain(t, o, "LINKED-KEY", "CA-WRITABLE")
	if o.res.ExitCode != 0 {
		t.Errorf("exit %d: %s", o.res.ExitCode, o)
	}
}

// 7. Profiles: restricted has a read-only working directory, restricted and
// workspace have loopback only, network shares the host network.
func TestProfiles(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		p            sandbox.Profile
		write, hostN bool
	}{
		{sandbox.ProfileRestricted, false, false},
		{sandbox.ProfileWorkspace, true, false},
		{sandbox.ProfileNetwork, true, true},
	} {
		t.Run(string(tc.p), func(t *testing.T) {
			o := e.sh(`(echo x > f) 2>/dev/null && echo WRITABLE; echo "IFACES: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
start=$(date +%s%N); getent hosts corral-nonexistent.example >/dev/null; end=$(date +%s%N); echo "lookup_ms=$(( (end-start)/1000000 ))"
mktemp >/dev/null && echo MKTEMP-OK; cat <<EOT
HEREDOC-OK
EOT
echo shm > /dev/shm/x && echo SHM-OK`, profile(tc.p))
			if got := strings.Contains(o.stdout, "WRITABLE"); got != tc.write {
				t.Errorf("writable=%v, want %v\n%s", got, tc.write, o)
			}
			var ifaces []string
			for _, l := range strings.Split(o.stdout, "\n") {
				if rest, ok := strings.CutPrefix(l, "IFACES:"); ok {
					ifaces = strings.Fields(rest)
				}
			}
			onlyLo := len(ifaces) == 1 && ifaces[0] == "lo"
			if onlyLo == tc.hostN {
				t.Errorf("interfaces %v under %s", ifaces, tc.p)
			}
			mustContain(t, o, "MKTEMP-OK", "HEREDOC-OK", "SHM-OK")
			if !tc.hostN {
				var ms int
				for _, l := range strings.Split(o.stdout, "\n") {
					fmt.Sscanf(l, "lookup_ms=%d", &ms)
				}
				if ms > 2000 {
					t.Errorf("a name lookup without network took %d ms; it must fail at once", ms)
				}
			}
		})
	}
	// Under network, resolv.conf and the CA store are readable.
	o := e.sh(`test -r /etc/resolv.conf && echo RESOLV-OK; ls /etc/ssl/certs | head -1 >/dev/null && echo CERTS-OK; getent hosts localhost >/dev/null && echo LOCALHOST-OK`, profile(sandbox.ProfileNetwork))
	mustContain(t, o, "RESOLV-OK", "CERTS-OK", "LOCALHOST-OK")
	// /dev/shm works for Python's multiprocessing locks.
	if _, err := exec.LookPath("python3"); err == nil {
		o = e.sh(`python3 -c 'import multiprocessing as m; l=m.Lock(); l.acquire(); l.release(); print("MPLOCK-OK")'`, func(r *sandbox.Request) { r.Limits.MemoryMB = 1024 })
		mustContain(t, o, "MPLOCK-OK")
	}
}

// A TCP listener on the host's loopback is out of reach under workspace.
func TestHostLoopbackUnreachable(t *testing.T) {
	e := newEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HOST-LISTENER\n"))
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	script := fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3 || echo REFUSED`, port)
	o := e.sh("bash -c '" + script + "' 2>&1")
	mustContain(t, o, "REFUSED")
	mustNotContain(t, o, "HOST-LISTENER")
	o = e.sh("bash -c '"+script+"' 2>&1", profile(sandbox.ProfileNetwork))
	mustContain(t, o, "HOST-LISTENER")
}

// 8. Limits: memory, CPU and process limits end runaway commands, are
// reported in words, and never harm the host.
func TestLimits(t *testing.T) {
	e := newEnv(t)
	if _, err := exec.LookPath("python3"); err == nil {
		o := e.sh(`python3 -c 'x = bytearray(1 << 30); print("ALLOCATED")'`, func(r *sandbox.Request) { r.Limits.MemoryMB = 128 })
		mustNotContain(t, o, "ALLOCATED")
		if want := memoryLimitName(); o.res.LimitHit != want {
			t.Errorf("memory bomb: LimitHit=%q, want %q\n%s", o.res.LimitHit, want, o)
		}
		if msg := sandbox.LimitMessage(o.res, sandbox.Limits{MemoryMB: 128}); !strings.Contains(msg, "memory_mb") {
			t.Errorf("message %q does not name memory_mb", msg)
		}
	}
	o := e.sh(`while :; do :; done`, func(r *sandbox.Request) { r.Limits.CPUSeconds = 1 })
	if o.res.LimitHit != sandbox.LimitCPU || o.res.ExitCode != 128+int(syscall.SIGXCPU) {
		t.Errorf("cpu loop: exit=%d LimitHit=%q", o.res.ExitCode, o.res.LimitHit)
	}
	if msg := sandbox.LimitMessage(o.res, sandbox.Limits{CPUSeconds: 1}); !strings.Contains(msg, "cpu_seconds") {
		t.Errorf("message %q does not name cpu_seconds", msg)
	}
	// A fork bomb is held by max_procs and the host keeps working.
	start := time.Now()
	o = e.sh(`bomb() { bomb | bomb & }; bomb; sleep 2; echo survived`, func(r *sandbox.Request) {
		r.Limits.MaxProcs = 64
		r.Timeout = 20 * time.Second
		r.Argv = []string{"/bin/bash", "-c", r.Argv[2]}
	})
	if time.Since(start) > 25*time.Second {
		t.Errorf("fork bomb ran %s", time.Since(start))
	}
	if o.res.LimitHit != sandbox.LimitProcs {
		t.Errorf("fork bomb: LimitHit=%q\n%.2000s", o.res.LimitHit, o)
	}
	if out, err := exec.Command("true").CombinedOutput(); err != nil {
		t.Errorf("host cannot fork after the bomb: %v %s", err, out)
	}
}

// Starting a sandbox never fails because the user runs many processes
// elsewhere: RLIMIT_NPROC is applied inside the sandbox's user namespace.
func TestManyHostProcessesDoNotBlockStart(t *testing.T) {
	e := newEnv(t)
	const n = 40
	var procs []*exec.Cmd
	for i := 0; i < n; i++ {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, c)
	}
	defer func() {
		for _, c := range procs {
			c.Process.Kill()
			c.Wait()
		}
	}()
	o := e.sh(`echo STARTED; for i in 1 2 3 4 5; do sleep 0.1 & done; wait; echo FORKED`, func(r *sandbox.Request) { r.Limits.MaxProcs = 10 })
	mustContain(t, o, "STARTED", "FORKED")
}

// 9. Binds: validation, modes, special files, hostile sources.
func TestBinds(t *testing.T) {
	e := newEnv(t)
	data := filepath.Join(e.base, "data dir: with colon")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "f"), []byte("BOUND-DATA"), 0o644)
	fifo := filepath.Join(e.base, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(e.base, "svc.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A socket anyone may connect to can be bound; one only its owner can
	// is refused (hostview.DecideBind; TestBindPolicySockets).
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	o := e.sh(`cat "/tmp/data at/f"; (echo x > "/tmp/data at/g") 2>/dev/null && echo RO-WRITABLE; test -p `+fifo+` && echo FIFO-OK; test -S `+sock+` && echo SOCK-OK`,
		func(r *sandbox.Request) {
			r.Binds = []sandbox.Bind{{Src: data, Dest: "/tmp/data at", ReadOnly: true}, {Src: fifo, ReadOnly: true}, {Src: sock, ReadOnly: true}}
			r.Workdir = e.work
		})
	mustContain(t, o, "BOUND-DATA", "FIFO-OK", "SOCK-OK")
	mustNotContain(t, o, "RO-WRITABLE")

	run := func(b sandbox.Bind) (out, error) {
		var so strings.Builder
		res, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Binds: []sandbox.Bind{b}}, Stdout: &so, Stderr: &so})
		if err != nil {
			return out{}, err
		}
		return out{res: res, stdout: so.String()}, nil
	}
	// Missing read-only source: error. Missing rw source: skipped with a warning.
	if _, err := run(sandbox.Bind{Src: "/nonexistent/corral", ReadOnly: true}); !errors.Is(err, sandbox.ErrPolicy) {
		t.Errorf("missing ro source: err=%v", err)
	}
	if o, err := run(sandbox.Bind{Src: "/nonexistent/corral"}); err != nil || !strings.Contains(strings.Join(o.res.Warnings, " "), "skipped") {
		t.Errorf("missing rw source: err=%v warnings=%v", err, o.res)
	}
	// A source in a hidden path is ignored with a warning.
	e.write(".ssh/id_rsa", "KEY")
	if o, err := run(sandbox.Bind{Src: filepath.Join(e.home, ".ssh"), Dest: "/keys", ReadOnly: true}); err != nil || !strings.Contains(strings.Join(o.res.Warnings, " "), "hidden") {
		t.Errorf("hidden source: err=%v res=%+v", err, o.res)
	}
	// A destination that cannot exist on the read-only root is refused.
	if _, err := run(sandbox.Bind{Src: data, Dest: "/corral-nonexistent-dest", ReadOnly: true}); !errors.Is(err, sandbox.ErrPolicy) {
		t.Errorf("dest on the read-only root: err=%v", err)
	}
	// A source holding the home directory is refused, wherever it goes.
	if _, err := run(sandbox.Bind{Src: e.base, Dest: "/tmp/mirror", ReadOnly: true}); !errors.Is(err, sandbox.ErrPolicy) {
		t.Errorf("source holding home at another dest: err=%v", err)
	}
	// A source inside the writable working directory is refused, unless
	// bound at its own path directly under it.
	os.MkdirAll(filepath.Join(e.work, "sub", "deep"), 0o755)
	if _, err := run(sandbox.Bind{Src: filepath.Join(e.work, "sub", "deep"), ReadOnly: true}); !errors.Is(err, sandbox.ErrPolicy) {
		t.Errorf("source deep in workdir: err=%v", err)
	}
	if _, err := run(sandbox.Bind{Src: filepath.Join(e.work, "sub"), ReadOnly: true}); err != nil {
		t.Errorf("source directly under workdir at its own path: err=%v", err)
	}
	// Swap a bind source for a symlink (as a command in the workdir could):
	// the next sandbox refuses it instead of following it to /etc.
	if err := os.RemoveAll(filepath.Join(e.work, "sub")); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/etc", filepath.Join(e.work, "sub"))
	if _, err := run(sandbox.Bind{Src: filepath.Join(e.work, "sub"), ReadOnly: true}); !errors.Is(err, sandbox.ErrPolicy) {
		t.Errorf("bind source swapped for a symlink out of the workdir: err=%v", err)
	}
}

// 10. Working directory rules.
func TestWorkdirRules(t *testing.T) {
	e := newEnv(t)
	run := func(wd string) (out, error) {
		var so strings.Builder
		res, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"/bin/sh", "-c", "pwd; (echo x > probe) 2>/dev/null && echo WRITABLE; true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: wd, Profile: sandbox.ProfileWorkspace}, Stdout: &so, Stderr: &so})
		if err != nil {
			return out{}, err
		}
		return out{res: res, stdout: so.String()}, nil
	}
	// Missing: nearest existing parent, read-only.
	o, err := run(filepath.Join(e.work, "gone", "deeper"))
	if err != nil || !strings.Contains(o.stdout, e.work) || strings.Contains(o.stdout, "WRITABLE") || len(o.res.Warnings) == 0 {
		t.Errorf("missing workdir: err=%v %v", err, o)
	}
	for _, wd := range []string{"/", e.state, filepath.Join(e.home, ".ssh"), filepath.Join(e.home, ".hidden-tool")} {
		os.MkdirAll(wd, 0o755)
		if _, err := run(wd); !errors.Is(err, sandbox.ErrPolicy) {
			t.Errorf("workdir %s: err=%v, want ErrPolicy", wd, err)
		}
	}
	// The home directory: warning; non-dot entries writable; no new entry at the top.
	e.write(".bashrc", "rc")
	o2 := e.sh(`echo a > ~/project/x && echo NONDOT-OK; (echo b >> ~/.bashrc) 2>/dev/null && echo DOT-WRITABLE; (echo c > ~/newtop) 2>/dev/null && echo TOP-WRITABLE; true`, func(r *sandbox.Request) { r.Workdir = e.home })
	mustContain(t, o2, "NONDOT-OK")
	mustNotContain(t, o2, "DOT-WRITABLE", "TOP-WRITABLE")
	if !strings.Contains(strings.Join(o2.res.Warnings, " "), "home directory") {
		t.Errorf("no warning for home as workdir: %v", o2.res.Warnings)
	}
	// Paths with spaces and colons.
	odd := filepath.Join(e.base, "my project: v2")
	os.MkdirAll(odd, 0o755)
	o3, err := run(odd)
	if err != nil || !strings.Contains(o3.stdout, "WRITABLE") {
		t.Errorf("workdir with space and colon: err=%v %v", err, o3)
	}
}

// 12. When bwrap is missing nothing runs: Run returns ErrUnavailable naming
// the package (degraded_mode is the front ends' business).
func TestUnavailable(t *testing.T) {
	base := testBase(t)
	marker := filepath.Join(base, "ran")
	req := &sandbox.Request{Argv: []string{"/bin/sh", "-c", "touch " + marker}, Policy: sandbox.Policy{Workdir: base}, Env: os.Environ()}
	b := New(Options{BwrapPath: "/nonexistent/bwrap", StateDir: filepath.Join(base, "state")})
	res, err := b.Run(context.Background(), req)
	if res != nil || !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "apt install bubblewrap") {
		t.Errorf("Run = %+v, %v; want ErrUnavailable naming the package", res, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although no sandbox was available")
	}
}

// home_mode session: HOME is a per-session directory, writable unless the
// profile is restricted; the real home stays under its rules.
func TestSessionHome(t *testing.T) {
	e := newEnv(t)
	sh := filepath.Join(e.state, "homes", "s1")
	os.MkdirAll(sh, 0o700)
	o := e.sh(`echo "home=$HOME"; git config --global user.name corral-test 2>/dev/null || echo "[user]" > ~/.gitconfig; ls -A ~`, func(r *sandbox.Request) { r.HomeDir = sh })
	mustContain(t, o, "home="+sh, ".gitconfig")
	if _, err := os.Stat(filepath.Join(sh, ".gitconfig")); err != nil {
		t.Errorf("write to the session home did not persist: %v", err)
	}
	o = e.sh(`(echo x > ~/.profile) 2>/dev/null && echo WRITABLE; true`, func(r *sandbox.Request) { r.HomeDir = sh; r.Profile = sandbox.ProfileRestricted })
	mustNotContain(t, o, "WRITABLE")
}

// Descriptors corral inherited without close-on-exec never reach the
// sandbox (runc CVE-2024-21626 came from such a leak).
func TestNoDescriptorLeak(t *testing.T) {
	e := newEnv(t)
	fd, err := syscall.Open(e.home, syscall.O_RDONLY|syscall.O_DIRECTORY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	o := e.sh(fmt.Sprintf(`ls /proc/self/fd | tr '\n' ' '; test -e /proc/self/fd/%d && echo LEAKED-%d; true`, fd, fd))
	mustNotContain(t, o, fmt.Sprintf("LEAKED-%d", fd))
}

// Findings of a hostile trial: each was a way out before it was fixed.
func TestHostileWorkdirsAndBinds(t *testing.T) {
	e := newEnv(t)
	run := func(tweak func(*sandbox.Request)) (out, error) {
		var so strings.Builder
		req := &sandbox.Request{Argv: []string{"/bin/sh", "-c", "(echo x > probe-$$) 2>/dev/null && echo WRITABLE; true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace}, Stdout: &so, Stderr: &so}
		tweak(req)
		res, err := e.backend.Run(context.Background(), req)
		if err != nil {
			return out{}, err
		}
		return out{res: res, stdout: so.String()}, nil
	}
	// A symlink planted in the workdir by an earlier command, then used as
	// the working directory: /etc stays unwritable.
	os.Symlink("/etc", filepath.Join(e.work, "sub"))
	if _, err := run(func(r *sandbox.Request) { r.Workdir = filepath.Join(e.work, "sub") }); !errors.Is(err, sandbox.ErrPolicy) {
		t.Errorf("workdir symlinked to /etc: err=%v", err)
	}
	// ... or into a dot entry of home: read-only there.
	os.MkdirAll(filepath.Join(e.home, ".local", "bin"), 0o755)
	os.Symlink("../.local/bin", filepath.Join(e.work, "tools"))
	if o, err := run(func(r *sandbox.Request) { r.Workdir = filepath.Join(e.work, "tools") }); err != nil || strings.Contains(o.stdout, "WRITABLE") {
		t.Errorf("workdir symlinked into ~/.local/bin: err=%v out=%v", err, o.stdout)
	}
	// System directories are never writable working directories.
	for _, wd := range []string{"/proc", "/sys", "/dev", "/tmp", "/dev/shm", "/etc", "/usr/lib", "/run"} {
		if _, err := run(func(r *sandbox.Request) { r.Workdir = wd }); !errors.Is(err, sandbox.ErrPolicy) {
			t.Errorf("workdir %s: err=%v, want ErrPolicy", wd, err)
		}
	}
	// Binds of the kernel's interfaces, and read-write binds of system trees.
	for _, b := range []sandbox.Bind{{Src: "/proc", Dest: "/tmp/p", ReadOnly: true}, {Src: "/sys", ReadOnly: true}, {Src: "/etc"}} {
		if _, err := run(func(r *sandbox.Request) { r.Binds = []sandbox.Bind{b} }); !errors.Is(err, sandbox.ErrPolicy) {
			t.Errorf("bind %+v: err=%v, want ErrPolicy", b, err)
		}
	}
	// Binds of the home directory, or read-write binds of its dot entries,
	// would undo the home rules: refused. A bind of a hidden dot entry is
	// ignored.
	e.write(".secretdir/s", "SECRET-DOT")
	for _, b := range []sandbox.Bind{{Src: e.home, ReadOnly: true}, {Src: filepath.Dir(e.home), ReadOnly: true}, {Src: filepath.Join(e.home, ".local")}} {
		if _, err := run(func(r *sandbox.Request) { r.Binds = []sandbox.Bind{b} }); !errors.Is(err, sandbox.ErrPolicy) {
			t.Errorf("bind %+v: err=%v, want ErrPolicy", b, err)
		}
	}
	for _, b := range []sandbox.Bind{{Src: filepath.Join(e.home, ".local"), ReadOnly: true}, {Src: filepath.Join(e.home, ".secretdir"), ReadOnly: true}} {
		var so strings.Builder
		res, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"/bin/sh", "-c", "cat ~/.secretdir/s; ls -A ~/.local; true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Binds: []sandbox.Bind{b}}, Stdout: &so, Stderr: &so})
		if err != nil || strings.Contains(so.String(), "SECRET-DOT") || strings.Contains(so.String(), "state") || len(res.Warnings) == 0 {
			t.Errorf("bind %+v: err=%v out=%q", b, err, so.String())
		}
	}
	// A bind elsewhere of a tree that holds credentials is ignored.
	e.write(".cargo/credentials.toml", "CARGO-TOKEN")
	keys := filepath.Join(e.base, "keys")
	e.write("../keys/ssh/id_rsa", "LINKED-STORE-KEY")
	os.Symlink(filepath.Join(keys, "ssh"), filepath.Join(e.home, ".ssh"))
	for _, b := range []sandbox.Bind{{Src: filepath.Join(e.home, ".cargo"), Dest: "/tmp/mnt", ReadOnly: true}, {Src: keys, Dest: "/tmp/mnt", ReadOnly: true}} {
		var so strings.Builder
		res, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"/bin/sh", "-c", "cat /tmp/mnt/credentials.toml /tmp/mnt/ssh/id_rsa 2>/dev/null; true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Binds: []sandbox.Bind{b}}, Stdout: &so, Stderr: &so})
		if err != nil || strings.Contains(so.String(), "TOKEN") || strings.Contains(so.String(), "KEY") || len(res.Warnings) == 0 {
			t.Errorf("bind %+v: err=%v out=%q", b, err, so.String())
		}
	}
}

// A symlink inside a credential store (GNU stow) is hidden at its target.
func TestSymlinkInsideCredentialStore(t *testing.T) {
	e := newEnv(t)
	e.write("dotfiles/ssh_key", "STOW-KEY")
	e.write("dotfiles/aws/creds", "STOW-AWS")
	os.MkdirAll(filepath.Join(e.home, ".ssh"), 0o700)
	os.MkdirAll(filepath.Join(e.home, ".aws"), 0o700)
	os.Symlink(filepath.Join(e.home, "dotfiles/ssh_key"), filepath.Join(e.home, ".ssh/id_rsa"))
	os.Symlink("../dotfiles/aws/creds", filepath.Join(e.home, ".aws/credentials"))
	o := e.sh(`cat ~/dotfiles/ssh_key ~/dotfiles/aws/creds 2>/dev/null; echo done`)
	mustNotContain(t, o, "STOW-KEY", "STOW-AWS")
	mustContain(t, o, "done")
}

// A symlink a sandbox leaves in the tool cache (under corral's own state
// directory, a credential store hidden whole) does not hide its target
// from the next sandbox: found by reading the walk, where /usr could have
// been planted.
func TestToolCacheSymlinkHidesNothing(t *testing.T) {
	e := newEnv(t)
	cache := filepath.Join(e.state, "cache")
	seen := filepath.Join(e.home, "project", "seen")
	if err := os.MkdirAll(seen, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(seen, "f"), []byte("VISIBLE"), 0o644)
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	withCache := func(r *sandbox.Request) { r.CacheDir = cache }
	o := e.sh(`mkdir -p "$GOCACHE" && ln -s `+seen+` "$GOCACHE/planted" && ln -s /usr/share "$GOCACHE/usr" && echo planted`, withCache)
	mustContain(t, o, "planted")
	o = e.sh(`cat `+seen+`/f; ls /usr/share | wc -l`, withCache)
	mustContain(t, o, "VISIBLE")
	if strings.HasPrefix(strings.TrimSpace(strings.SplitN(o.stdout, "\n", 2)[1]), "0") {
		t.Errorf("/usr/share hidden after a sandbox linked to it from the tool cache:\n%s", o)
	}
}

// Secrets by variable name stay out; env_allow lets one through; the
// sandbox gets a session keyring of its own; /tmp is bounded; the mount plan
// is not in /proc/1/cmdline.
func TestEnvKeyringTmpSizeCmdline(t *testing.T) {
	e := newEnv(t)
	e.envv = append(e.envv, "GITHUB_TOKEN=gh-secret", "NPM_TOKEN=npm-secret", "AWS_SECRET_ACCESS_KEY=aws-secret", "openai_api_key=lower-secret", "DATABASE_URL=db-secret", "VAULT_TOKEN=vault-secret")
	o := e.sh(`env`, func(r *sandbox.Request) { r.EnvAllow = []string{"VAULT_TOKEN"} })
	mustNotContain(t, o, "gh-secret", "npm-secret", "aws-secret", "lower-secret", "db-secret")
	mustContain(t, o, "vault-secret")

	// A key in corral's session keyring is not visible inside.
	id, err := unixAddKey("user", "corral-test-key", []byte("KEYRING-SECRET"))
	if err == nil {
		defer unixRevoke(id)
		if _, err := exec.LookPath("python3"); err != nil {
			t.Skip("python3 not installed; CI installs it")
		}
		// keyctl(KEYCTL_READ) of the key by id: only a possessor may read it.
		o = e.sh(fmt.Sprintf(`python3 -c '
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(64)
n = libc.syscall(250, 11, %d, buf, 64)
print("READ:" + buf.raw[:max(n,0)].decode() if n >= 0 else "DENIED errno=%%d" %% ctypes.get_errno())
'`, id), func(r *sandbox.Request) { r.Limits.MemoryMB = 1024 })
		mustNotContain(t, o, "KEYRING-SECRET")
		mustContain(t, o, "DENIED")
	} else {
		t.Logf("add_key not permitted here (%v); keyring isolation unchecked", err)
	}

	o = e.sh(`dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1 | tail -1; dd if=/dev/zero of=/dev/shm/fill bs=1M count=64 2>&1 | tail -1`, func(r *sandbox.Request) { r.TmpSizeMB = 16 })
	if strings.Count(o.stdout, "16777216 bytes") != 2 {
		t.Errorf("tmpfs not bounded at 16 MiB:\n%s", o)
	}
	e.write(".zz-hidden-name-xyz/f", "x")
	o = e.sh(`tr '\0' ' ' < /proc/1/cmdline`)
	mustNotContain(t, o, "--ro-bind", ".zz-hidden-name-xyz", "--tmpfs")
}

// A timeout first asks the command to stop (SIGTERM), so it can clean up.
func TestTimeoutGivesGrace(t *testing.T) {
	e := newEnv(t)
	e.backend.opts.KillGrace = 2 * time.Second
	o := e.sh(`trap 'echo got-term; exit 9' TERM; sleep 100 & wait`, func(r *sandbox.Request) { r.Timeout = 500 * time.Millisecond })
	if !o.res.TimedOut || !strings.Contains(o.stdout, "got-term") {
		t.Errorf("timeout without grace: %s", o)
	}
}

// Root can read every file: the system's secrets and other users'
// credential stores read as empty or are hidden all the same.
func TestRootSeesNoSystemSecrets(t *testing.T) {
	e := newEnv(t)
	o := e.sh(`head -c 100 /etc/shadow | wc -c; for k in /etc/ssh/ssh_host_*_key; do [ -e "$k" ] && head -c 10 "$k" | wc -c; done; echo done`)
	for _, l := range strings.Fields(o.stdout) {
		if l != "0" && l != "done" {
			t.Errorf("a system secret is readable:\n%s", o)
		}
	}
	if os.Getuid() != 0 {
		return // other users' homes are protected by their own permissions
	}
	u, err := user.Lookup("corraltest")
	if err != nil {
		t.Logf("no second user (CI creates corraltest): other homes unchecked")
		return
	}
	// A careless user's store: a world-readable key in an open directory.
	dir := filepath.Join(u.HomeDir, ".aws")
	os.MkdirAll(dir, 0o755)
	if st, err := os.Stat(u.HomeDir); err == nil {
		defer os.Chmod(u.HomeDir, st.Mode().Perm())
	}
	os.Chmod(u.HomeDir, 0o755)
	key := filepath.Join(dir, "credentials")
	if err := os.WriteFile(key, []byte("OTHER-USER-KEY"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	o = e.sh("cat " + key + " 2>&1; echo done")
	mustNotContain(t, o, "OTHER-USER-KEY")
}

// TestGateUnavailable: where ptrace is refused, memory and CPU limits come
// from prlimit(1), memory as RLIMIT_DATA (never RLIMIT_AS), and no memory
// cgroup; max_procs is refused with a message (prlimit would count
// all the uid's processes, root's sandboxes included: they are held by
// run_as); the allowlist profile enters its namespace through nsenter.
func TestGateUnavailable(t *testing.T) {
	e := newEnv(t)
	e.backend.noGate = true
	o := e.sh(`ulimit -d; ulimit -v; ulimit -t`, func(r *sandbox.Request) { r.Limits = sandbox.Limits{MemoryMB: 256, CPUSeconds: 30} })
	if o.stdout != "262144\nunlimited\n30\n" {
		t.Errorf("limits without the gate (ulimit -d, -v, -t): %q\n%s", o.stdout, o)
	}
	req := &sandbox.Request{Argv: []string{"/bin/sh", "-c", `for i in $(seq 40); do sleep 2 & done; wait`}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.Limits{MaxProcs: 16}}, Stdout: io.Discard, Stderr: io.Discard, Timeout: time.Minute}
	res, err := e.backend.Run(context.Background(), req)
	// Refused, never run without the limit.
	if err == nil {
		t.Errorf("max_procs without the gate ran: LimitHit %q (exit %d), want a refusal", res.LimitHit, res.ExitCode)
	} else if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "max_procs=16 cannot be enforced") {
		t.Errorf("max_procs without the gate: %v; want ErrUnavailable naming max_procs", err)
	}
}

// A series of commands does not make a session keyring each: one made per
// command counted against the user's key quota (200 keys) until the
// kernel's collector freed it, and about a hundred quick commands a second
// used it up, failing the user's own add_key(2) calls too. Each thread
// keeps the one it made, and the sandbox still does not get the caller's.
func TestSandboxKeyringKeptPerThread(t *testing.T) {
	e := newEnv(t)
	before := keyringsMade.Load()
	const commands = 60
	for i := 0; i < commands; i++ {
		if o := e.sh(`true`); o.res.ExitCode != 0 {
			t.Fatalf("command %d: %s", i, o)
		}
	}
	made := keyringsMade.Load() - before
	threads := osThreads(t)
	// As root, each command is started from a thread of its own that
	// leaves with the host view's mount namespace (enterHostView) and
	// frees its keyring with it; root's quota is root_maxkeys (1,000,000).
	if os.Geteuid() != 0 && (made > int64(threads) || made >= commands/2) {
		t.Errorf("%d commands made %d session keyrings (%d threads): one per thread at most", commands, made, threads)
	}
	// On one thread: the first join installs a keyring of corral's, the
	// next leaves it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	joinSandboxKeyring(nil)
	id, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := unix.KeyctlString(unix.KEYCTL_DESCRIBE, id); err != nil || !strings.HasSuffix(d, ";"+sandboxKeyringName()) {
		t.Fatalf("session keyring after the join: %q, %v", d, err)
	}
	n := keyringsMade.Load()
	joinSandboxKeyring(nil)
	if again, _ := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false); again != id || keyringsMade.Load() != n {
		t.Errorf("a second join on the same thread made another keyring (%d, then %d)", id, again)
	}
}

// osThreads returns how many threads this process has (/proc/self/status).
func osThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads: line in /proc/self/status")
	return 0
}
