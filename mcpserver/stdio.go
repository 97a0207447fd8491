package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxNestingDepth bounds how deeply a stdio message may nest JSON arrays
// and objects, counting the message object itself as depth 1. It is the
// bound the SDK's own JSON decoder applies to every message it decodes
// (go-sdk v1.8.0, internal/json, defaultMaxDepth), so a message within it
// is never refused for its depth later. encoding/json's scanner stops at
// 10000 levels; either way, a deeper line is answered with a parse error
// (-32700) rather than decoded.
const MaxNestingDepth = 1000

// ErrMessageTooLarge is wrapped by the error a stdio connection's Read
// returns, ending the connection, after a line longer than
// [StdioTransport.MaxMessageBytes]: the client was first sent a JSON-RPC
// error (-32600, id null) saying so.
var ErrMessageTooLarge = errors.New("message too large")

// StdioTransport is an mcp.Transport for MCP's stdio transport (MCP
// specification 2025-11-25, basic/transports, "stdio"): JSON-RPC 2.0
// messages, UTF-8, one per line, delimited by "\n" and never containing an
// embedded newline. It replaces the SDK's mcp.StdioTransport, whose
// json.Decoder reads the input as one stream of JSON values, so that a
// malformed message ends the connection or swallows the lines after it.
//
// Here each line stands alone (JSON-RPC 2.0 specification, section 5.1,
// "Error object"):
//
//   - a line that is not JSON text (a syntax error, a truncated message,
//     bytes that are not UTF-8, nesting deeper than [MaxNestingDepth]) is
//     answered with -32700 Parse error;
//   - JSON that is not a request, notification or response object (an
//     array, which would be a JSON-RPC batch, and MCP has had none since
//     revision 2025-06-18; a number; an object without "jsonrpc": "2.0" or
//     with a malformed member) is answered with -32600 Invalid Request;
//   - empty lines and lines of only spaces and tabs are skipped, and a
//     "\r" before the "\n" is dropped (CRLF line ends).
//
// Such an error response carries the message's id when the line is a JSON
// object with a "method" and a string or number "id", else id null; the
// connection then reads the next line. A line longer than MaxMessageBytes
// is answered with -32600 (id null) and ends the connection: Read returns
// an error wrapping [ErrMessageTooLarge]. The end of the input ends the connection cleanly
// (Read returns io.EOF).
//
// Writes are serialized: each message is written whole, as one line, with
// one Write call on Writer.
type StdioTransport struct {
	// Reader is where messages come from; nil means os.Stdin. The
	// connection's Close closes it.
	Reader io.ReadCloser
	// Writer is where messages go; nil means os.Stdout, which Close leaves
	// open. A Writer set here is closed by Close.
	Writer io.WriteCloser
	// MaxMessageBytes bounds one line, in bytes, without its "\n" or
	// "\r\n"; zero or less means [DefaultMaxRequestBytes] (64 MiB). No
	// more than this and its line end (and a 64 KiB read buffer) is held
	// for a line.
	MaxMessageBytes int
	// Logger receives mcp.stdio.bad_message for each line answered with an
	// error; nil discards it.
	Logger *slog.Logger
}

// Connect returns the connection over t's Reader and Writer; it implements
// mcp.Transport. A StdioTransport is connected once.
func (t *StdioTransport) Connect(context.Context) (mcp.Connection, error) {
	c := &stdioConn{
		r: t.Reader, w: t.Writer, max: t.MaxMessageBytes, log: t.Logger,
		want: make(chan struct{}), lines: make(chan lineOrErr), closed: make(chan struct{}),
	}
	if c.r == nil {
		c.r = os.Stdin
	}
	if c.w == nil {
		c.w = nopCloser{os.Stdout}
	}
	if c.max <= 0 {
		c.max = DefaultMaxRequestBytes
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	go c.readLines()
	return c, nil
}

// nopCloser is a writer whose Close does nothing (for os.Stdout).
type nopCloser struct{ io.Writer }

// Close does nothing.
func (nopCloser) Close() error { return nil }

// stdioConn is the mcp.Connection of a [StdioTransport].
type stdioConn struct {
	r   io.ReadCloser
	w   io.WriteCloser
	max int
	log *slog.Logger

	// readLines reads one line each time Read asks on want, and hands it
	// over on lines: Read can give up waiting (its context, Close) while a
	// read of the input blocks, and no line is read ahead.
	want    chan struct{}
	lines   chan lineOrErr
	pending bool // Read asked for a line it has not received yet (Reads are serialized)

	writeMu sync.Mutex

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
}

// lineOrErr is one line of input without its line end, or why there is no
// more.
type lineOrErr struct {
	line []byte
	err  error
}

// readLines is the goroutine that reads the input, a line at a time on
// request, until an error (io.EOF at the end) or Close. It may stay
// blocked in a read of an input whose Close does not interrupt reads, as
// the SDK's stdio transport does.
func (c *stdioConn) readLines() {
	br := bufio.NewReaderSize(c.r, 64<<10)
	for {
		select {
		case <-c.want:
		case <-c.closed:
			return
		}
		line, err := readLine(br, c.max)
		select {
		case c.lines <- lineOrErr{line, err}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// readLine reads the next line from br and returns it without its "\n"
// or "\r\n". A last line without "\n" is returned as a line; after it,
// io.EOF. A line longer than limit bytes is read no further than
// limit+2 bytes: readLine returns [ErrMessageTooLarge] and the rest of the
// line stays unread.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > limit+2 { // room for "\r\n"
			return nil, ErrMessageTooLarge
		}
		if len(chunk) > 0 {
			if need := len(line) + len(chunk); need > cap(line) {
				// Grow by doubling, but never past limit+2 bytes.
				n := min(max(2*cap(line), need, 512), limit+2)
				line = append(make([]byte, 0, n), line...)
			}
			line = append(line, chunk...)
		}
		switch {
		case err == nil:
			line = line[:len(line)-1]
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
		default:
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) > limit {
			return nil, ErrMessageTooLarge
		}
		return line, nil
	}
}

// Read returns the next message of the input. Lines that are not a
// message are answered with a JSON-RPC error response and skipped (see
// [StdioTransport]); a line too long is answered and ends the connection
// with [ErrMessageTooLarge]. Read implements mcp.Connection; calls must
// not overlap (the SDK makes them from one goroutine).
func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !c.pending {
			select {
			case c.want <- struct{}{}:
				c.pending = true
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-c.closed:
				return nil, io.EOF
			}
		}
		var in lineOrErr
		select {
		case in = <-c.lines:
			c.pending = false
		case <-ctx.Done():
			return nil, ctx.Err() // the line asked for is the next Read's
		case <-c.closed:
			return nil, io.EOF
		}
		if errors.Is(in.err, ErrMessageTooLarge) {
			msg := fmt.Sprintf("Invalid Request: a message is larger than %d bytes, the most this server reads; the connection ends", c.max)
			c.log.Warn("mcp.stdio.bad_message", "code", jsonrpc.CodeInvalidRequest, "error", msg, "limit", c.max)
			end := fmt.Errorf("%w: a line longer than %d bytes, the limit", ErrMessageTooLarge, c.max)
			if err := c.writeError(nil, jsonrpc.CodeInvalidRequest, msg); err != nil {
				return nil, errors.Join(end, err)
			}
			return nil, end
		}
		if in.err != nil {
			return nil, in.err
		}
		msg, bad := parseLine(in.line)
		if msg != nil {
			return msg, nil
		}
		if bad == nil {
			continue // an empty line
		}
		c.log.Warn("mcp.stdio.bad_message", "code", bad.code, "error", bad.msg, "bytes", len(in.line))
		if err := c.writeError(bad.id, bad.code, bad.msg); err != nil {
			return nil, err
		}
	}
}

// rejection is why a line is not a message: the JSON-RPC error code and
// message of the response, and the id to answer (nil for null; else a
// string or a json.Number).
type rejection struct {
	code int64
	id   any
	msg  string
}

// parseLine turns one line (without its line end) into a message. It
// returns a nil message and a nil rejection for a blank line (nothing
// but spaces and tabs), and a rejection for any line that is not one
// JSON-RPC 2.0 request, notification or response object.
func parseLine(line []byte) (jsonrpc.Message, *rejection) {
	text := bytes.TrimLeft(line, " \t\r\n")
	if len(text) == 0 {
		return nil, nil
	}
	if depthExceeds(text, MaxNestingDepth) {
		return nil, &rejection{code: jsonrpc.CodeParseError, msg: fmt.Sprintf("Parse error: the message nests arrays and objects deeper than %d levels", MaxNestingDepth)}
	}
	if !json.Valid(text) {
		var err error
		var v any
		if err = json.Unmarshal(text, &v); err == nil {
			err = errors.New("not JSON")
		}
		return nil, &rejection{code: jsonrpc.CodeParseError, msg: "Parse error: each line must be one whole JSON-RPC message: " + err.Error()}
	}
	if text[0] != '{' {
		what := map[byte]string{'[': "an array (a JSON-RPC batch: MCP has had none since 2025-06-18; send each message on a line of its own)", '"': "a string", 'n': "null", 't': "a boolean", 'f': "a boolean"}[text[0]]
		if what == "" {
			what = "a number"
		}
		return nil, &rejection{code: jsonrpc.CodeInvalidRequest, msg: "Invalid Request: a message must be a JSON-RPC 2.0 request, notification or response object, not " + what}
	}
	utf := utf8.Valid(text)
	var decodeErr error
	if utf {
		msg, err := jsonrpc.DecodeMessage(text)
		if err == nil {
			if nullID(msg, text) {
				// MCP: "Unlike base JSON-RPC, the ID MUST NOT be null"
				// (basic, Requests); the SDK took it for a notification
				// and nothing answered.
				return nil, &rejection{code: jsonrpc.CodeInvalidRequest, msg: "Invalid Request: a request's id must be a string or an integer, not null (leave the id out for a notification)"}
			}
			return msg, nil
		}
		decodeErr = err
	}
	// Not a message: find the id to answer and say why.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(text, &members); err != nil {
		return nil, &rejection{code: jsonrpc.CodeInvalidRequest, msg: "Invalid Request: " + err.Error()}
	}
	var id any
	if _, ok := members["method"]; ok {
		id = usableID(members["id"])
	}
	var version string
	switch {
	case !utf:
		return nil, &rejection{code: jsonrpc.CodeParseError, id: id, msg: "Parse error: the message is not valid UTF-8 (MCP messages must be UTF-8 encoded)"}
	case json.Unmarshal(members["jsonrpc"], &version) != nil || version != "2.0":
		return nil, &rejection{code: jsonrpc.CodeInvalidRequest, id: id, msg: `Invalid Request: a message must have "jsonrpc": "2.0"`}
	}
	return nil, &rejection{code: jsonrpc.CodeInvalidRequest, id: id, msg: "Invalid Request: " + decodeErr.Error()}
}

// nullID reports whether msg, decoded from text as a notification (no
// id), has an "id" member that is null. Only notifications are looked at
// again, and only when the text holds "id" at all: a large request is not
// decoded twice.
func nullID(msg jsonrpc.Message, text []byte) bool {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.ID.IsValid() || !bytes.Contains(text, []byte(`"id"`)) {
		return false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(text, &members) != nil {
		return false
	}
	raw, has := members["id"]
	return has && string(bytes.TrimSpace(raw)) == "null"
}

// usableID returns a request's id to answer an error with: a string or a
// number (as a json.Number), else nil (null, absent, or of another type).
func usableID(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	switch v.(type) {
	case string, json.Number:
		return v
	}
	return nil
}

// depthExceeds reports whether data nests arrays and objects deeper than
// limit, counting brackets outside strings in one pass (so that no
// recursive decoder ever sees such a line). data need not be valid JSON.
func depthExceeds(data []byte, limit int) bool {
	depth := 0
	inString, escaped := false, false
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > limit {
				return true
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return false
}

// errorResponse is a JSON-RPC 2.0 error response (specification section
// 5): unlike jsonrpc.EncodeMessage's, its id member is present when null.
type errorResponse struct {
	JSONRPC string         `json:"jsonrpc"`
	ID      any            `json:"id"`
	Error   *jsonrpc.Error `json:"error"`
}

// writeError sends the error response code, msg for the message id (nil
// for null).
func (c *stdioConn) writeError(id any, code int64, msg string) error {
	data, err := json.Marshal(errorResponse{JSONRPC: "2.0", ID: id, Error: &jsonrpc.Error{Code: code, Message: msg}})
	if err != nil {
		return err
	}
	return c.writeLine(data)
}

// Write sends msg as one line. It implements mcp.Connection and is safe
// for concurrent use: messages never interleave.
func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// EncodeMessage compacts params and results (encoding/json compacts a
	// json.RawMessage), and JSON strings escape newlines: the data has none.
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("mcp over stdio: encoding a message: %w", err)
	}
	return c.writeLine(data)
}

// writeLine writes data and a "\n" in one Write, under writeMu.
func (c *stdioConn) writeLine(data []byte) error {
	data = append(data, '\n')
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	select {
	case <-c.closed:
		return mcp.ErrConnectionClosed
	default:
	}
	_, err := c.w.Write(data)
	return err
}

// Close closes the Reader and the Writer (not os.Stdout) and ends a Read
// in progress, which returns io.EOF. It implements mcp.Connection; calls
// after the first return the first's result.
func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = errors.Join(c.r.Close(), c.w.Close())
	})
	return c.closeErr
}

// SessionID returns "": a stdio connection has no MCP session id. It
// implements mcp.Connection.
func (c *stdioConn) SessionID() string { return "" }
