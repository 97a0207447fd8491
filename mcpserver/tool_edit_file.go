package mcpserver

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/sandboxfs"
)

// EditFileInput are the arguments of the edit_file tool.
type EditFileInput struct {
	// Path is the file, absolute or relative to the session's cwd.
	Path string `json:"path" jsonschema:"file to edit, absolute or relative to the session's current directory"`
	// OldString is the exact text to replace.
	OldString string `json:"old_string" jsonschema:"the exact text to replace, whitespace included; it must occur exactly once unless replace_all"`
	// NewString replaces it.
	NewString string `json:"new_string" jsonschema:"the text to put in its place"`
	// ReplaceAll replaces every occurrence.
	ReplaceAll bool `json:"replace_all,omitempty" jsonschema:"replace every occurrence instead of requiring exactly one"`
}

func (s *Server) editFileTool() Tool {
	return newTool(s, &mcp.Tool{
		Name:  "edit_file",
		Title: "Edit a file",
		Description: "Replace old_string with new_string in a file in the sandbox. Fails unless old_string occurs exactly once " +
			"(or set replace_all); returns a short diff. The same write rules as write_file apply.",
		Annotations: &mcp.ToolAnnotations{Title: "edit_file", DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}, nil, s.editFile)
}

func (s *Server) editFile(ctx context.Context, c *call, in EditFileInput) (*mcp.CallToolResult, *sandboxfs.EditResult, error) {
	fc, err := c.files()
	if err != nil {
		return nil, nil, err
	}
	r, err := fc.Edit(ctx, in.Path, in.OldString, in.NewString, in.ReplaceAll)
	if err != nil {
		return nil, nil, fileError(err)
	}
	return textResult(fmt.Sprintf("Edited %s (%d replacement(s)):%s\n%s", r.Path, r.Replacements, c.reviewNote(), r.Diff)), r, nil
}
