// Package tail keeps the last bytes written to a writer: the end of a
// helper's stderr, for error messages.
package tail

import (
	"strings"
	"sync"
)

// Max is how many bytes a Buffer keeps unless its Size says otherwise.
const Max = 4096

// Buffer is an io.Writer that keeps the last Size bytes written to it. The
// zero value is ready; it is safe for concurrent use.
type Buffer struct {
	// Size is how many bytes are kept; 0 means Max.
	Size int

	mu  sync.Mutex
	buf []byte
}

// Write implements io.Writer; it never fails.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.Size
	if n <= 0 {
		n = Max
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > n {
		// Copied down, so the array does not keep what was cut.
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-n:]...)
	}
	return len(p), nil
}

// String returns what is kept, trimmed of surrounding white space.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
