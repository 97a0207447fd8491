package mcpserver

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/sandboxfs"
)

// WriteFileInput are the arguments of the write_file tool.
type WriteFileInput struct {
	// Path is the file, absolute or relative to the session's cwd.
	Path string `json:"path" jsonschema:"file to write, absolute or relative to the session's current directory; parent directories are created"`
	// Content replaces the file's content.
	Content string `json:"content" jsonschema:"the whole new content of the file"`
}

func (s *Server) writeFileTool() Tool {
	return newTool(s, &mcp.Tool{
		Name:  "write_file",
		Title: "Write a file",
		Description: "Create or replace a file in the sandbox (parent directories are created), atomically. Only the working directory, " +
			"the scratch directory ($TMPDIR) and read-write binds can be written; elsewhere the write fails with read-only file system. " +
			"A path that is (or goes through) a symlink leading outside the writable set is refused, naming the real path.",
		Annotations: &mcp.ToolAnnotations{Title: "write_file", DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, nil, s.writeFile)
}

func (s *Server) writeFile(ctx context.Context, c *call, in WriteFileInput) (*mcp.CallToolResult, *sandboxfs.WriteResult, error) {
	fc, err := c.files()
	if err != nil {
		return nil, nil, err
	}
	r, err := fc.Write(ctx, in.Path, in.Content)
	if err != nil {
		return nil, nil, fileError(err)
	}
	verb := "Replaced"
	if r.Created {
		verb = "Created"
	}
	return textResult(fmt.Sprintf("%s %s (%d bytes).%s", verb, r.Path, r.Bytes, c.reviewNote())), r, nil
}

// reviewNote is what a file tool's result adds under workspace_mode
// review: the change is in the session's layer, not in the person's
// project. Empty otherwise.
func (c *call) reviewNote() string {
	if sp, err := c.sess.Spec(); err != nil || !sp.Review {
		return ""
	}
	return " The change is in this session's review layer: the person's project is unchanged until they apply it."
}
