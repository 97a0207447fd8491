package wscopy

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/backend/kubernetes"
	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/k8stest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/transfer"
)

// TestKubernetesRoundTrip: a tree with modes, symlinks, a binary and a
// 50 MiB file goes into a session's pod (found by a second engine, as
// `corral cp` in another process finds it), is seen there by a command,
// and comes back identical; sync pushes and pulls with --delete; hostile
// archives are refused by the pod; a session without a pod is named.
func TestKubernetesRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("kubernetes cluster test (-short)")
	}
	c := k8stest.Require(t)
	st := kubernetes.DefaultSettings
	st.Image, st.Namespace, st.Kubeconfig = c.Image, c.Namespace, os.Getenv(k8stest.EnvKubeconfig)
	st.Memory, st.CPUs = "256Mi", "500m"
	log := &testkit.LogBuf{}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	owner := kubernetes.NewEngine(kubernetes.Options{Helper: dockertest.StaticCorral(t), Logger: logger})
	t.Cleanup(func() {
		owner.Close()
		if t.Failed() {
			t.Logf("log:\n%s", log.String())
		}
	})
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	ws := "/work/cp-" + hex.EncodeToString(rb[:])
	sess := "cp-" + strconv.Itoa(os.Getpid())
	b := owner.Backend(st)
	ctx := context.Background()
	run := func(script string) string {
		t.Helper()
		var out bytes.Buffer
		res, err := b.Run(ctx, &sandbox.Request{Argv: []string{"bash", "-c", script}, Session: sess, Stdout: &out, Stderr: &out,
			Policy: sandbox.Policy{Workdir: ws, Profile: sandbox.ProfileWorkspace}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: %v %+v %s", script, err, res, out.String())
		}
		return out.String()
	}
	run("echo old > stale")
	e := kubernetes.NewEngine(kubernetes.Options{Logger: logger})
	defer e.Close()
	if _, err := e.SessionPod(ctx, st, "no-such-session"); !errors.Is(err, kubernetes.ErrNoPod) || !strings.Contains(err.Error(), "session no-such-session has no running pod") {
		t.Errorf("missing session: %v", err)
	}
	pod, err := e.SessionPod(ctx, st, sess)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Workspace != ws {
		t.Fatalf("workspace %q, want %q", pod.Workspace, ws)
	}
	w := &Workspace{Session: sess, Root: pod.Workspace, Remote: e.Workspace(pod)}
	host := filepath.Join(dockertest.TestDir(t), "h")
	testkit.MakeTree(t, host, 50<<20)
	t0 := time.Now()
	res, err := CopyIn(ctx, w, filepath.Join(host, "src"), "in")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in: %+v in %s", res.Stats, time.Since(t0))
	if res.Files != 5 || res.Symlinks != 3 {
		t.Errorf("copied in %+v", res.Stats)
	}
	// A command in the pod sees it (ls of modes and links; the big file's hash).
	if out := run(`stat -c '%A %n' in/run.sh in/secret; readlink in/sub/link-out; /.corral/corral __corral-sha256 in/big`); !strings.HasPrefix(out, "-rwxr-xr-x in/run.sh\n-rw------- in/secret\n/etc/passwd\n") {
		t.Errorf("in the pod: %q", out)
	}
	back := filepath.Join(dockertest.TestDir(t), "back")
	t0 = time.Now()
	// sub/link-out leads out of the destination (to /etc/passwd): named,
	// as a person lets it through.
	if _, err := CopyOut(ctx, w, "in", back, Out{IncludeRisky: []string{"back/sub/link-out"}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("out: %s", time.Since(t0))
	if a, b := testkit.TreeHash(t, filepath.Join(host, "src")), testkit.TreeHash(t, back); a != b {
		t.Errorf("round trip differs")
	}
	// sync: push the tree's sub directory with --delete (stale and in go),
	// then pull the workspace back into an empty directory.
	if res, err := Sync(ctx, w, filepath.Join(host, "src/sub"), false, true, Out{}); err != nil || !slices.Contains(res.Deleted, "stale") || !slices.Contains(res.Deleted, "in") {
		t.Fatalf("sync --delete: %+v %v", res, err)
	}
	pulled := filepath.Join(dockertest.TestDir(t), "pulled")
	if _, err := Sync(ctx, w, pulled, true, false, Out{IncludeRisky: []string{"link-out", "link-in"}}); err != nil {
		t.Fatal(err)
	}
	if a, b := testkit.TreeHash(t, filepath.Join(host, "src/sub")), testkit.TreeHash(t, pulled); a != b {
		t.Errorf("sync round trip differs")
	}
	// Hostile archives are refused in the pod, and retried never.
	for _, hs := range [][]*tar.Header{
		{{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "l/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		f, _ := os.CreateTemp(dockertest.TestDir(t), "h*.tar")
		tw := tar.NewWriter(f)
		for _, h := range hs {
			tw.WriteHeader(h)
		}
		tw.Close()
		_, err := e.CopyIn(ctx, pod, f, transfer.Options{Dir: "."})
		f.Close()
		if !errors.Is(err, transfer.ErrRefused) {
			t.Errorf("hostile %s: %v", hs[len(hs)-1].Name, err)
		}
	}
	if out := run(`ls /work /tmp | grep -c escape || true`); out != "0\n" {
		t.Errorf("escape written: %q", out)
	}
	if _, err := CopyIn(ctx, w, filepath.Join(host, "src"), "/etc/x"); err == nil || !strings.Contains(err.Error(), "outside session") {
		t.Errorf("outside the workspace: %v", err)
	}
	b.Release(sess)
}
