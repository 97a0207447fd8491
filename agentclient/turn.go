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

// turnCall is the host's side of one session turn (inside/turn.go).
type turnCall struct {
	mu       sync.Mutex
	state    []byte
	tooLarge bool
	granted  chan inside.TurnGrant
}

func (t *turnCall) addState(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.state)+len(p) > inside.MaxTurnState {
		t.tooLarge = true
		return
	}
	t.state = append(t.state, p...)
}

func (t *turnCall) grant(p []byte) {
	var g inside.TurnGrant
	if json.Unmarshal(p, &g) != nil {
		g = inside.TurnGrant{StateError: "malformed grant"}
	}
	select {
	case t.granted <- g:
	default:
	}
}

// Turn is a session's turn held in its sandbox (Conn.Turn): until End,
// no other corral's command of that session runs.
type Turn struct {
	c  *Conn
	id uint32
	cl *call
	// State is the session's saved state (nil when none was saved, or it
	// could not be read: StateError says why).
	State      []byte
	StateError string
	// Interrupted is the marker of a command that held the turn when its
	// corral was lost, or "".
	Interrupted string
	endOnce     sync.Once
}

// Turn waits, in the sandbox, for the turn of the session whose directory
// there is dir (inside.TurnRequest), recording marker as the running
// command. It returns when the turn is held, or when ctx ends: then the
// wait is called off (nothing is held) and the error wraps ctx's cause.
// Errors: the agent is gone (sandbox.ErrUnavailable, passing), or the
// agent could not take the lock.
func (c *Conn) Turn(ctx context.Context, dir, marker string) (*Turn, error) {
	tc := &turnCall{granted: make(chan inside.TurnGrant, 1)}
	cl := &call{started: make(chan int, 1), finished: make(chan struct{}), turn: tc}
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
	b, _ := json.Marshal(inside.TurnRequest{Dir: dir, Marker: marker})
	if err := c.frame(inside.KindTurn, id, b); err != nil {
		c.w.Close()
		return nil, sandbox.Transient(fmt.Errorf("%w: %s: asking for the session's turn: %v", sandbox.ErrUnavailable, strings.SplitN(c.label, ":", 2)[0], err))
	}
	t := &Turn{c: c, id: id, cl: cl}
	select {
	case g := <-tc.granted:
		return t.granted(g, tc), nil
	case <-cl.finished:
		return nil, t.refused()
	case <-ctx.Done():
	}
	// Called off: the agent answers with an exit, or with the grant when
	// it took the lock first (then the turn is ended at once, unchanged).
	_ = c.frameTimeout(inside.KindSignal, id, []byte(strconv.Itoa(int(syscall.SIGTERM))), time.Second)
	select {
	case g := <-tc.granted:
		t.granted(g, tc).End(nil)
	case <-cl.finished:
	}
	return nil, context.Cause(ctx)
}

func (t *Turn) granted(g inside.TurnGrant, tc *turnCall) *Turn {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	t.Interrupted, t.StateError = g.Interrupted, g.StateError
	switch {
	case tc.tooLarge:
		t.StateError = fmt.Sprintf("the saved state is over %d bytes", inside.MaxTurnState)
	case g.HasState:
		t.State = tc.state
		if t.State == nil {
			t.State = []byte{}
		}
	}
	return t
}

// refused is the error of a turn the agent ended without granting it.
func (t *Turn) refused() error {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.cl.exit == nil {
		return sandbox.Transient(t.c.err)
	}
	return fmt.Errorf("%w: %s: the session's turn could not be taken: %s", sandbox.ErrUnavailable, strings.SplitN(t.c.label, ":", 2)[0], t.cl.exit.Error)
}

// End lets the turn go, first replacing the saved state with state when
// it is not nil. It does not wait for the agent's answer: the next turn,
// of this corral or another, is ordered after it by the lock, and Close
// waits for it; a failure to save is reported through done (when not
// nil), called once the agent answered, with nil on success. Only the
// first call counts.
func (t *Turn) End(state []byte, done ...func(error)) {
	t.endOnce.Do(func() {
		save := state != nil
		if save {
			for len(state) > 0 {
				n := min(len(state), inside.MaxFrame)
				if t.c.frame(inside.KindTurnState, t.id, state[:n]) != nil {
					break
				}
				state = state[n:]
			}
		}
		b, _ := json.Marshal(inside.TurnEnd{Save: save})
		t.c.ending.Add(1)
		err := t.c.frame(inside.KindTurnEnd, t.id, b)
		report := func(error) {}
		if len(done) > 0 && done[0] != nil {
			report = done[0]
		}
		if err != nil {
			t.c.ending.Done()
			report(err)
			return
		}
		go func() {
			defer t.c.ending.Done()
			<-t.cl.finished
			t.c.mu.Lock()
			ex := t.cl.exit
			t.c.mu.Unlock()
			switch {
			case ex == nil:
				report(fmt.Errorf("the agent went before it answered"))
			case ex.Error != "":
				report(fmt.Errorf("%s", ex.Error))
			default:
				report(nil)
			}
		}()
	})
}
