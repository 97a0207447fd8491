package mcpserver

import (
	"context"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/sandboxfs"
)

// SearchFilesInput are the arguments of the search_files tool.
type SearchFilesInput struct {
	// Pattern is a regular expression (ripgrep syntax, or grep -E).
	Pattern string `json:"pattern" jsonschema:"regular expression to look for (ripgrep syntax; grep -E when ripgrep is missing)"`
	// Path is where to search, default the session's cwd.
	Path string `json:"path,omitempty" jsonschema:"directory or file to search (default: the session's current directory)"`
	// Glob limits the files searched.
	Glob string `json:"glob,omitempty" jsonschema:"only files whose name matches this glob, such as *.go"`
	// Mode is content (matching lines) or files (matching file names).
	Mode string `json:"mode,omitempty" jsonschema:"content (matching lines as path:line:text, the default) or files (names of matching files)"`
}

func (s *Server) searchFilesTool() Tool {
	return newTool(s, &mcp.Tool{
		Name:  "search_files",
		Title: "Search files",
		Description: "Search file contents in the sandbox for a regular expression, with ripgrep when the sandbox has it and grep otherwise; " +
			"at most 200 results. Hidden paths are not searched; credential files are empty.",
		Annotations: &mcp.ToolAnnotations{Title: "search_files", ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, func(sc *jsonschema.Schema) {
		if p := sc.Properties["mode"]; p != nil {
			p.Enum = []any{"content", "files"}
		}
	}, s.searchFiles)
}

func (s *Server) searchFiles(ctx context.Context, c *call, in SearchFilesInput) (*mcp.CallToolResult, *sandboxfs.SearchResult, error) {
	fc, err := c.files()
	if err != nil {
		return nil, nil, err
	}
	r, err := fc.Search(ctx, in.Pattern, in.Path, in.Glob, in.Mode)
	if err != nil {
		return nil, nil, fileError(err)
	}
	text := strings.Join(r.Matches, "\n")
	if len(r.Matches) == 0 {
		text = "no matches"
	}
	switch {
	case r.TimedOut:
		text += "\n[the search stopped at its 30 s limit: these are the results so far, and matches may lie in what it had not read; narrow the path or glob]"
	case r.Truncated:
		text += "\n[more results were left out; narrow the pattern, path or glob]"
	}
	if r.Unreadable {
		text += "\n[some files or directories could not be read and were skipped]"
	}
	return textResult(text), r, nil
}
