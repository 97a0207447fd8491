//go:build corralbench

package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func init() {
	benchTools = func(*Server) []Tool {
		def := &mcp.Tool{Name: BenchNoopTool, Description: "does nothing (benchmark floor)"}
		return []Tool{{def: def, add: func(ms *mcp.Server) {
			mcp.AddTool(ms, def, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
			})
		}}}
	}
}
