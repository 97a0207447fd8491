package wscopy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/backend/kubernetes"
	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/k8stest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/transfer"
)

// EnvForged names a static build of testdata/forged: CI builds it beside
// the test binaries, since its unprivileged pass has no go tool.
const EnvForged = "CORRAL_TEST_FORGED_HELPER"

var (
	forgedOnce sync.Once
	forgedPath string
	forgedErr  error
)

// forgedBinary returns testdata/forged built static, not with -race (its
// memory is measured): $CORRAL_TEST_FORGED_HELPER, else a go build.
func forgedBinary(t *testing.T) string {
	t.Helper()
	forgedOnce.Do(func() {
		if p := os.Getenv(EnvForged); p != "" {
			forgedPath = p
			return
		}
		dir, err := os.MkdirTemp(testRoot(), "corral-forged-")
		if err != nil {
			forgedErr = err
			return
		}
		_ = os.Chmod(dir, 0o755)
		forgedPath = filepath.Join(dir, "forged")
		cmd := exec.Command("go", "build", "-o", forgedPath, "./testdata/forged")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			forgedErr = errors.New("CGO_ENABLED=0 go build ./testdata/forged (or set " + EnvForged + "): " + err.Error() + "\n" + string(out))
		}
	})
	if forgedErr != nil {
		t.Fatal(forgedErr)
	}
	return forgedPath
}

func testRoot() string {
	if d := os.Getenv("CORRAL_TEST_DIR"); d != "" {
		return d
	}
	return "/var/tmp"
}

// forgedResult is testdata/forged copy-out's line.
type forgedResult struct {
	Error    string   `json:"error"`
	TooLarge bool     `json:"too_large"`
	Refused  bool     `json:"refused"`
	Held     []string `json:"held"`
	Files    int      `json:"files"`
	VmHWMKiB int64    `json:"vmhwm_kib"`
	Left     []string `json:"left"`
}

// maxCopyRSS is what `corral cp` may hold whatever a pod sends (issue 24).
const maxCopyRSS = 64 << 20

// TestKubernetesForgedHelper: a pod whose helper is forged (testdata/forged,
// uploaded as corral's helper) is answered on the host, whatever it sends:
//   - an archive with entries beside the top asked for (a sibling file, a
//     .bashrc, .git/hooks/pre-commit and .git/config for DEST's parent or
//     an existing project) is refused whole: nothing is written, inside
//     DEST or outside it;
//   - 128 MiB on stderr before a good archive: the copy works, and the
//     copying process (a static build, not this -race test binary) peaks
//     below 64 MiB;
//   - an archive larger than the destination's file system may receive (a
//     64 MiB tmpfs): refused while it arrives, naming the bound, nothing
//     written there, no spool file left, memory as above.
func TestKubernetesForgedHelper(t *testing.T) {
	if testing.Short() {
		t.Skip("kubernetes cluster test (-short)")
	}
	c := k8stest.Require(t)
	forged := forgedBinary(t)
	kc := os.Getenv(k8stest.EnvKubeconfig)
	st := kubernetes.DefaultSettings
	st.Image, st.Namespace, st.Kubeconfig = c.Image, c.Namespace, kc
	st.Memory, st.CPUs = "256Mi", "500m"
	log := &testkit.LogBuf{}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	owner := kubernetes.NewEngine(kubernetes.Options{Helper: forged, Logger: logger})
	t.Cleanup(func() {
		owner.Close()
		if t.Failed() {
			t.Logf("log:\n%s", log.String())
		}
	})
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	ws := "/work/forged-" + hex.EncodeToString(rb[:])
	sess := "forged-" + strconv.Itoa(os.Getpid())
	b := owner.Backend(st)
	ctx := context.Background()
	run := func(script string) {
		t.Helper()
		var out bytes.Buffer
		res, err := b.Run(ctx, &sandbox.Request{Argv: []string{"bash", "-c", script}, Session: sess, Stdout: &out, Stderr: &out,
			Policy: sandbox.Policy{Workdir: ws, Profile: sandbox.ProfileWorkspace}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: %v %+v %s", script, err, res, out.String())
		}
	}
	defer b.Release(sess)
	run("mkdir -p out && echo ok > out/ok.txt && echo escape > .forge")
	e := kubernetes.NewEngine(kubernetes.Options{Logger: logger})
	defer e.Close()
	pod, err := e.SessionPod(ctx, st, sess)
	if err != nil {
		t.Fatal(err)
	}
	w := &Workspace{Session: sess, Root: pod.Workspace, Remote: e.Workspace(pod)}
	top := dockertest.TestDir(t)

	// Entries beside the top: refused whole, into a new DEST and into an
	// existing project.
	parent := filepath.Join(top, "parent")
	proj := filepath.Join(parent, "proj")
	os.MkdirAll(filepath.Join(proj, ".git/hooks"), 0o755)
	os.WriteFile(filepath.Join(parent, ".bashrc"), []byte("mine\n"), 0o644)
	os.WriteFile(filepath.Join(proj, ".git/config"), []byte("[core]\n"), 0o644)
	before := testkit.TreeHash(t, parent)
	for _, dest := range []string{filepath.Join(parent, "dest"), proj} {
		_, err := CopyOut(ctx, w, "out", dest, Out{})
		if !errors.Is(err, transfer.ErrRefused) {
			t.Errorf("cp out to %s: %v, want refused", dest, err)
		}
		if after := testkit.TreeHash(t, parent); after != before {
			t.Errorf("cp out to %s changed the host's tree", dest)
		}
	}
	if _, err := os.Lstat(filepath.Join(parent, "dest")); err == nil {
		t.Error("DEST was made")
	}

	// child runs testdata/forged copy-out of out to dest; with tmpfs, on a
	// 64 MiB tmpfs at that directory in a mount namespace of its own (a
	// user namespace too when the test is not root), with TMPDIR spool.
	child := func(dest, tmpfs, spool string) forgedResult {
		t.Helper()
		args := []string{"copy-out", kc, st.Namespace, sess, "out", dest}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, forged)
		if tmpfs != "" {
			args = append(args, tmpfs, "64m")
			cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
			if os.Getuid() != 0 {
				cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
				cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
				cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
			}
		}
		cmd.Args = append([]string{forged}, args...)
		cmd.Env = append(os.Environ(), "TMPDIR="+spool)
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		if err := cmd.Run(); err != nil {
			t.Fatalf("forged copy-out: %v\n%s\n%s", err, so.String(), se.String())
		}
		var r forgedResult
		if err := json.Unmarshal(so.Bytes(), &r); err != nil {
			t.Fatalf("forged copy-out said %q: %v\n%s", so.String(), err, se.String())
		}
		t.Logf("copy-out peaked at %d KiB resident: %s", r.VmHWMKiB, r.Error)
		if r.VmHWMKiB <= 0 || r.VmHWMKiB<<10 > maxCopyRSS {
			t.Errorf("the copy peaked at %d KiB resident, want at most %d MiB", r.VmHWMKiB, maxCopyRSS>>20)
		}
		return r
	}
	spool := filepath.Join(top, "spool")
	os.MkdirAll(spool, 0o755)

	// 128 MiB of stderr before a good archive.
	run("echo stderr 128 > .forge")
	got := filepath.Join(top, "got")
	if r := child(got, "", spool); r.Error != "" || r.Files != 1 {
		t.Errorf("stderr flood: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(got, "ok.txt")); err != nil || string(b) != "ok\n" {
		t.Errorf("after the stderr flood: %q %v", b, err)
	}

	// 96 MiB of archive for a 64 MiB file system.
	run("echo stdout 96 > .forge")
	small := filepath.Join(top, "small")
	os.MkdirAll(small, 0o755)
	r := child(filepath.Join(small, "dest"), small, spool)
	if !r.TooLarge || !strings.Contains(r.Error, "what "+small+"'s file system has free (") || !strings.Contains(r.Error, "nothing was written") {
		t.Errorf("too large: %+v", r)
	}
	if len(r.Left) != 0 {
		t.Errorf("written to the destination's file system: %q", r.Left)
	}
	if left, _ := os.ReadDir(spool); len(left) != 0 {
		t.Errorf("spool files left: %v", left)
	}
}
