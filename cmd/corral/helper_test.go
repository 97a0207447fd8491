package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/helperbin"
	"github.com/corralhq/corral/inside"
)

// shippedHelper returns a static corral-helper: $CORRAL_TEST_HELPERS's
// (built by .ci/run; the unprivileged pass has no go command), else one
// built here.
func shippedHelper(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("CORRAL_TEST_HELPERS"); d != "" {
		return filepath.Join(d, "static")
	}
	out := filepath.Join(t.TempDir(), "corral-helper")
	cmd := exec.Command("go", "build", "-o", out, "../corral-helper")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building corral-helper: %v\n%s", err, b)
	}
	return out
}

// packaged returns a corral installed as a packager ships it: a copy of
// corralBin with corral-helper beside it, in a directory of the system's
// that only root writes (/usr/local/lib, root-owned to /: a helper beside
// corral is taken only from such a place, helperbin.Trusted), which the
// docker daemon and the unprivileged user can read. Root only: the
// unprivileged pass skips, the root pass runs it.
func packaged(t *testing.T, helper string) (corralPath, helperPath string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("installing corral where only root writes needs root")
	}
	if err := os.MkdirAll("/usr/local/lib", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/usr/local/lib", "corral-test-pkg-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	corralPath, helperPath = filepath.Join(dir, "corral"), filepath.Join(dir, helperbin.Name)
	for from, to := range map[string]string{corralBin: corralPath, helper: helperPath} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return corralPath, helperPath
}

// TestDockerRunsShippedHelper checks that a container gets corral-helper
// from beside corral's executable, not corral itself: the helper mounted
// at inside.Path has the helper's size, and a command runs through it.
func TestDockerRunsShippedHelper(t *testing.T) {
	c, _ := dockerCLI(t)
	bin, helper := packaged(t, shippedHelper(t))
	st, err := os.Stat(helper)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--", "stat", "-c", "%s", inside.Path)
	cmd.Dir = c.work
	cmd.Env = append(c.env, "XDG_CACHE_HOME="+filepath.Join(c.home, "cache"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("corral run: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != strconv.FormatInt(st.Size(), 10) {
		t.Fatalf("%s in the container is %s bytes, want the helper's %d (corral's own would be larger)", inside.Path, got, st.Size())
	}
}

// TestDoctorHelper checks what corral doctor says of the helper: the one
// beside corral; without one, and without the go command, what to do;
// with the go command, one built into the cache that a later run finds.
func TestDoctorHelper(t *testing.T) {
	c := newCLI(t)
	doctor := func(bin string, env ...string) string {
		cmd := exec.Command(bin, "doctor")
		cmd.Dir = c.work
		cmd.Env = append(append([]string{}, c.env...), env...)
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	// corralBin alone, and no go command on PATH.
	noGo := t.TempDir()
	out := doctor(corralBin, "XDG_CACHE_HOME="+filepath.Join(c.home, "cache1"), "PATH="+noGo)
	if !strings.Contains(out, "warn helper: none usable") || !strings.Contains(out, "install Go") {
		t.Errorf("doctor without a helper or the go command: want a warning saying to install Go or ship the helper:\n%s", out)
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return // the unprivileged pass: Build itself is helperbin's test
	}
	gocache, _ := exec.Command(gocmd, "env", "GOCACHE").Output()
	gomodcache, _ := exec.Command(gocmd, "env", "GOMODCACHE").Output()
	cache := filepath.Join(c.home, "cache2")
	env := []string{"XDG_CACHE_HOME=" + cache, "PATH=" + filepath.Dir(gocmd) + ":/usr/bin:/bin",
		"GOCACHE=" + strings.TrimSpace(string(gocache)), "GOMODCACHE=" + strings.TrimSpace(string(gomodcache)), "GOPROXY=off"}
	// An empty go build cache: no build of minutes is started.
	cold := append(append([]string{}, env...), "GOCACHE="+t.TempDir())
	if out := doctor(corralBin, cold...); !strings.Contains(out, "warn helper: none usable") || !strings.Contains(out, "a minute or more") || !strings.Contains(out, "build corral with the go command as this user first") {
		t.Errorf("doctor with an empty go build cache: want a warning that names the long first build and how to build the helper beside corral (not to run doctor again):\n%s", out)
	}
	if _, err := os.Stat(cache); err == nil {
		t.Errorf("doctor that built nothing made %s", cache)
	}
	out = doctor(corralBin, env...)
	if !strings.Contains(out, "built now into corral's cache") || !strings.Contains(out, cache) || !strings.Contains(out, "corral doctor: building corral-helper") {
		t.Fatalf("doctor with the go command: want the helper built into %s:\n%s", cache, out)
	}
	if out := doctor(corralBin, env...); !strings.Contains(out, "helper "+cache) || !strings.Contains(out, "(cache)") && !strings.Contains(out, ", cache)") {
		t.Errorf("doctor again: want the cache's helper found, not built again:\n%s", out)
	}
}

// TestDoctorHelperBeside: doctor names a helper beside a packaged corral
// (in a directory only root writes) as the one in use, and a file there
// that is no helper as passed over.
func TestDoctorHelperBeside(t *testing.T) {
	c := newCLI(t)
	bin, _ := packaged(t, shippedHelper(t))
	doctor := func(bin string, env ...string) string {
		cmd := exec.Command(bin, "doctor")
		cmd.Dir = c.work
		cmd.Env = append(append([]string{}, c.env...), env...)
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	if out := doctor(bin); !strings.Contains(out, "helper "+filepath.Join(filepath.Dir(bin), helperbin.Name)) || !strings.Contains(out, "next-to-corral") {
		t.Errorf("doctor with corral-helper beside corral:\n%s", out)
	}
	// A file beside corral that is no helper (a packager's mistake) is
	// passed over, and doctor says so.
	fake := filepath.Join(t.TempDir(), "fake-helper")
	os.WriteFile(fake, []byte("#!/bin/sh\necho not a helper\n"), 0o755)
	badBin, _ := packaged(t, fake)
	if out := doctor(badBin, "XDG_CACHE_HOME="+filepath.Join(c.home, "cache0"), "PATH="+t.TempDir()); !strings.Contains(out, "warn helper passed over: next-to-corral "+filepath.Join(filepath.Dir(badBin), helperbin.Name)) {
		t.Errorf("doctor with a file beside corral that is no helper: want it named as passed over:\n%s", out)
	}
}

// TestHelperBesideProjectNotRun: a corral-helper beside a corral built in
// a project directory (README's build), where a sandbox's command could
// have put it, is never run on the host, not even to ask its protocol:
// doctor names it passed over, and the file is not executed (the hostile
// trial's payload ran as root when doctor asked it).
func TestHelperBesideProjectNotRun(t *testing.T) {
	c := newCLI(t)
	dir := filepath.Join(c.work, "bin")
	os.MkdirAll(dir, 0o755)
	b, err := os.ReadFile(corralBin)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "corral")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(t.TempDir(), "ran")
	os.Chmod(filepath.Dir(mark), 0o777)
	planted := filepath.Join(dir, helperbin.Name)
	os.WriteFile(planted, []byte("#!/bin/sh\ntouch "+mark+"\n"), 0o755)
	cmd := exec.Command(bin, "doctor")
	cmd.Dir = c.work
	cmd.Env = append(append([]string{}, c.env...), "XDG_CACHE_HOME="+filepath.Join(c.home, "cache-planted"), "PATH="+t.TempDir())
	out, _ := cmd.CombinedOutput()
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("doctor ran the corral-helper planted beside corral in the project:\n%s", out)
	}
	if !strings.Contains(string(out), "warn helper passed over: next-to-corral "+planted+": not run:") {
		t.Errorf("doctor does not name the planted helper as passed over:\n%s", out)
	}
}
