package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
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
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/k8stest"
)

// The tests in this file drive `corral serve`'s probes and metrics over
// real HTTP, with the MCP SDK's client making the tool calls
// (docs/serve.md).

// opsServe is a running `corral serve`.
type opsServe struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT
	token  string // the kept token, "" under --no-token
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{} // closed when stderr is read to its end
	exited chan error
}

var (
	opsServingRE = regexp.MustCompile(`serving MCP at (http://\S+)/mcp`)
	opsTokenRE   = regexp.MustCompile(`Bearer \$\(cat (\S+)\)`)
)

// serveOps starts `corral serve --listen 127.0.0.1:0 --log-level info
// ARGS` in c's home and waits for its URL and token lines.
func serveOps(t *testing.T, c *cli, env []string, args ...string) *opsServe {
	t.Helper()
	cmd := exec.Command(corralBin, append([]string{"serve", "--listen", "127.0.0.1:0", "--log-level", "info"}, args...)...)
	cmd.Dir = c.work
	cmd.Env = append(append([]string{}, c.env...), env...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	p := &opsServe{t: t, cmd: cmd, done: make(chan struct{}), exited: make(chan error, 1)}
	lines := make(chan string, 64)
	go func() {
		defer close(p.done)
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.Write(append(sc.Bytes(), '\n'))
			p.mu.Unlock()
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	// The token line ("clients send ..." or the --no-token warning)
	// follows the URL's.
	deadline := time.After(60 * time.Second)
	for p.base == "" || (p.token == "" && !strings.Contains(p.log(), "no bearer token") && !strings.Contains(p.log(), "TOKEN being the token setting")) {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("corral serve exited: %v\n%s", <-p.exited, p.log())
			}
			if m := opsServingRE.FindStringSubmatch(l); m != nil {
				p.base = m[1]
			}
			if m := opsTokenRE.FindStringSubmatch(l); m != nil {
				b, err := os.ReadFile(m[1])
				if err != nil {
					t.Fatal(err)
				}
				p.token = strings.TrimSpace(string(b))
			}
		case <-deadline:
			t.Fatalf("corral serve did not start:\n%s", p.log())
		}
	}
	return p
}

func (p *opsServe) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// stop ends the server with SIGTERM and returns its whole stderr.
func (p *opsServe) stop() string {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-p.exited; err != nil {
		p.t.Errorf("corral serve on SIGTERM: %v", err)
	}
	<-p.done
	return p.log()
}

// get sends method path with the token when withToken, and returns the
// status, headers and body.
func (p *opsServe) get(method, path string, withToken bool) (int, http.Header, string) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.base+path, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	if withToken && p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// scrape reads /metrics with the token through the reference parser.
func (p *opsServe) scrape() map[string]*dto.MetricFamily {
	p.t.Helper()
	code, h, body := p.get("GET", "/metrics", true)
	if code != 200 || h.Get("Content-Type") != "text/plain; version=0.0.4; charset=utf-8" {
		p.t.Fatalf("/metrics: %d %q\n%s", code, h.Get("Content-Type"), body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		p.t.Fatalf("the reference parser refuses /metrics: %v\n%s", err, body)
	}
	return fams
}

// sample is the value of the series of family name whose labels include
// want (0 when there is none).
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// callOps calls tool with args and returns the result's text and
// whether it is an error.
func callOps(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return err.Error(), true
	}
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), r.IsError
}

// bearerTransport adds the token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestServeProbesAndMetrics: /healthz and /readyz answer without the
// token (the reasons of a failed check only with it), other methods get
// 405; /metrics needs the token and, after real tool calls through the
// SDK's client, counts them by tool and outcome with a consistent
// latency histogram, counts the denials, and every log line of a call
// carries its session, MCP session and call id.
func TestServeProbesAndMetrics(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	p := serveOps(t, c, []string{"CORRAL_PROFILE=workspace"}, "--session", "ops-default")
	if p.token == "" {
		t.Fatalf("no kept token:\n%s", p.log())
	}
	for _, m := range []string{"GET", "HEAD"} {
		if code, _, body := p.get(m, "/healthz", false); code != 200 || (m == "GET" && body != "ok\n") {
			t.Errorf("%s /healthz: %d %q", m, code, body)
		}
	}
	code, _, body := p.get("GET", "/readyz", false)
	if code != 200 || body != "ready\nok   settings\nok   bwrap\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		for _, m := range []string{"POST", "PUT", "DELETE"} {
			if code, h, _ := p.get(m, path, true); code != 405 || h.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d Allow %q, want 405 with Allow: GET, HEAD", m, path, code, h.Get("Allow"))
			}
		}
	}
	if code, h, _ := p.get("GET", "/metrics", false); code != 401 || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("/metrics without the token: %d %v", code, h)
	}
	// (The reference parser leaves out a family with no series yet: the
	// call counters are looked for after the calls.)
	before := p.scrape()

	// A client of the revision with MCP sessions, so that its calls have
	// an Mcp-Session-Id to log.
	tr := &mcp.StreamableClientTransport{Endpoint: p.base + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{p.token}}, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "ops-test", Version: "v0"}, nil).Connect(context.Background(), tr, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	mcpID := cs.ID()
	if mcpID == "" {
		t.Fatal("no MCP session id")
	}
	for i := range 3 {
		if out, isErr := callOps(t, cs, "bash", map[string]any{"command": fmt.Sprintf("echo call-%d", i)}); isErr || !strings.Contains(out, fmt.Sprintf("call-%d", i)) {
			t.Errorf("bash %d: %v %s", i, isErr, out)
		}
	}
	// A write outside the writable set: the command runs (outcome ok) and
	// its result names a read-only denial.
	if out, _ := callOps(t, cs, "bash", map[string]any{"command": "touch /usr/corral-ops-test"}); !strings.Contains(out, "read-only") {
		t.Errorf("touch /usr: %s", out)
	}
	// The floor: refused, never run.
	if out, isErr := callOps(t, cs, "bash", map[string]any{"command": "rm -rf /"}); !isErr || !strings.Contains(out, "hard floor") {
		t.Errorf("rm -rf /: %v %s", isErr, out)
	}
	if _, isErr := callOps(t, cs, "read_file", map[string]any{"path": "no-such-file"}); !isErr {
		t.Error("read_file of a missing file did not fail")
	}
	// Arguments the schema refuses: outcome invalid.
	if _, isErr := callOps(t, cs, "bash", map[string]any{"command": 7}); !isErr {
		t.Error("bash with a number for a command did not fail")
	}
	after := p.scrape()
	for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds",
		"go_goroutines", "go_info", "corral_build_info", "corral_tool_calls_total", "corral_tool_call_duration_seconds",
		"corral_tool_calls_in_flight", "corral_sessions_open", "corral_mcp_sessions_open", "corral_denials_total"} {
		if after[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	delta := func(name string, labels map[string]string) float64 {
		return sample(after, name, labels) - sample(before, name, labels)
	}
	for _, w := range []struct {
		labels map[string]string
		n      float64
	}{
		{map[string]string{"tool": "bash", "outcome": "ok"}, 4},
		{map[string]string{"tool": "bash", "outcome": "denied"}, 1},
		{map[string]string{"tool": "bash", "outcome": "invalid"}, 1},
		{map[string]string{"tool": "read_file"}, 1},
	} {
		if got := delta("corral_tool_calls_total", w.labels); got != w.n {
			t.Errorf("corral_tool_calls_total%v grew by %v, want %v", w.labels, got, w.n)
		}
	}
	if got := delta("corral_denials_total", map[string]string{"kind": "approval"}); got != 1 {
		t.Errorf("approval denials grew by %v, want 1", got)
	}
	if got := delta("corral_denials_total", map[string]string{"kind": "read-only"}); got < 1 {
		t.Errorf("read-only denials grew by %v, want at least 1", got)
	}
	if got := sample(after, "corral_tool_calls_in_flight", nil); got != 0 {
		t.Errorf("calls in flight %v after every call returned", got)
	}
	if got := sample(after, "corral_sessions_open", nil); got < 1 {
		t.Errorf("corral sessions open %v", got)
	}
	// The histogram agrees with the counter, and with itself: buckets
	// never fall, and +Inf is the count.
	for _, m := range after["corral_tool_call_duration_seconds"].GetMetric() {
		tool := m.GetLabel()[0].GetValue()
		h := m.GetHistogram()
		if calls := sample(after, "corral_tool_calls_total", map[string]string{"tool": tool}); float64(h.GetSampleCount()) != calls {
			t.Errorf("%s: histogram count %d, calls %v", tool, h.GetSampleCount(), calls)
		}
		var prev uint64
		bs := h.GetBucket()
		for _, b := range bs {
			if b.GetCumulativeCount() < prev {
				t.Errorf("%s: bucket le=%v falls to %d", tool, b.GetUpperBound(), b.GetCumulativeCount())
			}
			prev = b.GetCumulativeCount()
		}
		if last := bs[len(bs)-1]; !math.IsInf(last.GetUpperBound(), 1) || last.GetCumulativeCount() != h.GetSampleCount() {
			t.Errorf("%s: last bucket %v, count %d", tool, last, h.GetSampleCount())
		}
		if h.GetSampleSum() < 0 || (h.GetSampleCount() > 0 && math.IsNaN(h.GetSampleSum())) {
			t.Errorf("%s: sum %v", tool, h.GetSampleSum())
		}
	}
	cs.Close()
	logs := p.stop()

	// Every line about a call carries session, mcp_session and call_id;
	// each call's mcp.tool.called and mcp.tool.done share one call_id.
	attr := func(line, key string) string {
		m := regexp.MustCompile(`(?:^| )` + key + `=("(?:[^"\\]|\\.)*"|\S*)`).FindStringSubmatch(line)
		if m == nil {
			return "\x00missing"
		}
		return strings.Trim(m[1], `"`)
	}
	called, done := map[string]int{}, map[string]int{}
	lineCount := 0
	for _, l := range strings.Split(logs, "\n") {
		msg := attr(l, "msg")
		if !strings.HasPrefix(msg, "mcp.tool.") && !strings.HasPrefix(msg, "mcp.approval.") {
			continue
		}
		lineCount++
		id := attr(l, "call_id")
		if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(id) || attr(l, "mcp_session") != mcpID || attr(l, "session") != "mcp:"+mcpID {
			t.Errorf("a call's line without its ids (session mcp:%s, mcp_session %s, call_id): %s", mcpID, mcpID, l)
		}
		switch msg {
		case "mcp.tool.called":
			called[id]++
		case "mcp.tool.done":
			done[id]++
			if attr(l, "outcome") == "\x00missing" {
				t.Errorf("mcp.tool.done without an outcome: %s", l)
			}
		}
	}
	// Six calls reached a tool (the invalid one was refused before).
	if len(called) != 6 || len(done) != 6 || lineCount < 13 {
		t.Errorf("called %v done %v (%d lines), want 6 calls with one id each:\n%s", called, done, lineCount, logs)
	}
	for id := range called {
		if called[id] != 1 || done[id] != 1 {
			t.Errorf("call %s: %d called, %d done lines", id, called[id], done[id])
		}
	}
}

// TestServeReadyzDockerUnreachable: a backend that cannot take work makes
// /readyz 503, naming it; with --no-token the reason is given to anyone
// (loopback only) and /metrics needs no token.
func TestServeReadyzDockerUnreachable(t *testing.T) {
	c := newCLI(t)
	sock := filepath.Join(c.home, "no-engine.sock")
	p := serveOps(t, c, []string{"CORRAL_BACKEND=docker", "DOCKER_HOST=unix://" + sock}, "--no-token")
	code, _, body := p.get("GET", "/readyz", false)
	if code != 503 || !strings.HasPrefix(body, "not ready\nok   settings\nFAIL docker: docker engine at unix://"+sock+": not reachable") {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if code, _, _ := p.get("HEAD", "/readyz", false); code != 503 {
		t.Errorf("HEAD /readyz: %d", code)
	}
	if code, _, body := p.get("GET", "/healthz", false); code != 200 || body != "ok\n" {
		t.Errorf("/healthz with the engine gone: %d %q", code, body)
	}
	if code, _, _ := p.get("GET", "/metrics", false); code != 200 {
		t.Errorf("/metrics under --no-token: %d", code)
	}
	logs := p.stop()
	if !strings.Contains(logs, "msg=host.ready.failed check=docker") {
		t.Errorf("no host.ready.failed line:\n%s", logs)
	}

	// With a token, the reason goes only to a request that carries it.
	c2 := newCLI(t)
	p = serveOps(t, c2, []string{"CORRAL_BACKEND=docker", "DOCKER_HOST=unix://" + sock})
	if code, _, body := p.get("GET", "/readyz", false); code != 503 || body != "not ready\nok   settings\nFAIL docker\n" {
		t.Errorf("/readyz without the token: %d %q", code, body)
	}
	if code, _, body := p.get("GET", "/readyz", true); code != 503 || !strings.Contains(body, "FAIL docker: docker engine at unix://"+sock) {
		t.Errorf("/readyz with the token: %d %q", code, body)
	}
	p.stop()
}

// TestServeReadyzDocker: with an engine that answers, the docker backend
// is ready.
func TestServeReadyzDocker(t *testing.T) {
	dockertest.Engine(t) // skips (fails under CORRAL_REQUIRE_DOCKER=1) without an engine
	c := newCLI(t)
	env := []string{"CORRAL_BACKEND=docker"}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		env = append(env, "DOCKER_HOST="+h)
	}
	p := serveOps(t, c, env)
	if code, _, body := p.get("GET", "/readyz", true); code != 200 || body != "ready\nok   settings\nok   docker\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	p.stop()
}

// TestServeReadyKubernetes: with the kubernetes backend on the test
// cluster, /readyz holds (the API server answers and every permission of
// doctor's table is held, asked by SelfSubjectAccessReview) and /metrics
// counts those requests; a kubeconfig whose server does not answer makes
// it 503, naming the server to a request with the token.
func TestServeReadyKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("kubernetes cluster test (-short)")
	}
	cl := k8stest.Require(t)
	c := newCLI(t)
	env := []string{"CORRAL_BACKEND=kubernetes", "CORRAL_KUBERNETES_KUBECONFIG=" + os.Getenv(k8stest.EnvKubeconfig), "CORRAL_KUBERNETES_NAMESPACE=" + cl.Namespace,
		"CORRAL_KUBERNETES_IMAGE=" + cl.Image, "CORRAL_KUBERNETES_MEMORY=256Mi", "CORRAL_KUBERNETES_CPUS=500m"}
	p := serveOps(t, c, env)
	if code, _, body := p.get("GET", "/readyz", true); code != 200 || body != "ready\nok   settings\nok   kubernetes\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	fams := p.scrape()
	want := map[string]string{"verb": "create", "resource": "selfsubjectaccessreviews", "code": "2xx"}
	if got := sample(fams, "corral_kubernetes_api_calls_total", want); got < 12 {
		t.Errorf("SelfSubjectAccessReviews counted: %v, want one per permission of doctor's table", got)
	}
	if fams["corral_kubernetes_pool_claims_total"] == nil || fams["corral_kubernetes_pool_ready_pods"] == nil {
		t.Error("/metrics lacks the warm pool's families")
	}
	p.stop()

	kc := filepath.Join(c.home, "bad.kubeconfig")
	os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"), 0o600)
	p = serveOps(t, c, []string{"CORRAL_BACKEND=kubernetes", "CORRAL_KUBERNETES_KUBECONFIG=" + kc})
	if code, _, body := p.get("GET", "/readyz", true); code != 503 || !strings.Contains(body, "FAIL kubernetes: kubernetes: the API server https://127.0.0.1:1 is not reachable") {
		t.Errorf("/readyz, server gone: %d %q", code, body)
	}
	p.stop()
}
