package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/layer"
)

// WorkspaceDiffInput are the arguments of the workspace_diff tool.
type WorkspaceDiffInput struct {
	// Paths limit the diff to these paths and what lies below them.
	Paths []string `json:"paths,omitempty" jsonschema:"limit the diff to these paths (relative to the working directory, or absolute inside it) and what lies below them; default all"`
	// Stat asks for per-file counts instead of the patch.
	Stat bool `json:"stat,omitempty" jsonschema:"print changed lines per file and a summary instead of the diff (git diff --stat)"`
}

// WorkspaceDiffResult is what workspace_diff returns.
type WorkspaceDiffResult struct {
	// Files is how many paths changed (directories included).
	Files int `json:"files" jsonschema:"how many paths the session changed (directories included)"`
	// Diff is the text, cut at the output limit.
	Diff string `json:"diff" jsonschema:"the diff, in git diff's form"`
	// OmittedBytes is how much of the end was left out.
	OmittedBytes int `json:"omitted_bytes,omitempty" jsonschema:"bytes of the diff left out at its end; narrow it with paths"`
}

func (s *Server) workspaceDiffTool() Tool {
	return newTool(s, &mcp.Tool{
		Name:  "workspace_diff",
		Title: "Show the session's pending changes",
		Description: "Under workspace_mode review, what this session's commands and file tools changed in the working directory, " +
			"held in the session's layer until a person applies it: a unified diff as git diff prints it (new, deleted and binary " +
			"files, mode changes, symlinks), or per-file counts with stat. Applying or discarding is the person's act, not a tool.",
		Annotations: &mcp.ToolAnnotations{Title: "workspace_diff", ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, nil, s.workspaceDiff)
}

func (s *Server) workspaceDiff(_ context.Context, c *call, in WorkspaceDiffInput) (*mcp.CallToolResult, *WorkspaceDiffResult, error) {
	l, err := layer.Open(filepath.Join(c.sess.Dir(), "layer"))
	if errors.Is(err, layer.ErrNoLayer) {
		return nil, nil, &ToolError{Msg: "this session's workspace_mode is direct: its commands write the working directory itself, so there is no pending change to show (git diff shows changes against the last commit)", Err: err}
	}
	if err != nil {
		return nil, nil, toolError(err)
	}
	limit := 64 << 10
	var protected []string
	if s.opts.Spec != nil {
		if sp, err := s.opts.Spec(c.sess.Name()); err == nil {
			if sp.OutputLimit > 0 {
				limit = sp.OutputLimit
			}
			protected = sp.Policy.Protected
		}
	}
	// Only what can be returned is kept: a diff of any size costs at
	// most the limit in memory.
	// The changes are streamed from the layer too (DiffLayer): neither
	// their number nor the diff's size grows what this keeps.
	b := &headWriter{limit: limit}
	files, err := layer.DiffLayer(b, l, in.Paths, layer.DiffOptions{Stat: in.Stat, Protected: protected, Exact: true}) // for the agent, which wrote them: exact
	if errors.Is(err, layer.ErrOutside) {
		return nil, nil, badInput("%v", err)
	}
	if err != nil {
		return nil, nil, toolError(err)
	}
	res := &WorkspaceDiffResult{Files: files, Diff: b.head.String()}
	text := res.Diff
	switch {
	case files == 0:
		text = "No changes: the working directory is as the session found it (or everything was applied or discarded)."
	case b.total > int64(limit):
		cut := bytes.LastIndexByte(b.head.Bytes()[:limit], '\n') + 1 // whole lines
		res.Diff, res.OmittedBytes = res.Diff[:cut], int(b.total)-cut
		text = res.Diff + fmt.Sprintf("[diff cut: %s of %s left out at the end; call again with stat, or with paths]\n", sizeText(int64(res.OmittedBytes)), sizeText(b.total))
	}
	return textResult(text), res, nil
}

// headWriter keeps the first limit bytes written to it and counts the
// rest.
type headWriter struct {
	head  bytes.Buffer
	limit int
	total int64
}

func (w *headWriter) Write(p []byte) (int, error) {
	w.total += int64(len(p))
	if room := w.limit - w.head.Len(); room > 0 {
		w.head.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
