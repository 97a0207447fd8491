package mcpserver

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/sandboxfs"
)

// ReadFileInput are the arguments of the read_file tool.
type ReadFileInput struct {
	// Path is the file, absolute or relative to the session's cwd.
	Path string `json:"path" jsonschema:"file to read, absolute or relative to the session's current directory"`
	// Offset is the first line to show (1-based).
	Offset int `json:"offset,omitempty" jsonschema:"first line to show, 1-based (default 1)"`
	// Limit is how many lines to show.
	Limit int `json:"limit,omitempty" jsonschema:"how many lines to show (default 2000)"`
}

func (s *Server) readFileTool() Tool {
	return newTool(s, &mcp.Tool{
		Name:  "read_file",
		Title: "Read a file",
		Description: "Read a text file in the sandbox, as commands of this session see it: lines numbered (cat -n style), up to 2000 lines " +
			"(use offset and limit for more), long lines cut; binary files are detected and not shown. Hidden paths (credentials, " +
			"dot entries of the home directory) do not exist; credential files read as empty.",
		Annotations: &mcp.ToolAnnotations{Title: "read_file", ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, nil, s.readFile)
}

func (s *Server) readFile(ctx context.Context, c *call, in ReadFileInput) (*mcp.CallToolResult, *sandboxfs.ReadResult, error) {
	if in.Offset < 0 || in.Limit < 0 {
		return nil, nil, badInput("offset and limit must not be negative")
	}
	fc, err := c.files()
	if err != nil {
		return nil, nil, err
	}
	r, err := fc.Read(ctx, in.Path, in.Offset, in.Limit)
	if err != nil {
		return nil, nil, fileError(err)
	}
	text := r.Content
	switch {
	case r.Binary:
		text = fmt.Sprintf("%s is a binary file (%d bytes); not shown.", r.Path, r.Size)
	case r.TotalLines == 0:
		text = fmt.Sprintf("%s is empty.", r.Path)
	case r.Truncated:
		text += fmt.Sprintf("[lines %d-%d of %d shown; call again with offset %d for more]\n", r.StartLine, r.StartLine+r.Lines-1, r.TotalLines, r.StartLine+r.Lines)
	}
	return textResult(text), r, nil
}
