package main

import (
	"context"
	"github.com/corralhq/corral/internal/testkit"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// layerVolumes lists the overlay volumes of corral's (label corral.env=1)
// whose layer lies below dir.
func layerVolumes(t *testing.T, eng *client.Client, dir string) []string {
	t.Helper()
	res, err := eng.VolumeList(context.Background(), client.VolumeListOptions{Filters: client.Filters{}.Add("label", "corral.env=1")})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range res.Items {
		if strings.HasPrefix(v.Labels["corral.layer"], dir+"/") {
			out = append(out, v.Name)
		}
	}
	return out
}

// layerFiles returns the paths of names in the one session layer's upper
// directory below state (corral's state directory).
func layerFiles(t *testing.T, state string, names ...string) []string {
	t.Helper()
	uppers, _ := filepath.Glob(filepath.Join(state, "sessions/*/layer/upper"))
	if len(uppers) != 1 {
		t.Fatalf("the session's layer: %v", uppers)
	}
	var out []string
	for _, n := range names {
		out = append(out, filepath.Join(uppers[0], n))
	}
	return out
}

// TestDockerReview: workspace_mode review on the docker backend through
// the CLI: the project stays as it was until corral apply; a kill -9 of
// corral mid-command loses nothing of the layer, and corral cleanup then
// leaves no container or overlay volume; diff, apply and discard work as
// on bwrap. On rootful and rootless Podman the same; the layer's files
// and the applied ones are the caller's.
func TestDockerReview(t *testing.T) {
	c, eng := dockerCLI(t)
	os.WriteFile(filepath.Join(c.work, "a.txt"), []byte("a\nb\n"), 0o644)
	if code, _, se := c.run(nil, "config", "set", "workspace_mode", "review"); code != 0 {
		t.Fatalf("config set: %d %s", code, se)
	}
	before := testkit.TreeHash(t, c.work)
	sess := "dkrev-" + itoa(os.Getpid())
	if code, so, se := c.run(nil, "run", "--session", sess, "--", "echo hi > notes.txt; echo c >> a.txt; test -e /.corral/corral && echo in-container"); code != 0 || so != "in-container\n" {
		t.Fatalf("a command in review mode: %d %q %s", code, so, se)
	}
	if testkit.TreeHash(t, c.work) != before {
		t.Fatal("the session wrote the project")
	}

	// kill -9 of corral while its command runs.
	cmd := exec.Command(corralBin, "run", "--session", sess, "--", "echo more > more.txt; sleep 120")
	cmd.Dir, cmd.Env = c.work, c.env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(c.home, ".local/state/corral")
	deadline := time.Now().Add(90 * time.Second)
	for {
		m, _ := filepath.Glob(filepath.Join(state, "sessions/*/layer/upper/more.txt"))
		if len(m) == 1 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("more.txt did not appear in the layer")
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	code, so, se := c.run(nil, "diff", "--session", sess, "--stat")
	if want := " a.txt     | 1 +\n more.txt  | 1 +\n notes.txt | 1 +\n 3 files changed, 3 insertions(+), 0 deletions(-)\n"; code != 0 || so != want {
		t.Errorf("diff --stat after kill -9: %d %q %q, want %q", code, so, se, want)
	}
	for i := 0; ; i++ {
		_, so, _ := c.run(nil, "cleanup", "--json")
		if len(sessionContainers(t, eng, sess)) == 0 {
			break
		}
		if i > 5 {
			t.Fatalf("cleanup left the session's container: %s", so)
		}
		time.Sleep(time.Second)
	}
	if vs := layerVolumes(t, eng, state); len(vs) != 0 {
		t.Errorf("overlay volumes left after cleanup: %v", vs)
	}
	if testkit.TreeHash(t, c.work) != before {
		t.Fatal("the project changed before apply")
	}

	// apply of one path, a conflict, discard.
	if code, _, se := c.run(nil, "apply", "--session", sess, "notes.txt"); code != 0 {
		t.Fatalf("apply: %d %s", code, se)
	}
	if b, _ := os.ReadFile(filepath.Join(c.work, "notes.txt")); string(b) != "hi\n" {
		t.Errorf("notes.txt after apply: %q", b)
	}
	for _, p := range append(layerFiles(t, state, "a.txt", "more.txt"), filepath.Join(c.work, "notes.txt")) {
		if st, err := os.Lstat(p); err != nil || int(st.Sys().(*syscall.Stat_t).Uid) != os.Getuid() {
			t.Errorf("%s: %v, %v; want uid %d's", p, st, err, os.Getuid())
		}
	}
	os.WriteFile(filepath.Join(c.work, "a.txt"), []byte("host\n"), 0o644)
	if code, _, se := c.run(nil, "apply", "--session", sess, "a.txt"); code == 0 || !strings.Contains(se, "a.txt") {
		t.Errorf("apply over a host change: %d %s", code, se)
	}
	if code, so, se := c.run(nil, "run", "--session", sess, "--", "cat a.txt notes.txt more.txt"); code != 0 || so != "a\nb\nc\nhi\nmore\n" {
		t.Errorf("after apply: %d %q %s", code, so, se)
	}
	if code, _, se := c.run(nil, "discard", "--session", sess); code != 0 {
		t.Fatalf("discard: %d %s", code, se)
	}
	if code, so, se := c.run(nil, "run", "--session", sess, "--", "cat a.txt; ls"); code != 0 || so != "host\nREADME\na.txt\nnotes.txt\n" {
		t.Errorf("after discard: %d %q %s", code, so, se)
	}
	c.run(nil, "cleanup")
	if vs := layerVolumes(t, eng, state); len(vs) != 0 {
		t.Errorf("overlay volumes left at the end: %v", vs)
	}
	if cs := sessionContainers(t, eng, sess); len(cs) != 0 {
		t.Errorf("containers left at the end: %v", cs)
	}
}
