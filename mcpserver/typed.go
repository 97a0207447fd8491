package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// schemas are a typed tool's input and output schemas, resolved once when
// the tool is defined.
type schemas struct {
	in, out *jsonschema.Resolved // out is nil for an untyped (any) result
	// elemZero is the zero value of Out's element type when Out is a
	// pointer: a nil result is sent as that, never as JSON null.
	elemZero any
}

// resolveSchemas resolves the input schema in (already inferred from In
// and edited) and infers and resolves Out's, as the SDK's mcp.AddTool does
// (mcp's setSchema: pointers stand for their element type; defaults are
// checked against their schemas).
func resolveSchemas[Out any](in *jsonschema.Schema) (*jsonschema.Schema, schemas, error) {
	var sc schemas
	var err error
	if sc.in, err = in.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true}); err != nil {
		return nil, sc, fmt.Errorf("input schema: %w", err)
	}
	rt := reflect.TypeFor[Out]()
	if rt == reflect.TypeFor[any]() {
		return nil, sc, nil
	}
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
		sc.elemZero = reflect.Zero(rt).Interface()
	}
	out, err := jsonschema.ForType(rt, &jsonschema.ForOptions{})
	if err != nil {
		return nil, sc, fmt.Errorf("output schema: %w", err)
	}
	if sc.out, err = out.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true}); err != nil {
		return nil, sc, fmt.Errorf("output schema: %w", err)
	}
	return out, sc, nil
}

// typed turns a typed handler into the SDK's raw one, doing what
// mcp.AddTool's adapter does, check for check: the arguments are
// validated against the input schema, its defaults applied, and decoded
// into In (a failure is a tool error, `validating "arguments": ...`, which
// the middleware words for the model); the result's structured content is
// Out marshaled, validated against the output schema and its defaults
// applied (a failure is a protocol error), and it stands in as text when
// the handler gave no content. The difference is the JSON decoder: the
// SDK's (internal/json over segmentio's) takes a new 32 KiB buffer for
// every value it decodes, three per call; encoding/json does not.
func typed[In, Out any](sc schemas, h mcp.ToolHandlerFor[In, Out]) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		in, err := decodeArguments[In](req.Params.Arguments, sc.in)
		if err != nil {
			var r mcp.CallToolResult
			r.SetError(err)
			return &r, nil
		}
		res, out, err := h(ctx, req, in)
		if err != nil {
			if wire, ok := err.(*jsonrpc.Error); ok {
				return nil, wire
			}
			var r mcp.CallToolResult
			r.SetError(err)
			return &r, nil
		}
		if res == nil {
			res = &mcp.CallToolResult{}
		}
		var outval any = out
		if res.InputRequests != nil {
			// Content and input requests are exclusive on the wire.
			outval = nil
		} else if sc.elemZero != nil {
			var z Out
			if any(out) == any(z) { // Out is a pointer here: comparable
				outval = sc.elemZero
			}
		}
		if outval == nil {
			return res, nil
		}
		data, err := json.Marshal(outval)
		if err != nil {
			return nil, fmt.Errorf("marshaling output: %w", err)
		}
		if data, err = applySchema(data, sc.out, true); err != nil {
			return nil, fmt.Errorf("validating tool output: %w", err)
		}
		res.StructuredContent = json.RawMessage(data)
		if res.Content == nil {
			res.Content = []mcp.Content{&mcp.TextContent{Text: string(data)}}
		} else if !isObject(data) {
			res.Content = append(res.Content, &mcp.TextContent{Text: string(data)})
		}
		return res, nil
	}
}

// decodeArguments validates a call's arguments against the resolved input
// schema, applies its defaults and decodes them into In. Errors are worded
// as the SDK words them.
func decodeArguments[In any](args json.RawMessage, rs *jsonschema.Resolved) (In, error) {
	var in In
	data, err := applySchema(args, rs, false)
	if err != nil {
		return in, fmt.Errorf("validating \"arguments\": %v", err)
	}
	if data != nil {
		if err := json.Unmarshal(data, &in); err != nil {
			return in, err
		}
	}
	return in, nil
}

// applySchema validates data against rs and applies its defaults, as the
// SDK's applySchema does: arguments are an object even when absent; a
// result that is an object, or null under an object schema, is re-encoded
// with its defaults. It returns the JSON to use.
func applySchema(data json.RawMessage, rs *jsonschema.Resolved, output bool) (json.RawMessage, error) {
	if rs == nil {
		return data, nil
	}
	var v any
	if !output {
		m := map[string]any{}
		if len(data) > 0 {
			if err := json.Unmarshal(data, &m); err != nil {
				return nil, fmt.Errorf("unmarshaling arguments: %w", err)
			}
		}
		v = m
	} else if len(data) > 0 {
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("unmarshaling output: %w", err)
		}
	}
	applied := false
	if _, ok := v.(map[string]any); ok {
		if err := rs.ApplyDefaults(&v); err != nil {
			return nil, fmt.Errorf("applying schema defaults:\n%w", err)
		}
		applied = true
	} else if output && v == nil && rs.Schema().Type == "object" {
		v = map[string]any{}
		if err := rs.ApplyDefaults(&v); err != nil {
			return nil, fmt.Errorf("applying schema defaults:\n%w", err)
		}
		applied = true
	}
	if err := rs.Validate(&v); err != nil {
		return nil, err
	}
	if !applied {
		return data, nil
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshalling with defaults: %v", err)
	}
	return out, nil
}

// isObject reports whether data is a JSON object (its first byte past
// white space is '{').
func isObject(data []byte) bool {
	for _, b := range data {
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}
