package agentclient

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/sandbox"
)

// boundedBuffer keeps the first max bytes written and counts the rest.
type boundedBuffer struct {
	mu   sync.Mutex
	b    []byte
	max  int
	over bool
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - len(w.b); len(p) > room {
		w.over = true
		p = p[:max(room, 0)]
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

// Call runs st on the agent (a helper mode of corral's, short-lived, or
// with st.Detach a detached one) and returns its stdout, at most max
// bytes: more is an error, as the output comes from the sandbox. stderr
// is dropped. It returns when the agent reports the command's end (a
// detached one: when it closed its output), or when ctx ends: the
// command is then killed (not a detached one) and the error wraps ctx's
// cause. A command that exits non-zero is an error with its exit code.
// Errors reaching the agent wrap sandbox.ErrUnavailable.
func (c *Conn) Call(ctx context.Context, st inside.Start, max int) ([]byte, error) {
	out := &boundedBuffer{max: max}
	cl := &call{stdout: out, stderr: discard{}, started: make(chan int, 1), finished: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, sandbox.Transient(err)
	}
	c.next++
	id := c.next
	c.chans[id] = cl
	c.mu.Unlock()
	b, _ := json.Marshal(st)
	if err := c.frame(inside.KindOpen, id, b); err != nil {
		c.w.Close()
		return nil, sandbox.Transient(fmt.Errorf("%w: %s: sending a command to corral's helper: %v", sandbox.ErrUnavailable, strings.SplitN(c.label, ":", 2)[0], err))
	}
	if !st.Detach {
		_ = c.frame(inside.KindStdinEOF, id, nil)
	}
	select {
	case <-cl.finished:
	case <-ctx.Done():
		if !st.Detach {
			_ = c.frameTimeout(inside.KindSignal, id, []byte(strconv.Itoa(int(syscall.SIGKILL))), time.Second)
		}
		return nil, context.Cause(ctx)
	}
	c.mu.Lock()
	ex, err := cl.exit, c.err
	c.mu.Unlock()
	if ex == nil {
		return nil, fmt.Errorf("%w: the agent went before %s answered", err, st.Argv[min(1, len(st.Argv)-1)])
	}
	if ex.Code != 0 {
		return nil, fmt.Errorf("%s exited %d: %s", st.Argv[min(1, len(st.Argv)-1)], ex.Code, ex.Error)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.over {
		return nil, fmt.Errorf("%s printed over %d bytes", st.Argv[min(1, len(st.Argv)-1)], max)
	}
	return out.b, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
