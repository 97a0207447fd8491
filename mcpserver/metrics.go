package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/metrics"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// The outcomes of a tool call, the values of corral_tool_calls_total's
// outcome label (docs/serve.md, "Metrics"): what the call's result says
// about the command, as toolError words it for the model (sandbox/outcome.go).
const (
	OutcomeOK          = "ok"           // the tool did its work (a command ran, whatever its exit code)
	OutcomeAsked       = "asked"        // an approval question went to the person (approval: ask)
	OutcomeDenied      = "denied"       // refused by the approval floor, the person, or the sandbox policy; nothing ran
	OutcomeInvalid     = "invalid"      // bad arguments or an unknown tool; nothing ran
	OutcomeCancelled   = "cancelled"    // cancelled by the client or corral's shutdown; the command's processes were ended
	OutcomeMayHaveRun  = "may_have_run" // started and lost: its outcome is unknown
	OutcomeTransient   = "transient"    // nothing ran, for a passing cause; a retry may succeed
	OutcomeUnavailable = "unavailable"  // nothing ran: no sandbox here, or invalid settings; a person must act
	OutcomeError       = "error"        // any other failure, or the tool's own error result
)

// errRefused marks a call the approval policy refused (the floor, a
// person's no, a client that cannot ask): outcome denied.
var errRefused = errors.New("refused by the approval policy")

// outcomeOf classifies a finished call (pure): err is the error the
// handler's wrapper returns (toolError's), isError the result's flag,
// asked whether the result is an approval question. ErrMayHaveRun is
// tested first, as toolError does: its cause may match the others too.
func outcomeOf(err error, isError, asked bool) string {
	switch {
	case err == nil && asked:
		return OutcomeAsked
	case err == nil && isError:
		return OutcomeError
	case err == nil:
		return OutcomeOK
	case errors.Is(err, sandbox.ErrMayHaveRun):
		return OutcomeMayHaveRun
	case errors.Is(err, errRefused), errors.Is(err, sandbox.ErrPolicy):
		return OutcomeDenied
	case errors.Is(err, session.ErrCancelledWaiting), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCancelled
	case errors.Is(err, sandbox.ErrBadRequest):
		return OutcomeInvalid
	case sandbox.IsTransient(err):
		return OutcomeTransient
	case errors.Is(err, sandbox.ErrUnavailable), errors.Is(err, session.ErrStateUnwritable):
		return OutcomeUnavailable
	}
	return OutcomeError
}

// serverMetrics are the MCP server's families (Options.Metrics); a nil
// *serverMetrics counts nothing.
type serverMetrics struct {
	calls    *metrics.CounterVec   // tool, outcome
	latency  *metrics.HistogramVec // tool
	inFlight *metrics.Gauge
	mcpOpen  *metrics.Gauge
	denials  *metrics.CounterVec // kind
}

// newServerMetrics adds the server's families to r (nil: none).
func newServerMetrics(r *metrics.Registry, s *Server) *serverMetrics {
	if r == nil {
		return nil
	}
	m := &serverMetrics{
		calls: r.Counter("corral_tool_calls_total",
			"MCP tool calls finished, by tool and outcome (ok, asked, denied, invalid, cancelled, may_have_run, transient, unavailable, error).",
			"tool", "outcome"),
		latency: r.Histogram("corral_tool_call_duration_seconds",
			"Wall time of MCP tool calls from the tool's start to its result, seconds, by tool.", metrics.DefBuckets, "tool"),
		inFlight: r.Gauge("corral_tool_calls_in_flight", "MCP tool calls running now.").With(),
		mcpOpen:  r.Gauge("corral_mcp_sessions_open", "MCP sessions (Mcp-Session-Id, protocol revisions before 2026-07-28) open now.").With(),
		denials: r.Counter("corral_denials_total",
			"Refusals, by kind: approval (the command floor, a person's no, a client that cannot ask), policy (the sandbox policy refused the request), and the sandbox's wall as a command's output showed it (read-only, hidden, network, syscall, layer).",
			"kind"),
	}
	r.GaugeFunc("corral_sessions_open", "corral sessions the MCP server's calls have opened and that are still open.", nil, func() []metrics.Sample {
		s.mu.Lock()
		defer s.mu.Unlock()
		return []metrics.Sample{{Value: float64(len(s.opened))}}
	})
	return m
}

// toolLabel bounds the tool label to the server's own tools: a call
// naming another is "unknown" (a client's arbitrary names must not grow
// the series without bound).
func (s *Server) toolLabel(name string) string {
	if slices.ContainsFunc(s.Tools(), func(t Tool) bool { return t.Name() == name }) {
		return name
	}
	return "unknown"
}

// observe counts one finished call of tool.
func (m *serverMetrics) observe(tool, outcome string, err error, seconds float64, denials []string) {
	if m == nil {
		return
	}
	m.calls.With(tool, outcome).Inc()
	m.latency.With(tool).Observe(seconds)
	if outcome == OutcomeDenied {
		m.denials.With(deniedKind(err)).Inc()
	}
	for _, k := range denials {
		m.denials.With(k).Inc()
	}
}

// deniedKind is the denials kind of a denied call.
func deniedKind(err error) string {
	if errors.Is(err, sandbox.ErrPolicy) {
		return "policy"
	}
	return "approval"
}

// denialKindsOf returns the kinds of a command result's denials.
func denialKindsOf(out any) []string {
	r, ok := out.(CommandResult)
	if !ok {
		return nil
	}
	var ks []string
	for _, d := range r.Denials {
		ks = append(ks, d.Kind)
	}
	return ks
}

// asked reports whether res is an approval question (input requests).
func asked(res *mcp.CallToolResult) bool { return res != nil && len(res.InputRequests) > 0 }

func (m *serverMetrics) begin() {
	if m != nil {
		m.inFlight.Add(1)
	}
}

func (m *serverMetrics) end() {
	if m != nil {
		m.inFlight.Add(-1)
	}
}

// newCallID returns a tool call's id for the logs (call_id): 16 hex
// digits from crypto/rand, unique enough to follow one call among a
// server's lines. The SDK keeps the JSON-RPC request id to itself, so
// corral names each call with its own.
func newCallID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
