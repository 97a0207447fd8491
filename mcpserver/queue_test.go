package mcpserver

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/session"
)

// awaitEvent waits up to d for the event msg; it reports whether it came.
func awaitEvent(events <-chan string, msg string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case m := <-events:
			if m == msg {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// threadInFlock reports whether a thread of this process sleeps in
// flock(2) (wchan locks_lock_inode_wait).
func threadInFlock() bool {
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(os.Getpid()), "task", "*", "wchan"))
	for _, w := range tasks {
		if b, _ := os.ReadFile(w); string(b) == "locks_lock_inode_wait" {
			return true
		}
	}
	return false
}

// pipeConnect connects a client to srv's MCP server for session name over
// a pair of pipes, as a stdio client is; goAway closes the client's ends
// at once, as a client that dies does (no goodbye: the server reads end
// of file).
func pipeConnect(t *testing.T, srv *Server, name string) (cs *mcp.ClientSession, goAway func()) {
	t.Helper()
	toServer, fromClient, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	toClient, fromServer, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ss, err := srv.MCPServer(name).Connect(context.Background(), &mcp.IOTransport{Reader: toServer, Writer: fromServer}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err = mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, nil).Connect(context.Background(), &mcp.IOTransport{Reader: toClient, Writer: fromClient}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fromClient.Close(); toClient.Close(); ss.Wait() })
	return cs, func() { fromClient.Close(); toClient.Close() }
}

// TestQueuedCallCancelled (issue 27, item 9): a bash call queued behind
// its session's running command (another process's: the test holds the
// session's lock file, as that process's corral would) ends, in the
// server, as soon as its request is cancelled (notifications/cancelled)
// or its client goes away, and its command never runs, not even once the
// lock is let go. That the call waits, and that the server's handler
// stopped waiting, are read from the session's events (session.lock.wait,
// session.lock.cancelled; a thread asleep in flock(2) also says it waits),
// never guessed from time.
func TestQueuedCallCancelled(t *testing.T) {
	f := newFixture(t)
	events := make(chan string, 1024) // Events drops what does not fit
	m := session.NewManager(session.Options{StateDir: f.state, Resolve: f.resolve, Logger: slog.New(testkit.Events{C: events})})
	srv, err := New(Options{Manager: m, DefaultSession: "queue", Spec: f.resolve, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Close(); m.Close() }()
	cs := connectTo(t, srv, "queue", nil)
	bash(t, cs, "true") // the session and its lock file exist
	locks, _ := filepath.Glob(filepath.Join(f.state, "sessions", "queue-*", "lock"))
	if len(locks) != 1 {
		t.Fatalf("the session's lock file: %v", locks)
	}
	for _, how := range []string{"notifications/cancelled", "client gone"} {
		t.Run(how, func(t *testing.T) {
			// What an earlier call left must not read as this call's
			// wait: a called-off wait's flock(2) goes on in a thread of
			// its own until it has the lock (and lets it go at once),
			// and a call that met that thread holding the lock logged
			// session.lock.wait. So wait for no thread in flock(2), then
			// forget the events so far.
			deadline := time.Now().Add(time.Minute)
			for threadInFlock() {
				if time.Now().After(deadline) {
					t.Fatal("a minute on, a thread still sleeps in flock(2) from an earlier call")
				}
				time.Sleep(10 * time.Millisecond)
			}
			for len(events) > 0 {
				<-events
			}
			lf, err := os.OpenFile(locks[0], os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer lf.Close()
			if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			client, goAway := cs, func() {}
			if how == "client gone" {
				client, goAway = pipeConnect(t, srv, "queue")
			}
			mark := filepath.Join(f.work, "ran-"+marker())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := client.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "touch " + mark}})
				done <- err
			}()
			// Waiting: the event, or (a server that does not log it) a
			// thread of this process asleep in flock(2).
			deadline = time.Now().Add(time.Minute)
			for !awaitEvent(events, "session.lock.wait", 10*time.Millisecond) && !threadInFlock() {
				if time.Now().After(deadline) {
					t.Fatal("the call did not wait for the session's lock within a minute")
				}
			}
			if how == "client gone" {
				goAway()
			} else {
				cancel()
			}
			if !awaitEvent(events, "session.lock.cancelled", time.Minute) {
				t.Fatal("a minute after the call was called off, the server still waited for the session's lock to run it")
			}
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("the call had not ended a minute after it was called off")
			}
			_ = unix.Flock(int(lf.Fd()), unix.LOCK_UN)
			if got := bash(t, cs, "echo next").str("output"); got != "next\n" {
				t.Errorf("the session's next command: %q", got)
			}
			if _, err := os.Stat(mark); err == nil {
				t.Errorf("the called-off command ran (%s exists)", mark)
			}
		})
	}
}
