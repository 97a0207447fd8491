package docker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// TestContainerChangedOutsideCorral: a session's container restarted,
// stopped or removed behind corral's back (docker restart, a daemon
// restart) is replaced by a new one, the command runs there, and the
// result says what was lost; nothing is left on the engine afterwards.
func TestContainerChangedOutsideCorral(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(ctx context.Context, cli *client.Client, id string) error
		want string
	}{
		{"restart", func(ctx context.Context, cli *client.Client, id string) error {
			_, err := cli.ContainerRestart(ctx, id, client.ContainerRestartOptions{Timeout: new(0)})
			return err
		}, "was restarted outside corral"},
		{"stop", func(ctx context.Context, cli *client.Client, id string) error {
			_, err := cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: new(0)})
			return err
		}, "was stopped outside corral"},
		{"kill", func(ctx context.Context, cli *client.Client, id string) error {
			_, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
			return err
		}, "was stopped outside corral"},
		{"remove", func(ctx context.Context, cli *client.Client, id string) error {
			_, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
			return err
		}, "was removed outside corral"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			sess := "changed-" + tc.name
			if res, out := f.run(sess, "echo kept > /tmp/mark"); res.ExitCode != 0 {
				t.Fatalf("first command: %d %s", res.ExitCode, out)
			}
			names := f.containers(sess)
			if len(names) != 1 {
				t.Fatalf("containers: %v", names)
			}
			ctx := context.Background()
			var agentDone <-chan struct{}
			for _, en := range f.e.table.Entries() {
				if c := en.Handle; c.name == names[0] {
					agentDone = c.agent.Done()
				}
			}
			if err := tc.do(ctx, f.cli, names[0]); err != nil {
				t.Fatal(err)
			}
			// The agent's stream breaks when the container stops. A
			// command sent before corral has read that break fails as a
			// passing failure (nothing run, retry); this test is about
			// the one after.
			select {
			case <-agentDone:
			case <-time.After(time.Minute):
				t.Fatal("the agent's stream did not end")
			}
			res, out := f.run(sess, "cat /tmp/mark 2>/dev/null || echo lost; echo ran")
			if !strings.Contains(out, "ran") {
				t.Fatalf("the command did not run: %d %q", res.ExitCode, out)
			}
			note := strings.Join(res.Warnings, "\n")
			if !strings.Contains(note, tc.want) || !strings.Contains(note, "/tmp") {
				t.Errorf("warnings %q, want them to say it %s and what was lost", res.Warnings, tc.want)
			}
			if strings.Contains(out, "kept") {
				t.Errorf("the old container's /tmp is there: %q", out)
			}
			after := f.containers(sess)
			if len(after) != 1 || after[0] == names[0] {
				t.Errorf("containers after: %v (before %v): want one new one", after, names)
			}
			// Later commands run as usual, with no note.
			if res, out := f.run(sess, "echo again"); res.ExitCode != 0 || len(res.Warnings) != 0 {
				t.Errorf("next command: %d %q %q", res.ExitCode, out, res.Warnings)
			}
			f.e.Close()
			deadline := time.Now().Add(30 * time.Second)
			for len(f.containers(sess)) > 0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if left := f.containers(sess); len(left) > 0 {
				t.Errorf("left after Close: %v", left)
			}
		})
	}
}

// TestCloseRemovesWhatTheTableLost: a container labelled as this corral's
// that its table no longer holds (forgotten when the engine said it was
// gone or stopped) is removed at Close, whatever its state.
func TestCloseRemovesWhatTheTableLost(t *testing.T) {
	f := newFixture(t, nil)
	if res, out := f.run("lost", "true"); res.ExitCode != 0 {
		t.Fatalf("%d %s", res.ExitCode, out)
	}
	names := f.containers("lost")
	if len(names) != 1 {
		t.Fatalf("containers: %v", names)
	}
	ctx := context.Background()
	if _, err := f.cli.ContainerStop(ctx, names[0], client.ContainerStopOptions{Timeout: new(0)}); err != nil {
		t.Fatal(err)
	}
	for _, en := range f.e.table.Entries() {
		if en.Handle.name == names[0] {
			f.e.forget(en.Handle)
		}
	}
	if n := len(f.e.table.Entries()); n != 0 {
		t.Fatalf("%d containers still in the table", n)
	}
	f.e.Close()
	if left := f.containers("lost"); len(left) > 0 {
		t.Errorf("left after Close: %v", left)
	}
}
