package mcpserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// legacyVersion is the protocol revision before the stateless one.
const legacyVersion = "2025-11-25"

// httpFixture serves the fixture's server over streamable HTTP on
// loopback.
type httpFixture struct {
	*fixture
	url string
}

func newHTTPFixture(t *testing.T, o HTTPOptions) *httpFixture {
	f := newFixture(t)
	ts := httptest.NewServer(f.srv.HTTPHandler(o))
	t.Cleanup(ts.Close)
	return &httpFixture{fixture: f, url: ts.URL}
}

// client connects an MCP client over HTTP: version "" is the newest
// (2026-07-28, stateless), legacyVersion the revision with sessions;
// headers are sent with every request.
func (h *httpFixture) client(version string, opts *mcp.ClientOptions, headers ...string) (*mcp.ClientSession, error) {
	tr := &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: httpClient(headers...), MaxRetries: -1}
	var so *mcp.ClientSessionOptions
	if version != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-client", Version: "v0"}, opts).Connect(context.Background(), tr, so)
	if err == nil {
		h.t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func (h *httpFixture) mustClient(version string, opts *mcp.ClientOptions, headers ...string) *mcp.ClientSession {
	h.t.Helper()
	cs, err := h.client(version, opts, headers...)
	if err != nil {
		h.t.Fatal(err)
	}
	return cs
}

// TestHTTPSessions: each MCP session of the older revision gets a corral
// session of its own; the Corral-Session header names one explicitly and
// wins, in both revisions; stateless clients without it share the default
// session.
func TestHTTPSessions(t *testing.T) {
	h := newHTTPFixture(t, HTTPOptions{})
	a := h.mustClient(legacyVersion, nil)
	b := h.mustClient(legacyVersion, nil)
	if a.ID() == "" || b.ID() == "" || a.ID() == b.ID() {
		t.Fatalf("MCP session ids %q and %q, want two different ones", a.ID(), b.ID())
	}
	if v := a.InitializeResult().ProtocolVersion; v != legacyVersion {
		t.Errorf("legacy client negotiated %s", v)
	}
	bash(t, a, "mkdir -p a && cd a && export WHO=a")
	if got := bash(t, a, `echo "$WHO $PWD"`).str("output"); got != "a "+h.work+"/a\n" {
		t.Errorf("client a sees %q", got)
	}
	if got := bash(t, b, `echo "[$WHO] $PWD"`).str("output"); got != "[] "+h.work+"\n" {
		t.Errorf("client b sees %q, want its own session", got)
	}

	// The header names a session; two clients naming the same one share it,
	// whatever their protocol revision.
	c1 := h.mustClient(legacyVersion, nil, SessionHeader, "chat-1")
	c2 := h.mustClient("", nil, SessionHeader, "chat-1")
	if v := c2.InitializeResult().ProtocolVersion; v != StatelessProtocolVersion {
		t.Errorf("newest client negotiated %s, want %s", v, StatelessProtocolVersion)
	}
	if c2.ID() != "" {
		t.Errorf("stateless client has MCP session id %q", c2.ID())
	}
	bash(t, c1, "export CHAT=one")
	if got := bash(t, c2, `echo "$CHAT"`).str("output"); got != "one\n" {
		t.Errorf("second client of chat-1 sees %q", got)
	}
	if got := bash(t, a, `echo "[$CHAT]"`).str("output"); got != "[]\n" {
		t.Errorf("client a sees chat-1's variable: %q", got)
	}

	// Stateless clients without the header share the default session.
	d1 := h.mustClient("", nil)
	d2 := h.mustClient("", nil)
	bash(t, d1, "export DEF=shared")
	if got := bash(t, d2, `echo "$DEF"`).str("output"); got != "shared\n" {
		t.Errorf("default session not shared: %q", got)
	}
	if got := bash(t, c1, `echo "[$DEF]"`).str("output"); got != "[]\n" {
		t.Errorf("chat-1 sees the default session's variable: %q", got)
	}

	// The sessions exist under their names.
	for _, name := range []string{"chat-1", "test", "mcp:" + a.ID(), "mcp:" + b.ID()} {
		found := false
		infos, _ := h.m.List()
		for _, in := range infos {
			found = found || in.Name == name
		}
		if !found {
			t.Errorf("no session %q on disk", name)
		}
	}

	// Instructions name the session the client's calls run in.
	if got := c1.InitializeResult().Instructions; !strings.Contains(got, `"chat-1"`) {
		t.Errorf("instructions for chat-1 do not name it:\n%s", got)
	}
}

// TestHTTPRequests checks the HTTP layer: bad session header, cross-origin
// requests, the endpoint's methods.
func TestHTTPRequests(t *testing.T) {
	h := newHTTPFixture(t, HTTPOptions{})
	post := func(hdr ...string) *http.Response {
		req, _ := http.NewRequest("POST", h.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
				continue
			}
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST with %q: %v", hdr, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for _, tc := range []struct {
		name   string
		hdr    []string
		status int
		body   string
	}{
		{"plain initialize", nil, 200, ""},
		{"session header", []string{SessionHeader, "tg:1"}, 200, ""},
		{"control character in the session header", []string{SessionHeader, "tg:\t1"}, 400, "Corral-Session header must name a session"},
		{"overlong session header", []string{SessionHeader, strings.Repeat("s", 300)}, 400, "at most 256"},
		{"session header that is not UTF-8", []string{SessionHeader, "tg:\xff"}, 400, "not UTF-8"},
		{"cross-origin browser request", []string{"Sec-Fetch-Site", "cross-site"}, 403, ""},
		{"rebinding: foreign Host on loopback", []string{"Host", "evil.example"}, 403, "Host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(tc.hdr...)
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.body) {
				t.Errorf("status %d %q, want %d with %q", resp.StatusCode, body, tc.status, tc.body)
			}
		})
	}
}

// TestHTTPToken: with a token, every request must carry it.
func TestHTTPToken(t *testing.T) {
	const token = "s3cret-token-0123456789"
	h := newHTTPFixture(t, HTTPOptions{Token: token})
	for _, tc := range []struct {
		name    string
		version string
		headers []string
		ok      bool
	}{
		{"no token", "", nil, false},
		{"no token, legacy", legacyVersion, nil, false},
		{"wrong token", "", []string{"Authorization", "Bearer " + token + "x"}, false},
		{"prefix of the token", "", []string{"Authorization", "Bearer " + token[:10]}, false},
		{"basic auth", "", []string{"Authorization", "Basic " + token}, false},
		{"right token", "", []string{"Authorization", "Bearer " + token}, true},
		{"right token, legacy", legacyVersion, []string{"Authorization", "Bearer " + token}, true},
		{"scheme in lower case", "", []string{"Authorization", "bearer " + token}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := h.client(tc.version, nil, tc.headers...)
			if !tc.ok {
				if err == nil {
					t.Fatal("connected without the right token")
				}
				if !strings.Contains(err.Error(), "Unauthorized") && !strings.Contains(err.Error(), "401") {
					t.Errorf("error %v does not say unauthorized", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			bash(t, cs, "true")
		})
	}
	resp, err := http.Post(h.url, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("no token: %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
}

// TestHTTPToolsBothRevisions: every tool, progress, big arguments and
// cancellation over HTTP, in both protocol revisions.
func TestHTTPToolsBothRevisions(t *testing.T) {
	h := newHTTPFixture(t, HTTPOptions{})
	for _, version := range []string{"", legacyVersion} {
		name := version
		if name == "" {
			name = StatelessProtocolVersion
		}
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			progress := 0
			cs := h.mustClient(version, &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				progress++
				mu.Unlock()
			}}, SessionHeader, "http-"+name)

			if got := bash(t, cs, "echo hi").str("output"); got != "hi\n" {
				t.Errorf("bash = %q", got)
			}
			if hasExec("python3") {
				if got := callTool(t, cs, "run_code", map[string]any{"code": "print(2**10)"}).ok(t).str("output"); got != "1024\n" {
					t.Errorf("run_code = %q", got)
				}
			}
			id := callTool(t, cs, "bash", map[string]any{"command": "echo bg", "background": true}).ok(t).str("id")
			end := waitEnded(t, cs, id)
			if end.str("output") != "bg\n" {
				t.Errorf("bash_output = %q", end.str("output"))
			}
			callTool(t, cs, "bash_kill", map[string]any{"id": id}).ok(t)

			// A 10 MB argument is answered by the tool.
			r := callTool(t, cs, "bash", map[string]any{"command": strings.Repeat("x", 10<<20)})
			if !r.isError || !strings.Contains(r.text, "at most 128 KiB") {
				t.Errorf("10 MB command over HTTP = %.300s", r.text)
			}

			// Progress reaches the client while the command runs.
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep 0.6"}, Meta: mcp.Meta{"progressToken": 7}})
			if err != nil || res.IsError {
				t.Fatalf("sleep with progress: %v %+v", err, res)
			}
			mu.Lock()
			if progress < 2 {
				t.Errorf("%d progress notifications over HTTP, want several", progress)
			}
			mu.Unlock()

			// Cancellation ends the whole tree.
			mk := marker()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep " + mk + " & sleep " + mk + "; wait"}})
			}()
			waitProcesses(t, mk, 2, 10*time.Second)
			cancel()
			<-done
			waitProcesses(t, mk, 0, 5*time.Second)
			bash(t, cs, "true")
		})
	}
}

// TestHTTPSessionEndEndsBackground: when a client of the older revision
// ends its MCP session (DELETE), the background processes of its own
// corral session end too.
func TestHTTPSessionEndEndsBackground(t *testing.T) {
	h := newHTTPFixture(t, HTTPOptions{})
	cs := h.mustClient(legacyVersion, nil)
	mk := marker()
	callTool(t, cs, "bash", map[string]any{"command": "sleep " + mk, "background": true}).ok(t)
	waitProcesses(t, mk, 1, 10*time.Second)
	cs.Close()
	waitProcesses(t, mk, 0, 5*time.Second)
}

// TestHTTPSessionTimeout: an idle MCP session is closed after
// SessionTimeout, with its background processes.
func TestHTTPSessionTimeout(t *testing.T) {
	h := newHTTPFixture(t, HTTPOptions{SessionTimeout: 500 * time.Millisecond})
	cs := h.mustClient(legacyVersion, nil)
	mk := marker()
	callTool(t, cs, "bash", map[string]any{"command": "sleep " + mk, "background": true}).ok(t)
	waitProcesses(t, mk, 1, 10*time.Second)
	waitProcesses(t, mk, 0, 5*time.Second)
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		ok          bool
		want        string
	}{
		{"127.0.0.1:8765", "", true, ""},
		{"127.1.2.3:0", "", true, ""},
		{"[::1]:8765", "", true, ""},
		{"localhost:8765", "", true, ""},
		{"0.0.0.0:8765", "", false, "refusing to listen on 0.0.0.0:8765 without a bearer token"},
		{":8765", "", false, "CORRAL_TOKEN"},
		{"[::]:8765", "", false, "Authorization: Bearer"},
		{"192.0.2.1:80", "", false, "without a bearer token"},
		{"0.0.0.0:8765", "0123456789abcdef", true, ""},
		{"nonsense", "", false, "not host:port"},
	} {
		err := CheckListen(tc.addr, tc.token)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckListen(%q, %q) = %v, want ok %v with %q", tc.addr, tc.token, err, tc.ok, tc.want)
		}
	}
}
