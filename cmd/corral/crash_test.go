package main

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/k8stest"
)

// corePatternFile is where the kernel reads how to name a core.
const corePatternFile = "/proc/sys/kernel/core_pattern"

// relativeCores makes a crashing process write its core as a file named
// "core..." in its own working directory (a relative
// kernel.core_pattern), the setting under which a core lands where a
// sandbox can read it. A pattern that is a pipe or an absolute path is
// replaced for the test (as root) and put back after; without root the
// test skips.
func relativeCores(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(corePatternFile)
	if err != nil {
		t.Skipf("cannot read %s: %v", corePatternFile, err)
	}
	pat := strings.TrimSpace(string(b))
	if pat != "" && !strings.HasPrefix(pat, "|") && !strings.HasPrefix(pat, "/") && strings.HasPrefix(filepath.Base(pat), "core") {
		return
	}
	if os.Getuid() != 0 {
		t.Skipf("kernel.core_pattern is %q: only root can make it a relative file for this test", pat)
	}
	if err := os.WriteFile(corePatternFile, []byte("core.%p"), 0o644); err != nil {
		t.Skipf("cannot set kernel.core_pattern: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(corePatternFile, []byte(pat), 0o644); err != nil {
			t.Errorf("restoring kernel.core_pattern %q: %v", pat, err)
		}
	})
}

// cores lists the files named core* below dirs (not descending into
// dirs' own subdirectories when shallow).
func cores(dirs []string, shallow bool) []string {
	var out []string
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if e.IsDir() && p != d && shallow {
				return filepath.SkipDir
			}
			if !e.IsDir() && strings.HasPrefix(e.Name(), "core") {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// crashLeavesNoCore crashes a corral that holds a secret's real value
// (a command of it runs, through the proxy that holds the value) with
// SIGABRT, GOTRACEBACK=crash and ulimit -c unlimited: the kernel must
// dump no core (corral is not dumpable), and none may appear in the
// project (the sandbox's writable tree, where corral was started), the
// home or "/", where a relative core_pattern would put it; while it runs,
// corral's working directory is not the project. A plain process crashed
// the same way in the same place first must leave a core there, or the
// test would prove nothing. runArgs follow `corral run`: they must run a
// command whose first line on stdout is "ready" and which then waits
// (crashCommand).
func crashLeavesNoCore(t *testing.T, c *cli, runArgs ...string) {
	relativeCores(t)
	real := "ghp_" + strings.Repeat("Cr4sh", 7) + "x"
	for _, kv := range [][2]string{{"profile", "allowlist"}, {"secrets", `[{name: GITHUB_TOKEN, from: "env:GH_REAL", hosts: [api.example.test]}]`}} {
		if code, so, se := c.run(nil, "config", "set", kv[0], kv[1]); code != 0 {
			t.Fatalf("config set %s: %d %s %s", kv[0], code, so, se)
		}
	}
	watch := []string{c.home} // the project, c.work, is inside

	// The control: a plain process, crashed here, leaves a core here.
	ctl := exec.Command("bash", "-c", `ulimit -c unlimited && echo ready && exec sleep 60`)
	ctl.Dir = c.work
	ctlOut, err := ctl.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	// Once "ready" is out the limit is raised (a core of bash, not yet
	// sleep, would do as well).
	if l, _ := bufio.NewReader(ctlOut).ReadString('\n'); l != "ready\n" {
		t.Skipf("cannot raise RLIMIT_CORE here (%q): nothing to test", l)
	}
	_ = ctl.Process.Signal(syscall.SIGSEGV)
	_ = ctl.Wait()
	if ws, _ := ctl.ProcessState.Sys().(syscall.WaitStatus); !ws.CoreDump() {
		t.Skipf("a plain process that crashes here leaves no core (%v; is the hard RLIMIT_CORE 0?): nothing to test", ctl.ProcessState)
	}
	got := cores(watch, false)
	if len(got) == 0 {
		t.Fatalf("the kernel dumped the control's core, but not into %s: the test would not see corral's", c.work)
	}
	for _, p := range got {
		os.Remove(p)
	}
	rootBefore := cores([]string{"/"}, true)

	args := append([]string{"run"}, runArgs...)
	cmd := exec.Command("bash", append([]string{"-c", `ulimit -c unlimited && exec "$0" "$@"`, corralBin}, args...)...)
	cmd.Dir = c.work
	cmd.Env = append(append([]string{}, c.env...), "GH_REAL="+real, "GOTRACEBACK=crash")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line
	}()
	select {
	case l := <-ready:
		if l != "ready\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the command did not start: %q\n%s", l, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("no command started in 3 minutes:\n%s", stderr.String())
	}
	t.Cleanup(func() { c.run(nil, "cleanup") }) // the container or pod of a corral that died
	// Root can read a non-dumpable process's cwd; its own user cannot
	// (which is the point), and then there is nothing to compare.
	if cwd, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cwd"); err == nil && cwd != "/" {
		t.Errorf("corral runs in %s, want / (it was started in the project %s)", cwd, c.work)
	}
	_ = cmd.Process.Signal(syscall.SIGABRT)
	_ = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGABRT {
		t.Fatalf("corral did not die of SIGABRT: %v\n%s", cmd.ProcessState, stderr.String())
	}
	if ws.CoreDump() {
		t.Errorf("the kernel dumped corral's core (it holds the real value)")
	}
	if got := cores(watch, false); len(got) > 0 {
		t.Errorf("cores where a sandbox reads: %v", got)
	}
	for _, p := range cores([]string{"/"}, true) {
		if !strings.Contains(strings.Join(rootBefore, "\n"), p) {
			t.Errorf("a core in /: %s", p)
			os.Remove(p)
		}
	}
}

// crashCommand prints "ready", then waits to be ended with corral.
const crashCommand = "echo ready; exec sleep 120"

func TestCrashLeavesNoCore(t *testing.T) {
	requireBwrap(t)
	crashLeavesNoCore(t, newCLI(t), "--", "sh", "-c", crashCommand)
}

func TestCrashLeavesNoCoreDocker(t *testing.T) {
	c, _ := dockerCLI(t)
	crashLeavesNoCore(t, c, "--", "sh", "-c", crashCommand)
}

func TestCrashLeavesNoCoreKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("kubernetes cluster test (-short)")
	}
	cl := k8stest.Require(t)
	c := newCLI(t)
	c.env = append(c.env, "CORRAL_BACKEND=kubernetes", "CORRAL_KUBERNETES_KUBECONFIG="+os.Getenv(k8stest.EnvKubeconfig),
		"CORRAL_KUBERNETES_NAMESPACE="+cl.Namespace, "CORRAL_KUBERNETES_IMAGE="+cl.Image, "CORRAL_KUBERNETES_MEMORY=256Mi", "CORRAL_KUBERNETES_CPUS=500m")
	// A session's pod, as the other CLI tests use. With --session the
	// words after "--" are joined with spaces and run by the session's
	// shell (as ssh does), so the command is one word: given as `sh -c`
	// and its script, the shell ran `sh -c echo` (a blank line, "ready"
	// being only its $0) and then `exec sleep 120`, so "ready" never came
	// and corral ended with the sleep; that was this variant's failure.
	crashLeavesNoCore(t, c, "--session", "crash-"+itoa(os.Getpid()), "--", crashCommand)
}
