package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// BashOutputInput are the arguments of the bash_output tool.
type BashOutputInput struct {
	// ID names the background process (bash with background: true).
	ID string `json:"id" jsonschema:"id of a background process, as bash returned it (bg-1)"`
	// Offset is the byte offset to read from; absent means where the
	// previous bash_output call for this id stopped (0 the first time).
	Offset *int64 `json:"offset,omitempty" jsonschema:"byte offset of the output to read from; default: where the previous bash_output call for this id stopped (0 the first time)"`
}

// BashOutputResult is what bash_output returns: a chunk of a background
// process's output (at most 64 KiB) and whether it still runs.
type BashOutputResult struct {
	// ID names the background process.
	ID string `json:"id" jsonschema:"the background process"`
	// Output is the output from Offset to NextOffset, valid UTF-8.
	Output string `json:"output" jsonschema:"output from offset to next_offset, stdout and stderr interleaved"`
	// Offset is where Output starts, in bytes from the start of the
	// process's output: past the requested offset when older output was
	// dropped (SkippedBytes says how much).
	Offset int64 `json:"offset" jsonschema:"byte offset where output starts"`
	// NextOffset is the offset to read from next time.
	NextOffset int64 `json:"next_offset" jsonschema:"byte offset to pass next time for the output that follows"`
	// SkippedBytes is how many bytes before Offset were dropped: past
	// 64 MiB only the newest output is kept.
	SkippedBytes int64 `json:"skipped_bytes,omitempty" jsonschema:"bytes before offset that were dropped (only the newest output is kept past 64 MiB or when corral's disk is nearly full)"`
	// SkippedReason says why SkippedBytes were dropped
	// (session.Chunk.SkippedReason).
	SkippedReason string `json:"skipped_reason,omitempty" jsonschema:"why the skipped bytes were dropped"`
	// More is set when output beyond NextOffset is already there.
	More bool `json:"more,omitempty" jsonschema:"more output is already available: call again with next_offset"`
	// Running is false once the process has ended; ExitCode, TimedOut,
	// LimitHit and Error then say how.
	Running bool `json:"running" jsonschema:"the process is still running"`
	// ExitCode is the exit status once the process has ended (128+N for
	// signal N); absent while it runs.
	ExitCode *int `json:"exit_code,omitempty" jsonschema:"exit status, once it has ended (128+N for signal N)"`
	// TimedOut is set when its timeout_s ended it.
	TimedOut bool `json:"timed_out,omitempty" jsonschema:"its timeout ended it"`
	// LimitHit names the resource limit that ended it: "cpu", "memory" or
	// "procs".
	LimitHit string `json:"limit_hit,omitempty" jsonschema:"the resource limit that ended it: cpu, memory or procs"`
	// Error says why it could not run at all (no sandbox), if so, or,
	// with MayHaveRun, how corral lost track of it.
	Error string `json:"error,omitempty" jsonschema:"why it could not run, if it could not; with may_have_run, how corral lost track of it"`
	// MayHaveRun is set with Error when the process was started and
	// corral lost track of it: it may have run, in part or whole.
	MayHaveRun bool `json:"may_have_run,omitempty" jsonschema:"it was started and may have run, in part or whole, before corral lost track of it: look at its effects before running it again"`
	// InvalidUTF8 says that bytes that are not UTF-8 were replaced by
	// U+FFFD.
	InvalidUTF8 bool `json:"invalid_utf8,omitempty" jsonschema:"bytes that are not UTF-8 were replaced by U+FFFD"`
	// Ports are the TCP ports its sandbox listens on while it runs, each
	// with the host URL when it is forwarded (session.Session.Ports).
	Ports []session.PortInfo `json:"ports,omitempty" jsonschema:"TCP ports it listens on inside its sandbox, with the URL on the host where one is forwarded"`
}

func (s *Server) bashOutputTool() Tool {
	return newTool(s, &mcp.Tool{
		Name:  "bash_output",
		Title: "Read a background command's output",
		Description: "Read the output of a background process started by bash with background: true: at most 64 KiB from offset (default: where the previous call stopped), " +
			"whether it still runs, and its exit code once it has ended. Call again with next_offset for more.",
		Annotations: &mcp.ToolAnnotations{Title: "bash_output", ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, nil, s.bashOutput)
}

func (s *Server) bashOutput(_ context.Context, c *call, in BashOutputInput) (*mcp.CallToolResult, BashOutputResult, error) {
	var zero BashOutputResult
	if err := checkID(in.ID); err != nil {
		return nil, zero, err
	}
	key := c.sess.Name() + "\x00" + in.ID
	var off int64
	if in.Offset != nil {
		if *in.Offset < 0 {
			return nil, zero, badInput("offset is %d; it must be 0 or more (leave it out to continue where the previous call stopped)", *in.Offset)
		}
		off = *in.Offset
	} else {
		s.mu.Lock()
		off = s.offsets[key]
		s.mu.Unlock()
	}
	ch, err := c.sess.Output(in.ID, off)
	if err != nil {
		return nil, zero, unknownProcess(c.sess, in.ID, err)
	}
	out := BashOutputResult{
		ID: in.ID, Output: ch.Data, Offset: ch.Offset, NextOffset: ch.Next, SkippedBytes: ch.Skipped, SkippedReason: ch.SkippedReason,
		Running: ch.Running, TimedOut: ch.TimedOut, LimitHit: ch.LimitHit, Error: ch.Error, MayHaveRun: ch.MayHaveRun, InvalidUTF8: ch.InvalidUTF8,
	}
	live := map[string]bool{}
	for _, p := range c.sess.List() {
		live[c.sess.Name()+"\x00"+p.ID] = true
		if p.ID == in.ID {
			out.More = p.Bytes > ch.Next
		}
	}
	if !ch.Running {
		code := ch.ExitCode
		out.ExitCode = &code
	} else {
		out.Ports = c.sess.Ports(in.ID)
	}
	s.mu.Lock()
	s.offsets[key] = ch.Next
	// Forget the offsets of this session's processes that it has forgotten.
	for k := range s.offsets {
		if strings.HasPrefix(k, c.sess.Name()+"\x00") && !live[k] {
			delete(s.offsets, k)
		}
	}
	s.mu.Unlock()

	var b strings.Builder
	if ch.Skipped > 0 {
		// Where the gap is, before the output that follows it.
		fmt.Fprintf(&b, "[corral: %d older bytes were dropped before offset %d", ch.Skipped, ch.Offset)
		if ch.SkippedReason != "" {
			fmt.Fprintf(&b, ": %s", ch.SkippedReason)
		}
		b.WriteString("]\n")
	}
	b.WriteString(ch.Data)
	if ch.Data != "" && !strings.HasSuffix(ch.Data, "\n") {
		b.WriteString("\n")
	}
	switch {
	case ch.Error != "" && ch.MayHaveRun:
		fmt.Fprintf(&b, "[corral: %s was started, but corral lost track of it, so it may have run, in part or whole (look at its effects before running it again): %s]", in.ID, ch.Error)
	case ch.Error != "":
		fmt.Fprintf(&b, "[corral: %s could not run: %s]", in.ID, ch.Error)
	case ch.Running:
		if note := portsNote(c.sess.Name(), in.ID, out.Ports); note != "" {
			b.WriteString(note)
		}
		fmt.Fprintf(&b, "[corral: %s is still running · next_offset %d", in.ID, ch.Next)
		if out.More {
			b.WriteString(" · more output is ready: call again")
		}
		b.WriteString("]")
	default:
		fmt.Fprintf(&b, "[corral: %s has ended with exit code %d", in.ID, ch.ExitCode)
		if ch.TimedOut {
			b.WriteString(" (its timeout ended it)")
		}
		if ch.LimitHit != "" {
			fmt.Fprintf(&b, " (it hit the %s limit)", ch.LimitHit)
		}
		fmt.Fprintf(&b, " · next_offset %d", ch.Next)
		if out.More {
			b.WriteString(" · more output is ready: call again")
		}
		b.WriteString("]")
	}
	return textResult(b.String()), out, nil
}

// portsNote says, one line per port, where the host reaches the ports a
// background process listens on: the URL of a forward, or the command a
// person runs to make one (the model cannot open a host port itself).
func portsNote(sess, id string, ports []session.PortInfo) string {
	var b strings.Builder
	for _, p := range ports {
		if p.URL != "" {
			fmt.Fprintf(&b, "[corral: %s listens on port %d; the host reaches it at %s]\n", id, p.Port, p.URL)
		} else {
			fmt.Fprintf(&b, "[corral: %s listens on port %d inside its sandbox, which the host cannot reach; a person can forward it with: corral port --session %s %d (or list the port in the ports setting)]\n", id, p.Port, shellWord(sess), p.Port)
		}
	}
	return b.String()
}

// shellWord returns s as one shell word: as it is when it holds only
// characters no shell treats specially, else quoted (shellQuote).
func shellWord(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r)) {
			return shellQuote(s)
		}
	}
	if s == "" {
		return shellQuote(s)
	}
	return s
}

// checkID refuses an empty or implausible background process id.
func checkID(id string) error {
	if strings.TrimSpace(id) == "" {
		return badInput("id is empty; pass the id bash returned for a background command (bg-1)")
	}
	if len(id) > 64 || strings.IndexByte(id, 0) >= 0 {
		return badInput("id %.64q is not a background process id; pass the id bash returned (bg-1)", id)
	}
	return nil
}

// unknownProcess words a failed lookup of a background process, listing
// the ones the session has.
func unknownProcess(sess *session.Session, id string, err error) error {
	if !errors.Is(err, sandbox.ErrBadRequest) {
		return err
	}
	var ids []string
	for _, p := range sess.List() {
		state := "ended"
		if p.Running {
			state = "running"
		}
		ids = append(ids, fmt.Sprintf("%s (%s: %.40q)", p.ID, state, p.Command))
	}
	msg := fmt.Sprintf("this session has no background process %q", id)
	if len(ids) == 0 {
		msg += " and none at all (start one with bash and background: true)"
	} else {
		msg += "; it has " + strings.Join(ids, ", ")
	}
	return &ToolError{Msg: msg + ". An ended process is forgotten some minutes after its output was read to the end.", Err: err}
}
