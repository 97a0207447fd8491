// Package relay holds the byte relay and the connection bookkeeping shared
// by netproxy's proxies (host side) and its forwarder (sandbox side), so
// that the forwarder's package need not link the proxies' net/http.
package relay

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Pipe copies bytes both ways between a and b until both directions have
// ended, then closes both. When one side finishes sending (EOF), the other
// side's write half is shut (TCP FIN, or shutdown(SHUT_WR) on a Unix
// socket) and the opposite direction goes on: half-closed connections work
// as they do without a proxy. A read or write error in either direction
// closes both connections at once, which also ends the other copy.
func Pipe(a, b net.Conn) {
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

// Tracker keeps the goroutines and connections of a server so that
// shutdown can close every connection and wait for every goroutine.
type Tracker struct {
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// Enter registers a goroutine that will call Leave; it returns false once
// shutdown has begun, and the caller must then not start its work.
func (t *Tracker) Enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

// Leave ends a goroutine registered with Enter.
func (t *Tracker) Leave() { t.wg.Done() }

// Add records connections to be closed at shutdown. It returns false, and
// records nothing, once shutdown has begun; the caller then closes them.
func (t *Tracker) Add(cs ...net.Conn) bool {
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

// Remove forgets connections recorded with Add (they are closed by
// their owner).
func (t *Tracker) Remove(cs ...net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cs {
		delete(t.conns, c)
	}
}

// Shutdown refuses new work, closes every recorded connection and waits
// for every registered goroutine to leave.
func (t *Tracker) Shutdown() {
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

// IsClosed reports whether shutdown has begun.
func (t *Tracker) IsClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// AcceptLoop accepts connections from ln and runs handle for each in its
// own goroutine registered with t, until ln is closed. Transient accept
// errors (such as running out of file descriptors) are retried with a
// backoff of 5 ms doubling up to 1 s, as net/http does.
func AcceptLoop(ln net.Listener, t *Tracker, handle func(net.Conn)) {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || t.IsClosed() {
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
		if !t.Enter() {
			_ = c.Close()
			return
		}
		go func() {
			defer t.Leave()
			handle(c)
		}()
	}
}
