package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/corralhq/corral/session"
)

// The tests in this file drive StdioTransport with raw lines, as a client
// nobody here wrote might send them, and read the raw lines it answers.

// Raw messages the tests send.
const (
	rawInitialize  = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	rawInitialized = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	rawToolsList   = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
)

// rawPing is a ping request with id id.
func rawPing(id int) string { return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, id) }

// paddedPing is a ping request with id id, padded (in a params member the
// server ignores) to exactly n bytes.
func paddedPing(id, n int) string {
	s := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"pad":"`, id)
	return s + strings.Repeat("p", n-len(s)-3) + `"}}`
}

// nested is a ping request with id id whose params nest arrays so that
// the whole message is depth levels deep.
func nested(id, depth int) string {
	n := depth - 2 // the message and its params are two levels
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"a":%s%s}}`, id, strings.Repeat("[", n), strings.Repeat("]", n))
}

// badLine is one line sent to a stdio server and the answers it must get:
// "ID/CODE" for each, ID as JSON ("null", "7", `"a"`), CODE a JSON-RPC
// error code or 0 for a result.
type badLine struct {
	name string
	line string
	eol  string // the line end of this case's lines; "" means "\n"
	want []string
}

// badLines are the lines that used to end a stdio connection, swallow the
// lines after them, or pass when they should not; and the blank lines and
// line ends that are fine.
var badLines = []badLine{
	{name: "garbage", line: "hello world", want: []string{"null/-32700"}},
	{name: "empty batch", line: "[]", want: []string{"null/-32600"}},
	{name: "batch", line: "[" + rawPing(9) + "]", want: []string{"null/-32600"}},
	{name: "number", line: "42", want: []string{"null/-32600"}},
	{name: "string", line: `"ping"`, want: []string{"null/-32600"}},
	{name: "null", line: "null", want: []string{"null/-32600"}},
	{name: "truncated", line: `{"jsonrpc":"2.0","id":5,"method":`, want: []string{"null/-32700"}},
	{name: "two messages on a line", line: rawPing(5) + " " + rawPing(6), want: []string{"null/-32700"}},
	{name: "100000 open brackets", line: strings.Repeat("[", 100000), want: []string{"null/-32700"}},
	{name: "100000 nested arrays", line: strings.Repeat("[", 100000) + strings.Repeat("]", 100000), want: []string{"null/-32700"}},
	{name: "100000 nested objects", line: strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000), want: []string{"null/-32700"}},
	{name: "request past the nesting bound", line: nested(8, MaxNestingDepth+1), want: []string{"null/-32700"}},
	{name: "request at the nesting bound", line: nested(8, MaxNestingDepth), want: []string{"8/0"}},
	{name: "not UTF-8", line: "\xff\xfe\xfd", want: []string{"null/-32700"}},
	{name: "request not UTF-8", line: `{"jsonrpc":"2.0","id":7,"method":"ping","params":{"pad":"a` + "\xff" + `b"}}`, want: []string{"7/-32700"}},
	{name: "jsonrpc 1.0", line: `{"jsonrpc":"1.0","id":"a","method":"ping"}`, want: []string{`"a"/-32600`}},
	{name: "no jsonrpc", line: `{"id":3,"method":"ping"}`, want: []string{"3/-32600"}},
	{name: "method not a string", line: `{"jsonrpc":"2.0","id":4,"method":1}`, want: []string{"4/-32600"}},
	{name: "id an object", line: `{"jsonrpc":"2.0","id":{"n":1},"method":"ping"}`, want: []string{"null/-32600"}},
	{name: "no method and no id", line: `{"jsonrpc":"2.0"}`, want: []string{"null/-32600"}},
	{name: "result without id", line: `{"jsonrpc":"2.0","result":{}}`, want: []string{"null/-32600"}},
	{name: "empty line", line: ""},
	{name: "spaces", line: "     "},
	{name: "spaces and tabs", line: " \t \t"},
	{name: "CRLF", line: rawPing(6), eol: "\r\n", want: []string{"6/0"}},
}

// rawPeer is the client end of a stdio connection, speaking raw lines: it
// writes to the server's input from a goroutine of its own (so that a
// server blocked writing an answer never blocks the test reading it) and
// reads the server's output a line at a time.
type rawPeer struct {
	t    *testing.T
	send chan string
	out  *bufio.Reader
	sent chan struct{} // closed when the input is closed
}

// newRawPeer writes to in and reads from out.
func newRawPeer(t *testing.T, in io.WriteCloser, out io.Reader) *rawPeer {
	p := &rawPeer{t: t, send: make(chan string, 64), out: bufio.NewReader(out), sent: make(chan struct{})}
	go func() {
		defer close(p.sent)
		var failed error
		for s := range p.send {
			if failed == nil {
				_, failed = io.WriteString(in, s)
			}
		}
		in.Close()
	}()
	return p
}

// lines sends each line followed by eol ("\n" when empty).
func (p *rawPeer) lines(eol string, lines ...string) {
	if eol == "" {
		eol = "\n"
	}
	for _, l := range lines {
		p.send <- l + eol
	}
}

// closeInput closes the server's input after what was sent.
func (p *rawPeer) closeInput() {
	close(p.send)
	<-p.sent
}

// rawReply is one message of the server's output.
type rawReply struct {
	key    string // "ID/CODE", as in badLine.want
	result json.RawMessage
	error  *jsonrpc.Error
	line   []byte
}

// next reads the server's next response (skipping its requests and
// notifications); ok is false at the end of the output.
func (p *rawPeer) next() (r rawReply, ok bool) {
	p.t.Helper()
	for {
		line, err := p.out.ReadBytes('\n')
		if err != nil {
			if len(line) > 0 {
				p.t.Fatalf("the server's output ends without a line end: %.200q", line)
			}
			return rawReply{}, false
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			p.t.Fatalf("the server wrote a line that is not a JSON object: %v: %.300q", err, line)
		}
		if _, ok := m["method"]; ok {
			continue
		}
		if string(m["jsonrpc"]) != `"2.0"` {
			p.t.Errorf("a response without \"jsonrpc\": \"2.0\": %.300s", line)
		}
		id, ok := m["id"]
		if !ok {
			p.t.Errorf("a response without an id member (JSON-RPC 2.0 section 5: null when unknown): %.300s", line)
			id = json.RawMessage("absent")
		}
		r = rawReply{result: m["result"], line: line}
		code := int64(0)
		if e, ok := m["error"]; ok {
			if err := json.Unmarshal(e, &r.error); err != nil || r.error == nil {
				p.t.Fatalf("a malformed error member: %.300s", line)
			}
			code = r.error.Code
			if r.error.Message == "" {
				p.t.Errorf("an error without a message: %s", line)
			}
		} else if r.result == nil {
			p.t.Errorf("a response with neither result nor error: %.300s", line)
		}
		r.key = fmt.Sprintf("%s/%d", id, code)
		return r, true
	}
}

// expect reads responses until it has had exactly want (in any order),
// and returns them by key. A response not in want, or the end of the
// output first, fails the test.
func (p *rawPeer) expect(what string, want ...string) map[string]rawReply {
	p.t.Helper()
	due := map[string]int{}
	for _, w := range want {
		due[w]++
	}
	got := map[string]rawReply{}
	for n := len(want); n > 0; n-- {
		r, ok := p.next()
		if !ok {
			p.t.Fatalf("%s: the connection ended with answers %v still due", what, due)
		}
		if due[r.key] == 0 {
			p.t.Fatalf("%s: unexpected answer %s (due: %v): %.300s", what, r.key, due, r.line)
		}
		due[r.key]--
		got[r.key] = r
	}
	return got
}

// bareServer is a Server whose tools cannot run anything (there is no
// sandbox here): enough for initialize, ping and tools/list.
func bareServer(t *testing.T) *Server {
	t.Helper()
	m := session.NewManager(session.Options{StateDir: t.TempDir(), Resolve: func(string) (*session.Spec, error) {
		return nil, errors.New("no sandbox in this test")
	}})
	srv, err := New(Options{Manager: m, DefaultSession: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); m.Close() })
	return srv
}

// stdioServer connects a bare server's MCP server through a StdioTransport
// over two OS pipes (as stdin and stdout are) with a line limit of max
// (0: the default). ended receives what the session's Wait returns.
func stdioServer(t *testing.T, max int) (p *rawPeer, ended <-chan error) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inW.Close(); outR.Close() })
	ss, err := bareServer(t).MCPServer("test").Connect(context.Background(), &StdioTransport{Reader: inR, Writer: outW, MaxMessageBytes: max}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- ss.Wait() }()
	t.Cleanup(func() { ss.Close() })
	return newRawPeer(t, inW, outR), ch
}

// TestStdioBadLines: each line that is not a JSON-RPC message gets the
// JSON-RPC error it should (or none, for a blank line), and the
// connection goes on: the requests on the lines after it, before and
// after initialization, are all answered. The end of the input then ends
// the connection cleanly.
func TestStdioBadLines(t *testing.T) {
	for _, tc := range badLines {
		t.Run(tc.name, func(t *testing.T) {
			p, ended := stdioServer(t, 0)
			p.lines(tc.eol, tc.line, rawPing(100), rawInitialize)
			p.expect("before initialize", append([]string{"100/0", "1/0"}, tc.want...)...)
			p.lines(tc.eol, rawInitialized, tc.line, rawToolsList, rawPing(101))
			got := p.expect("after initialize", append([]string{"2/0", "101/0"}, tc.want...)...)
			if !bytes.Contains(got["2/0"].result, []byte(`"name":"bash"`)) {
				t.Errorf("tools/list lacks bash: %.300s", got["2/0"].line)
			}
			p.closeInput()
			if r, ok := p.next(); ok {
				t.Errorf("an answer more: %.300s", r.line)
			}
			if err := <-ended; err != nil {
				t.Errorf("the session ended with %v at the end of the input", err)
			}
		})
	}
}

// TestStdioLineLimit: a line of exactly the limit (without its "\n" or
// "\r\n") is a message; one byte more is answered with -32600 (id null)
// and ends the connection, without reading the rest of the line.
func TestStdioLineLimit(t *testing.T) {
	const limit = 4096
	p, ended := stdioServer(t, limit)
	p.lines("\n", paddedPing(10, limit))
	p.lines("\r\n", paddedPing(11, limit))
	p.expect("lines at the limit", "10/0", "11/0")
	p.lines("\n", paddedPing(12, limit+1)+strings.Repeat(" ", 1<<20), rawPing(13))
	got := p.expect("a line past the limit", "null/-32600")
	if msg := got["null/-32600"].error.Message; !strings.Contains(msg, "larger than 4096 bytes") {
		t.Errorf("the error says %q", msg)
	}
	if r, ok := p.next(); ok {
		t.Errorf("an answer after the line past the limit: %.300s", r.line)
	}
	if err := <-ended; !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("the session ended with %v, want ErrMessageTooLarge", err)
	}
	p.closeInput()
}

// TestReadLineBounded: an endless line is read no further than the limit
// and the line end, plus what the buffer reads ahead.
func TestReadLineBounded(t *testing.T) {
	for _, limit := range []int{1, 100, 4096} {
		r := &endless{}
		if _, err := readLine(bufio.NewReaderSize(r, 16), limit); !errors.Is(err, ErrMessageTooLarge) {
			t.Errorf("limit %d: %v, want ErrMessageTooLarge", limit, err)
		}
		if r.n > limit+2+16 {
			t.Errorf("limit %d: read %d bytes of an endless line", limit, r.n)
		}
	}
}

// endless is a reader of an endless line of "a"s that counts what it gave.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	e.n += len(p)
	return len(p), nil
}

// TestStdioWritesWhole: messages written from many goroutines at once
// reach the output whole, one per line.
func TestStdioWritesWhole(t *testing.T) {
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	defer inW.Close()
	conn, err := (&StdioTransport{Reader: inR, Writer: outW}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 20
	got := make(chan map[int64]int, 1)
	go func() {
		seen := map[int64]int{}
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			msg, err := jsonrpc.DecodeMessage(sc.Bytes())
			if err != nil {
				t.Errorf("a line that is not one message: %v: %.200q", err, sc.Bytes())
				continue
			}
			r := msg.(*jsonrpc.Response)
			id := r.ID.Raw().(int64)
			var s string
			if json.Unmarshal(r.Result, &s) != nil || s != strings.Repeat(string(rune('a'+id%26)), int(id)*1000) {
				t.Errorf("message %d arrived damaged", id)
			}
			seen[id]++
		}
		got <- seen
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := int64(w*each + i)
				res, _ := json.Marshal(strings.Repeat(string(rune('a'+id%26)), int(id)*1000))
				rid, _ := jsonrpc.MakeID(float64(id))
				if err := conn.Write(context.Background(), &jsonrpc.Response{ID: rid, Result: res}); err != nil {
					t.Errorf("write %d: %v", id, err)
				}
			}
		})
	}
	wg.Wait()
	conn.Close() // closes outW: the reader sees the end
	seen := <-got
	for id := range int64(writers * each) {
		if seen[id] != 1 {
			t.Errorf("message %d arrived %d times", id, seen[id])
		}
	}
	rid, _ := jsonrpc.MakeID("after")
	if err := conn.Write(context.Background(), &jsonrpc.Response{ID: rid}); err == nil {
		t.Error("a write after Close succeeded")
	}
}

// TestStdioCloseEndsRead: Close ends a Read waiting for input that never
// comes (the mcp.Connection contract), and Read then reports the end.
func TestStdioCloseEndsRead(t *testing.T) {
	inR, inW, _ := os.Pipe()
	defer inW.Close()
	outR, outW, _ := os.Pipe()
	defer outR.Close()
	conn, err := (&StdioTransport{Reader: inR, Writer: outW}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := conn.Read(context.Background())
		read <- err
	}()
	conn.Close()
	if err := <-read; !errors.Is(err, io.EOF) {
		t.Errorf("Read after Close: %v, want io.EOF", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := conn.Read(ctx); err == nil {
		t.Error("a Read with a cancelled context succeeded")
	}
}

// TestParseLineIDs: an error answers the id of a line that is an object
// with a method and a string or number id; anything else gets null.
func TestParseLineIDs(t *testing.T) {
	for _, tc := range []struct {
		line string
		id   any
	}{
		{`{"jsonrpc":"1.0","id":"x","method":"ping"}`, "x"},
		{`{"jsonrpc":"1.0","id":12,"method":"ping"}`, json.Number("12")},
		{`{"jsonrpc":"1.0","id":1.5e3,"method":"ping"}`, json.Number("1.5e3")},
		{`{"jsonrpc":"1.0","id":null,"method":"ping"}`, nil},
		{`{"jsonrpc":"1.0","id":true,"method":"ping"}`, nil},
		{`{"jsonrpc":"1.0","id":[1],"method":"ping"}`, nil},
		{`{"jsonrpc":"1.0","id":7}`, nil}, // a response: never answered with its id
		{`{"jsonrpc":"1.0","ID":7,"method":"ping"}`, nil},
	} {
		msg, bad := parseLine([]byte(tc.line))
		if msg != nil || bad == nil {
			t.Errorf("%s: parsed as %v", tc.line, msg)
			continue
		}
		if bad.id != tc.id {
			t.Errorf("%s: answered id %#v, want %#v", tc.line, bad.id, tc.id)
		}
	}
}

// TestParseLineNullID: a request whose id is null is refused (-32600, id
// null), as MCP forbids it; the SDK took it for a notification and it went
// unanswered. A notification and a request with an id pass.
func TestParseLineNullID(t *testing.T) {
	for line, refused := range map[string]bool{
		`{"jsonrpc":"2.0","id":null,"method":"ping"}`:                       true,
		`{"jsonrpc":"2.0", "id" : null ,"method":"tools/list","params":{}}`: true,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`:            false,
		`{"jsonrpc":"2.0","method":"notifications/x","params":{"id":null}}`: false,
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`:                          false,
		`{"jsonrpc":"2.0","id":"a","method":"ping","params":{"id":null}}`:   false,
	} {
		msg, bad := parseLine([]byte(line))
		if refused != (bad != nil) || refused == (msg != nil) {
			t.Errorf("%s: message %v, refusal %+v; want refused %v", line, msg, bad, refused)
		}
		if bad != nil && (bad.code != -32600 || bad.id != nil) {
			t.Errorf("%s: refusal %+v, want -32600 with id null", line, bad)
		}
	}
}
