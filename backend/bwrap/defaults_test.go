package bwrap

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/sandbox"
)

// Issue 25: with no settings file, the runtimes agents use most start in
// the sandbox and a memory bomb is still held, for root (a memory cgroup
// on this machine) and for an unprivileged user (RLIMIT_DATA here: no
// memory cgroup for them on cgroup v1), and on the prlimit(1) path.

// defaultLimits are the limits of a caller with no settings file.
func defaultLimits(r *sandbox.Request) { r.Limits = config.Defaults().Limits() }

// goTool returns the go command: on PATH, else in the GOROOT this test
// was built with (CI's unprivileged user has no go on its PATH).
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no go command on PATH nor at %s: the Go cases cannot run", p)
	}
	return p
}

// hostGoCache is the Go build cache of the user running the tests, found
// before newEnv points HOME at a fresh directory (a cold cache would cost
// the Go bomb a minute of compiling the runtime).
var hostGoCache = func() string {
	if c := os.Getenv("GOCACHE"); c != "" {
		return c
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "corral-test-gocache")
	}
	return filepath.Join(d, "go-build")
}()

// requirePerProcessHolds fails the test where the kernel does not hold
// RLIMIT_DATA as memory.go says (before Linux 4.7, or booted with
// ignore_rlimit_data) and commands here would get it.
func requirePerProcessHolds(t *testing.T, perProcess bool) {
	t.Helper()
	if !perProcess {
		return
	}
	if c := rlimitDataCaveat(kernelRelease(), readTrim("/sys/module/kernel/parameters/ignore_rlimit_data")); c != "" {
		t.Fatalf("memory_mb is RLIMIT_DATA per process here, and %s", c)
	}
}

// TestDefaultsRuntimesStart: node, go, java and python3 start under the
// default limits, and so does corral's own executable (a Go program, the
// secrets' git credential helper) where CI built it.
func TestDefaultsRuntimesStart(t *testing.T) {
	e := newEnv(t)
	t.Logf("%s", MemoryLimit(nil, config.Defaults().Limits().MemoryMB))
	runtimesStart(t, e, defaultLimits, memoryLimitName() == sandbox.LimitMemory)
}

// runtimesStart runs each runtime's smallest program under tweak;
// perProcess says memory_mb is RLIMIT_DATA there, and the JVM must then
// have been told it (withJavaMaxRAM).
func runtimesStart(t *testing.T, e *env, tweak func(*sandbox.Request), perProcess bool) {
	cases := []struct{ name, script, want string }{
		{"node", `node -e 'console.log("NODE-" + (40 + 2))'`, "NODE-42"},
		{"go", goTool(t) + ` version`, "go version go"},
		{"java", `java -version 2>&1; echo "JAVA-EXIT-$?"`, "JAVA-EXIT-0"},
		{"python3", `python3 -c 'print("PY-" + str(40 + 2))'`, "PY-42"},
	}
	if bin := os.Getenv("CORRAL_TEST_BIN"); bin != "" {
		cases = append(cases, struct{ name, script, want string }{"corral", bin + ` version`, "corral "})
	} else {
		t.Logf("CORRAL_TEST_BIN unset: corral's own executable is not tried (CI sets it)")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name != "go" && tc.name != "corral" {
				requireTool(t, tc.name, "CI installs it")
			}
			o := e.sh(tc.script, tweak)
			if o.res.ExitCode != 0 || !strings.Contains(o.stdout, tc.want) || o.res.LimitHit != "" {
				t.Errorf("%s under %+v: want exit 0 and %q\n%s", tc.name, o.res, tc.want, o)
			}
			told := strings.Contains(o.stdout, "Picked up JAVA_TOOL_OPTIONS: -XX:MaxRAM=")
			if tc.name == "java" && told != perProcess {
				t.Errorf("java told -XX:MaxRAM: %v, want %v (memory_mb per process)\n%s", told, perProcess, o)
			}
			if n := strings.Count(o.stdout, "Picked up"); tc.name == "java" && n > 1 {
				t.Errorf("one JVM said it picked up options %d times\n%s", n, o)
			}
		})
	}
}

// bombProgress matches the lines the bombs print: MiB held so far.
var bombProgress = regexp.MustCompile(`(?m)^HELD (\d+)$`)

// heldMiB returns the last amount a bomb said it held.
func heldMiB(stdout string) int {
	m := bombProgress.FindAllStringSubmatch(stdout, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// Memory bombs: each allocates 16 MiB at a time, writes every page of it,
// and prints "HELD n" (MiB) after each, forever; none ends by itself.
const (
	pyBomb = `python3 -c '
import sys
held = []
while True:
    held.append(b"x" * (16 << 20))
    print("HELD", 16 * len(held), flush=True)
'`
	cBomb = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
	for (int n = 1;; n++) {
		char *p = malloc(16 << 20);
		if (!p) { perror("bomb: malloc"); return 1; }
		memset(p, 1, 16 << 20);
		printf("HELD %d\n", 16 * n);
		fflush(stdout);
	}
}
`
	goBomb = `package main

import "fmt"

var held [][]byte

func main() {
	for {
		b := make([]byte, 16<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
		fmt.Printf("HELD %d\n", 16*len(held))
	}
}
`
)

// TestDefaultsMemoryBomb: under the default limits a memory bomb in
// Python, C and Go is stopped by the memory bound before it holds
// memory_mb, and reported as the bound corral has here: the whole
// command's cgroup (an OOM kill) or RLIMIT_DATA (the allocation fails).
func TestDefaultsMemoryBomb(t *testing.T) {
	e := newEnv(t)
	mb := config.Defaults().Limits().MemoryMB
	want := memoryLimitName()
	requirePerProcessHolds(t, want == sandbox.LimitMemory)
	t.Logf("%s", MemoryLimit(nil, mb))
	memoryBombs(t, e, defaultLimits, mb, want)
}

// memoryBombs runs each bomb under tweak, whose memory_mb is mb, and
// wants each held before mb with LimitHit want.
func memoryBombs(t *testing.T, e *env, tweak func(*sandbox.Request), mb int, want string) {
	build := func(t *testing.T, name string, cmd ...string) {
		t.Helper()
		c := exec.Command(cmd[0], cmd[1:]...)
		c.Dir = e.work
		c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local", "GOFLAGS=", "GOCACHE="+hostGoCache)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("building the %s bomb: %v\n%s", name, err, out)
		}
	}
	for _, tc := range []struct {
		name   string
		script string
		setup  func(t *testing.T)
	}{
		{"python3", pyBomb, func(t *testing.T) { requireTool(t, "python3", "CI installs it") }},
		{"c", "./cbomb", func(t *testing.T) {
			requireTool(t, "gcc", "CI installs it")
			if err := os.WriteFile(filepath.Join(e.work, "bomb.c"), []byte(cBomb), 0o644); err != nil {
				t.Fatal(err)
			}
			build(t, "C", "gcc", "-O0", "-o", "cbomb", "bomb.c")
		}},
		{"go", "./gobomb", func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(e.work, "bomb.go"), []byte(goBomb), 0o644); err != nil {
				t.Fatal(err)
			}
			build(t, "Go", goTool(t), "build", "-o", "gobomb", "bomb.go")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup(t)
			// stderr apart: corral reads a failed allocation's message
			// there.
			o := e.sh(tc.script, tweak)
			held := heldMiB(o.stdout)
			if o.res.ExitCode == 0 || o.res.LimitHit != want {
				t.Errorf("%s bomb: want it stopped with LimitHit %q\n%s", tc.name, want, o)
			}
			// Stopped by the bound, not by something else first: it held
			// some memory, and less than memory_mb.
			if held == 0 || held >= mb {
				t.Errorf("%s bomb held %d MiB at the end: want more than 0 and less than memory_mb %d\n%.3000s", tc.name, held, mb, o)
			}
			if msg := sandbox.LimitMessage(o.res, sandbox.Limits{MemoryMB: mb}); !strings.Contains(msg, "memory_mb") || !strings.Contains(msg, fmt.Sprintf("%d MiB", mb)) {
				t.Errorf("LimitMessage = %q: want memory_mb and %d MiB", msg, mb)
			}
			t.Logf("%s bomb: held %d MiB, exit %d, %s", tc.name, held, o.res.ExitCode, o.res.LimitHit)
		})
	}
}

// TestPrlimitPathDefaults: where bwrap starts through prlimit(1) (the
// gate refused; a setuid bwrap takes the same path), memory_mb is
// RLIMIT_DATA for root too, the runtimes start under the default memory
// and CPU limits, and the bombs are held per process. max_procs is 0:
// that path cannot enforce it (TestGateUnavailable).
func TestPrlimitPathDefaults(t *testing.T) {
	requireTool(t, "prlimit", "apt-get install util-linux")
	e := newEnv(t)
	e.backend.noGate = true
	requirePerProcessHolds(t, true)
	tweak := func(r *sandbox.Request) {
		defaultLimits(r)
		r.Limits.MaxProcs = 0
	}
	o := e.sh(`ulimit -d; ulimit -v`, tweak)
	if want := fmt.Sprintf("%d\nunlimited\n", config.Defaults().Limits().MemoryMB*1024); o.stdout != want {
		t.Errorf("through prlimit(1): ulimit -d; ulimit -v = %q, want %q\n%s", o.stdout, want, o)
	}
	t.Run("start", func(t *testing.T) { runtimesStart(t, e, tweak, true) })
	t.Run("bomb", func(t *testing.T) { memoryBombs(t, e, tweak, config.Defaults().Limits().MemoryMB, sandbox.LimitMemory) })
}
