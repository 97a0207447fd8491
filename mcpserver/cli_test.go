package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/corralhq/corral/reexec"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tests in this file drive the corral binary as an MCP client nobody
// here wrote would: `corral mcp` over stdio and `corral serve` over HTTP.

var (
	buildOnce sync.Once
	corralBin string
	buildErr  error
)

// corral returns the corral binary, built once for the package's tests
// (or $CORRAL_TEST_BIN where there is no go tool, as in CI's unprivileged
// pass).
func corral(t *testing.T) string {
	t.Helper()
	requireBwrap(t)
	buildOnce.Do(func() {
		if pre := os.Getenv("CORRAL_TEST_BIN"); pre != "" {
			corralBin = pre
			return
		}
		dir, err := os.MkdirTemp(testRoot(), "corral-mcp-bin-*")
		if err != nil {
			buildErr = err
			return
		}
		os.Chmod(dir, 0o755)
		corralBin = filepath.Join(dir, "corral")
		out, err := exec.Command("go", "build", "-o", corralBin, "../cmd/corral").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building corral: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return corralBin
}

func TestMain(m *testing.M) {
	// The test binary serves as corral's helpers (the file server), as
	// corral's main does.
	reexec.Init()
	code := m.Run()
	if corralBin != "" && os.Getenv("CORRAL_TEST_BIN") == "" {
		os.RemoveAll(filepath.Dir(corralBin))
	}
	os.Exit(code)
}

// cliEnv is a home with a settings file, for the binary.
type cliEnv struct {
	home, work string
	env        []string
}

// newCLIEnv makes a home whose settings file holds settings (YAML) with
// cwd set to its work directory.
func newCLIEnv(t *testing.T, settings string) *cliEnv {
	t.Helper()
	base, err := os.MkdirTemp(testRoot(), "corral-mcp-cli-*")
	if err != nil {
		t.Fatal(err)
	}
	base, _ = filepath.EvalSymlinks(base)
	t.Cleanup(func() { os.RemoveAll(base) })
	c := &cliEnv{home: filepath.Join(base, "home")}
	c.work = filepath.Join(c.home, "work")
	cfg := filepath.Join(c.home, ".config", "corral", "config.yaml")
	for _, d := range []string{c.work, filepath.Dir(cfg)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	body := fmt.Sprintf("cwd: %s\nmemory_mb: 2048\ntimeout: 60\n%s", c.work, settings)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c.env = []string{"HOME=" + c.home, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	return c
}

// mcpCmd returns `corral mcp args...` in the environment.
func (c *cliEnv) command(t *testing.T, extraEnv []string, args ...string) *exec.Cmd {
	cmd := exec.Command(corral(t), args...)
	cmd.Env = append(append([]string{}, c.env...), extraEnv...)
	cmd.Dir = c.work
	return cmd
}

// stdioClient starts `corral mcp args...` and connects to it.
func (c *cliEnv) stdioClient(t *testing.T, stderr *syncBuffer, args ...string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	cmd := c.command(t, nil, append([]string{"mcp", "--log-level", "info"}, args...)...)
	if stderr != nil {
		cmd.Stderr = stderr
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-test", Version: "v0"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connecting to corral mcp: %v (stderr: %s)", err, stderr)
	}
	return cs, cmd
}

// pipedMCP starts `corral mcp args...` on pipes the test owns (so that the
// test, not the client, waits for the process and closes its stdin) and
// connects to it.
func (c *cliEnv) pipedMCP(t *testing.T, stderr *syncBuffer, args ...string) (cs *mcp.ClientSession, cmd *exec.Cmd, stdin io.Closer, exited <-chan error) {
	t.Helper()
	cmd, in, out, ch := c.startMCP(t, stderr, args...)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "piped-test", Version: "v0"}, nil).Connect(context.Background(), &mcp.IOTransport{Reader: out, Writer: nopWriteCloser{in}}, nil)
	if err != nil {
		t.Fatalf("connecting to corral mcp: %v (stderr: %s)", err, stderr)
	}
	return cs, cmd, in, ch
}

// startMCP starts `corral mcp --log-level info ARGS` with its stdin and
// stdout as pipes and stderr into stderr (if not nil); exited receives
// its Wait's error. It is killed at the test's end.
func (c *cliEnv) startMCP(t *testing.T, stderr *syncBuffer, args ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser, <-chan error) {
	t.Helper()
	cmd := c.command(t, nil, append([]string{"mcp", "--log-level", "info"}, args...)...)
	if stderr != nil {
		cmd.Stderr = stderr
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, in, out, exited
}

// nopWriteCloser keeps the client's Close from closing stdin: the test
// closes it.
type nopWriteCloser struct{ w io.Writer }

func (n nopWriteCloser) Write(p []byte) (int, error) { return n.w.Write(p) }
func (nopWriteCloser) Close() error                  { return nil }

// syncBuffer is a bytes.Buffer safe for a process writing and a test
// reading.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStdioBinary drives `corral mcp` with the SDK's client over stdio:
// every tool, bad input, the instructions, a clean exit at the end of
// stdin.
func TestStdioBinary(t *testing.T) {
	c := newCLIEnv(t, "profile: workspace\n")
	var stderr syncBuffer
	cs, _ := c.stdioClient(t, &stderr, "--session", "stdio-1")

	// serverInfo names corral and its version, as `corral version --json`.
	var build struct {
		Version, Revision string
		Modified          bool
	}
	if out, err := exec.Command(corral(t), "version", "--json").Output(); err != nil || json.Unmarshal(out, &build) != nil {
		t.Errorf("corral version --json: %v %q", err, out)
	} else if si := cs.InitializeResult().ServerInfo; si == nil || si.Name != ServerName || !strings.HasPrefix(si.Version, build.Version) ||
		(build.Version == "dev" && build.Revision != "" && !strings.Contains(si.Version, build.Revision[:12])) {
		t.Errorf("serverInfo %+v, build %+v", si, build)
	}
	instr := cs.InitializeResult().Instructions
	for _, w := range []string{`"stdio-1"`, "under the workspace profile", "Working directory: " + c.work, "Network: none", "2048 MiB"} {
		if !strings.Contains(instr, w) {
			t.Errorf("instructions lack %q:\n%s", w, instr)
		}
	}
	if got := bash(t, cs, "cd /usr && export V=1").str("cwd"); got != "/usr" {
		t.Errorf("cwd = %q", got)
	}
	if got := bash(t, cs, "pwd; echo $V").str("output"); got != "/usr\n1\n" {
		t.Errorf("state did not carry over: %q", got)
	}
	if got := bash(t, cs, "cd "+c.work+" && echo hi > made && cat made").str("output"); got != "hi\n" {
		t.Errorf("writing the working directory: %q", got)
	}
	if r := bash(t, cs, "ls -A ~/.config 2>&1; ls ~/.config/corral 2>&1"); strings.Contains(r.str("output"), "config.yaml") {
		t.Errorf("the settings file is visible in the sandbox: %q", r.str("output"))
	}
	id := callTool(t, cs, "bash", map[string]any{"command": "echo from-bg", "background": true}).ok(t).str("id")
	if got := waitEnded(t, cs, id).str("output"); got != "from-bg\n" {
		t.Errorf("bash_output = %q", got)
	}
	callTool(t, cs, "bash_kill", map[string]any{"id": id}).ok(t)
	if hasExec("python3") {
		if got := callTool(t, cs, "run_code", map[string]any{"code": "print('py')"}).ok(t).str("output"); got != "py\n" {
			t.Errorf("run_code = %q", got)
		}
	}
	for _, args := range []map[string]any{
		{},
		{"command": 1},
		{"command": strings.Repeat("z", 10<<20)},
		{"command": "a\x00b"},
		{"command": "true", "timeout_s": -1},
	} {
		if r := callTool(t, cs, "bash", args); !r.isError {
			t.Errorf("bash(%.60v) succeeded", args)
		}
	}
	bash(t, cs, "true")

	start := time.Now()
	if err := cs.Close(); err != nil {
		t.Errorf("corral mcp exited with %v after the end of stdin; stderr:\n%s", err, stderr.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("corral mcp took %s to exit after the end of stdin", d)
	}
	for _, ev := range []string{"mcp.server.started", "mcp.session.opened", "mcp.tool.called", "mcp.tool.done", "mcp.tool.rejected", "mcp.server.stopped"} {
		if !strings.Contains(stderr.String(), ev) {
			t.Errorf("stderr lacks the log event %s", ev)
		}
	}
}

// TestStdioDefaultSession: without --session the session is named after
// the working directory, and a second server in the same directory finds
// its state again.
func TestStdioDefaultSession(t *testing.T) {
	c := newCLIEnv(t, "")
	cs, _ := c.stdioClient(t, nil)
	if instr := cs.InitializeResult().Instructions; !strings.Contains(instr, fmt.Sprintf("%q", "dir:"+c.work)) {
		t.Errorf("instructions do not name the session dir:%s:\n%s", c.work, instr)
	}
	bash(t, cs, "export KEPT=yes")
	cs.Close()
	cs2, _ := c.stdioClient(t, nil)
	defer cs2.Close()
	if got := bash(t, cs2, "echo $KEPT").str("output"); got != "yes\n" {
		t.Errorf("a new corral mcp in the same directory sees %q", got)
	}
}

// TestStdioRoutes: the routes setting picks the profile by session name.
func TestStdioRoutes(t *testing.T) {
	c := newCLIEnv(t, "profile: workspace\nroutes:\n  - {sessions: \"ro:*\", profile: restricted}\n")
	for _, tc := range []struct {
		session, profile string
		writeOK          bool
	}{
		{"ro:1", "restricted", false},
		{"rw:1", "workspace", true},
	} {
		t.Run(tc.session, func(t *testing.T) {
			cs, _ := c.stdioClient(t, nil, "--session", tc.session)
			defer cs.Close()
			if instr := cs.InitializeResult().Instructions; !strings.Contains(instr, "under the "+tc.profile+" profile") {
				t.Errorf("instructions do not say %s:\n%s", tc.profile, instr)
			}
			r := callTool(t, cs, "bash", map[string]any{"command": "touch " + c.work + "/f-" + tc.profile}).ok(t)
			if ok := r.num("exit_code") == 0; ok != tc.writeOK {
				t.Errorf("writing the working directory under %s: %s", tc.profile, r.text)
			}
		})
	}
}

// TestStdioSignal: SIGTERM ends corral mcp, the command in flight and the
// background processes with it; nothing is left behind.
func TestStdioSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			c := newCLIEnv(t, "")
			var stderr syncBuffer
			cs, cmd, _, exited := c.pipedMCP(t, &stderr, "--session", "sig")
			bg, fg := marker(), marker()
			callTool(t, cs, "bash", map[string]any{"command": "sleep " + bg + " & sleep " + bg + "; wait", "background": true}).ok(t)
			go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep " + fg}})
			waitProcesses(t, bg, 2, 10*time.Second)
			waitProcesses(t, fg, 1, 10*time.Second)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("corral mcp exited with %v on %s; stderr:\n%s", err, sig, stderr.String())
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("corral mcp still runs 10 s after %s", sig)
			}
			if n := len(processesWith(bg)) + len(processesWith(fg)); n != 0 {
				t.Errorf("%d processes outlived corral mcp: %v %v", n, psLines(bg), psLines(fg))
			}
		})
	}
}

// TestStdioEndOfInputDuringCommand: the client going away (stdin closed)
// mid-command ends the command and corral mcp.
func TestStdioEndOfInputDuringCommand(t *testing.T) {
	c := newCLIEnv(t, "")
	cs, _, stdin, exited := c.pipedMCP(t, nil, "--session", "eof")
	mk := marker()
	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep " + mk}})
	waitProcesses(t, mk, 1, 10*time.Second)
	stdin.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("corral mcp exited with %v at the end of stdin", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("corral mcp still runs 10 s after the end of stdin")
	}
	waitProcesses(t, mk, 0, time.Second)
}

func TestMCPBadSettings(t *testing.T) {
	c := newCLIEnv(t, "cpu_seconds: lots\n")
	cmd := c.command(t, nil, "mcp")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), `cpu_seconds: "lots"`) {
		t.Errorf("corral mcp with a bad setting: %v %s", err, out)
	}
	c = newCLIEnv(t, "")
	cmd = c.command(t, nil, "mcp", "--session", "bad\nname")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "control character") {
		t.Errorf("corral mcp --session with a newline: %v %s", err, out)
	}
}

// serveProc is a running `corral serve`.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	token  string // the kept bearer token it printed the path of, if any
	stderr *syncBuffer
	exited chan error
}

var (
	servingRE = regexp.MustCompile(`serving MCP at (http://\S+/mcp)`)
	tokenRE   = regexp.MustCompile(`Bearer \$\(cat (\S+)\)`)
)

// keptToken reads the token file a serve's stderr names, or "" when it
// names none.
func keptToken(t *testing.T, stderr string) string {
	t.Helper()
	m := tokenRE.FindStringSubmatch(stderr)
	if m == nil {
		return ""
	}
	b, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatalf("the token file serve names: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// connect connects to p with its kept token, if any, and headers.
func (p *serveProc) connect(t *testing.T, version string, headers ...string) (*mcp.ClientSession, error) {
	if p.token != "" {
		headers = append([]string{"Authorization", "Bearer " + p.token}, headers...)
	}
	return httpConnect(t, p.url, version, headers...)
}

// serve starts `corral serve args...` and waits until it listens.
func (c *cliEnv) serve(t *testing.T, extraEnv []string, args ...string) *serveProc {
	t.Helper()
	cmd := c.command(t, extraEnv, append([]string{"serve", "--log-level", "info"}, args...)...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	p := &serveProc{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.stderr.Write(append(sc.Bytes(), '\n'))
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		pr.Close()
	}()
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
	})
	select {
	case p.url = <-urls:
	case err := <-p.exited:
		t.Fatalf("corral serve exited: %v\n%s", err, p.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("corral serve did not start listening:\n%s", p.stderr)
	}
	// The token line follows the URL's.
	for i := 0; i < 100 && !strings.Contains(p.stderr.String(), "Bearer") && !strings.Contains(p.stderr.String(), "no bearer token"); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	p.token = keptToken(t, p.stderr.String())
	return p
}

// httpConnect connects to a running serve.
func httpConnect(t *testing.T, url, version string, headers ...string) (*mcp.ClientSession, error) {
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: httpClient(headers...), MaxRetries: -1}
	var so *mcp.ClientSessionOptions
	if version != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "serve-test", Version: "v0"}, nil).Connect(context.Background(), tr, so)
	if err == nil {
		t.Cleanup(func() { closeSoon(cs) })
	}
	return cs, err
}

// closeSoon closes a client session, giving up after a few seconds: Close
// waits for calls in flight, which a stopped server never answers.
func closeSoon(cs *mcp.ClientSession) {
	done := make(chan struct{})
	go func() { cs.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
	}
}

// TestServeBinary drives `corral serve` over HTTP: both revisions, the
// session header, and a clean stop on SIGTERM that leaves nothing behind.
func TestServeBinary(t *testing.T) {
	c := newCLIEnv(t, "profile: workspace\n")
	p := c.serve(t, nil, "--listen", "127.0.0.1:0", "--session", "http-default")
	legacyA, err := p.connect(t, legacyVersion)
	if err != nil {
		t.Fatal(err)
	}
	legacyB, err := p.connect(t, legacyVersion)
	if err != nil {
		t.Fatal(err)
	}
	chat, err := p.connect(t, "", SessionHeader, "tg:77")
	if err != nil {
		t.Fatal(err)
	}
	stateless, err := p.connect(t, "")
	if err != nil {
		t.Fatal(err)
	}
	bash(t, legacyA, "export WHO=A")
	if got := bash(t, legacyB, `echo "[$WHO]"`).str("output"); got != "[]\n" {
		t.Errorf("two MCP sessions share a corral session: %q", got)
	}
	bash(t, chat, "export CHAT=77")
	chat2, err := p.connect(t, legacyVersion, SessionHeader, "tg:77")
	if err != nil {
		t.Fatal(err)
	}
	if got := bash(t, chat2, "echo $CHAT").str("output"); got != "77\n" {
		t.Errorf("the header did not select session tg:77: %q", got)
	}
	if instr := stateless.InitializeResult().Instructions; !strings.Contains(instr, `"http-default"`) {
		t.Errorf("stateless client's instructions do not name the default session:\n%s", instr)
	}

	bg, fg := marker(), marker()
	callTool(t, legacyA, "bash", map[string]any{"command": "sleep " + bg, "background": true}).ok(t)
	callTool(t, stateless, "bash", map[string]any{"command": "sleep " + bg, "background": true}).ok(t)
	go chat.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep " + fg}})
	waitProcesses(t, bg, 2, 10*time.Second)
	waitProcesses(t, fg, 1, 10*time.Second)

	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("corral serve exited with %v on SIGTERM:\n%s", err, p.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("corral serve still runs 15 s after SIGTERM:\n%s", p.stderr)
	}
	if n := len(processesWith(bg)) + len(processesWith(fg)); n != 0 {
		t.Errorf("%d processes outlived corral serve: %v %v", n, psLines(bg), psLines(fg))
	}
	for _, ev := range []string{"mcp.server.started", "mcp.server.stopping", "mcp.server.stopped", "mcp.session.opened"} {
		if !strings.Contains(p.stderr.String(), ev) {
			t.Errorf("stderr lacks the log event %s:\n%s", ev, p.stderr)
		}
	}
}

// TestServeListenRules: beyond loopback serve needs a token and refuses to
// start without one; with one, every request must carry it.
func TestServeListenRules(t *testing.T) {
	c := newCLIEnv(t, "")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"all interfaces without a token", nil, []string{"--listen", "0.0.0.0:0"}, "refusing to listen on 0.0.0.0:0 without a bearer token"},
		{"empty host without a token", nil, []string{"--listen", ":0"}, "without a bearer token"},
		{"listen setting without a token", []string{"CORRAL_LISTEN=0.0.0.0:0"}, nil, "refusing to listen"},
		{"a token too short", []string{"CORRAL_TOKEN=short"}, []string{"--listen", "0.0.0.0:0"}, "too short"},
		{"not host:port", nil, []string{"--listen", "nonsense"}, "not host:port"},
		{"--no-token beyond loopback", nil, []string{"--listen", "0.0.0.0:0", "--no-token"}, "without a bearer token"},
		{"--no-token and a token", []string{"CORRAL_TOKEN=0123456789abcdef0123"}, []string{"--listen", "127.0.0.1:0", "--no-token"}, "drop one of them"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := c.command(t, tc.env, append([]string{"serve"}, tc.args...)...)
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatal("corral serve started")
			}
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), tc.want) {
				t.Errorf("corral serve %v: %v %s; want exit 125 and %q", tc.args, err, out, tc.want)
			}
		})
	}

	const token = "0123456789abcdef0123456789abcdef"
	p := c.serve(t, []string{"CORRAL_TOKEN=" + token}, "--listen", "0.0.0.0:0")
	url := strings.Replace(p.url, "0.0.0.0", "127.0.0.1", 1)
	url = strings.Replace(url, "[::]", "127.0.0.1", 1)
	if _, err := httpConnect(t, url, ""); err == nil {
		t.Error("connected without the token")
	}
	if _, err := httpConnect(t, url, "", "Authorization", "Bearer wrong-"+token); err == nil {
		t.Error("connected with a wrong token")
	}
	cs, err := httpConnect(t, url, "", "Authorization", "Bearer "+token)
	if err != nil {
		t.Fatalf("with the token: %v\n%s", err, p.stderr)
	}
	bash(t, cs, "true")
	if !strings.Contains(p.stderr.String(), "mcp.http.unauthorized") {
		t.Errorf("refused requests were not logged:\n%s", p.stderr)
	}
}

// TestServeLoopbackToken: on loopback too, serve requires a bearer token
// by default (other users and network-profile sandboxes reach loopback);
// without a token setting it makes one, keeps it where no sandbox sees it
// even when the state directory lies in the workspace, and keeps it
// across restarts; it refuses a token file others could read or that is a
// link; --no-token serves without one, with a warning.
func TestServeLoopbackToken(t *testing.T) {
	// No tool cache: it would lie in the workspace with the state
	// directory, which policy refuses.
	c := newCLIEnv(t, "profile: workspace\ntool_caches: off\n")
	state := filepath.Join(c.work, ".state")
	env := []string{"XDG_STATE_HOME=" + state}
	file := filepath.Join(state, "corral", TokenFileName)

	p := c.serve(t, env, "--listen", "127.0.0.1:0")
	if p.token == "" {
		t.Fatalf("serve named no token file:\n%s", p.stderr)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v (want mode 0600)", file, err)
	}
	if strings.Contains(p.stderr.String(), p.token) {
		t.Errorf("serve printed the token itself:\n%s", p.stderr)
	}
	if _, err := httpConnect(t, p.url, ""); err == nil {
		t.Error("connected to a loopback serve without the token")
	}
	// A refusal says where the token is.
	if resp, err := http.Post(p.url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)); err != nil {
		t.Error(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(string(body), "keeps the token in "+file) {
			t.Errorf("without the token: %d %q, want 401 naming %s", resp.StatusCode, body, file)
		}
	}
	cs, err := p.connect(t, "")
	if err != nil {
		t.Fatalf("with the kept token: %v\n%s", err, p.stderr)
	}
	// The state directory is in the workspace here: still hidden.
	if r := callTool(t, cs, "bash", map[string]any{"command": "cat " + file + " 2>&1; ls -a " + state + "/corral 2>&1"}); strings.Contains(r.text, p.token) || strings.Contains(r.text, "\n"+TokenFileName+"\n") {
		t.Errorf("a sandboxed command saw the token file:\n%s", r.text)
	}
	p.cmd.Process.Signal(os.Interrupt)
	<-p.exited

	p2 := c.serve(t, env, "--listen", "127.0.0.1:0")
	if p2.token != p.token || !strings.Contains(p2.stderr.String(), "the token was kept there") {
		t.Errorf("after a restart the token changed (%q, was %q):\n%s", p2.token, p.token, p2.stderr)
	}
	p2.cmd.Process.Signal(os.Interrupt)
	<-p2.exited

	refuse := func(why string) {
		t.Helper()
		out, err := c.command(t, env, "serve", "--listen", "127.0.0.1:0").CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), why) || !strings.Contains(string(out), "remove it") {
			t.Errorf("serve with a bad token file: %v %s; want exit 125 and %q", err, out, why)
		}
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	refuse("read or written by others")
	other := filepath.Join(c.home, "elsewhere")
	if err := os.WriteFile(other, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(file)
	if err := os.Symlink(other, file); err != nil {
		t.Fatal(err)
	}
	refuse("symbolic link")
	os.Remove(file)
	if err := os.WriteFile(file, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refuse("does not hold a token")

	p3 := c.serve(t, env, "--listen", "127.0.0.1:0", "--no-token")
	if !strings.Contains(p3.stderr.String(), "warning: no bearer token") {
		t.Errorf("--no-token gave no warning:\n%s", p3.stderr)
	}
	cs3, err := httpConnect(t, p3.url, "")
	if err != nil {
		t.Fatalf("--no-token: %v\n%s", err, p3.stderr)
	}
	bash(t, cs3, "true")
}
