package agentclient

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// TestSignalAtStart (issue 27, item 9): a person's signal that reaches the
// agent before it has started the command (the signal frame follows the
// start frame at once) ends the command as soon as it starts, and is
// reported as that signal; the agent dropped it (no process group yet),
// and the command ran on until its timeout. The verdict is the result,
// whichever comes first in the agent.
func TestSignalAtStart(t *testing.T) {
	c, _ := localAgent(t)
	for i := 0; i < 10; i++ {
		sigs := make(chan os.Signal, 1)
		sigs <- syscall.SIGTERM
		res := run(t, c, context.Background(), &sandbox.Request{
			Argv:    []string{"sleep", "600"},
			Timeout: 2 * time.Minute, // far past any start: a lost signal is a timeout
			Signals: sigs,
		})
		if res.TimedOut || res.Signal != int(syscall.SIGTERM) || res.ExitCode != 128+int(syscall.SIGTERM) {
			t.Fatalf("try %d: %+v; want ended by SIGTERM (143) at once", i, res)
		}
	}
}

// TestStuckAgentEndsSandbox (hostile trial): a command that stops corral's
// helper (SIGSTOP) cannot hold corral past its timeout: the killed
// command's report never comes, so Wait calls Stuck (the backend ends the
// whole sandbox) and reports that the command may have run. Before, Wait
// waited for ever and the command ran on. The agent is stopped from the
// test, as the command would, once the command is running; the verdict is
// the error and the call, not a time.
func TestStuckAgentEndsSandbox(t *testing.T) {
	c, agent := localAgent(t)
	defer agent.Process.Signal(syscall.SIGCONT)
	// Stopped from Wait's own report that the command runs (OnStart):
	// a second reader of StartedC would race Wait for its one value.
	req := &sandbox.Request{Argv: []string{"sleep", "600"}, Timeout: time.Second,
		OnStart: func(int) { agent.Process.Signal(syscall.SIGSTOP) }}
	s, err := c.Start(req, []string{"PATH=/usr/bin:/bin"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stuck := make(chan string, 1)
	_, err = Wait(context.Background(), req, s, time.Now(), WaitOptions{KillGrace: 100 * time.Millisecond, StuckAfter: 200 * time.Millisecond,
		Stuck: func(why string) {
			stuck <- why
			agent.Process.Kill() // what ending the container does to its helper
		}})
	if !errors.Is(err, sandbox.ErrMayHaveRun) || !strings.Contains(err.Error(), "did not report") {
		t.Fatalf("Wait = %v; want ErrMayHaveRun saying the helper did not report", err)
	}
	select {
	case <-stuck:
	default:
		t.Fatal("Stuck was not called")
	}
}

// TestLeftoverNoted: a command that exits while a process it started
// still runs (here in the background, in a session of its own) gets a
// note that corral ended it, so no process ends unseen; one that leaves
// nothing gets none.
func TestLeftoverNoted(t *testing.T) {
	c, _ := localAgent(t)
	res := run(t, c, context.Background(), &sandbox.Request{Argv: []string{"sh", "-c", "setsid sleep 300 & exit 0"}, Timeout: time.Minute})
	if res.ExitCode != 0 || !strings.Contains(strings.Join(res.Warnings, "\n"), "the command left running") {
		t.Errorf("a command that left a process running: %+v; want exit 0 and the note", res)
	}
	res = run(t, c, context.Background(), &sandbox.Request{Argv: []string{"true"}, Timeout: time.Minute})
	if len(res.Warnings) != 0 {
		t.Errorf("a command that left nothing: warnings %q", res.Warnings)
	}
}
