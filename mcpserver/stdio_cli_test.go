package mcpserver

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// TestStdioBinaryBadLines drives `corral mcp` with raw lines: after each
// of badLines it answers as it should and still answers a ping; then a
// line past 64 MiB is answered with -32600 and ends corral mcp (exit
// status 125), without a crash.
func TestStdioBinaryBadLines(t *testing.T) {
	c := newCLIEnv(t, "")
	var stderr syncBuffer
	_, in, out, exited := c.startMCP(t, &stderr, "--session", "raw")
	defer func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr.String())
		}
	}()

	p := newRawPeer(t, in, out)
	p.lines("", rawInitialize)
	p.expect("initialize", "1/0")
	p.lines("", rawInitialized)
	for i, tc := range badLines {
		ping := 1000 + i
		p.lines(tc.eol, tc.line, rawPing(ping))
		p.expect(tc.name, append([]string{fmt.Sprint(ping) + "/0"}, tc.want...)...)
	}
	p.lines("", rawToolsList)
	if got := p.expect("tools/list", "2/0"); !bytes.Contains(got["2/0"].result, []byte(`"name":"bash"`)) {
		t.Errorf("tools/list lacks bash: %.300s", got["2/0"].line)
	}
	if !strings.Contains(stderr.String(), "mcp.stdio.bad_message") {
		t.Error("stderr lacks the log event mcp.stdio.bad_message")
	}

	p.lines("", paddedPing(3, DefaultMaxRequestBytes+1), rawPing(4))
	got := p.expect("a line past 64 MiB", "null/-32600")
	if msg := got["null/-32600"].error.Message; !strings.Contains(msg, fmt.Sprintf("larger than %d bytes", DefaultMaxRequestBytes)) {
		t.Errorf("the error says %q", msg)
	}
	if r, ok := p.next(); ok {
		t.Errorf("an answer after the line past 64 MiB: %.300s", r.line)
	}
	err := <-exited
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 {
		t.Errorf("corral mcp exited with %v after a line past 64 MiB, want exit status 125", err)
	}
	if s := stderr.String(); !strings.Contains(s, "message too large: a line longer than 67108864 bytes") || strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") {
		t.Errorf("stderr after a line past 64 MiB:\n%s", s)
	}
	p.closeInput()
}
