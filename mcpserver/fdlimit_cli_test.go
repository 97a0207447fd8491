package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/sandboxfs"
	"github.com/corralhq/corral/session"
)

// fdLimitSettings route sessions by name prefix to each way a sandbox is
// started: ws (the workspace profile), al (allowlist: the egress holder),
// rv (review: the layer holder), ra (both).
const fdLimitSettings = `approval: off
routes:
  - {sessions: "al:*", profile: allowlist}
  - {sessions: "rv:*", workspace_mode: review}
  - {sessions: "ra:*", profile: allowlist, workspace_mode: review}
`

// fdLimitPrefixes are the session name prefixes of fdLimitSettings.
var fdLimitPrefixes = []string{"ws", "al", "rv", "ra"}

// prlimitPath returns prlimit(1), which starts the binary under a low
// RLIMIT_NOFILE (soft and hard: corral's Go runtime raises its soft limit
// to the hard one).
func prlimitPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	return p
}

// badFD reports whether text says "bad file descriptor" other than where
// it explains that Go says so for a full table (internal/forkfds).
func badFD(text string) bool {
	t := strings.ReplaceAll(strings.ToLower(text), `reports this as "bad file descriptor"`, "")
	return strings.Contains(t, "bad file descriptor")
}

// TestRunUnderFDLimit runs `corral run` under every open-files limit from
// one too low to start corral up to one that lets the command run, in each
// way a sandbox starts, and holds every outcome to one rule: the command
// runs, or corral exits 125 with a line that says what failed; never
// "bad file descriptor" (issue 27 item 10), and a full table is never
// blamed on policy or on user namespaces.
func TestRunUnderFDLimit(t *testing.T) {
	prlimit := prlimitPath(t)
	bin := corral(t)
	c := newCLIEnv(t, fdLimitSettings)
	ran := map[string]bool{}
	for _, p := range fdLimitPrefixes {
		for n := 8; n <= 48; n += 2 {
			args := []string{"--nofile=" + fmt.Sprint(n) + ":" + fmt.Sprint(n), bin, "run", "--session", fmt.Sprintf("%s:run-%d", p, n), "--", "true"}
			cmd := exec.Command(prlimit, args...)
			cmd.Env, cmd.Dir = c.env, c.work
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var ee *exec.ExitError
			switch {
			case err == nil:
				ran[p] = true
				continue
			case !errors.As(err, &ee):
				t.Fatalf("%s at %d open files: %v", p, n, err)
			}
			text := out.String()
			last := lastLine(text)
			where := fmt.Sprintf("%s at %d open files (exit %d)", p, n, ee.ExitCode())
			if ee.ExitCode() != 125 || !strings.HasPrefix(last, "corral: ") || len(last) < len("corral: ")+10 {
				t.Errorf("%s: not a clear failure of corral's own:\n%s", where, text)
			}
			if badFD(text) {
				t.Errorf("%s: bad file descriptor:\n%s", where, text)
			}
			if strings.Contains(last, "too many open files") &&
				(strings.Contains(last, "refused by sandbox policy") || strings.Contains(last, "user namespaces may be disabled")) {
				t.Errorf("%s: a full descriptor table blamed on something else:\n%s", where, last)
			}
		}
	}
	for _, p := range fdLimitPrefixes {
		if !ran[p] {
			t.Errorf("%s: the command never ran, at any limit up to 48", p)
		}
	}
}

// lastLine returns the last line of text that is not a log record.
func lastLine(text string) string {
	var last string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "time=") {
			last = l
		}
	}
	return last
}

// TestServeUnderFDLimit serves MCP under low open-files limits with
// sessions of every kind at once, each with foreground and background
// commands in flight together, so descriptors are opened and closed by
// other goroutines while a sandbox starts. Every tool error must say what
// happened: never "bad file descriptor", and a full table (too many open
// files) as the passing failure it is, with "call the tool again" (not
// "no sandbox can be had", "refused by policy", or "corral failed").
// Which calls fail depends on timing; the rule must hold for all.
func TestServeUnderFDLimit(t *testing.T) {
	prlimit := prlimitPath(t)
	bin := corral(t)
	c := newCLIEnv(t, fdLimitSettings)
	var mu sync.Mutex
	okCalls, emfile := 0, 0
	for _, n := range []int{40, 48, 56, 64, 80} {
		cmd := exec.Command(prlimit, fmt.Sprintf("--nofile=%d:%d", n, n), bin, "serve", "--listen", "127.0.0.1:0", "--session", "default", "--log-level", "warn")
		const token = "fdlimit-test-token-0123456789"
		cmd.Env, cmd.Dir = append(append([]string{}, c.env...), "CORRAL_TOKEN="+token), c.work
		url, stop := startServe(t, cmd)
		var wg sync.WaitGroup
		for _, p := range fdLimitPrefixes {
			cs, err := httpConnect(t, url, "", "Authorization", "Bearer "+token, SessionHeader, fmt.Sprintf("%s:serve-%d", p, n))
			if err != nil {
				t.Logf("%s at %d open files: no MCP session (%v)", p, n, err)
				continue
			}
			for i, a := range []map[string]any{
				{"command": "cd /tmp; true"},
				{"command": "true", "background": true},
				{"command": "echo x", "background": true},
				{"command": "ls >/dev/null; echo y"},
			} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: a})
					where := fmt.Sprintf("%s call %d at %d open files", p, i, n)
					if err != nil {
						// The transport (accept under a full table), not a
						// tool's answer.
						if badFD(err.Error()) {
							t.Errorf("%s: bad file descriptor: %v", where, err)
						}
						t.Logf("%s: %v", where, err)
						return
					}
					r := toResult(t, res)
					mu.Lock()
					defer mu.Unlock()
					if !r.isError {
						okCalls++
						return
					}
					if badFD(r.text) {
						t.Errorf("%s: bad file descriptor: %s", where, r.text)
					}
					if r.text == "" {
						t.Errorf("%s: an error without a message", where)
					}
					if strings.Contains(r.text, "too many open files") {
						emfile++
						if !strings.Contains(strings.ToLower(r.text), "call the tool again") || strings.HasPrefix(r.text, "no sandbox can be had") ||
							strings.HasPrefix(r.text, "refused by") || strings.HasPrefix(r.text, "corral failed") {
							t.Errorf("%s: a full descriptor table not worded as a passing failure: %s", where, r.text)
						}
					}
				}()
			}
		}
		wg.Wait()
		stop()
	}
	t.Logf("%d calls ran, %d failed for a full table", okCalls, emfile)
	if okCalls == 0 {
		t.Error("no call ran at any limit")
	}
}

// startServe starts cmd (corral serve) and returns its URL and a stop
// that ends it (SIGTERM, then SIGKILL) and waits for it.
func startServe(t *testing.T, cmd *exec.Cmd) (string, func()) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	log := &syncBuffer{}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			log.Write(append(sc.Bytes(), '\n'))
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		pr.Close()
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if badFD(log.String()) {
			t.Errorf("corral serve logged bad file descriptor:\n%s", log)
		}
	}
	select {
	case url := <-urls:
		return url, stop
	case err := <-exited:
		t.Fatalf("corral serve exited: %v\n%s", err, log)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("corral serve did not start listening:\n%s", log)
	}
	return "", nil
}

// TestFileErrorTransient: the file tools word a passing cause as bash
// does (call again), also when the cause reached corral as text from the
// file server; another cause still goes to the person.
func TestFileErrorTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: accept: too many open files", sandboxfs.ErrUnavailable), "call the tool again"},
		{fmt.Errorf("%w: %w", sandboxfs.ErrUnavailable, syscall.EMFILE), "call the tool again"},
		{fmt.Errorf("%w: no bwrap", sandboxfs.ErrUnavailable), "tell the person running corral"},
		// A policy refusal of the file server's sandbox, as it reached a
		// new user's agent (its stderr quoted after EOF): nothing done,
		// the person's setting; not "could not be reached".
		{fmt.Errorf("%w: EOF (refused by sandbox policy: the working directory /w is larger than corral checks)", sandboxfs.ErrUnavailable), "refused by corral's sandbox policy, so nothing was done"},
		{fmt.Errorf("%w: protected path", sandbox.ErrPolicy), "refused by corral's sandbox policy, so nothing was done"},
	} {
		if got := fileError(tc.err).Error(); !strings.Contains(got, tc.want) {
			t.Errorf("fileError(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if !sandbox.IsTransientText("open x: too many open files") || sandbox.IsTransientText("permission denied") {
		t.Error("IsTransientText")
	}
}

// TestToolErrorKeepsOutput: what a command that may have run wrote before
// its sandbox was lost reaches the agent with the error.
func TestToolErrorKeepsOutput(t *testing.T) {
	err := &session.OutputError{Err: sandbox.MayHaveRun(fmt.Errorf("%w: the container was removed", sandbox.ErrUnavailable)), Output: "start\n"}
	got := toolError(err).Error()
	if !strings.Contains(got, "may have run") || !strings.Contains(got, "What the command wrote before that:\nstart\n") {
		t.Errorf("toolError = %q", got)
	}
}
