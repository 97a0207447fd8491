package tail

import (
	"strings"
	"testing"
)

func TestKeepsTheEnd(t *testing.T) {
	var b Buffer
	b.Write([]byte(strings.Repeat("a", Max)))
	b.Write([]byte(" end \n"))
	if s := b.String(); len(s) != Max-2 || !strings.HasSuffix(s, "a end") {
		t.Errorf("%d bytes, ends %q", len(s), s[len(s)-8:])
	}
	var e Buffer
	if e.String() != "" {
		t.Error("empty buffer")
	}
}

func TestSize(t *testing.T) {
	b := &Buffer{Size: 8}
	b.Write([]byte("0123456789"))
	b.Write([]byte("ab"))
	if got := b.String(); got != "456789ab" {
		t.Fatalf("String() = %q, want the last 8 bytes", got)
	}
}
