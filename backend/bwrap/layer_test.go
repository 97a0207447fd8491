package bwrap

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/layer"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// Review mode: the sandbox writes its working directory, the host's files
// stay as they were, the changes are in the layer's upper directory, the
// next command (and one running at the same time) sees them, protected
// paths stay read-only in the layer, and no holder outlives the backend.
func TestReviewLayer(t *testing.T) {
	e := newEnv(t)
	os.WriteFile(filepath.Join(e.work, "a.txt"), []byte("old\n"), 0o644)
	os.WriteFile(filepath.Join(e.work, "b.txt"), []byte("bee\n"), 0o644)
	layerDir := filepath.Join(e.base, "layer")
	review := func(r *sandbox.Request) { r.LayerDir = layerDir }
	o := e.sh(`echo new > a.txt && rm b.txt && mkdir -p d && echo why > d/y && ln -s a.txt l && cat a.txt && id -u && grep CapEff /proc/self/status`, review)
	mustContain(t, o, "new", "CapEff:\t0000000000000000")
	if !strings.Contains(o.stdout, "\n"+strconv.Itoa(os.Getuid())) {
		t.Errorf("the command's uid is not the caller's (%d):\n%s", os.Getuid(), o)
	}
	if b, _ := os.ReadFile(filepath.Join(e.work, "a.txt")); string(b) != "old\n" {
		t.Errorf("host a.txt changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(e.work, "b.txt")); err != nil {
		t.Errorf("host b.txt removed: %v", err)
	}
	for _, p := range []string{"d", "l"} {
		if _, err := os.Lstat(filepath.Join(e.work, p)); err == nil {
			t.Errorf("host %s made", p)
		}
	}
	upper := layer.New(layerDir, e.work).Upper()
	if b, _ := os.ReadFile(filepath.Join(upper, "a.txt")); string(b) != "new\n" {
		t.Errorf("upper a.txt = %q", b)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(upper, "b.txt"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("upper b.txt is not a whiteout: %v %o", err, st.Mode)
	}

	// The next command, and two at once, see the layer.
	o = e.sh(`cat a.txt d/y; ls b.txt 2>&1; readlink l`, review)
	mustContain(t, o, "new", "why", "No such file", "a.txt")
	var wg sync.WaitGroup
	outs := make([]out, 2)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var so strings.Builder
			res, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"/bin/sh", "-c", "cat a.txt"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace}, LayerDir: layerDir, Stdout: &so, Stderr: &so})
			if err != nil {
				t.Errorf("concurrent command %d: %v", i, err)
				return
			}
			outs[i] = out{res: res, stdout: so.String()}
		}()
	}
	wg.Wait()
	for i, o := range outs {
		if o.stdout != "new\n" {
			t.Errorf("concurrent command %d read %q", i, o.stdout)
		}
	}

	// Protected paths keep their rules in the layer: a repository made
	// there has its hooks read-only from the next command on, and a hook
	// written by the command that made it is swept.
	if _, err := exec.LookPath("git"); err == nil {
		o = e.sh(`git init -q . && echo evil > .git/hooks/pre-commit; echo made`, review)
		mustContain(t, o, "made")
		if _, err := os.Stat(filepath.Join(e.work, ".git")); err == nil {
			t.Error("git init in review mode made .git on the host")
		}
		o = e.sh(`echo evil > .git/hooks/pre-commit && echo WROTE; cat .git/hooks/pre-commit 2>&1; true`, review)
		mustNotContain(t, o, "WROTE", "evil")
	}

	// A new generation (apply or discard changed the directories) gets a
	// new mount that shows them.
	os.WriteFile(filepath.Join(upper, "a.txt"), []byte("rewritten\n"), 0o644)
	if err := layer.New(layerDir, e.work).Bump(); err != nil {
		t.Fatal(err)
	}
	o = e.sh(`cat a.txt`, review)
	mustContain(t, o, "rewritten")

	// Close ends every holder.
	e.backend.layers.mu.Lock()
	var pids []int
	for _, h := range e.backend.layers.m {
		pids = append(pids, h.cmd.Process.Pid)
	}
	e.backend.layers.mu.Unlock()
	if len(pids) != 1 {
		t.Fatalf("holders: %v, want one", pids)
	}
	e.backend.Close()
	for _, pid := range pids {
		if err := unix.Kill(pid, 0); err == nil {
			t.Errorf("holder %d still runs after Close", pid)
		}
	}
}

// Review mode is refused where its promise cannot be kept.
func TestReviewLayerRefusals(t *testing.T) {
	e := newEnv(t)
	layerDir := filepath.Join(e.base, "layer")
	for _, p := range []sandbox.Profile{sandbox.ProfileRestricted} {
		_, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"/bin/true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: p}, LayerDir: layerDir})
		if !errors.Is(err, sandbox.ErrPolicy) {
			t.Errorf("%s: want a policy refusal, got %v", p, err)
		}
	}
	// A layer made over one directory is not put over another.
	{
		other := filepath.Join(e.base, "other")
		os.Mkdir(other, 0o755)
		if err := layer.New(layerDir, other).Ensure(); err != nil {
			t.Fatal(err)
		}
		_, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"/bin/true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace}, LayerDir: layerDir})
		if !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), other) {
			t.Errorf("another working directory: %v", err)
		}
	}
}

// TestReviewLayerNotDumpable: a corral that holds a secret's value is not
// dumpable (secrets.ProtectProcess) and so cannot write a child's uid
// map; a review layer still mounts for a caller who is not root (its
// holder starts in two stages). Root's holder always does.
func TestReviewLayerNotDumpable(t *testing.T) {
	e := newEnv(t)
	if err := secrets.ProtectProcess(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.work, "a.txt"), []byte("old\n"), 0o644)
	layerDir := filepath.Join(e.base, "layer")
	o := e.sh(`echo new > a.txt && cat a.txt`, func(r *sandbox.Request) { r.LayerDir = layerDir })
	mustContain(t, o, "new")
	if b, _ := os.ReadFile(filepath.Join(e.work, "a.txt")); string(b) != "old\n" {
		t.Errorf("host a.txt changed: %q", b)
	}
}
