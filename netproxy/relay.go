package netproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// relay copies bytes both ways between a and b until both directions have
// ended, then closes both. When one side finishes sending (EOF), the other
// side's write half is shut (TCP FIN, or shutdown(SHUT_WR) on a Unix
// socket) and the opposite direction goes on: half-closed connections work
// as they do without a proxy. A read or write error in either direction
// closes both connections at once, which also ends the other copy.
func relay(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = a.Close()
			_ = b.Close()
		})
	}
	copyHalf := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if err == nil {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				return
			}
		}
		closeBoth()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(b, a)
	}()
	copyHalf(a, b)
	<-done
	closeBoth()
}

// tracker keeps the goroutines and connections of a server so that
// shutdown can close every connection and wait for every goroutine.
type tracker struct {
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// enter registers a goroutine that will call leave; it returns false once
// shutdown has begun, and the caller must then not start its work.
func (t *tracker) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

func (t *tracker) leave() { t.wg.Done() }

// add records connections to be closed at shutdown. It returns false, and
// records nothing, once shutdown has begun; the caller then closes them.
func (t *tracker) add(cs ...net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.conns == nil {
		t.conns = make(map[net.Conn]struct{})
	}
	for _, c := range cs {
		t.conns[c] = struct{}{}
	}
	return true
}

func (t *tracker) remove(cs ...net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cs {
		delete(t.conns, c)
	}
}

// shutdown refuses new work, closes every recorded connection and waits
// for every registered goroutine to leave.
func (t *tracker) shutdown() {
	t.mu.Lock()
	t.closed = true
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	t.wg.Wait()
}

// isClosed reports whether shutdown has begun.
func (t *tracker) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// acceptLoop accepts connections from ln and runs handle for each in its
// own goroutine registered with t, until ln is closed. Transient accept
// errors (such as running out of file descriptors) are retried with a
// backoff of 5 ms doubling up to 1 s, as net/http does.
func acceptLoop(ln net.Listener, t *tracker, handle func(net.Conn)) {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || t.isClosed() {
				return
			}
			if delay == 0 {
				delay = 5 * time.Millisecond
			} else if delay *= 2; delay > time.Second {
				delay = time.Second
			}
			time.Sleep(delay)
			continue
		}
		delay = 0
		if !t.enter() {
			_ = c.Close()
			return
		}
		go func() {
			defer t.leave()
			handle(c)
		}()
	}
}
