package main

import (
	"bytes"
	"log"
	"testing"
)

func TestStdLogWithholdsData(t *testing.T) {
	var b bytes.Buffer
	l := log.New(withheldLog{&b}, "", 0)
	l.Printf("Unsolicited response received on idle HTTP channel starting with %q; err=%v", "HTTP/1.1 200 OK\r\nX: ghp_REALSECRET", nil)
	if got := b.String(); bytes.Contains(b.Bytes(), []byte("ghp_")) || got != "corral: Unsolicited response received on idle HTTP channel starting with ... (network data withheld)\n" {
		t.Errorf("got %q", got)
	}
}

// TestStderrShowsControls: corral's own stderr lines show what a sandbox
// put in them (a path in a note) as termsafe.Text does, and report the
// whole write as written.
func TestStderrShowsControls(t *testing.T) {
	var b bytes.Buffer
	msg := "corral: note: x\x1b]52;c;ZXZpbA==\a\u202e was made\n"
	n, err := textWriter{&b}.Write([]byte(msg))
	if err != nil || n != len(msg) {
		t.Fatalf("Write = %d, %v; want %d", n, err, len(msg))
	}
	if want := "corral: note: x^[]52;c;ZXZpbA==^G<U+202E> was made\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
