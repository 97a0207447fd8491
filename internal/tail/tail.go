// Package tail keeps the last bytes written to a writer: the end of a
// helper's stderr, for error messages.
package tail

import (
	"strings"
	"sync"
)

// Max is how many bytes a Buffer keeps.
const Max = 4096

// Buffer is an io.Writer that keeps the last Max bytes written to it. The
// zero value is ready; it is safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	buf []byte
}

// Write implements io.Writer; it never fails.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > Max {
		t.buf = t.buf[len(t.buf)-Max:]
	}
	return len(p), nil
}

// String returns what is kept, trimmed of surrounding white space.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
