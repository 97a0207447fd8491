package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// typedIn and typedOut exercise what the SDK's adapter handles: a
// required argument, a default, a bounded number; an output with slices,
// pointers and omitted fields.
type typedIn struct {
	Name  string `json:"name"`
	Mode  string `json:"mode,omitempty"`
	Count int    `json:"count,omitempty"`
}

type typedOut struct {
	Code  *int     `json:"code,omitempty"`
	Text  string   `json:"text"`
	List  []string `json:"list,omitempty"`
	Count int      `json:"count"`
}

// badOut marshals to what its schema (an integer n) refuses.
type badOut struct {
	N int `json:"n"`
}

func (badOut) MarshalJSON() ([]byte, error) { return []byte(`{"n":"not a number"}`), nil }

// typedHandler answers from its arguments: "nil" gives a nil result
// (and, for a pointer Out, a nil Out), "err" a tool error, "ask" an input
// request.
func typedHandler[Out any](mk func(typedIn) Out) mcp.ToolHandlerFor[typedIn, Out] {
	return func(_ context.Context, _ *mcp.CallToolRequest, in typedIn) (*mcp.CallToolResult, Out, error) {
		var zero Out
		switch in.Name {
		case "err":
			return nil, zero, errors.New("it failed")
		case "ask":
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"q": &mcp.ElicitParams{Message: "sure?"}}}, zero, nil
		case "nil":
			return nil, zero, nil
		}
		return textResult("ran " + in.Name), mk(in), nil
	}
}

func inSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	in, err := jsonschema.For[typedIn](&jsonschema.ForOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in.Properties["mode"].Default = json.RawMessage(`"fast"`)
	in.Properties["mode"].Enum = []any{"fast", "slow"}
	in.Properties["count"].Maximum = ptr(10.0)
	in.Required = []string{"name"}
	return in
}

// sdkAndOurs returns a client of a server with the handler added twice:
// as "sdk" through mcp.AddTool, and as "ours" through typed.
func sdkAndOurs[Out any](t *testing.T, h mcp.ToolHandlerFor[typedIn, Out]) *mcp.ClientSession {
	t.Helper()
	ms := mcp.NewServer(&mcp.Implementation{Name: "typed-test"}, nil)
	mcp.AddTool(ms, &mcp.Tool{Name: "sdk", InputSchema: inSchema(t)}, h)
	in := inSchema(t)
	out, sc, err := resolveSchemas[Out](in)
	if err != nil {
		t.Fatal(err)
	}
	def := &mcp.Tool{Name: "ours", InputSchema: in}
	if out != nil {
		def.OutputSchema = out
	}
	ms.AddTool(def, typed(sc, h))
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := ms.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "typed-test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

// answer is a call's outcome as the client sees it, on the wire.
func answer(t *testing.T, cs *mcp.ClientSession, tool string, args any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "protocol error: " + err.Error()
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTypedAsSDK: the tools' adapter (typed) answers every call as the
// SDK's mcp.AddTool answers it, byte for byte on the wire: arguments
// refused by the schema (missing, unknown, of the wrong type, out of
// bounds), defaults applied, tool errors, input requests,
// nil results and nil pointer outputs, structured content and its text
// stand-in; and the tools list shows the same schemas. An output its
// schema refuses is an error in both.
func TestTypedAsSDK(t *testing.T) {
	mk := func(in typedIn) typedOut {
		code := in.Count
		return typedOut{Code: &code, Text: in.Name + " " + in.Mode, Count: in.Count, List: strings.Fields(in.Name)}
	}
	calls := []any{
		map[string]any{"name": "a b"},
		map[string]any{"name": "x", "mode": "slow", "count": 3},
		map[string]any{"name": "x", "count": 3.0},
		map[string]any{},
		nil,
		map[string]any{"name": 1},
		map[string]any{"name": "x", "extra": true},
		map[string]any{"name": "x", "Name": "y"},
		map[string]any{"name": "x", "mode": "other"},
		map[string]any{"name": "x", "count": 11},
		map[string]any{"name": "x", "count": 1.5},
		map[string]any{"name": "err"},
		map[string]any{"name": "ask"},
		map[string]any{"name": "nil"},
		map[string]any{"name": "bad \xff utf-8"},
	}
	check := func(t *testing.T, cs *mcp.ClientSession) {
		for _, args := range calls {
			sdk, ours := answer(t, cs, "sdk", args), answer(t, cs, "ours", args)
			if sdk != ours {
				t.Errorf("arguments %v:\n sdk:  %s\n ours: %s", args, sdk, ours)
			}
		}
		// Arguments that are not an object: refused by both, worded by
		// each decoder in its own way (the SDK's quotes the value).
		for _, args := range []any{[]any{"name"}, "name"} {
			for _, tool := range []string{"sdk", "ours"} {
				if got := answer(t, cs, tool, args); !strings.Contains(got, `validating \"arguments\": unmarshaling arguments: json: cannot unmarshal`) || !strings.Contains(got, `"isError":true`) {
					t.Errorf("%s, arguments %v: %s; want a tool error, unmarshaling arguments", tool, args, got)
				}
			}
		}
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var defs [2]string
		for i, tool := range res.Tools {
			tool.Name = ""
			b, _ := json.Marshal(tool)
			defs[i] = string(b)
		}
		if defs[0] != defs[1] {
			t.Errorf("tools/list:\n ours: %s\n sdk:  %s", defs[0], defs[1])
		}
	}
	t.Run("struct", func(t *testing.T) { check(t, sdkAndOurs(t, typedHandler(mk))) })
	t.Run("pointer", func(t *testing.T) {
		check(t, sdkAndOurs(t, typedHandler(func(in typedIn) *typedOut { o := mk(in); return &o })))
	})
	t.Run("untyped", func(t *testing.T) {
		check(t, sdkAndOurs(t, typedHandler(func(in typedIn) any { return map[string]any{"name": in.Name} })))
	})
	t.Run("output refused", func(t *testing.T) {
		cs := sdkAndOurs(t, typedHandler(func(typedIn) badOut { return badOut{} }))
		for _, tool := range []string{"sdk", "ours"} {
			if got := answer(t, cs, tool, map[string]any{"name": "x"}); !strings.Contains(got, "validating tool output") {
				t.Errorf("%s: an output its schema refuses gave %s; want a validating tool output error", tool, got)
			}
		}
	})
}

// TestTypedAllocations: a call through the adapter allocates a few KiB,
// not the 32 KiB buffer the SDK's decoder takes for each of the three
// values it decodes per call (arguments twice, the output once).
func TestTypedAllocations(t *testing.T) {
	in := inSchema(t)
	_, sc, err := resolveSchemas[typedOut](in)
	if err != nil {
		t.Fatal(err)
	}
	h := typed(sc, typedHandler(func(in typedIn) typedOut { return typedOut{Text: in.Name} }))
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "t", Arguments: json.RawMessage(`{"name":"true","count":2}`)}}
	ctx := context.Background()
	if _, err := h(ctx, req); err != nil {
		t.Fatal(err)
	}
	const calls = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		if res, err := h(ctx, req); err != nil || res.IsError {
			t.Fatal(err, res)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / calls; per > 16<<10 {
		t.Errorf("a call allocates %d bytes; want at most 16 KiB", per)
	}
}
