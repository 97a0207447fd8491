package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/internal/dockertest"
)

// procStat is what a test needs of /proc/PID/stat: the command name, the
// state, the parent, and the start time (which tells a pid reused from
// the process it named).
type procStat struct {
	comm, state string
	ppid        int
	start       string
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return procStat{}, false
	}
	f := strings.Fields(string(b[close+1:]))
	if len(f) < 20 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return procStat{comm: string(b[open+1 : close]), state: f[0], ppid: ppid, start: f[19]}, true
}

// descendants returns every process below pid (not pid itself), by pid.
func descendants(pid int) map[int]procStat {
	all := map[int]procStat{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(n); ok {
			all[n] = st
		}
	}
	out := map[int]procStat{}
	for n, st := range all {
		for p, seen := st.ppid, 0; p > 1 && seen < 64; seen++ {
			if p == pid {
				out[n] = st
				break
			}
			p = all[p].ppid
		}
	}
	return out
}

// stillRunning returns those of procs that still run (the same process:
// same start time; zombies have ended).
func stillRunning(procs map[int]procStat) []string {
	var out []string
	for n, st := range procs {
		if now, ok := readStat(n); ok && now.start == st.start && now.state != "Z" {
			out = append(out, fmt.Sprintf("%d (%s, state %s, parent %d)", n, now.comm, now.state, now.ppid))
		}
	}
	return out
}

// holding returns the processes (other than this test) one of whose
// arguments contains s, as "PID (COMM, state S): ARGS".
func holding(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(s)) {
			continue
		}
		st, ok := readStat(n)
		if !ok || st.state == "Z" {
			continue
		}
		args := strings.ReplaceAll(string(b), "\x00", " ")
		if len(args) > 120 {
			args = args[:60] + " ... " + args[len(args)-60:]
		}
		out = append(out, fmt.Sprintf("%d (%s, state %s, parent %d): %s", n, st.comm, st.state, st.ppid, args))
	}
	return out
}

// pollUntil calls cond every 50 ms until it holds or d passes, and
// reports whether it held. d only catches hangs: a slow machine takes
// longer, it does not fail.
func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeUnderLoad (issue 12): 20 clients of one `corral serve`, each
// with its own corral session, interleave bash and read_file calls and
// check their own state every time (no error, no mix-up); a few cancel a
// running sleep (the call returns, the sleep is gone); then the server is
// killed with SIGKILL in the middle of a second wave of calls: nothing of
// it is left running, and a new server in the same directory works and
// finds the sessions' state. No verdict depends on timing: loops are
// bounded by count, deadlines only catch hangs. As root with a Docker
// engine, containers start and stop during wave 1 (their mounts change
// the host's mount table under bwrap's starts), with no error either.
func TestServeUnderLoad(t *testing.T) {
	const (
		clients = 20
		// bash and read_file calls per client, interleaved: enough for
		// every client to overlap every other many times (the load
		// benchmark, bench/mcpload, runs more).
		rounds  = 12
		cancels = 4 // clients that also cancel a running sleep
	)
	c := newCLIEnv(t, "profile: workspace\n")
	// A timeout no loaded machine reaches: a command that ran must not be
	// reported as timed out.
	env := []string{"CORRAL_TIMEOUT=900"}
	p := c.serve(t, env, "--listen", "127.0.0.1:0")

	sessions := make([]*mcp.ClientSession, clients)
	for i := range sessions {
		cs, err := p.connect(t, "", SessionHeader, fmt.Sprintf("load-%d", i))
		if err != nil {
			t.Fatalf("client %d: %v\n%s", i, err, p.stderr)
		}
		sessions[i] = cs
	}
	call := func(ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) (callResult, error) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			return callResult{}, err
		}
		return toResult(t, res), nil
	}

	churn := dockertest.ChurnAsRoot(t)
	start := time.Now()
	// Wave 1: every client in its own subdirectory, with its own variable
	// and file, checked on every call.
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			cs := sessions[i]
			ctx := context.Background()
			dir := filepath.Join(c.work, fmt.Sprintf("c%d", i))
			val := func(j int) string { return fmt.Sprintf("client-%d-%d", i, j) }
			r, err := call(ctx, cs, "bash", map[string]any{"command": fmt.Sprintf("mkdir c%d && cd c%d && export MINE=%s && echo %s > own.txt && echo \"$MINE $PWD\"", i, i, val(0), val(0))})
			if err != nil || r.isError || r.str("output") != val(0)+" "+dir+"\n" {
				t.Errorf("client %d setup: %v %v %q %s", i, err, r.isError, r.str("output"), r.text)
				return
			}
			for j := range rounds {
				if i < cancels && j == rounds/2 {
					if err := cancelSleep(cs); err != nil {
						t.Errorf("client %d: %v", i, err)
					}
				}
				// The state of the previous call, then the next.
				cmd := fmt.Sprintf(`[ "$MINE" = %s ] && [ "$(cat own.txt)" = %s ] || { echo "MINE=$MINE own.txt=$(cat own.txt) PWD=$PWD"; exit 3; }; export MINE=%s; echo %s > own.txt; echo "$MINE $PWD"`, val(j), val(j), val(j+1), val(j+1))
				r, err := call(ctx, cs, "bash", map[string]any{"command": cmd})
				if err != nil || r.isError || r.str("output") != val(j+1)+" "+dir+"\n" {
					t.Errorf("client %d bash %d: err %v, isError %v, output %q, text %.300s", i, j, err, r.isError, r.str("output"), r.text)
					return
				}
				r, err = call(ctx, cs, "read_file", map[string]any{"path": "own.txt"})
				if want := fmt.Sprintf("%6d\t%s\n", 1, val(j+1)); err != nil || r.isError || r.str("content") != want || r.str("path") != filepath.Join(dir, "own.txt") {
					t.Errorf("client %d read_file %d: err %v, isError %v, path %q, content %q, want %q", i, j, err, r.isError, r.str("path"), r.str("content"), want)
					return
				}
			}
		})
	}
	wg.Wait()
	if churn != nil {
		t.Logf("%d containers started and removed during wave 1", churn.Stop())
	}
	if t.Failed() {
		t.Fatalf("wave 1 failed; server log:\n%s", tailOf(p.stderr.String(), 4000))
	}
	t.Logf("wave 1: %d clients, %d calls each, in %s", clients, 2*rounds+1, time.Since(start).Round(time.Millisecond))

	// Wave 2: every client keeps calling, half of them in a long sleep,
	// one with a background sleep, and the server is killed.
	mk := marker()
	sleepers := clients / 2
	bg, err := call(context.Background(), sessions[0], "bash", map[string]any{"command": "sleep " + mk, "background": true})
	if err != nil || bg.isError {
		t.Fatalf("background sleep: %v %s", err, bg.text)
	}
	stop := make(chan struct{})
	ended := make(chan int, clients)
	for i := range clients {
		go func() {
			defer func() { ended <- i }()
			cs := sessions[i]
			if i < sleepers {
				call(context.Background(), cs, "bash", map[string]any{"command": "sleep " + mk})
				return
			}
			for n := 0; n < 1000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := call(context.Background(), cs, "bash", map[string]any{"command": ": " + mk + "; echo $MINE"}); err != nil {
					return
				}
				if _, err := call(context.Background(), cs, "read_file", map[string]any{"path": "own.txt"}); err != nil {
					return
				}
			}
		}()
	}
	if !pollUntil(2*time.Minute, func() bool { return len(processesWith(mk)) >= sleepers+1 }) {
		t.Fatalf("only %d of %d sleeps started within 2 minutes", len(processesWith(mk)), sleepers+1)
	}
	procs := descendants(p.cmd.Process.Pid)
	sandboxes := 0
	for _, st := range procs {
		if st.comm == "bwrap" {
			sandboxes++
		}
	}
	if sandboxes == 0 {
		t.Fatalf("no bwrap below corral serve among its %d descendants", len(procs))
	}
	t.Logf("killing corral serve with %d processes below it (%d bwrap)", len(procs), sandboxes)
	p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatal("corral serve still runs a minute after SIGKILL")
	}
	close(stop)
	for range clients {
		select {
		case <-ended:
		case <-time.After(2 * time.Minute):
			t.Fatal("a call to the killed server has not returned after 2 minutes")
		}
	}
	// A new server in the same directory works, and the sessions' state
	// carried over. Its first sandbox ends what the killed one left
	// (bwrap.SweepOrphans): where corral's gate is not used, a sandbox
	// the kill caught at its birth has no parent-death signal yet.
	p2 := c.serve(t, env, "--listen", "127.0.0.1:0")
	for _, i := range []int{0, clients - 1} {
		cs, err := p2.connect(t, "", SessionHeader, fmt.Sprintf("load-%d", i))
		if err != nil {
			t.Fatalf("new server: %v\n%s", err, p2.stderr)
		}
		want := fmt.Sprintf("client-%d-%d client-%d-%d %s\n", i, rounds, i, rounds, filepath.Join(c.work, fmt.Sprintf("c%d", i)))
		if got := bash(t, cs, `echo "$MINE $(cat own.txt) $PWD"`).str("output"); got != want {
			t.Errorf("new server, session load-%d: %q, want %q", i, got, want)
		}
	}
	// What is left of the killed server: the processes below it when it
	// was killed, and any process naming the marker (every wave-2 command
	// does, and bwrap shows its command in its argv).
	leftovers := func() []string {
		return append(stillRunning(procs), holding(mk)...)
	}
	if !pollUntil(time.Minute, func() bool { return len(leftovers()) == 0 }) {
		left := leftovers()
		t.Errorf("a minute after corral serve was killed and another started, %d processes of the killed one still run (killed now):\n%s", len(left), strings.Join(left, "\n"))
		for _, l := range left {
			if pid, err := strconv.Atoi(l[:strings.IndexByte(l, ' ')]); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// cancelSleep starts a foreground sleep on cs, cancels the call once the
// sleep runs, and checks that the call returns and the sleep is gone.
func cancelSleep(cs *mcp.ClientSession) error {
	mk := marker()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep " + mk}})
		done <- err
	}()
	if !pollUntil(2*time.Minute, func() bool { return len(processesWith(mk)) > 0 }) {
		return fmt.Errorf("sleep %s did not start within 2 minutes", mk)
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			return fmt.Errorf("the cancelled call returned no error")
		}
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("the cancelled call has not returned after 2 minutes")
	}
	if !pollUntil(time.Minute, func() bool { return len(processesWith(mk)) == 0 }) {
		return fmt.Errorf("a minute after its call was cancelled, sleep %s still runs: %v", mk, psLines(mk))
	}
	return nil
}
