package mcpserver

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/session"
)

// Bounds of the bash tool's arguments.
const (
	// maxCommandBytes is the longest command line: Linux passes it to
	// bash as one argument, and one argument may hold at most 128 KiB
	// (MAX_ARG_STRLEN) with its terminating NUL.
	maxCommandBytes = 128<<10 - 1
	// maxWorkdirBytes bounds workdir (PATH_MAX).
	maxWorkdirBytes = 4096
	// maxTimeout bounds timeout_s: a day.
	maxTimeout = 24 * time.Hour
)

// BashInput are the arguments of the bash tool.
type BashInput struct {
	// Command is a shell command line, run by bash.
	Command string `json:"command" jsonschema:"shell command line, run by bash in the session's current directory; cd and export carry over to later calls"`
	// TimeoutS, when set, replaces the timeout setting for this call, in
	// seconds; greater than 0 and at most 86400.
	TimeoutS *float64 `json:"timeout_s,omitempty" jsonschema:"seconds after which the command and every process it started are killed; default: the server's timeout setting; at most 86400"`
	// Background starts the command in the background and returns its id
	// at once.
	Background bool `json:"background,omitempty" jsonschema:"start the command in the background and return an id at once; read its output with bash_output and stop it with bash_kill; it does not change cwd or variables and runs until it exits (or timeout_s, when given)"`
	// Workdir is where this one command starts: absolute, or relative to
	// the session's current directory.
	Workdir string `json:"workdir,omitempty" jsonschema:"directory to start in, absolute or relative to the current directory; later calls still start where the session's cwd is"`
}

// CommandResult is what bash and run_code return for a command that ran
// (structuredContent; the text content says the same for a person or a
// model that reads text).
type CommandResult struct {
	// ExitCode is the command's exit status (128+N when signal N ended it,
	// 124 when its timeout did, as corral run: sandbox.ExitStatus); absent
	// for a background start.
	ExitCode *int `json:"exit_code,omitempty" jsonschema:"the command's exit status; 128+N when signal N ended it; 124 when its timeout did"`
	// Output is stdout and stderr interleaved, valid UTF-8, cut in the
	// middle beyond the output_limit setting.
	Output string `json:"output" jsonschema:"stdout and stderr, interleaved; when output_omitted_bytes > 0 the middle was left out"`
	// Cwd is the session's directory after the command.
	Cwd string `json:"cwd,omitempty" jsonschema:"the session's current directory after the command"`
	// TimedOut is set when the timeout ended the command.
	TimedOut bool `json:"timed_out,omitempty" jsonschema:"the timeout ended the command and every process it started"`
	// PipeStatus is the exit status of each member of the last pipeline.
	PipeStatus []int `json:"pipe_status,omitempty" jsonschema:"exit status of each member of the command's last pipeline"`
	// OutputBytes is how many bytes the command wrote in all.
	OutputBytes int64 `json:"output_bytes" jsonschema:"bytes the command wrote in all"`
	// OutputOmittedBytes is how many of them were left out in the middle
	// of Output.
	OutputOmittedBytes int64 `json:"output_omitted_bytes,omitempty" jsonschema:"bytes left out of the middle of output"`
	// InvalidUTF8 says that bytes of the output that are not UTF-8 were
	// replaced by U+FFFD.
	InvalidUTF8 bool `json:"invalid_utf8,omitempty" jsonschema:"bytes that are not UTF-8 were replaced by U+FFFD"`
	// Binary says that the output held NUL bytes, replaced by U+FFFD.
	Binary bool `json:"binary,omitempty" jsonschema:"the output holds NUL bytes (binary data), replaced by U+FFFD"`
	// LimitHit names the resource limit that ended the command: "cpu",
	// "memory" or "procs".
	LimitHit string `json:"limit_hit,omitempty" jsonschema:"the resource limit that ended the command: cpu, memory or procs"`
	// LimitMessage says which limit ended the command and which setting
	// raises it.
	LimitMessage string `json:"limit_message,omitempty" jsonschema:"which limit ended the command and which setting raises it"`
	// Notes are things worth knowing (a vanished cwd, a skipped bind).
	Notes []string `json:"notes,omitempty"`
	// Denials say how a failed command hit the sandbox's wall, as its
	// output shows: a read-only or hidden path, no network or a host the
	// allowlist refuses, a system call the filter refuses.
	Denials []hostview.Denial `json:"denials,omitempty" jsonschema:"how the command hit the sandbox's limits (read-only or hidden path, network, refused system call), one line each, with what would allow it"`
	// DurationMS is the wall-clock time the command ran, in milliseconds.
	DurationMS int64 `json:"duration_ms" jsonschema:"wall-clock milliseconds the command ran"`
	// ID names the background process a background: true call started.
	ID string `json:"id,omitempty" jsonschema:"id of the background process: pass it to bash_output and bash_kill"`
	// Running is set for a background process just started.
	Running bool `json:"running,omitempty" jsonschema:"the background process is running"`
}

func (s *Server) bashTool() Tool {
	return newTool(s, &mcp.Tool{
		Name:  "bash",
		Title: "Run a shell command in the sandbox",
		Description: "Run a shell command line with bash in this session's sandbox and return its exit code, output (stdout and stderr interleaved) and the directory it left the session in. " +
			"cd and exported variables carry over to later calls. stdin is empty, so nothing waits for input. " +
			"Long-running programs (servers, watchers): pass background: true, then use bash_output and bash_kill.",
		Annotations: &mcp.ToolAnnotations{Title: "bash", DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, nil, s.bash)
}

func (s *Server) bash(ctx context.Context, c *call, in BashInput) (*mcp.CallToolResult, CommandResult, error) {
	var zero CommandResult
	if err := checkCommand("command", in.Command, maxCommandBytes, "put a long script in a file with run_code, or write it with a file tool and run it"); err != nil {
		return nil, zero, err
	}
	if len(in.Workdir) > maxWorkdirBytes || strings.IndexByte(in.Workdir, 0) >= 0 {
		return nil, zero, badInput("workdir must be a path of at most %d bytes without NUL bytes", maxWorkdirBytes)
	}
	timeout, err := timeoutArg(in.TimeoutS)
	if err != nil {
		return nil, zero, err
	}
	if ask, err := s.approve(ctx, c, in.Command); err != nil || ask != nil {
		return ask, zero, err
	}
	// The settings were resolved once for this call (approve, above):
	// the command runs under that answer.
	sp, err := c.spec()
	if err != nil {
		return nil, zero, err
	}
	if in.Background {
		p, err := c.sess.Start(session.StartRequest{Command: in.Command, Workdir: in.Workdir, Timeout: timeout, Spec: sp})
		if err != nil {
			return nil, zero, err
		}
		out := CommandResult{ID: p.ID, Running: true, Output: ""}
		text := fmt.Sprintf("started %s in the background. Read its output with bash_output {\"id\": %q} (call again for more) and stop it with bash_kill {\"id\": %q}. If it serves on a port, bash_output says how the host reaches it.", p.ID, p.ID, p.ID)
		return textResult(text), out, nil
	}
	stop := c.progress(ctx, "bash", effectiveTimeout(sp, timeout))
	r, err := c.sess.Exec(ctx, session.ExecRequest{Command: in.Command, Timeout: timeout, Workdir: in.Workdir, Progress: c.note(ctx), Spec: sp})
	stop()
	if err != nil {
		return nil, zero, err
	}
	return commandResult(r)
}

// commandResult turns a finished foreground command into the tool result:
// the structured CommandResult and a text rendering of it. (A command for
// which no sandbox could be had never gets here: Exec returned
// sandbox.ErrUnavailable, a tool error by toolError.)
func commandResult(r *session.ExecResult) (*mcp.CallToolResult, CommandResult, error) {
	code := r.ExitCode
	out := CommandResult{
		ExitCode: &code, Output: r.Output.Text, Cwd: r.Cwd, TimedOut: r.TimedOut, PipeStatus: r.PipeStatus,
		OutputBytes: r.Output.Bytes, OutputOmittedBytes: r.Output.Omitted, InvalidUTF8: r.Output.InvalidUTF8, Binary: r.Output.Binary,
		LimitHit: r.LimitHit, LimitMessage: r.LimitMessage, Notes: r.Notes, DurationMS: r.Duration.Milliseconds(),
		Denials: r.Denials,
	}
	if r.TimedOut {
		out.Notes = append(out.Notes, fmt.Sprintf("the command timed out after %s and every process it started was killed; pass a larger timeout_s, or run it with background: true and poll bash_output", human(r.Timeout)))
	}
	return textResult(renderCommand(&out)), out, nil
}

// renderCommand renders a result as text: the output, then one status
// line and the notes.
func renderCommand(r *CommandResult) string {
	var b strings.Builder
	b.WriteString(r.Output)
	if r.Output != "" && !strings.HasSuffix(r.Output, "\n") {
		b.WriteString("\n")
	}
	status := "exit code ?"
	if r.ExitCode != nil {
		status = fmt.Sprintf("exit code %d", *r.ExitCode)
	}
	if len(r.PipeStatus) > 1 {
		ps := make([]string, len(r.PipeStatus))
		for i, v := range r.PipeStatus {
			ps[i] = fmt.Sprint(v)
		}
		status += " (pipeline: " + strings.Join(ps, " ") + ")"
	}
	if r.TimedOut {
		status += ", timed out"
	}
	fmt.Fprintf(&b, "[corral: %s · cwd %s · %.2f s", status, r.Cwd, float64(r.DurationMS)/1000)
	if r.OutputOmittedBytes > 0 {
		fmt.Fprintf(&b, " · %d of %d output bytes omitted in the middle", r.OutputOmittedBytes, r.OutputBytes)
	}
	b.WriteString("]")
	if r.LimitMessage != "" {
		b.WriteString("\n" + r.LimitMessage)
	}
	for _, d := range r.Denials {
		b.WriteString("\n" + d.Message)
	}
	for _, n := range r.Notes {
		b.WriteString("\nnote: " + n)
	}
	return b.String()
}

// textResult is a result whose content is text; the SDK adds the
// structured output.
func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// checkCommand refuses an empty, oversized or NUL-holding command-like
// argument, saying what to do instead.
func checkCommand(field, v string, max int, instead string) error {
	switch {
	case strings.TrimSpace(v) == "":
		return badInput("%s is empty; give the command line to run", field)
	case len(v) > max:
		return badInput("%s is %s long; at most %s fits (%s)", field, sizeText(int64(len(v))), sizeText(int64(max)), instead)
	case strings.IndexByte(v, 0) >= 0:
		return badInput("%s contains a NUL byte, which no command line can hold; remove it (write binary data with printf '\\0' or a file instead)", field)
	}
	return nil
}

// timeoutArg checks timeout_s: absent is zero (the setting's default),
// otherwise greater than 0 and at most maxTimeout.
func timeoutArg(v *float64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	s := *v
	switch {
	case math.IsNaN(s) || s <= 0:
		return 0, badInput("timeout_s is %v; it must be a number of seconds greater than 0 (leave it out for the server's default)", s)
	case s > maxTimeout.Seconds():
		return 0, badInput("timeout_s is %v; at most %d seconds (a day) is allowed; for longer work run it with background: true", s, int(maxTimeout.Seconds()))
	}
	d := time.Duration(s * float64(time.Second))
	if d < time.Millisecond {
		d = time.Millisecond
	}
	return d, nil
}

// effectiveTimeout returns the timeout a foreground command will get, for
// progress totals: the argument, else the setting of sp (the call's Spec;
// nil gives 0, no total).
func effectiveTimeout(sp *session.Spec, timeout time.Duration) time.Duration {
	if timeout > 0 {
		return timeout
	}
	if sp != nil {
		return sp.Timeout
	}
	return 0
}

// sizeText renders a byte count for a message: "10.0 MB", "128 KiB".
func sizeText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }
