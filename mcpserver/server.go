package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/audit"
	"github.com/corralhq/corral/metrics"
	"github.com/corralhq/corral/session"
)

// ServerName is the name the server gives in its implementation info
// (serverInfo, MCP specification 2025-11-25, basic/lifecycle).
const ServerName = "corral"

// DefaultProgressInterval is how often a running command reports progress
// when the client asked for it (a progress token in the request's _meta,
// MCP specification 2025-11-25, basic/utilities/progress).
const DefaultProgressInterval = 5 * time.Second

// Options are a Server's dependencies and settings. Manager and
// DefaultSession are required.
type Options struct {
	// Manager runs the sessions' commands. The caller owns it: close it
	// after [Server.Close], which ends the calls in flight first.
	Manager *session.Manager
	// DefaultSession is the session a call runs in when nothing else names
	// one: the only session over stdio, and over HTTP the session of a
	// stateless (2026-07-28) client that sends no Corral-Session header.
	DefaultSession string
	// SessionName, when set, names the corral session a tool call runs in,
	// replacing [DefaultSessionName]; an error is reported to the model as
	// a tool error.
	SessionName func(req *mcp.CallToolRequest) (string, error)
	// Spec returns how the session called name runs (usually the resolver
	// the Manager was built with): for the instructions the server sends,
	// and once per call of a command tool (bash, run_code), whose approval
	// policy (Spec.Approval: nil runs every command, the sandbox still the
	// boundary), default timeout and command all come from that one
	// answer. Nil gives instructions without the settings, asks no
	// approval, and lets the session resolve its own.
	Spec session.Resolver
	// Logger receives the server's events; nil discards them.
	Logger *slog.Logger
	// Version is the version in serverInfo; empty means "dev".
	Version string
	// ProgressInterval is how often a running command sends a progress
	// notification; zero means DefaultProgressInterval.
	ProgressInterval time.Duration
	// Audit, when set, gets one line per tool call.
	Audit *audit.Log
	// Metrics, when set, gets the server's families: tool calls by tool
	// and outcome, their latency, calls in flight, open sessions and MCP
	// sessions, denials by kind (metrics.go; docs/serve.md, "Metrics").
	Metrics *metrics.Registry
}

// Server is corral's MCP server: the tools, bound to a session manager. It
// is safe for concurrent use; one Server can back any number of
// mcp.Servers and transports at once.
type Server struct {
	opts    Options
	log     *slog.Logger
	schemas *mcp.SchemaCache
	metrics *serverMetrics // nil: nothing counted

	life     context.Context // cancelled by Close: ends every call in flight
	shutdown context.CancelFunc
	calls    sync.WaitGroup

	toolsOnce sync.Once
	tools     []Tool // Tools, defined at first use

	mu      sync.Mutex
	closed  bool
	servers map[string]*mcp.Server // by instructions text
	opened  map[string]bool        // corral sessions a call has used
	offsets map[string]int64       // session + "\x00" + background id -> next offset
}

// maxCachedServers bounds the mcp.Servers kept for reuse, one per distinct
// instructions text (the instructions name the session, so a server
// whose clients name many sessions builds one per request beyond this).
const maxCachedServers = 32

// New returns a server over opts. It fails when a required option is
// missing.
func New(opts Options) (*Server, error) {
	if opts.Manager == nil {
		return nil, errors.New("mcpserver: Options.Manager is required")
	}
	if opts.DefaultSession == "" && opts.SessionName == nil {
		return nil, errors.New("mcpserver: Options.DefaultSession is required")
	}
	if opts.DefaultSession != "" {
		if err := ValidSessionName(opts.DefaultSession); err != nil {
			return nil, fmt.Errorf("mcpserver: default session: %w", err)
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = DefaultProgressInterval
	}
	if opts.SessionName == nil {
		opts.SessionName = DefaultSessionName(opts.DefaultSession)
	}
	life, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts: opts, log: opts.Logger, schemas: mcp.NewSchemaCache(),
		life: life, shutdown: cancel,
		servers: map[string]*mcp.Server{}, opened: map[string]bool{}, offsets: map[string]int64{},
	}
	s.metrics = newServerMetrics(opts.Metrics, s)
	return s, nil
}

// Close ends every tool call in flight (their commands' whole process
// trees are killed, as for an MCP cancellation) and waits for them;
// later calls are answered with a tool error. Close does not close the
// Manager: background processes end when the caller closes it.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.shutdown()
	s.calls.Wait()
}

// MCPServer returns an MCP server with every tool of [Server.Tools] and
// instructions generated from the live settings of the session called
// name (see [Instructions]). Servers are reused while the instructions stay
// the same. Which session each tool call runs in is decided per call (see
// [Options.SessionName]), not by name.
func (s *Server) MCPServer(name string) *mcp.Server {
	instr := s.instructions(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ms, ok := s.servers[instr]; ok {
		return ms
	}
	ms := mcp.NewServer(&mcp.Implementation{Name: ServerName, Title: "corral: sandboxed shell and code for agents", Version: s.opts.Version}, &mcp.ServerOptions{
		Instructions:       instr,
		Logger:             s.log.With("component", "mcp-sdk"),
		InitializedHandler: s.initialized,
		SchemaCache:        s.schemas,
		// Tools only; the list never changes while the server runs.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	for _, t := range s.Tools() {
		t.add(ms)
	}
	ms.AddReceivingMiddleware(s.middleware)
	if len(s.servers) >= maxCachedServers {
		for k := range s.servers { // evict one at random (map order)
			delete(s.servers, k)
			break
		}
	}
	s.servers[instr] = ms
	return ms
}

// instructions renders the instructions for the session called name from
// the live settings.
func (s *Server) instructions(name string) string {
	if s.opts.Spec == nil {
		return Instructions(name, nil, nil)
	}
	sp, err := s.opts.Spec(name)
	return Instructions(name, sp, err)
}

// initialized runs when a client finishes the initialize handshake (the
// protocol revisions before 2026-07-28). For an MCP session with an id
// (streamable HTTP), it arranges for the session's own corral session to
// be closed when the MCP session ends.
func (s *Server) initialized(_ context.Context, req *mcp.InitializedRequest) {
	ss := req.Session
	id := ss.ID()
	if id == "" {
		return
	}
	if s.metrics != nil {
		s.metrics.mcpOpen.Add(1)
	}
	go func() {
		_ = ss.Wait()
		if s.metrics != nil {
			s.metrics.mcpOpen.Add(-1)
		}
		name := mcpSessionPrefix + id
		s.mu.Lock()
		used := s.opened[name]
		delete(s.opened, name)
		s.mu.Unlock()
		s.log.Info("mcp.session.closed", "mcp_session", id, "session", name, "used", used)
		if used {
			if cs, err := s.opts.Manager.Open(name); err == nil {
				cs.Close() // its background processes end with the MCP session
			}
		}
	}()
}

// Tool is one tool of the server: its MCP definition and how to add it,
// with its typed handler, to an mcp.Server. Build one with newTool from a
// tool_*.go file and list it in [Server.Tools].
type Tool struct {
	def *mcp.Tool
	add func(*mcp.Server)
}

// Name returns the tool's name as clients call it ("bash").
func (t Tool) Name() string { return t.def.Name }

// Definition returns the tool's MCP definition: name, description,
// annotations and input and output schemas. Do not modify it.
func (t Tool) Definition() *mcp.Tool { return t.def }

// Tools returns the server's tools (tools/list shows them sorted by
// name). Each tool lives in its own tool_NAME.go file; a new tool is one
// more entry here. They are defined once per Server (their schemas
// inferred and resolved) and shared by its mcp.Servers.
func (s *Server) Tools() []Tool {
	s.toolsOnce.Do(func() { s.tools = s.defineTools() })
	return slices.Clone(s.tools)
}

func (s *Server) defineTools() []Tool {
	tools := []Tool{
		s.bashTool(),
		s.bashOutputTool(),
		s.bashKillTool(),
		s.runCodeTool(),
		s.readFileTool(),
		s.writeFileTool(),
		s.editFileTool(),
		s.searchFilesTool(),
		s.workspaceDiffTool(),
	}
	if benchTools != nil {
		tools = append(tools, benchTools(s)...)
	}
	return tools
}

// benchTools adds the tools only a build with -tags corralbench has: the
// floor bench/mcpbench measures beside the real tools. Nil in corral.
var benchTools func(*Server) []Tool

// BenchNoopTool is the name of the tool that does nothing, registered on
// the SDK directly (no session opened, no log, no policy): its round trip
// is the SDK's floor, against which bench/mcpbench measures read_file in
// the same server and the same run. Only builds with -tags corralbench
// list it (benchtool_corralbench.go): corral itself never does.
const BenchNoopTool = "bench_noop"

// BenchEchoTool is the name of the tool that returns the text read_file
// would give for a file of `lines` copies of `line`, shaped as its answer (the same output schema, the text twice:
// as content and structured), registered on the SDK directly: the SDK's
// own cost of carrying a file's text both ways, which read_file cannot go
// below. Only builds with -tags corralbench list it.
const BenchEchoTool = "bench_echo"

// call is one tool call as a tool handler sees it: the request and the
// corral session it runs in.
type call struct {
	srv  *Server
	req  *mcp.CallToolRequest
	sess *session.Session
	log  *slog.Logger
	tool string

	// progMu orders this call's progress notifications: their progress
	// values must only grow (see progress.go).
	progMu    sync.Mutex
	progStart time.Time
	progLast  float64
	progSent  bool // a notification went out: later ones exceed progLast

	// spec is the session's Spec as resolved once for this call (see
	// call.spec), and specErr its error.
	specOnce sync.Once
	resolved *session.Spec
	specErr  error
}

// spec returns the session's Spec for this call, resolved by
// Options.Spec on first use and kept for the rest of the call: its
// approval policy, its default timeout and the command it runs all come
// from one reading of the settings. Nil, nil when Options.Spec is unset
// (then the session resolves its own).
func (c *call) spec() (*session.Spec, error) {
	c.specOnce.Do(func() {
		if c.srv.opts.Spec != nil {
			c.resolved, c.specErr = c.srv.opts.Spec(c.sess.Name())
		}
	})
	return c.resolved, c.specErr
}

// handler is the typed function a tool implements. A non-nil error is
// reported to the model as a tool error (see toolError).
type handler[In, Out any] func(ctx context.Context, c *call, in In) (*mcp.CallToolResult, Out, error)

// newTool defines a tool whose input and output schemas are inferred from
// In and Out (json and jsonschema struct tags). edit, when set, may adjust
// the inferred input schema (enums, bounds) before it is published. The
// schemas are resolved here, once, and calls go through typed, which
// checks arguments and results against them as mcp.AddTool would.
func newTool[In, Out any](s *Server, def *mcp.Tool, edit func(*jsonschema.Schema), h handler[In, Out]) Tool {
	in, err := jsonschema.For[In](&jsonschema.ForOptions{})
	if err != nil {
		panic(fmt.Sprintf("mcpserver: tool %s: input schema: %v", def.Name, err))
	}
	if edit != nil {
		edit(in)
	}
	def.InputSchema = in
	out, sc, err := resolveSchemas[Out](in)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: tool %s: %v", def.Name, err))
	}
	if out != nil {
		def.OutputSchema = out
	}
	th := typed(sc, wrap(s, def.Name, h))
	return Tool{def: def, add: func(ms *mcp.Server) { ms.AddTool(def, th) }}
}

// wrap adapts a tool handler to the SDK: it resolves and opens the corral
// session, ties the call to the server's lifetime, logs it, and maps
// errors to tool errors.
func wrap[In, Out any](s *Server, tool string, h handler[In, Out]) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		ctx, done, err := s.begin(ctx)
		if err != nil {
			return nil, zero, err
		}
		defer done()
		name, err := s.opts.SessionName(req)
		if err != nil {
			return nil, zero, &ToolError{Msg: err.Error(), Err: err}
		}
		mcpID := ""
		if req.Session != nil {
			mcpID = req.Session.ID()
		}
		// Every line about the call carries the corral session, the MCP
		// session ("" for stateless clients) and the call's own id
		// (docs/serve.md, "Logs").
		log := s.log.With("tool", tool, "session", name, "mcp_session", mcpID, "call_id", newCallID())
		sess, err := s.opts.Manager.Open(name)
		if err != nil {
			return nil, zero, toolError(err)
		}
		s.mu.Lock()
		first := !s.opened[name]
		s.opened[name] = true
		s.mu.Unlock()
		if first {
			s.log.Info("mcp.session.opened", "session", name, "mcp_session", mcpID)
		}
		log.Info("mcp.tool.called")
		s.metrics.begin()
		defer s.metrics.end()
		start := time.Now()
		res, out, err := h(ctx, &call{srv: s, req: req, sess: sess, log: log, tool: tool}, in)
		switch {
		case ctx.Err() != nil && s.life.Err() != nil:
			err = &ToolError{Msg: "corral is shutting down: the command and every process it started were ended; call again once it is back", Err: ctx.Err()}
		case ctx.Err() != nil:
			err = toolError(ctx.Err())
		case err != nil:
			err = toolError(err)
		}
		took := time.Since(start)
		outcome := outcomeOf(err, res != nil && res.IsError, asked(res))
		attrs := []any{"duration_ms", took.Milliseconds(), "is_error", err != nil || (res != nil && res.IsError), "outcome", outcome}
		if err != nil {
			attrs = append(attrs, "error", err.Error())
		}
		log.Info("mcp.tool.done", attrs...)
		s.metrics.observe(tool, outcome, err, took.Seconds(), denialKindsOf(out))
		s.record(name, tool, req, exitCodeOf(out), time.Since(start), err, denialsOf(out)...)
		if err != nil {
			return nil, zero, err
		}
		return res, out, nil
	}
}

// begin registers a call in flight: the returned context also ends when
// the server closes, and done must be called when the call returns.
func (s *Server) begin(ctx context.Context) (context.Context, func(), error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, &ToolError{Msg: "corral is shutting down, so nothing was run; call again once it is back"}
	}
	s.calls.Add(1)
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.life, cancel)
	return ctx, func() { stop(); cancel(); s.calls.Done() }, nil
}

// middleware sees every request an mcp.Server receives. For tools/call it
// turns the SDK's argument validation failures into messages that show
// the tool's arguments, and logs them (mcp.tool.rejected).
func (s *Server) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		// corral declares only the tools capability: prompts and resources
		// are methods it does not have (JSON-RPC -32601), rather than the
		// SDK's empty lists (MCP 2026-07-28, server/discover: a server
		// answers only what it declares).
		if strings.HasPrefix(method, "prompts/") || strings.HasPrefix(method, "resources/") {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "corral serves tools only: " + method + " is not supported"}
		}
		start := time.Now()
		res, err := next(ctx, method, req)
		if method == "tools/call" && err != nil {
			// A call the SDK refused before any tool ran (an unknown tool):
			// audited all the same.
			if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
				s.record(s.sessionOf(r), r.Params.Name, r, nil, time.Since(start), err)
				s.metrics.observe(s.toolLabel(r.Params.Name), OutcomeInvalid, err, time.Since(start).Seconds(), nil)
			}
		}
		if method != "tools/call" || err != nil {
			return res, err
		}
		cr, ok := res.(*mcp.CallToolResult)
		if !ok || !cr.IsError {
			return res, err
		}
		var te *ToolError
		if e := cr.GetError(); e == nil || errors.As(e, &te) {
			return res, err // the tool's own error, already worded for the model
		}
		name, sess, mcpID := "", "", ""
		if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
			name, sess = r.Params.Name, s.sessionOf(r)
			if r.Session != nil {
				mcpID = r.Session.ID()
			}
		}
		msg := s.argumentError(name, cr.GetError())
		s.log.Info("mcp.tool.rejected", "tool", name, "session", sess, "mcp_session", mcpID, "call_id", newCallID(), "error", cr.GetError().Error())
		if r, ok := req.(*mcp.CallToolRequest); ok {
			s.record(s.sessionOf(r), name, r, nil, time.Since(start), errors.New(msg))
		}
		s.metrics.observe(s.toolLabel(name), OutcomeInvalid, nil, time.Since(start).Seconds(), nil)
		cr.Content = []mcp.Content{&mcp.TextContent{Text: msg}}
		return cr, nil
	}
}

// argumentError words an argument validation failure of tool name,
// listing the arguments the tool takes.
func (s *Server) argumentError(name string, err error) string {
	detail := err.Error()
	for _, p := range []string{`validating "arguments": `, "validating root: "} {
		detail = strings.TrimPrefix(detail, p)
	}
	var def *mcp.Tool
	for _, t := range s.Tools() {
		if t.Name() == name {
			def = t.def
		}
	}
	msg := fmt.Sprintf("invalid arguments for %s: %s.", name, detail)
	if def != nil {
		if sc, ok := def.InputSchema.(*jsonschema.Schema); ok {
			msg += " " + name + " takes " + describeArgs(sc) + "."
		}
	}
	return msg + " Fix the arguments and call again."
}

// describeArgs renders an object schema's properties as
// "{command: string (required), timeout_s: number}".
func describeArgs(sc *jsonschema.Schema) string {
	names := make([]string, 0, len(sc.Properties))
	if len(sc.PropertyOrder) > 0 {
		names = append(names, sc.PropertyOrder...)
	} else {
		for n := range sc.Properties {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	parts := make([]string, 0, len(names))
	for _, n := range names {
		p := sc.Properties[n]
		if p == nil {
			continue
		}
		typ := p.Type
		if typ == "" {
			for _, t := range p.Types {
				if t != "null" {
					typ = t
				}
			}
		}
		part := n + ": " + typ
		if len(p.Enum) > 0 {
			var vs []string
			for _, v := range p.Enum {
				vs = append(vs, fmt.Sprint(v))
			}
			part = n + ": " + strings.Join(vs, " | ")
		}
		for _, r := range sc.Required {
			if r == n {
				part += " (required)"
			}
		}
		parts = append(parts, part)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// denialsOf returns the denials of a tool result that has them, as the
// audit log keeps them.
func denialsOf(out any) []string {
	r, ok := out.(CommandResult)
	if !ok {
		return nil
	}
	var ds []string
	for _, d := range r.Denials {
		ds = append(ds, strings.TrimSpace(d.Kind+" "+d.Path+d.Host))
	}
	return ds
}

// exitCodeOf returns the exit code of a tool result that has one.
func exitCodeOf(out any) *int {
	if r, ok := out.(CommandResult); ok {
		return r.ExitCode
	}
	return nil
}

// sessionOf names the corral session of a request, or "" when it cannot.
func (s *Server) sessionOf(req *mcp.CallToolRequest) string {
	name, err := s.opts.SessionName(req)
	if err != nil {
		return ""
	}
	return name
}
