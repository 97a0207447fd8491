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
