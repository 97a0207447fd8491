package bwrap

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
)

// reviewAllowlist sets workspace_mode review over layerDir and the
// allowlist profile with the test policy.
func reviewAllowlist(layerDir string) func(*sandbox.Request) {
	return func(r *sandbox.Request) {
		allowlist(r)
		r.LayerDir = layerDir
	}
}

// interfaces returns the names /proc/net/dev lists (proc(5): two header
// lines, then "NAME: counters" per interface of the reader's network
// namespace), from the lines of out between the markers "IF<" and ">IF".
func interfaces(out string) []string {
	_, rest, _ := strings.Cut(out, "IF<\n")
	body, _, _ := strings.Cut(rest, ">IF")
	var names []string
	for i, l := range strings.Split(body, "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok && i >= 2 {
			names = append(names, strings.TrimSpace(name))
		}
	}
	return names
}

// lineWith returns the first line of out that starts with prefix.
func lineWith(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestReviewAllowlist: under workspace_mode review with the allowlist
// profile a command writes to the layer (the host's file unchanged),
// reaches an allowed host through the proxy and is refused another with
// the allowlist's message, has no interface but lo, and does not see the
// forwarder; a background command keeps its network across other
// commands; a holder made by a workspace command serves the allowlist's
// later ones; Close leaves no holder and no forwarder.
func TestReviewAllowlist(t *testing.T) {
	e := newEnv(t)
	requireTool(t, "curl", "apt-get install curl")
	w := newWorld(t, e)
	if err := os.WriteFile(filepath.Join(e.work, "a.txt"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	layerDir := filepath.Join(e.base, "layer")
	ra := reviewAllowlist(layerDir)
	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	curl := "curl -q -sS --max-time 20 "

	// The holder is made by a command of another profile first.
	o := e.sh(`echo new > a.txt`, func(r *sandbox.Request) { r.LayerDir = layerDir })
	if o.res.ExitCode != 0 {
		t.Fatalf("workspace command in review mode:\n%s", o)
	}

	// A background command: waits (with a generous deadline) for a file
	// that a later command makes, then uses the network.
	bg := make(chan string, 1)
	go func() {
		var so strings.Builder
		req := &sandbox.Request{Argv: []string{"/bin/sh", "-c", `echo "net=$(readlink /proc/self/ns/net)"; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; cat b.txt; ` + curl + `http://api.allowed.test/bg`},
			Env: e.envv, Policy: sandbox.Policy{Workdir: e.work}, Stdout: &so, Stderr: &so, Timeout: 3 * time.Minute}
		ra(req)
		_, err := e.backend.Run(context.Background(), req)
		bg <- fmt.Sprint(so.String(), err)
	}()

	o = e.sh(`cat a.txt; echo more >> a.txt; echo b > b.txt
`+curl+`http://api.allowed.test/fg; echo
`+curl+`-w '\n%{http_code}\n' http://evil.test/x
echo "net=$(readlink /proc/self/ns/net)"
echo 'IF<'; cat /proc/net/dev; echo '>IF'
for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done`, ra)
	mustContain(t, o, "new\n", "hello host=api.allowed.test path=/fg tls=false", "blocked by corral network allowlist: evil.test", "\n403\n")
	mustNotContain(t, o, netForwardArg(), layerHoldArg)
	if got := interfaces(o.stdout); len(got) != 1 || got[0] != "lo" {
		t.Errorf("interfaces %q, want lo alone\n%s", got, o)
	}
	fgNet := lineWith(o.stdout, "net=")
	if fgNet == "" || fgNet == "net="+hostNet {
		t.Errorf("the command's network namespace %q is the host's (%s) or unknown", fgNet, hostNet)
	}
	w.log.waitFor(t, "network.denied", "evil.test")
	if b, _ := os.ReadFile(filepath.Join(e.work, "a.txt")); string(b) != "old\n" {
		t.Errorf("host a.txt changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(e.work, "b.txt")); err == nil {
		t.Error("b.txt was made on the host")
	}

	// The foreground command has ended; the background one goes on.
	if o := e.sh(`touch go`, ra); o.res.ExitCode != 0 {
		t.Fatalf("touch go:\n%s", o)
	}
	got := <-bg
	if !strings.Contains(got, "b\nhello host=api.allowed.test path=/bg tls=false") {
		t.Errorf("the background command after the others ended:\n%s", got)
	}
	if n := lineWith(got, "net="); n != fgNet {
		t.Errorf("background command in %q, foreground one in %q: want the session's one namespace", n, fgNet)
	}

	// Close ends the holder and its forwarder.
	e.backend.layers.mu.Lock()
	var holders []int
	for _, h := range e.backend.layers.m {
		holders = append(holders, h.cmd.Process.Pid, h.pid)
	}
	e.backend.layers.mu.Unlock()
	if len(holders) != 2 {
		t.Fatalf("holders %v, want one", holders)
	}
	// A foreground command's own forwarder may still be ending.
	if n := waitForwarderSandboxes(1); n != 1 {
		t.Errorf("%d forwarder sandboxes (%v), want the holder's one", n, forwarderPids())
	}
	// The forwarder holds no capability and runs under the filter, as the
	// pool's does.
	checked := 0
	for _, p := range forwarderPids() {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(comm)) == "bwrap" {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
			if !strings.Contains(string(st), want) {
				t.Errorf("forwarder %d: status lacks %q", p, want)
			}
		}
		checked++
	}
	if checked != 1 {
		t.Errorf("%d forwarder processes, want 1", checked)
	}
	e.backend.Close()
	waitNoForwarder(t)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if !running(holders[0]) && !running(holders[1]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("holder processes %v still run after Close", holders)
		}
	}
}

// forwarderSandboxes counts the forwarder sandboxes among this process's
// descendants: forwarderPids lists bwrap, its pid 1 and the forwarder
// of each; the outermost is the one whose parent is not listed.
func forwarderSandboxes() int {
	pids := forwarderPids()
	n := 0
	for _, p := range pids {
		if pp, ok := ppidOf(p); ok && !slices.Contains(pids, pp) {
			n++
		}
	}
	return n
}

// waitForwarderSandboxes waits until forwarderSandboxes is want, or a
// minute has passed (only a forwarder that never ends waits that long),
// and returns the last count.
func waitForwarderSandboxes(want int) int {
	n := forwarderSandboxes()
	for deadline := time.Now().Add(time.Minute); n != want && time.Now().Before(deadline); n = forwarderSandboxes() {
		time.Sleep(50 * time.Millisecond)
	}
	return n
}

// netForwardArg is the forwarder's re-exec name (its command line).
func netForwardArg() string { return egress.ServeArgv("x", "/d", 3)[1] }

// TestReviewAllowlistSecrets: a session's secrets work in review mode,
// the trust bundle bound in the layer's view too, and a change of the
// session's server (secrets added) moves the holder's forwarder to the
// new one.
func TestReviewAllowlistSecrets(t *testing.T) {
	e := newEnv(t)
	requireTool(t, "curl", "apt-get install curl")
	w := newSecretsWorld(t, e)
	// A state directory off the way to the working directory, as root's
	// (/root/.local/state/corral) is for a project elsewhere: a root
	// caller's layer view must reach its trust bundles all the same.
	state := filepath.Join(e.base, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	e.backend = New(Options{StateDir: state, HiddenDirs: []string{filepath.Join(e.home, ".config", "corral")}, Egress: w.pool})
	layerDir := filepath.Join(e.base, "layer")
	ra := reviewAllowlist(layerDir)
	// The holder and its first forwarder are made without secrets.
	o := e.sh(`curl -q -sS --max-time 20 --cacert upstream-ca.pem https://api.allowed.test/plain`, ra)
	mustContain(t, o, "hello host=api.allowed.test path=/plain")
	o = e.sh(`curl -q -sS --max-time 20 -H "Authorization: Bearer $GITHUB_TOKEN" https://api.allowed.test/secret; echo; echo "cert=$SSL_CERT_FILE"`, ra, func(r *sandbox.Request) {
		r.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.allowed.test"}}}
	})
	mustContain(t, o, "hello host=api.allowed.test path=/secret", "cert=/etc/ssl/certs/ca-certificates.crt")
	mustNotContain(t, o, realGH)
	if !strings.Contains(w.seen(), "api.allowed.test GET /secret auth=Bearer "+realGH) {
		t.Errorf("the server did not get the real token:\n%s", w.seen())
	}
	// The old server's forwarder ends once it is replaced.
	if n := waitForwarderSandboxes(1); n != 1 {
		t.Errorf("%d forwarder sandboxes after the server changed (%v), want 1", n, forwarderPids())
	}
	e.backend.Close()
	waitNoForwarder(t)
}

// reviewAllowlistArg is the re-exec mode of TestReviewAllowlistKilled's
// corral: argv is [exe, reviewAllowlistArg, STATE, WORK, LAYER, NETDIR].
const reviewAllowlistArg = "__corral-test-review-allowlist"

func init() { reexec.Register(reviewAllowlistArg, reviewAllowlistMain) }

// reviewAllowlistMain runs a review+allowlist command that says "up" and
// sleeps, until it is killed.
func reviewAllowlistMain(args []string) int {
	if len(args) != 4 {
		return 2
	}
	pool := egress.NewPool(egress.Options{Dir: args[3], Linger: -1})
	b := New(Options{StateDir: args[0], Egress: pool})
	req := &sandbox.Request{Argv: []string{"/bin/sh", "-c", "echo up; exec sleep 300"}, Env: []string{"PATH=/usr/bin:/bin", "GORACE=atexit_sleep_ms=0"},
		Policy: sandbox.Policy{Workdir: args[1]}, Stdout: os.Stdout, Stderr: os.Stderr}
	reviewAllowlist(args[2])(req)
	if _, err := b.Run(context.Background(), req); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	return 0
}

// processesMentioning returns the pids whose command line holds s.
func processesMentioning(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == os.Getpid() {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), s) && running(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestReviewAllowlistKilled: a corral killed (SIGKILL) while a
// review+allowlist command runs leaves neither the layer's holder nor its
// forwarder behind, once the orphan sweep has run (they end by
// themselves: their standard input, a pipe only corral held, ends).
func TestReviewAllowlistKilled(t *testing.T) {
	e := newEnv(t)
	layerDir := filepath.Join(e.base, "layer")
	netDir := filepath.Join(e.base, "net")
	cmd := exec.Command("/proc/self/exe", reviewAllowlistArg, e.state, e.work, layerDir, netDir)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "up\n" {
			t.Fatalf("the killed corral's command said %q", s)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the command did not start within two minutes")
	}
	// Its holder (the overlay's lower directory is e.work) and forwarder
	// (relaying to a socket under netDir) run.
	holders := filterMentioning(processesMentioning(layerHoldArg), e.work)
	fwds := filterMentioning(processesMentioning(netDir), netForwardArg())
	if len(holders) == 0 || len(fwds) == 0 {
		t.Fatalf("holders %v forwarders %v while the command runs, want both", holders, fwds)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	SweepOrphans()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left := append(filterMentioning(processesMentioning(layerHoldArg), e.work), filterMentioning(processesMentioning(netDir), netForwardArg())...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left after corral was killed: %v", left)
		}
	}
}

// filterMentioning keeps the pids whose command line holds s.
func filterMentioning(pids []int, s string) []int {
	var out []int
	for _, p := range pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); err == nil && strings.Contains(string(b), s) {
			out = append(out, p)
		}
	}
	return out
}
