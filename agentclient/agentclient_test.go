package agentclient

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/corralhq/corral/inside" // registers the agent's mode
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// localAgent runs the real agent (inside.ModeAgent) as a child of the
// test, the test binary re-executed, and connects to it.
func localAgent(t *testing.T) (*Conn, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "__corral-agent")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &tail.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := New(in, out, stderr, "test backend", "local")
	t.Cleanup(func() {
		c.Close()
		_ = cmd.Wait()
	})
	return c, cmd
}

func run(t *testing.T, c *Conn, ctx context.Context, req *sandbox.Request) *sandbox.Result {
	t.Helper()
	s, err := c.Start(req, []string{"PATH=/usr/bin:/bin"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	res, err := Wait(ctx, req, s, time.Now(), WaitOptions{KillGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestAgentCommands: output, stdin, extra descriptors, exit statuses and
// signals travel over one agent stream; a timeout ends the command's whole
// tree; commands run side by side.
func TestAgentCommands(t *testing.T) {
	c, _ := localAgent(t)
	ctx := context.Background()
	var out, errb bytes.Buffer
	res := run(t, c, ctx, &sandbox.Request{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 3"}, Stdin: strings.NewReader("in\n"), Stdout: &out, Stderr: &errb})
	if res.ExitCode != 3 || out.String() != "in\n" || errb.String() != "err\n" {
		t.Errorf("res %+v out %q err %q", res, out.String(), errb.String())
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	res = run(t, c, ctx, &sandbox.Request{Argv: []string{"sh", "-c", "echo three >&3"}, ExtraFiles: []*os.File{w}})
	w.Close()
	b := make([]byte, 64)
	n, _ := r.Read(b)
	if res.ExitCode != 0 || string(b[:n]) != "three\n" {
		t.Errorf("fd 3: %+v %q", res, b[:n])
	}
	res = run(t, c, ctx, &sandbox.Request{Argv: []string{"sleep", "300"}, Timeout: 500 * time.Millisecond})
	if !res.TimedOut || res.Signal == 0 {
		t.Errorf("timeout: %+v", res)
	}
	// Cancellation (the same kill as a timeout) ends the tree: the
	// background child (its pid in a file) is gone too. The cancel comes
	// once the child has written its pid.
	dir := t.TempDir()
	cctx, ccancel := context.WithCancel(ctx)
	go func() {
		for {
			if b, err := os.ReadFile(dir + "/pid"); err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
				ccancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	res = run(t, c, cctx, &sandbox.Request{Argv: []string{"sh", "-c", "sh -c 'echo $$ > " + dir + "/pid; exec sleep 301' & sleep 300"}})
	if res.Signal == 0 {
		t.Errorf("cancelled tree: %+v", res)
	}
	// Side by side: a second command runs while the first waits.
	ctx2, cancel := context.WithCancel(ctx)
	done := make(chan *sandbox.Result, 1)
	go func() { done <- run(t, c, ctx2, &sandbox.Request{Argv: []string{"sleep", "300"}}) }()
	if res := run(t, c, ctx, &sandbox.Request{Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Errorf("second command: %+v", res)
	}
	cancel()
	if res := <-done; res.Signal == 0 {
		t.Errorf("cancelled: %+v", res)
	}
	pid, err := os.ReadFile(dir + "/pid")
	if err != nil {
		t.Fatalf("the background child did not start: %v", err)
	}
	// Condition loop: a killed process may take a moment to be reaped.
	stat := "/proc/" + strings.TrimSpace(string(pid)) + "/stat"
	for deadline := time.Now().Add(20 * time.Second); ; {
		b, err := os.ReadFile(stat)
		if err != nil || strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the timed-out command's background child survived: %s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAgentLost: when the agent dies, a waiting command ends with an error
// that says its status is unknown, and a new command is refused as
// sandbox.ErrUnavailable (nothing was run).
func TestAgentLost(t *testing.T) {
	c, cmd := localAgent(t)
	req := &sandbox.Request{Argv: []string{"sleep", "300"}}
	s, err := c.Start(req, nil, "/")
	if err != nil {
		t.Fatal(err)
	}
	<-s.StartedC()
	_ = cmd.Process.Kill()
	_, err = Wait(context.Background(), req, s, time.Now(), WaitOptions{KillGrace: time.Second})
	if err == nil || !strings.Contains(err.Error(), "may have run") || errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("lost during a command: %v", err)
	}
	<-c.Done()
	if _, err := c.Start(req, nil, "/"); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "test backend: lost corral's helper in local") {
		t.Errorf("after the loss: %v", err)
	}
}

// TestAgentVanishedDir: a command whose directory is gone (made in an
// earlier pod's workspace) starts in the nearest directory above it that
// exists, and says so, instead of failing to start.
func TestAgentVanishedDir(t *testing.T) {
	c, _ := localAgent(t)
	base := t.TempDir()
	var out, errb bytes.Buffer
	req := &sandbox.Request{Argv: []string{"sh", "-c", "pwd"}, Stdout: &out, Stderr: &errb}
	s, err := c.Start(req, []string{"PATH=/usr/bin:/bin"}, filepath.Join(base, "gone", "deeper"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Wait(context.Background(), req, s, time.Now(), WaitOptions{KillGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || strings.TrimSpace(out.String()) != base || !strings.Contains(errb.String(), "no longer exists; starting in "+base) {
		t.Errorf("exit %d, stdout %q, stderr %q; want it to start in %s and say so", res.ExitCode, out.String(), errb.String(), base)
	}
}
