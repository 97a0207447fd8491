package helperbin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/reexec"

	// The modes corral hands sandboxes, so that this test binary expects
	// what corral expects of a helper (reexec.Answer).
	_ "github.com/corralhq/corral/egress/inside"
	_ "github.com/corralhq/corral/inside"
	_ "github.com/corralhq/corral/inside/tunnel"
	_ "github.com/corralhq/corral/portfwd"
	_ "github.com/corralhq/corral/sandboxfs"
	_ "github.com/corralhq/corral/secrets/gitcred"
)

// TestMain dispatches reexec's modes: the test binary answers
// reexec.ProtocolMode as corral's executable does.
func TestMain(m *testing.M) {
	reexec.Init()
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// moduleDir is corral's module source, two levels up from this file; run
// elsewhere (CI's unprivileged pass runs test binaries in its test
// directory), a directory whose go.mod names the module, enough for the
// stand-in go command of goForBuild.
func moduleDir(t *testing.T) string {
	t.Helper()
	if d, err := filepath.Abs(".."); err == nil {
		if m, err := modulePath(filepath.Join(d, "go.mod")); err == nil && m == ModulePath {
			return d
		}
	}
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "go.mod"), []byte("module "+ModulePath+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// requireGo returns the go command on PATH, or "" when there is none
// (CI's unprivileged pass).
func requireGo(t *testing.T) string {
	t.Helper()
	g, _ := exec.LookPath("go")
	return g
}

// goForBuild returns a go command for Build: the real one, else (no go on
// PATH) a stand-in script that "builds" by copying the static helper of
// helpers(t) to its -o argument, so that the lock, the check and the
// rename are still what is tested.
func goForBuild(t *testing.T) string {
	t.Helper()
	if g := requireGo(t); g != "" {
		return g
	}
	// Build wants a go build cache that holds something (ErrColdCache);
	// the stand-in compiles nothing.
	warm := t.TempDir()
	if err := os.WriteFile(filepath.Join(warm, "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOCACHE", warm)
	script := filepath.Join(t.TempDir(), "go")
	body := "#!/bin/sh\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then out=$2; fi; shift; done\nexec cp " + filepath.Join(helpers(t), "static") + " \"$out\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

var (
	buildOnce sync.Once
	builtDir  string
	buildErr  error
)

// helpers builds, once per test binary, the real helper (static), one of
// another protocol (-X reexec.protocolVersion) and a dynamically linked
// one, into a directory of their own; it returns that directory
// ($CORRAL_TEST_HELPERS when set: .ci/run builds the same three there).
func helpers(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("CORRAL_TEST_HELPERS"); d != "" {
		// Built by .ci/run: the unprivileged pass has no go command.
		return d
	}
	gocmd := requireGo(t)
	if gocmd == "" {
		t.Fatal("no go command on PATH to build the test helpers, and no CORRAL_TEST_HELPERS")
	}
	buildOnce.Do(func() {
		builtDir, buildErr = os.MkdirTemp("", "helperbin-test-*")
		if buildErr != nil {
			return
		}
		for _, b := range []struct {
			name string
			env  []string
			args []string
		}{
			{name: "static", env: []string{"CGO_ENABLED=0"}},
			{name: "other", env: []string{"CGO_ENABLED=0"}, args: []string{"-ldflags=-X github.com/corralhq/corral/reexec.protocolVersion=0-other"}},
			// External linking with the C toolchain gives PT_INTERP.
			{name: "dynamic", env: []string{"CGO_ENABLED=1"}, args: []string{"-ldflags=-linkmode=external"}},
		} {
			args := append(append([]string{"build"}, b.args...), "-o", filepath.Join(builtDir, b.name), "./cmd/corral-helper")
			cmd := exec.Command(gocmd, args...)
			cmd.Dir = ".."
			cmd.Env = append(os.Environ(), b.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtDir
}

// install copies the helper variant name to dir/corral-helper, beside a
// corral at dir/corral (a copy of this test binary), and returns that
// corral's path.
func install(t *testing.T, dir, name string) string {
	t.Helper()
	self := filepath.Join(dir, "corral")
	copyFile(t, os.Args[0], self)
	if name != "" {
		copyFile(t, filepath.Join(helpers(t), name), filepath.Join(dir, Name))
	}
	return self
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// logs returns a logger at debug level and what it wrote.
func logs() (*slog.Logger, *testkit.LogBuf) {
	var b testkit.LogBuf
	return slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})), &b
}

func TestNextToCorralChosen(t *testing.T) {
	dir := t.TempDir()
	self := install(t, dir, "static")
	log, out := logs()
	l := New(Options{Self: self, CacheDir: filepath.Join(dir, "cache"), Logger: log})
	for _, static := range []bool{true, false} {
		if got := l.Path(static); got != filepath.Join(dir, Name) {
			t.Fatalf("Path(%v) = %s, want the helper next to corral; log:\n%s", static, got, out)
		}
	}
	if strings.Contains(out.String(), FallbackEvent) {
		t.Errorf("a fallback was logged although the helper is usable:\n%s", out)
	}
}

func TestOtherProtocolRefused(t *testing.T) {
	dir := t.TempDir()
	self := install(t, dir, "other")
	log, out := logs()
	l := New(Options{Self: self, CacheDir: filepath.Join(dir, "cache"), Logger: log})
	if got := l.Path(false); got != self {
		t.Fatalf("Path = %s, want corral's own executable %s: the helper speaks another protocol", got, self)
	}
	l.Path(false)
	s := out.String()
	if strings.Count(s, FallbackEvent) != 1 || !strings.Contains(s, "0-other") || !strings.Contains(s, "install corral-helper beside corral where only root writes") {
		t.Fatalf("want one %s event naming the other protocol and the advice; log:\n%s", FallbackEvent, s)
	}
}

func TestNotAHelperRefused(t *testing.T) {
	dir := t.TempDir()
	self := install(t, dir, "")
	if err := os.WriteFile(filepath.Join(dir, Name), []byte("#!/bin/sh\necho corral-helper-protocol 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Self: self, CacheDir: filepath.Join(dir, "cache")}).Choose(false)
	if c.Source != SourceSelf || len(c.Passed) != 1 || !strings.Contains(c.Passed[0], "not an ELF") {
		t.Fatalf("a script as the helper: %+v, want it refused as not an ELF executable", c)
	}
}

func TestDynamicRefusedForContainers(t *testing.T) {
	dir := t.TempDir()
	self := install(t, dir, "dynamic")
	if static, err := IsStatic(filepath.Join(dir, Name)); err != nil || static {
		t.Fatalf("the externally linked helper: static %v, err %v; want a PT_INTERP", static, err)
	}
	l := New(Options{Self: self, CacheDir: filepath.Join(dir, "cache")})
	if got := l.Path(false); got != filepath.Join(dir, Name) {
		t.Errorf("Path(false) = %s: bwrap takes a dynamically linked helper", got)
	}
	c := l.Choose(true)
	if c.Source != SourceSelf || len(c.Passed) != 1 || !strings.Contains(c.Passed[0], "dynamically linked") {
		t.Errorf("Choose(true) = %+v, want corral's own with the helper refused as dynamically linked", c)
	}
}

// TestVerdictStamped checks that a second process (a new Locator) takes
// the verdict from the stamp instead of running the helper, and runs it
// again once the file changed.
func TestVerdictStamped(t *testing.T) {
	dir := t.TempDir()
	self := install(t, dir, "static")
	cache := filepath.Join(dir, "cache")
	checks := func() int {
		log, out := logs()
		if got := New(Options{Self: self, CacheDir: cache, Logger: log}).Path(true); got != filepath.Join(dir, Name) {
			t.Fatalf("Path = %s, want the helper", got)
		}
		return strings.Count(out.String(), "helper.checked")
	}
	if n := checks(); n != 1 {
		t.Fatalf("first look ran the helper %d times, want 1", n)
	}
	if n := checks(); n != 0 {
		t.Fatalf("second look ran the helper %d times, want 0 (the stamp)", n)
	}
	// Replaced by another build: the stamp no longer applies.
	copyFile(t, filepath.Join(helpers(t), "other"), filepath.Join(dir, Name+".new"))
	if err := os.Rename(filepath.Join(dir, Name+".new"), filepath.Join(dir, Name)); err != nil {
		t.Fatal(err)
	}
	log, out := logs()
	if got := New(Options{Self: self, CacheDir: cache, Logger: log}).Path(true); got != self {
		t.Fatalf("after the helper was replaced by one of another protocol, Path = %s, want corral's own; log:\n%s", got, out)
	}
}

// TestBuildThenFound builds the helper into the cache as corral doctor
// does, from several Locators at once (one build, no torn file), and
// checks that a later Locator finds it there.
func TestBuildThenFound(t *testing.T) {
	gocmd := goForBuild(t)
	dir := t.TempDir()
	self := install(t, dir, "")
	cache := filepath.Join(dir, "cache")
	log, out := logs()
	var wg sync.WaitGroup
	var starts atomic.Int32
	res := make([]Built, 3)
	errs := make([]error, 3)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = New(Options{Self: self, CacheDir: cache, SourceDir: moduleDir(t), Go: gocmd, Logger: log}).Build(context.Background(), func(string) { starts.Add(1) })
		}()
	}
	wg.Wait()
	for i := range res {
		if errs[i] != nil {
			t.Fatalf("Build %d: %v", i, errs[i])
		}
		if res[i].Source != SourceCache || res[i].Path != res[0].Path || res[i].Size == 0 {
			t.Fatalf("Build %d = %+v, want the cache's helper, as Build 0's %+v", i, res[i], res[0])
		}
	}
	if n := starts.Load(); n != 1 {
		t.Errorf("Build's starting was called %d times, want once (one build)", n)
	}
	if n := strings.Count(out.String(), "helper.built"); n != 1 {
		t.Fatalf("%d builds for three concurrent Build calls, want 1 (the lock); log:\n%s", n, out)
	}
	if f := Check(res[0].Path); f.Err != "" || Compatible(f.Answer, reexec.Answer()) != nil || !f.Static {
		t.Fatalf("the built helper: %+v", f)
	}
	if ents, _ := os.ReadDir(filepath.Dir(res[0].Path)); len(ents) != 2 {
		t.Errorf("the cache directory holds %d entries, want the helper and the lock (no temporary left)", len(ents))
	}
	log2, out2 := logs()
	l := New(Options{Self: self, CacheDir: cache, Logger: log2})
	if got := l.Path(true); got != res[0].Path {
		t.Fatalf("a later run's Path = %s, want the cache's %s; log:\n%s", got, res[0].Path, out2)
	}
	if b, err := l.Build(context.Background(), nil); err != nil || b.Took != 0 {
		t.Fatalf("Build again = %+v, %v; want the built one, not built again", b, err)
	}
}

func TestBuildWithoutToolchainOrSource(t *testing.T) {
	dir := t.TempDir()
	self := install(t, dir, "")
	for _, tc := range []struct {
		name string
		o    Options
		want error
	}{
		{name: "no go command", o: Options{Go: filepath.Join(dir, "no-go"), SourceDir: moduleDir(t)}, want: ErrNoToolchain},
		{name: "no source", o: Options{Go: goForBuild(t), SourceDir: dir}, want: ErrNoSource},
		{name: "cold go build cache", o: Options{Go: goForBuild(t), SourceDir: moduleDir(t)}, want: ErrColdCache},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == ErrColdCache {
				t.Setenv("GOCACHE", t.TempDir())
			}
			tc.o.Self, tc.o.CacheDir = self, filepath.Join(dir, "cache-"+tc.name)
			log, out := logs()
			tc.o.Logger = log
			l := New(tc.o)
			if _, err := l.Build(context.Background(), nil); !errors.Is(err, tc.want) {
				t.Fatalf("Build = %v, want %v", err, tc.want)
			}
			if _, err := os.Stat(tc.o.CacheDir); err == nil {
				t.Errorf("Build that could not build made %s", tc.o.CacheDir)
			}
			if got := l.Path(true); got != self || !strings.Contains(out.String(), FallbackEvent) {
				t.Fatalf("Path = %s, want corral's own with a %s event; log:\n%s", got, FallbackEvent, out)
			}
		})
	}
}

// TestBuildOutOfTime: a build that outlives its context is stopped with
// every process of it (the go command's compilers are its children), the
// error says so, and nothing is left in the cache.
func TestBuildOutOfTime(t *testing.T) {
	dir := t.TempDir()
	self := install(t, dir, "")
	warm := t.TempDir()
	os.WriteFile(filepath.Join(warm, "README"), nil, 0o644)
	t.Setenv("GOCACHE", warm)
	pidFile := filepath.Join(dir, "compiler.pid")
	// A go command whose "compiler" child outlives it unless its
	// process group is killed.
	gocmd := filepath.Join(dir, "go")
	body := "#!/bin/sh\nsleep 1000 &\necho $! > " + pidFile + "\nwait\n"
	if err := os.WriteFile(gocmd, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := New(Options{Self: self, CacheDir: cache, SourceDir: moduleDir(t), Go: gocmd}).Build(ctx, nil)
		done <- err
	}()
	var pid int
	for pid == 0 {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		select {
		case err := <-done:
			t.Fatalf("Build ended before its go command started a child: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	err := <-done
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("Build = %v, want it stopped with the context's error", err)
	}
	// The child was killed with its group: once reaped by init it is gone;
	// a zombie counts as gone (it runs nothing). The bound only ends a
	// test that would otherwise wait for ever: a SIGKILL takes effect at
	// once.
	hang := time.After(time.Minute)
	for {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-hang:
			t.Fatalf("the go command's child %d still runs after Build returned", pid)
		}
	}
	ents, _ := filepath.Glob(filepath.Join(cache, "*", "*"+Name+"*"))
	if len(ents) > 0 {
		t.Errorf("left in the cache: %q", ents)
	}
}

// BenchmarkPath is one process's cost of finding the helper beside
// corral: "stamped", a stat and a stamp read (every run after the first);
// "checked", the helper run in reexec.ProtocolMode (the first run, or
// with no cache directory to keep the verdict).
func BenchmarkPath(b *testing.B) {
	dir := b.TempDir()
	self := filepath.Join(dir, "corral")
	for from, to := range map[string]string{os.Args[0]: self, filepath.Join(benchHelpers(b), "static"): filepath.Join(dir, Name)} {
		data, err := os.ReadFile(from)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	cache := filepath.Join(dir, "cache")
	New(Options{Self: self, CacheDir: cache}).Path(true)
	b.Run("stamped", func(b *testing.B) {
		for b.Loop() {
			if New(Options{Self: self, CacheDir: cache}).Path(true) != filepath.Join(dir, Name) {
				b.Fatal("not the helper")
			}
		}
	})
	b.Run("checked", func(b *testing.B) {
		for b.Loop() {
			os.RemoveAll(filepath.Join(cache, "verdicts"))
			if New(Options{Self: self, CacheDir: cache}).Path(true) != filepath.Join(dir, Name) {
				b.Fatal("not the helper")
			}
		}
	})
}

// benchHelpers is helpers for a benchmark: $CORRAL_TEST_HELPERS, else
// built with the go command.
func benchHelpers(b *testing.B) string {
	if d := os.Getenv("CORRAL_TEST_HELPERS"); d != "" {
		return d
	}
	d := b.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(d, "static"), "./cmd/corral-helper")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	return d
}
