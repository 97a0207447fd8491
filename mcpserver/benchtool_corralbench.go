//go:build corralbench

package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/sandboxfs"
)

func init() {
	benchTools = func(*Server) []Tool {
		noop := &mcp.Tool{Name: BenchNoopTool, Description: "does nothing (benchmark floor)"}
		echo := &mcp.Tool{Name: BenchEchoTool, Description: "returns the text read_file would give for a file of lines copies of line, shaped as read_file's answer (benchmark floor)"}
		return []Tool{
			{def: noop, add: func(ms *mcp.Server) {
				mcp.AddTool(ms, noop, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return textResult("ok"), nil, nil
				})
			}},
			{def: echo, add: func(ms *mcp.Server) {
				mcp.AddTool(ms, echo, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
					Line  string `json:"line"`
					Lines int    `json:"lines"`
				}) (*mcp.CallToolResult, *sandboxfs.ReadResult, error) {
					// The text read_file would give for a file of Lines
					// copies of Line: cat -n style.
					var b strings.Builder
					for i := 1; i <= in.Lines && i <= 100000; i++ {
						fmt.Fprintf(&b, "%6d\t%s\n", i, in.Line)
					}
					text := b.String()
					r := &sandboxfs.ReadResult{Path: "/bench", Content: text, StartLine: 1, Lines: in.Lines, TotalLines: in.Lines, Size: int64(in.Lines * (len(in.Line) + 1))}
					return textResult(text), r, nil
				})
			}},
		}
	}
}
