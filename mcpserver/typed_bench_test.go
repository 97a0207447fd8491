package mcpserver

import (
	"context"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkTypedCall compares, over the SDK's in-memory transport (client
// and server in one process), a call of a bash-shaped tool (BashInput in,
// the CommandResult of `true` out) added through mcp.AddTool with the same
// tool added through typed, and a tool that does nothing (the SDK's
// floor: a raw handler). Measured 2026-12-03 on the loaded 2-core
// machine: 388, 348 and 256 us per call; 492, 394 and 386 KB allocated.
func BenchmarkTypedCall(b *testing.B) {
	h := func(ctx context.Context, req *mcp.CallToolRequest, in BashInput) (*mcp.CallToolResult, CommandResult, error) {
		code := 0
		out := CommandResult{ExitCode: &code, Cwd: "/var/tmp/corral-bench/work", DurationMS: 9}
		return textResult(renderCommand(&out)), out, nil
	}
	b.Run("sdk", func(b *testing.B) {
		benchCall(b, func(ms *mcp.Server) { mcp.AddTool(ms, &mcp.Tool{Name: "t"}, h) })
	})
	b.Run("typed", func(b *testing.B) {
		benchCall(b, func(ms *mcp.Server) {
			in, err := jsonschema.For[BashInput](&jsonschema.ForOptions{})
			if err != nil {
				b.Fatal(err)
			}
			out, sc, err := resolveSchemas[CommandResult](in)
			if err != nil {
				b.Fatal(err)
			}
			ms.AddTool(&mcp.Tool{Name: "t", InputSchema: in, OutputSchema: out}, typed(sc, h))
		})
	})
	b.Run("floor", func(b *testing.B) {
		benchCall(b, func(ms *mcp.Server) {
			ms.AddTool(&mcp.Tool{Name: "t", InputSchema: &jsonschema.Schema{Type: "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return textResult("ok"), nil
			})
		})
	})
}

// benchCall calls the tool "t" that add adds with {"command": "true"}.
func benchCall(b *testing.B, add func(ms *mcp.Server)) {
	ctx := context.Background()
	ms := mcp.NewServer(&mcp.Implementation{Name: "bench"}, nil)
	add(ms)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := ms.Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { cs.Close(); ss.Wait() }()
	args := map[string]any{"command": "true"}
	b.ReportAllocs()
	for b.Loop() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "t", Arguments: args})
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
}
