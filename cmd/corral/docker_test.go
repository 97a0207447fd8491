package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/internal/dockertest"
)

// dockerCLI is a cli whose corral uses the docker backend with the test
// image.
func dockerCLI(t *testing.T) (*cli, *client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("docker test (-short)")
	}
	eng := dockertest.Engine(t)
	c := newCLI(t)
	c.env = append(c.env, "CORRAL_BACKEND=docker", "CORRAL_DOCKER_IMAGE="+dockertest.Image(t, eng))
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		c.env = append(c.env, "DOCKER_HOST="+h)
	}
	os.WriteFile(filepath.Join(c.work, "README"), []byte("hi\n"), 0o644)
	return c, eng
}

// sessionContainers lists the containers labelled with session key.
func sessionContainers(t *testing.T, eng *client.Client, key string) []string {
	t.Helper()
	res, err := eng.ContainerList(context.Background(), client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", "corral.env=1", "corral.env.key="+key)})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range res.Items {
		out = append(out, c.ID)
	}
	return out
}

func TestDockerRunAndSession(t *testing.T) {
	c, _ := dockerCLI(t)
	code, so, se := c.run(nil, "run", "--", "sh", "-c", "cat README; id -u; exit 4")
	if code != 4 || so != "hi\n"+itoa(os.Getuid())+"\n" {
		t.Fatalf("run: %d %q %q", code, so, se)
	}
	sess := "dk-" + itoa(os.Getpid())
	if code, so, se := c.run(nil, "run", "--session", sess, "--", "mkdir -p sub && cd sub && export X=kept"); code != 0 {
		t.Fatalf("session 1: %d %q %q", code, so, se)
	}
	code, so, se = c.run(nil, "run", "--session", sess, "--", `echo "$PWD $X"`)
	if code != 0 || so != c.work+"/sub kept\n" {
		t.Errorf("session 2: %d %q %q", code, so, se)
	}
	// --backend picks a backend for one command.
	if code, so, _ := c.run(nil, "run", "--backend", "local", "--", "sh", "-c", "test -e /.corral/corral && echo in-container || echo on-host"); code != 0 || so != "on-host\n" {
		t.Errorf("--backend local: %d %q", code, so)
	}
	// corral exec: an argv in the session's sandbox with stdin open.
	cmd := exec.Command(corralBin, "exec", "--session", sess, "-i", "--", "bash", "-c", `pwd; cat; test -e /.corral/corral && echo in-container`)
	cmd.Dir, cmd.Env = c.work, c.env
	cmd.Stdin = strings.NewReader("streamed\n")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != c.work+"/sub\nstreamed\nin-container\n" {
		t.Errorf("exec: %v %q", err, out)
	}
}

// TestDockerCleanupAfterKill9: a container left by a killed corral is
// removed by corral cleanup; its command was ended when corral went away.
func TestDockerCleanupAfterKill9(t *testing.T) {
	c, eng := dockerCLI(t)
	sess := "k9-" + itoa(os.Getpid())
	cmd := exec.Command(corralBin, "run", "--session", sess, "--", "sleep 120")
	cmd.Dir, cmd.Env = c.work, c.env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(sessionContainers(t, eng, sess)) == 0 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("no container appeared")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // the command runs
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	ids := sessionContainers(t, eng, sess)
	if len(ids) != 1 {
		t.Fatalf("containers after kill -9: %v", ids)
	}
	// The relay ends the command when corral's stream breaks.
	var left string
	for i := 0; i < 50; i++ {
		left = execIn(t, eng, ids[0], `for p in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $p; echo; done 2>/dev/null | grep -c 'sleep 12[0]' || true`)
		if left == "0\n" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if left != "0\n" {
		t.Errorf("the command outlived corral: %q", left)
	}
	for i := 0; ; i++ {
		code, so, _ := c.run(nil, "cleanup", "--json") // must keep nothing alive of a dead owner
		_ = code
		if strings.Contains(so, `"removed": true`) {
			break
		}
		if i > 3 {
			t.Fatalf("cleanup did not remove it: %s", so)
		}
		time.Sleep(time.Second)
	}
	if ids := sessionContainers(t, eng, sess); len(ids) != 0 {
		t.Errorf("left after cleanup: %v", ids)
	}
}

// TestDockerCleanupKeepsLive: cleanup keeps the containers of a corral that
// still runs, and never touches other containers.
func TestDockerCleanupKeepsLive(t *testing.T) {
	c, eng := dockerCLI(t)
	sess := "live-" + itoa(os.Getpid())
	cmd := exec.Command(corralBin, "run", "--session", sess, "--", "sleep 30")
	cmd.Dir, cmd.Env = c.work, c.env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for len(sessionContainers(t, eng, sess)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no container appeared")
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, so, _ := c.run(nil, "cleanup")
	if !strings.Contains(so, "in use by corral") {
		t.Errorf("cleanup output %q", so)
	}
	if ids := sessionContainers(t, eng, sess); len(ids) != 1 {
		t.Errorf("live container removed: %v", ids)
	}
}

func TestDockerDoctor(t *testing.T) {
	c, _ := dockerCLI(t)
	code, so, se := c.run(nil, "doctor")
	if code != 0 || !strings.Contains(so, "docker engine") || !strings.Contains(so, "API 1.") || !strings.Contains(so, "backend: docker") {
		t.Errorf("doctor: %d\n%s%s", code, so, se)
	}
	code, so, _ = c.run([]string{"DOCKER_HOST=unix:///nonexistent.sock"}, "doctor")
	if code != 1 || !strings.Contains(so, "not reachable") || !strings.Contains(so, "systemctl start docker") {
		t.Errorf("doctor without engine: %d\n%s", code, so)
	}
	code, _, se = c.run([]string{"DOCKER_HOST=unix:///nonexistent.sock"}, "run", "--", "true")
	if code != 125 || !strings.Contains(se, "not reachable") || !strings.Contains(se, "DOCKER_HOST") {
		t.Errorf("run without engine: %d %q", code, se)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// execIn runs a shell line in container id and returns its stdout.
func execIn(t *testing.T, eng *client.Client, id, script string) string {
	t.Helper()
	ctx := context.Background()
	cr, err := eng.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: []string{"sh", "-c", script}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	att, err := eng.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	var so, se strings.Builder
	if _, err := stdcopy.StdCopy(&so, &se, att.Reader); err != nil {
		t.Fatal(err)
	}
	return so.String()
}

// TestDockerExecJoinsAndOutlives: corral exec joins the container of a
// running corral of the same session; when that corral exits first the
// container stays for the exec, which removes it at its end. The order is
// made by files in the workspace, not by sleeps (it failed on a busy
// rootless Podman when the exec came after the owner's "sleep 3"): the
// owner waits until the exec has joined, the exec until the owner has
// ended.
func TestDockerExecJoinsAndOutlives(t *testing.T) {
	c, eng := dockerCLI(t)
	sess := "join-" + itoa(os.Getpid())
	joined, ownerDone := filepath.Join(c.work, "joined"), filepath.Join(c.work, "owner-done")
	owner := exec.Command(corralBin, "run", "--session", sess, "--", "while [ ! -e joined ]; do sleep 0.1; done")
	owner.Dir, owner.Env = c.work, c.env
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer owner.Process.Kill()
	deadline := time.Now().Add(60 * time.Second)
	for len(sessionContainers(t, eng, sess)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no container appeared")
		}
		time.Sleep(100 * time.Millisecond)
	}
	joiner := exec.Command(corralBin, "exec", "--session", sess, "--", "bash", "-c", "echo $HOSTNAME; touch joined; while [ ! -e owner-done ]; do sleep 0.1; done; echo survived")
	joiner.Dir, joiner.Env = c.work, c.env
	var out bytes.Buffer
	joiner.Stdout, joiner.Stderr = &out, &out
	if err := joiner.Start(); err != nil {
		t.Fatal(err)
	}
	defer joiner.Process.Kill()
	if err := owner.Wait(); err != nil {
		t.Errorf("the owner: %v", err)
	}
	if _, err := os.Stat(joined); err != nil {
		t.Errorf("the owner ended before the exec joined: %v", err)
	}
	if err := os.WriteFile(ownerDone, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := joiner.Wait()
	if err != nil || !strings.HasSuffix(out.String(), "survived\n") {
		t.Errorf("exec: %v %q", err, out.String())
	}
	deadline = time.Now().Add(60 * time.Second)
	for len(sessionContainers(t, eng, sess)) != 0 {
		if time.Now().After(deadline) {
			t.Errorf("left after both ended: %v", sessionContainers(t, eng, sess))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDockerSecretFiles: settings with a secret whose files name
// ~/.netrc, through corral run on the docker backend: the container's
// ~/.netrc holds the stand-in (the command's $GITHUB_TOKEN), never the
// real value, and the copy lies in the state directory's secretfiles,
// where corral cleanup keeps it while it is recent.
func TestDockerSecretFiles(t *testing.T) {
	c, _ := dockerCLI(t)
	real := "ghp_" + strings.Repeat("Rl7", 12)
	if err := os.WriteFile(filepath.Join(c.home, ".netrc"), []byte("machine api.example.test login x password "+real+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"profile", "allowlist"}, {"secrets", `[{name: GITHUB_TOKEN, from: "env:GH_REAL", hosts: [api.example.test], files: ["~/.netrc"]}]`}} {
		if code, so, se := c.run(nil, "config", "set", kv[0], kv[1]); code != 0 {
			t.Fatalf("config set %s: %d %s %s", kv[0], code, so, se)
		}
	}
	code, so, se := c.run([]string{"GH_REAL=" + real}, "run", "--", "sh", "-c", `cat ~/.netrc; echo "GT=$GITHUB_TOKEN"`)
	if code != 0 || strings.Contains(so+se, real) {
		t.Fatalf("run: %d\n%s\n%s", code, so, se)
	}
	_, standIn, _ := strings.Cut(so, "GT=")
	standIn = strings.TrimSpace(standIn)
	if len(standIn) != len(real) || so != "machine api.example.test login x password "+standIn+"\nGT="+standIn+"\n" {
		t.Errorf("run: %q", so)
	}
	copies, _ := filepath.Glob(filepath.Join(c.home, ".local", "state", "corral", "secretfiles", "*netrc*"))
	if len(copies) == 0 {
		t.Fatalf("no copy in the state directory")
	}
	c.run(nil, "cleanup")
	for _, p := range copies {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("cleanup removed a recent copy: %v", err)
		}
	}
}
