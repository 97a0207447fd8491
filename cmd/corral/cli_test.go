package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/secrets"
)

var corralBin string

// TestMain builds the corral binary once; the tests drive it as a person
// would, through its exit status, stdout and stderr.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp(testRoot(), "corral-bin-*")
	if err != nil {
		panic(err)
	}
	os.Chmod(dir, 0o755)
	corralBin = filepath.Join(dir, "corral")
	build := exec.Command("go", "build", "-o", corralBin, ".")
	// Static, as the README builds it: the docker backend mounts it in
	// containers.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		// Test binaries run without the go tool (CI's unprivileged pass)
		// fall back to a binary built next to them by .ci/run.
		if pre := os.Getenv("CORRAL_TEST_BIN"); pre != "" {
			corralBin = pre
		} else {
			panic("building corral: " + err.Error() + "\n" + string(out))
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testRoot() string {
	if d := os.Getenv("CORRAL_TEST_DIR"); d != "" {
		return d
	}
	return "/var/tmp"
}

type cli struct {
	t    *testing.T
	home string
	work string
	env  []string
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	base, err := os.MkdirTemp(testRoot(), "corral-cli-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	base, _ = filepath.EvalSymlinks(base)
	c := &cli{t: t, home: filepath.Join(base, "home"), work: filepath.Join(base, "home", "work")}
	os.MkdirAll(c.work, 0o755)
	c.env = []string{"HOME=" + c.home, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	return c
}

func requireBwrap(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping sandbox test in -short mode")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap not installed (apt install bubblewrap); CI installs it")
	}
}

// run runs corral with args and extra environment; it returns the exit
// status, stdout and stderr.
func (c *cli) run(extraEnv []string, args ...string) (int, string, string) {
	c.t.Helper()
	cmd := exec.Command(corralBin, args...)
	cmd.Dir = c.work
	cmd.Env = append(append([]string{}, c.env...), extraEnv...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return code, so.String(), se.String()
}

func TestRunExitStatus(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stdout   string
		stderrRe string
	}{
		{"passes output and status", []string{"run", "--", "sh", "-c", "echo out; echo err >&2; exit 3"}, 3, "out\n", "err"},
		{"signal gives 128+N", []string{"run", "--", "sh", "-c", "kill -9 $$"}, 137, "", ""},
		{"not found is 127", []string{"run", "--", "corral-no-such-command"}, 127, "", "command not found"},
		{"bad flag is 125", []string{"run", "--memory-mb", "lots", "--", "true"}, 125, "", "--memory-mb"},
		{"bad profile is 125", []string{"run", "--profile", "open", "--", "true"}, 125, "", "restricted, workspace, allowlist or network"},
		{"refused workdir is 125", []string{"run", "--cwd", "/", "--", "true"}, 125, "", "working directory / is refused"},
		{"cpu limit in words", []string{"run", "--cpu-seconds", "1", "--", "sh", "-c", "while :; do :; done"}, 152, "", "CPU time limit"},
		{"timeout is 124, in words", []string{"run", "--timeout", "300ms", "--", "sleep", "30"}, 124, "", "timed out"},
		{"stdin passes through", []string{"run", "--", "sh", "-c", "read x; echo got:$x"}, 0, "got:\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, so, se := c.run(nil, tc.args...)
			if code != tc.code {
				t.Errorf("exit = %d, want %d (stderr %q)", code, tc.code, se)
			}
			if tc.stdout != "" && so != tc.stdout {
				t.Errorf("stdout = %q, want %q", so, tc.stdout)
			}
			if tc.stderrRe != "" && !strings.Contains(se, tc.stderrRe) {
				t.Errorf("stderr = %q, want it to mention %q", se, tc.stderrRe)
			}
			if code == 125 && strings.Count(strings.TrimSpace(se), "\n") > 0 {
				t.Errorf("corral's own error must be one line: %q", se)
			}
		})
	}
}

func TestSettingsDriveRun(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	cfg := filepath.Join(c.home, "corral.yaml")
	if code, _, se := c.run(nil, "--config", cfg, "config", "set", "profile", "restricted"); code != 0 {
		t.Fatalf("config set: %d %s", code, se)
	}
	code, _, se := c.run(nil, "--config", cfg, "run", "--", "sh", "-c", "echo x > f")
	if code == 0 || !strings.Contains(se, "Read-only file system") {
		t.Errorf("profile from the config file not applied: %d %q", code, se)
	}
	// The environment overrides the file.
	if code, _, se := c.run([]string{"CORRAL_PROFILE=workspace"}, "--config", cfg, "run", "--", "sh", "-c", "echo x > f"); code != 0 {
		t.Errorf("CORRAL_PROFILE not applied: %d %q", code, se)
	}
	// A bad value in the environment is refused, naming the key and variable.
	code, _, se = c.run([]string{"CORRAL_MEMORY_MB=lots"}, "--config", cfg, "run", "--", "true")
	if code != 125 || !strings.Contains(se, "memory_mb") || !strings.Contains(se, "CORRAL_MEMORY_MB") {
		t.Errorf("bad CORRAL_MEMORY_MB: %d %q", code, se)
	}
	if code, _, se := c.run(nil, "--config", cfg, "config", "set", "memory_mb", "lots"); code != 125 || !strings.Contains(se, "memory_mb") {
		t.Errorf("config set memory_mb lots: %d %q", code, se)
	}
}

func TestUnavailableNeverRunsCommand(t *testing.T) {
	c := newCLI(t)
	marker := filepath.Join(c.work, "ran")
	for _, mode := range []string{"degrade", "fail"} {
		code, _, se := c.run([]string{"CORRAL_BWRAP=/nonexistent/bwrap", "CORRAL_DEGRADED_MODE=" + mode}, "run", "--", "touch", marker)
		if code != 125 || !strings.Contains(se, "apt install bubblewrap") {
			t.Errorf("%s: exit %d stderr %q", mode, code, se)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: the command ran without a sandbox", mode)
		}
	}
}

func TestDoctor(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	code, so, se := c.run(nil, "doctor", "--json")
	var rep struct {
		Ready bool `json:"ready"`
		Bwrap struct {
			ProbeOK bool `json:"probe_ok"`
			Bwrap   struct {
				Path    string `json:"path"`
				Version string `json:"version"`
			} `json:"bwrap"`
		} `json:"bwrap"`
	}
	if err := json.Unmarshal([]byte(so), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, so)
	}
	if code != 0 || !rep.Ready || !rep.Bwrap.ProbeOK || !strings.HasPrefix(rep.Bwrap.Bwrap.Version, "0.") || !strings.HasSuffix(rep.Bwrap.Bwrap.Path, "/bwrap") {
		t.Errorf("doctor: exit %d ready=%v probe=%v stderr=%q", code, rep.Ready, rep.Bwrap.ProbeOK, se)
	}
	code, so, _ = c.run(nil, "doctor")
	if code != 0 || !strings.Contains(so, "ready") {
		t.Errorf("doctor text: %d %s", code, so)
	}
	// A state directory corral cannot write makes it not ready, said
	// with the fix (a full disk read "ready").
	blocker := filepath.Join(c.home, "not-a-dir")
	os.WriteFile(blocker, nil, 0o600)
	if code, so, _ := c.run([]string{"XDG_STATE_HOME=" + filepath.Join(blocker, "state")}, "doctor"); code == 0 || !strings.Contains(so, "cannot be made") || !strings.Contains(so, "XDG_STATE_HOME") {
		t.Errorf("doctor with an unwritable state directory: %d\n%s", code, so)
	}
	if got := checkStateDir(c.home); got != "" {
		t.Errorf("checkStateDir(%s) = %q", c.home, got)
	}
	// The settings file named by $CORRAL_CONFIG is the one reported (a
	// fresh user's trial saw the default one named instead).
	other := filepath.Join(c.home, "other-config.yaml")
	os.WriteFile(other, []byte("profile: workspace\n"), 0o600)
	if _, so, _ = c.run([]string{"CORRAL_CONFIG=" + other}, "doctor"); !strings.Contains(so, "settings "+other) {
		t.Errorf("doctor with CORRAL_CONFIG=%s does not name it:\n%s", other, so)
	}
	// A broken bwrap is reported with the fix, and a non-zero status.
	fake := filepath.Join(c.home, "bin")
	os.MkdirAll(fake, 0o755)
	os.WriteFile(filepath.Join(fake, "bwrap"), []byte("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'bubblewrap 0.8.0'; exit 0; }\necho 'bwrap: setting up uid map: Permission denied' >&2; exit 1\n"), 0o755)
	code, so, _ = c.run([]string{"CORRAL_BWRAP=" + filepath.Join(fake, "bwrap")}, "doctor")
	if code == 0 || !strings.Contains(so, "fix:") {
		t.Errorf("doctor with a failing bwrap: exit %d\n%s", code, so)
	}
	// A bwrap on PATH is never used: a sandboxed command could have planted
	// it (a project's .venv/bin).
	marker := filepath.Join(c.home, "planted-ran")
	os.WriteFile(filepath.Join(fake, "bwrap"), []byte("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'bubblewrap 0.8.0'; exit 0; }\ntouch "+marker+"\n"), 0o755)
	c.run([]string{"PATH=" + fake + ":/usr/bin:/bin"}, "run", "--", "true")
	c.run([]string{"PATH=" + fake + ":/usr/bin:/bin"}, "doctor")
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a bwrap found on PATH was executed")
	}
}

// A terminal stays a terminal: under script(1)'s pty, the command sees one.
func TestTerminalPassthrough(t *testing.T) {
	requireBwrap(t)
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) from util-linux not installed; CI installs it")
	}
	c := newCLI(t)
	cmd := exec.Command("script", "-qec", corralBin+" run -- sh -c 'test -t 0 && test -t 1 && test -t 2 && echo IS-A-TTY'", "/dev/null")
	cmd.Dir = c.work
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "IS-A-TTY") {
		t.Errorf("no terminal in the sandbox: %v %q", err, out)
	}
}

func TestDryRunShowsArgv(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	code, so, se := c.run(nil, "run", "--dry-run", "--profile", "workspace", "--", "echo", "hi there")
	if code != 0 {
		t.Fatalf("dry-run: %d %s", code, se)
	}
	lines := strings.Split(strings.TrimSpace(so), "\n")
	if !strings.HasSuffix(lines[0], "bwrap") || lines[len(lines)-1] != "hi there" || !strings.Contains(so, "--unshare-net\n") {
		t.Errorf("dry-run argv:\n%s", so)
	}
}

// ^C is passed on to the command, which may handle it; its own status is
// corral's status.
func TestInterruptForwarded(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	cmd := exec.Command(corralBin, "run", "--", "bash", "-c", `trap 'echo got-int; exit 42' INT; echo ready; sleep 30 & wait`)
	cmd.Dir = c.work
	cmd.Env = c.env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var lines []string
	if sc.Scan() {
		lines = append(lines, sc.Text())
	}
	cmd.Process.Signal(os.Interrupt)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 42 || strings.Join(lines, ",") != "ready,got-int" {
		t.Errorf("after ^C: err=%v stdout=%q", err, lines)
	}
}

// corral run --session: words joined and run by the session's shell; state
// carries over between separate corral processes.
func TestRunSession(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	if code, _, se := c.run(nil, "run", "--session", "s1", "--", "mkdir", "-p", "sub", "&&", "cd", "sub", "&&", "export", "A=1"); code != 0 {
		t.Fatalf("first: %d %s", code, se)
	}
	code, so, se := c.run(nil, "run", "--session", "s1", "--", `pwd; echo "$A"; exit 3`)
	if code != 3 || so != filepath.Join(c.work, "sub")+"\n1\n" {
		t.Errorf("second: %d %q %q", code, so, se)
	}
	// Bare "sessions" lists them too, as docker ps does (it printed help).
	for _, args := range [][]string{{"sessions", "list"}, {"sessions"}} {
		code, so, _ = c.run(nil, args...)
		if code != 0 || !strings.HasPrefix(so, "NAME") || !strings.Contains(so, "s1") || !strings.Contains(so, filepath.Join(c.work, "sub")) {
			t.Errorf("%q: %d %s", args, code, so)
		}
	}
	if code, _, se := c.run(nil, "sessions", "lsit"); code != 125 || !strings.Contains(se, `unknown command "lsit"`) {
		t.Errorf("sessions lsit: %d %q", code, se)
	}
	// A name that cannot be removed is said, and the others go all the
	// same (it stopped at the first).
	if code, _, se := c.run(nil, "sessions", "rm", "no-such-session", "s1"); code != 125 || !strings.Contains(se, `no session "no-such-session"`) || !strings.Contains(se, "1 of 2 sessions not removed") {
		t.Errorf("sessions rm: %d %s", code, se)
	}
	if _, so, _ := c.run(nil, "sessions", "list"); strings.Contains(so, "s1") {
		t.Errorf("removed session still listed: %s", so)
	}
}

// corral shell: bash on corral's own pty, with job control, in the
// session's directory.
func TestShell(t *testing.T) {
	requireBwrap(t)
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) from util-linux not installed; CI installs it")
	}
	c := newCLI(t)
	c.run(nil, "run", "--session", "sh1", "--", "mkdir -p inner && cd inner")
	cmd := exec.Command("script", "-qec", corralBin+" shell --session sh1", "/dev/null")
	cmd.Dir = c.work
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader("echo PWD=$(pwd); sleep 30 & jobs; kill %1; echo $((6*7)); exit 0\n")
	out, err := cmd.CombinedOutput()
	s := string(out)
	if err != nil || !strings.Contains(s, "PWD="+filepath.Join(c.work, "inner")) || !strings.Contains(s, "42") || !strings.Contains(s, "Running") {
		t.Errorf("shell: %v\n%s", err, s)
	}
	// Without a terminal it says so.
	if code, _, se := c.run(nil, "shell"); code != 125 || !strings.Contains(se, "terminal") {
		t.Errorf("shell without a terminal: %d %q", code, se)
	}
}

// corral's own files cannot be changed from inside: a settings file in the
// working directory is refused, and corral's executable (or bwrap) in it is
// read-only in the sandbox or refused.
func TestOwnFilesProtected(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	cfg := filepath.Join(c.work, "corral.yaml")
	os.WriteFile(cfg, []byte("profile: workspace\n"), 0o644)
	code, _, se := c.run([]string{"CORRAL_CONFIG=" + cfg}, "run", "--", "sh", "-c", "echo 'backend: local' > corral.yaml")
	if code != 125 || !strings.Contains(se, "settings file") {
		t.Errorf("settings file in the workdir: %d %q", code, se)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "profile: workspace\n" {
		t.Errorf("settings file changed: %q", b)
	}
	// corral's executable inside the working directory stays read-only.
	exe := filepath.Join(c.work, "corral")
	data, _ := os.ReadFile(corralBin)
	os.WriteFile(exe, data, 0o755)
	run := exec.Command(exe, "run", "--", "sh", "-c", "(echo evil > ./corral) 2>/dev/null || echo WRITE-REFUSED; rm -f ./corral 2>/dev/null || echo RM-REFUSED; mv ./corral ./x 2>/dev/null || echo MV-REFUSED")
	run.Dir, run.Env = c.work, c.env
	out, _ := run.CombinedOutput()
	if got := string(out); !strings.Contains(got, "WRITE-REFUSED") || !strings.Contains(got, "RM-REFUSED") || !strings.Contains(got, "MV-REFUSED") {
		t.Errorf("corral's executable changeable from inside: %q", got)
	}
	if b, _ := os.ReadFile(exe); len(b) != len(data) {
		t.Errorf("corral's executable changed on the host")
	}
	// A bwrap reached through a symlink into the working directory is refused.
	os.MkdirAll(filepath.Join(c.work, "bin"), 0o755)
	bw, _ := os.ReadFile("/usr/bin/bwrap")
	os.WriteFile(filepath.Join(c.work, "bin", "bwrap"), bw, 0o755)
	link := filepath.Join(c.home, "plink")
	os.Symlink(c.work, link)
	code, _, se = c.run([]string{"CORRAL_BWRAP=" + filepath.Join(link, "bin", "bwrap")}, "run", "--", "true")
	if code != 125 || !strings.Contains(se, "could replace it") {
		t.Errorf("bwrap in the workdir through a symlink: %d %q", code, se)
	}
}

// TestProtectedNoteOnce: what a command made at a protected path is
// moved out and said so on stderr once (it was said twice: the result's
// warning and the backend's log line).
func TestProtectedNoteOnce(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	if out, err := exec.Command("git", "init", "-q", c.work).CombinedOutput(); err != nil {
		t.Skipf("git init: %v %s", err, out)
	}
	code, _, se := c.run(nil, "run", "--", "sh", "-c", "echo hi > .bashrc")
	if code != 0 || strings.Count(se, "protected path") != 1 || !strings.Contains(se, "held 1 protected path the command made (programs on the host run them): .bashrc;") {
		t.Errorf("a .bashrc made by the command: %d, the note not once: %q", code, se)
	}
	if _, err := os.Lstat(filepath.Join(c.work, ".bashrc")); err == nil {
		t.Error(".bashrc stayed in the working directory")
	}
}

// TestGitInitHeldOneLine: `corral run -- git init` in a fresh workspace
// tells what it held in one short line (it printed one long line per file),
// naming the paths and the command that lists them, and the repository
// works.
func TestGitInitHeldOneLine(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	code, _, se := c.run(nil, "run", "--", "git", "init", "-q")
	// The line's length leaves out the quarantine's path, which is as
	// long as the state directory's (CI's is longer than a home's).
	q := filepath.Join(c.home, ".local", "state", "corral", "quarantine")
	var notes []string
	for _, l := range strings.Split(strings.TrimSpace(se), "\n") {
		if strings.HasPrefix(l, "corral: ") {
			notes = append(notes, l)
		}
	}
	if code != 0 || len(notes) != 1 || !strings.Contains(notes[0], "held 2 protected paths the command made") ||
		!strings.Contains(notes[0], ": .git/hooks, .git/config (its settings, all safe, written back)") || !strings.Contains(notes[0], "ls -A "+q) || len(notes[0])-len(q) > 250 {
		t.Errorf("git init: %d, want one short line naming what was held: %q", code, se)
	}
	if code, so, se := c.run(nil, "run", "--", "git", "status", "--short"); code != 0 || so != "" {
		t.Errorf("git status after: %d %q %q", code, so, se)
	}
}

// A second ^C ends the whole sandbox at once, even when the command ignores
// the first.
func TestSecondInterruptKills(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	cmd := exec.Command(corralBin, "run", "--", "bash", "-c", `trap '' INT TERM; echo ready; sleep 30`)
	cmd.Dir, cmd.Env = c.work, c.env
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(stdout).ReadString('\n')
	cmd.Process.Signal(os.Interrupt)
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 137 || time.Since(start) > time.Second {
		t.Errorf("second ^C: err=%v after %s", err, time.Since(start))
	}
}

// TestRunAllowlist drives the allowlist profile through the real binary:
// corral's own executable is the forwarder and the trampoline inside the
// sandbox, refusals come back as the proxy's 403 and are logged at the
// default level, direct connections fail, the filter is loaded, and a
// route's allow list replaces network.allow for its sessions.
func TestRunAllowlist(t *testing.T) {
	requireBwrap(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed (apt-get install curl); CI installs it")
	}
	c := newCLI(t)
	script := `curl -q -sS -m 10 http://denied.test/x; echo
curl -q -sS -m 5 --noproxy '*' http://1.1.1.1/ >/dev/null 2>&1; echo direct=$?
grep '^Seccomp:' /proc/self/status`
	code, so, se := c.run([]string{"CORRAL_NETWORK_ALLOW=allowed.test, *.allowed.test"}, "run", "--profile", "allowlist", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, so, se)
	}
	for _, want := range []string{"blocked by corral network allowlist: denied.test\n", "direct=7\n", "Seccomp:\t2\n"} {
		if !strings.Contains(so, want) {
			t.Errorf("stdout lacks %q:\n%s", want, so)
		}
	}
	if !strings.Contains(se, "msg=network.denied") || !strings.Contains(se, "host=denied.test") {
		t.Errorf("stderr lacks the network.denied record:\n%s", se)
	}

	routes := `CORRAL_ROUTES=[{sessions: "al:*", profile: allowlist, allow: ["a.test"], deny: ["x.a.test"]}]`
	code, so, se = c.run([]string{routes}, "run", "--session", "al:1", "--", "curl -q -sS -m 10 http://x.a.test/; echo; curl -q -sS -m 10 http://b.test/")
	if code != 0 || !strings.Contains(so, "blocked by corral network allowlist: x.a.test") || !strings.Contains(so, "blocked by corral network allowlist: b.test") {
		t.Errorf("routed session: exit %d\nstdout %s\nstderr %s", code, so, se)
	}
	if !strings.Contains(se, "session=al:1 host=x.a.test") {
		t.Errorf("the refusal is not logged with the session:\n%s", se)
	}

	code, so, _ = c.run(nil, "doctor", "--json")
	var rep struct {
		Seccomp struct {
			OK    bool `json:"ok"`
			Rules int  `json:"rules"`
		} `json:"seccomp"`
		Proxy struct {
			OK bool `json:"ok"`
		} `json:"allowlist_proxy"`
	}
	if err := json.Unmarshal([]byte(so), &rep); err != nil || code != 0 || !rep.Seccomp.OK || rep.Seccomp.Rules < 10 || !rep.Proxy.OK {
		t.Errorf("doctor: exit %d, %v, %+v\n%s", code, err, rep, so)
	}
}

// TestCleanupSweepsDeadDirs: corral cleanup removes the proxy socket
// directories and `corral run` scratch directories of corral processes that
// are gone, and keeps those of live ones; and the secret file copies
// unused for longer than their lease, keeping a recent one.
func TestCleanupSweepsDeadDirs(t *testing.T) {
	c := newCLI(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	gone, live := dead.Process.Pid, os.Getpid()
	state := filepath.Join(c.home, ".local", "state", "corral")
	paths := map[string]bool{ // path -> must be removed
		filepath.Join(state, "net", fmt.Sprintf("%d-1", gone)):           true,
		filepath.Join(state, "net", fmt.Sprintf("%d-1", live)):           false,
		filepath.Join(state, "scratch", fmt.Sprintf("run-%d-123", gone)): true,
		filepath.Join(state, "scratch", fmt.Sprintf("run-%d-123", live)): false,
		filepath.Join(state, "scratch", "session-dir-of-something-else"): false,
	}
	for p := range paths {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "f"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copies := filepath.Join(state, "secretfiles")
	if err := os.MkdirAll(copies, 0o700); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-2 * secrets.CopyLease)
	for name, remove := range map[string]bool{"aaaa-netrc": true, "aaaa-netrc-u1000": true, "bbbb-netrc": false} {
		p := filepath.Join(copies, name)
		if err := os.WriteFile(p, []byte("password stand-in\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if remove {
			if err := os.Chtimes(p, long, long); err != nil {
				t.Fatal(err)
			}
		}
		paths[p] = remove
	}
	_, so, se := c.run(nil, "cleanup") // the Docker part may fail here; the sweep does not depend on it
	if !strings.Contains(so, "removed "+filepath.Join(copies, "aaaa-netrc")+"\n") {
		t.Errorf("cleanup did not say it removed the old copy:\n%s%s", so, se)
	}
	for p, remove := range paths {
		_, err := os.Stat(p)
		if remove && err == nil {
			t.Errorf("%s left\n%s%s", p, so, se)
		}
		if !remove && err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}

// TestCleanupWithoutDocker: where no Docker engine answers (everyone who
// uses bwrap alone), cleanup does its own work, says it skipped the
// containers, names DOCKER_HOST, and succeeds; --json stays valid JSON.
func TestCleanupWithoutDocker(t *testing.T) {
	c := newCLI(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(c.home, ".local", "state", "corral", "scratch", fmt.Sprintf("run-%d-1", dead.Process.Pid))
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	host := "unix://" + filepath.Join(c.home, "no-such-dir", "docker.sock")
	env := []string{"DOCKER_HOST=" + host}
	code, so, se := c.run(env, "cleanup")
	if code != 0 || !strings.Contains(so, "docker: skipped") || !strings.Contains(so, host) || !strings.Contains(so, "DOCKER_HOST") ||
		!strings.Contains(so, "removed "+stale) || strings.Contains(so+se, "nothing was run") {
		t.Errorf("cleanup without an engine: exit %d\nstdout:\n%s\nstderr:\n%s", code, so, se)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("%s left", stale)
	}
	code, so, se = c.run(env, "cleanup", "--json")
	var los []map[string]any
	if err := json.Unmarshal([]byte(so), &los); err != nil || code != 0 || len(los) != 0 || !strings.Contains(se, "docker: skipped") || !strings.Contains(se, host) {
		t.Errorf("cleanup --json without an engine: exit %d, %v\nstdout:\n%s\nstderr:\n%s", code, err, so, se)
	}
}

// TestSecondsFlag: --timeout takes whole seconds too, as the timeout
// setting does.
func TestSecondsFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"2": 2 * time.Second, "90s": 90 * time.Second, "5m": 5 * time.Minute, "0": 0, "1.5s": 1500 * time.Millisecond} {
		var d time.Duration
		if err := (secondsFlag{&d}).Set(in); err != nil || d != want {
			t.Errorf("Set(%q) = %v, %v; want %v", in, d, err, want)
		}
	}
	for _, in := range []string{"-1", "x", "-5s", "99999999999999999999"} {
		var d time.Duration
		if err := (secondsFlag{&d}).Set(in); err == nil {
			t.Errorf("Set(%q) accepted: %v", in, d)
		}
	}
}

// TestTimeoutAdvice: a timeout's advice names where the timeout came
// from (it advised `corral config set` for a CORRAL_TIMEOUT, which
// overrides the file).
func TestTimeoutAdvice(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"CORRAL_TIMEOUT=1s"}, []string{"run", "--", "sleep", "30"}, "in CORRAL_TIMEOUT (which overrides the settings file)"},
		{nil, []string{"run", "--timeout", "1", "--", "sleep", "30"}, "raise --timeout"},
	} {
		if code, _, se := c.run(tc.env, tc.args...); code != 124 || !strings.Contains(se, tc.want) {
			t.Errorf("%v %v: %d %s; want 124 and %q", tc.env, tc.args, code, se, tc.want)
		}
	}
}

// TestEmptySessionName: --session given empty is refused, not taken for
// no session (run then did not join the words: "echo ok" exited 127).
func TestEmptySessionName(t *testing.T) {
	c := newCLI(t)
	for _, args := range [][]string{{"run", "--session", "", "--", "echo", "ok"}, {"run", "--session=", "--", "echo ok"}, {"shell", "--session", " "}} {
		if code, so, se := c.run(nil, args...); code != 125 || so != "" || !strings.Contains(se, "--session: a session needs a name") {
			t.Errorf("%q: %d %q %q", args, code, so, se)
		}
	}
}

// TestExecNeedsSession: corral exec on a session that does not exist is
// refused, naming how to start one, and leaves no session behind (it made
// a blank one, which sessions list then showed); with --create it makes
// the session, which is listed from then on and joined without --create.
// A session whose one command was refused before it ran is not listed,
// and exec refuses it too.
func TestExecNeedsSession(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	code, so, se := c.run(nil, "exec", "--session", "ghost", "--", "echo", "ran")
	if code != 125 || so != "" || !strings.Contains(se, "no session ghost") || !strings.Contains(se, "corral run --session ghost -- true") || !strings.Contains(se, "--create") {
		t.Errorf("exec on a missing session: %d %q %q", code, so, se)
	}
	if _, so, _ := c.run(nil, "sessions", "list"); strings.Contains(so, "ghost") {
		t.Errorf("exec left a session behind:\n%s", so)
	}
	if code, so, se := c.run(nil, "exec", "--session", "ghost", "--create", "--", "echo", "ran"); code != 0 || so != "ran\n" {
		t.Errorf("exec --create: %d %q %q", code, so, se)
	}
	if code, so, se := c.run(nil, "exec", "--session", "ghost", "--", "echo", "again"); code != 0 || so != "again\n" {
		t.Errorf("exec after --create: %d %q %q", code, so, se)
	}
	if _, so, _ := c.run(nil, "sessions", "list"); !strings.Contains(so, "ghost") || !strings.Contains(so, "bwrap") {
		t.Errorf("a session exec --create made is not listed:\n%s", so)
	}
	// --create whose program is refused before it starts leaves no
	// session directory behind.
	if code, _, se := c.run([]string{"CORRAL_CWD=/"}, "exec", "--session", "half", "--create", "--", "true"); code != 125 || !strings.Contains(se, "refused") {
		t.Errorf("exec --create refused: %d %q", code, se)
	}
	if m, _ := filepath.Glob(filepath.Join(c.home, ".local", "state", "corral", "sessions", "half-*")); len(m) != 0 {
		t.Errorf("exec --create whose program never started left %q", m)
	}
	// Refused before it ran: a working directory that is the whole host.
	if code, _, se := c.run(nil, "run", "--session", "refused", "--cwd", "/", "--", "true"); code != 125 || !strings.Contains(se, "refused") {
		t.Fatalf("a refused command: %d %q", code, se)
	}
	if _, so, _ := c.run(nil, "sessions", "list"); strings.Contains(so, "refused") {
		t.Errorf("a session that never ran a command is listed:\n%s", so)
	}
	if code, _, se := c.run(nil, "exec", "--session", "refused", "--", "true"); code != 125 || !strings.Contains(se, "no session refused") {
		t.Errorf("exec on a session that never ran: %d %q", code, se)
	}
}

// TestReadOnlyNamesProtectedPath: a write to a protected path refused as
// read-only is explained naming the path, printed relative, and why it is
// read-only inside the writable directory (it said "a path is read-only"
// and named that directory as writable), for corral run and a session.
func TestReadOnlyNamesProtectedPath(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	if out, err := exec.Command("git", "init", "-q", c.work).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	for _, args := range [][]string{
		{"run", "--profile", "workspace", "--", "sh", "-c", "echo > .git/config"},
		{"run", "--session", "ro", "--", "echo > .git/config"},
	} {
		code, _, se := c.run(nil, args...)
		if code == 0 || !strings.Contains(se, "corral: .git/config is a protected path (protected_paths: **/.git/config), read-only in this sandbox although "+c.work+" is writable") || strings.Contains(se, "a path is read-only") {
			t.Errorf("%q: %d %q", args, code, se)
		}
	}
	if code, _, se := c.run(nil, "run", "--", "sh", "-c", "cd /usr && echo > x"); code == 0 || !strings.Contains(se, "corral: x is read-only in this sandbox") {
		t.Errorf("a relative path outside the writable set: %d %q", code, se)
	}
}
