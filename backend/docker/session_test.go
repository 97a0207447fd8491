package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/sandboxfs"
	"github.com/corralhq/corral/session"
)

// sessionFixture is a session manager whose sessions run on the docker
// backend of f.
func sessionFixture(t testing.TB, f *fixture) *session.Manager {
	t.Helper()
	state := filepath.Join(f.ws, ".state")
	m := session.NewManager(session.Options{StateDir: state, Resolve: func(string) (*session.Spec, error) {
		return &session.Spec{Backend: f.b, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: f.ws}, Timeout: time.Minute,
			OutputLimit: 1 << 20, Env: []string{"PATH=/usr/bin:/bin"}}, nil
	}})
	t.Cleanup(m.Close)
	return m
}

// TestSessionOnDocker: cwd and variables carry over, background processes
// run in the container and their whole tree is killed, and the container
// goes when the session closes.
func TestSessionOnDocker(t *testing.T) {
	f := newFixture(t, nil)
	m := sessionFixture(t, f)
	s, err := m.Open("work")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exec := func(cmd string) *session.ExecResult {
		t.Helper()
		r, err := s.Exec(ctx, session.ExecRequest{Command: cmd})
		if err != nil {
			t.Fatalf("Exec(%q): %v", cmd, err)
		}
		return r
	}
	exec("mkdir -p a/b && cd a/b && export GREETING='hello there' && echo scratch > $TMPDIR/keep")
	r := exec(`echo "$PWD|$GREETING|$(cat $TMPDIR/keep)"; false | true`)
	if want := filepath.Join(f.ws, "a/b") + "|hello there|scratch\n"; r.Output.Text != want || r.Cwd != filepath.Join(f.ws, "a/b") {
		t.Errorf("carried over: %q cwd %q, want %q", r.Output.Text, r.Cwd, want)
	}
	if len(r.PipeStatus) != 2 || r.PipeStatus[0] != 1 {
		t.Errorf("PIPESTATUS %v", r.PipeStatus)
	}
	// A background process with children; Kill ends the tree.
	p, err := s.Start(session.StartRequest{Command: `(sleep 310; echo never) & sleep 311 & echo started; wait`})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := s.Output(p.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(c.Data, "started") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no output: %+v", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Kill(p.ID); err != nil {
		t.Fatal(err)
	}
	r = exec(`for p in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $p 2>/dev/null; echo; done | grep -c 'sleep 31[01]' || true`)
	if r.Output.Text != "0\n" {
		t.Errorf("left after Kill: %q", r.Output.Text)
	}
	// The stream prefix runs in this session's sandbox.
	if pre := s.ExecPrefix("", true); len(pre) < 5 || pre[len(pre)-1] != "--" || !strings.Contains(strings.Join(pre, " "), "exec --session work -i") {
		t.Errorf("ExecPrefix = %q", pre)
	}
	if len(f.containers("work")) != 1 {
		t.Fatalf("containers: %v", f.containers("work"))
	}
	m.Close()
	if n := f.containers("work"); len(n) != 0 {
		t.Errorf("after the session closed: %v", n)
	}
}

// TestFileToolsOnDocker: the file server runs in the session's container.
func TestFileToolsOnDocker(t *testing.T) {
	f := newFixture(t, nil)
	m := sessionFixture(t, f)
	s, err := m.Open("files")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fc, err := sandboxfs.For(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fc.Write(ctx, "notes/todo.txt", "one\ntwo\n"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(f.ws, "notes/todo.txt"))
	if err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("on the host: %q %v", b, err)
	}
	rr, err := fc.Read(ctx, "notes/todo.txt", 0, 0)
	if err != nil || !strings.Contains(rr.Content, "two") {
		t.Errorf("Read: %+v %v", rr, err)
	}
	if _, err := fc.Write(ctx, "/tmp/scratch.txt", "x"); err != nil {
		t.Errorf("writing /tmp in the container: %v", err)
	}
	r, err := s.Exec(ctx, session.ExecRequest{Command: "cat /tmp/scratch.txt"})
	if err != nil || r.Output.Text != "x" {
		t.Errorf("the shell sees the file server's /tmp: %q %v", r.Output.Text, err)
	}
	if _, err := fc.Write(ctx, "/etc/evil", "x"); err == nil {
		t.Error("write to /etc was allowed")
	}
	sr, err := fc.Search(ctx, "tw.", "", "", "content")
	if err != nil || len(sr.Matches) != 1 || !strings.Contains(sr.Matches[0], "todo.txt") {
		t.Errorf("Search: %+v %v", sr, err)
	}
}
