// Package scopes is the one table of a container backend's sandboxes by
// scope: docker's containers and kubernetes' pods. It is pure
// bookkeeping, generic over the backend's handle (H: a *ctr, a *podRef)
// and over what a session keeps of a sandbox that went (R: kubernetes'
// reset, with its note and kept workspace volume); making, checking and
// removing sandboxes stays with the backend, which removes what a call
// hands back (a Drop) after the call returns, outside the table's lock.
//
// The rules, as both backends had them:
//
//   - A command asks for its sandbox by Key (KeyFor): one of its own
//     (Once) when it has no session, the session's own (PerSession), or
//     the one every session shares (Shared); the spec hash is part of
//     the key, so other settings get another sandbox.
//   - Acquire counts the command as holding the sandbox until its Done;
//     the first to ask for a key makes the sandbox (Lease.New), the
//     others wait for it the backend's way.
//   - A one-command sandbox goes at its command's Done.
//   - A session's (or shared) sandbox goes when Release ends the last
//     session naming it, at once: what still runs in it (a background
//     process, the file server) ends with it, and that command's Done is
//     then nothing.
//   - A session whose spec hash changed gets a new sandbox, and its old
//     one goes at once the same way (Lease.Stale): what ran in it ends
//     with it (the docs say so), and nothing of the session is left
//     holding a mount (a review layer) the new one needs.
//   - A sandbox that went behind the backend's back is taken out at once
//     (Take); one that sat idle as long as the backend allows (Idle), or
//     a one-command sandbox that was lost or one that failed to start,
//     when no command holds it (Retire). Those a session names leave a
//     reset: the key's next sandbox gets it (Lease.Reset), or a
//     session's next sandbox of another spec, and Release of its last
//     session hands it back.
//   - Close hands back every sandbox and reset, and refuses later
//     Acquires.
package scopes

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Kind is the kind of a Key.
type Kind uint8

const (
	// Once is a sandbox of one command (no session), removed after it.
	Once Kind = iota
	// PerSession is a session's own sandbox (docker.scope and
	// kubernetes.scope "session").
	PerSession
	// Shared is one sandbox for every session with the same spec
	// (scope "shared").
	Shared
)

// Key names a sandbox in a Table. Keys are comparable; two Once keys
// are never equal once Acquire has numbered them.
type Key struct {
	Kind Kind
	// Session is the session of a PerSession key ("" otherwise).
	Session string
	// Hash identifies the sandbox's spec (settings, workspace, profile):
	// the backend's hash of what the sandbox is made of.
	Hash string
	seq  uint64 // numbers Once keys (Acquire)
}

// KeyFor is the key rule both backends share: a request without a
// session gets a sandbox of its own (Once); with one, the session's own
// (PerSession) or, when shared is set, the one of all sessions with spec
// hash (Shared).
func KeyFor(session string, shared bool, hash string) Key {
	switch {
	case session == "":
		return Key{Kind: Once, Hash: hash}
	case shared:
		return Key{Kind: Shared, Hash: hash}
	}
	return Key{Kind: PerSession, Session: session, Hash: hash}
}

// String is the key as the backends wrote their map keys and logs:
// "s:SESSION|HASH", "shared|HASH", "once:N".
func (k Key) String() string {
	switch k.Kind {
	case PerSession:
		return "s:" + k.Session + "|" + k.Hash
	case Shared:
		return "shared|" + k.Hash
	}
	return "once:" + strconv.FormatUint(k.seq, 10)
}

// Reasons a Drop gives, as the backends logged them (the reason field of
// docker.container.removed and kubernetes.pod.removed).
const (
	WhyDone     = "command done"
	WhySettings = "settings changed"
	WhyEnded    = "session ended"
	WhyStopped  = "corral stopped"
)

// Drop is a sandbox the caller now removes: no session names it and no
// command holds it, or it goes whatever holds it (Release, a spec
// change, Take, Close). Why says what retired it
// (WhyDone, WhySettings, WhyEnded, WhyStopped, or Retire's why).
type Drop[H any] struct {
	Handle H
	Why    string
}

// Reset is what a session keeps of a sandbox that went (Retire, Idle)
// until the key's next sandbox is made or its sessions end.
type Reset[R any] struct {
	Value    R
	sessions map[string]bool
}

// Lease is Acquire's answer. The caller holds Handle until it calls
// Done, whatever becomes of the command (the sandbox failed to start
// included).
type Lease[H any, R any] struct {
	Handle H
	// Key is the key asked for, numbered when it is Once.
	Key Key
	// New is set for the first command of the key: it makes the sandbox
	// (and on failure Retires it); others wait until it is ready.
	New bool
	// Reset is, with New, what the key's previous sandbox left (Retire,
	// Idle), taken out of the table; nil when none. A start that fails
	// gives it back (Restore).
	Reset *Reset[R]
	// Stale are the session's sandboxes of other specs, which no session
	// names any more: the caller removes them, held or not.
	Stale []Drop[H]
}

type state uint8

const (
	live    state = iota // under its key
	retired              // out of the key's place; dropped at its last Done
	gone                 // handed back, or forgotten: nothing more to do
)

type entry[H any] struct {
	key      Key
	h        H
	sessions map[string]bool
	refs     int
	last     time.Time // the last Done (or the making), for Idle
	st       state
	why      string // with retired: the Drop's Why
}

// Table is the sandboxes of one engine. Make it with New. Safe for
// concurrent use; it never calls out while locked, but for the functions
// given to Acquire, Retire and Idle.
type Table[H comparable, R any] struct {
	now func() time.Time

	mu     sync.Mutex
	live   map[Key]*entry[H]
	held   map[H]*entry[H] // every entry not yet gone: live and retired
	resets map[Key]*Reset[R]
	closed bool
	seq    uint64
}

// New returns an empty table. now is its clock (the idle rule); nil
// means time.Now.
func New[H comparable, R any](now func() time.Time) *Table[H, R] {
	if now == nil {
		now = time.Now
	}
	return &Table[H, R]{now: now, live: map[Key]*entry[H]{}, held: map[H]*entry[H]{}, resets: map[Key]*Reset[R]{}}
}

// Acquire returns the sandbox of key k for a command of session ("" for
// none), counted as held until Done. When k has none, newHandle is called
// (under the table's lock: it must only build the handle, which must be
// new to the table) and the lease is New. A PerSession key retires the
// session's sandboxes of other hashes (Lease.Stale). ok is false once
// the table is closed: nothing was acquired.
func (t *Table[H, R]) Acquire(session string, k Key, newHandle func() H) (l Lease[H, R], ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return l, false
	}
	if k.Kind == Once {
		t.seq++
		k.seq = t.seq
	}
	e := t.live[k]
	if e == nil {
		if k.Kind == PerSession {
			for ko, o := range t.live {
				if ko.Kind != PerSession || ko.Session != k.Session {
					continue
				}
				delete(o.sessions, k.Session)
				if len(o.sessions) == 0 {
					l.Stale = append(l.Stale, t.takeLocked(o, WhySettings))
				}
			}
		}
		e = &entry[H]{key: k, h: newHandle(), sessions: map[string]bool{}, last: t.now()}
		t.live[k] = e
		t.held[e.h] = e
		l.New = true
		if r := t.resets[k]; r != nil {
			delete(t.resets, k)
			l.Reset = r
		} else if k.Kind == PerSession {
			// A session's reset follows it to its sandbox of another
			// spec: what became of its last sandbox is said there, and
			// what the reset kept (a workspace volume) is used there.
			for ko, r := range t.resets {
				if ko.Kind == PerSession && ko.Session == k.Session {
					delete(t.resets, ko)
					l.Reset = r
					break
				}
			}
		}
	}
	e.refs++
	if session != "" {
		e.sessions[session] = true
	}
	l.Handle, l.Key = e.h, k
	return l, true
}

// retireLocked takes e out of its key's place, to be dropped for why
// once no command holds it: now (the Drop returned) or at the last Done.
func (t *Table[H, R]) retireLocked(e *entry[H], why string) *Drop[H] {
	if t.live[e.key] == e {
		delete(t.live, e.key)
	}
	e.st, e.why = retired, why
	if e.refs > 0 {
		return nil
	}
	return t.goneLocked(e)
}

// takeLocked takes e out of its key's place and hands it back for why,
// whatever holds it (their Done is then nothing).
func (t *Table[H, R]) takeLocked(e *entry[H], why string) Drop[H] {
	t.retireLocked(e, why)
	if e.st != gone {
		t.goneLocked(e)
	}
	return Drop[H]{Handle: e.h, Why: why}
}

// goneLocked ends the table's part in e and hands it back.
func (t *Table[H, R]) goneLocked(e *entry[H]) *Drop[H] {
	e.st = gone
	delete(t.held, e.h)
	return &Drop[H]{Handle: e.h, Why: e.why}
}

// Done ends one command's hold on h (Acquire). It returns the Drop when
// that was the last hold of a sandbox nothing else keeps: one of a
// single command (WhyDone), or one Retired meanwhile. Done of a handle
// the table handed back already (Release, a spec change, Take, Close),
// forgot, or that is not held returns nil.
func (t *Table[H, R]) Done(h H) *Drop[H] {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.held[h]
	if e == nil || e.refs == 0 {
		return nil
	}
	e.refs--
	e.last = t.now()
	if e.refs > 0 {
		return nil
	}
	switch {
	case e.st == retired:
		return t.goneLocked(e)
	case len(e.sessions) == 0:
		return t.retireLocked(e, WhyDone)
	}
	return nil
}

// Retire takes h out of its key's place for why (it failed to start,
// or a one-command sandbox went behind the backend's back): the key's
// next Acquire makes a new sandbox, and h goes when no command holds it. When keep is set and a session still
// names h, keep's value (called under the table's lock, so it may move
// what the reset keeps out of h) becomes the key's Reset, handed to that
// next sandbox. took reports whether h was in its place (false: retired
// already, or unknown; nothing is done). d is set when no command holds
// h: the caller removes it now; otherwise its last Done hands it back.
func (t *Table[H, R]) Retire(h H, why string, keep func() R) (took bool, d *Drop[H]) {
	return t.retire(h, why, keep, false)
}

// Take is Retire for a sandbox that is broken (lost, restarted behind the
// backend's back), which the commands holding it cannot use: it is
// handed back now (d is set when took), and their Done is nothing.
func (t *Table[H, R]) Take(h H, why string, keep func() R) (took bool, d *Drop[H]) {
	return t.retire(h, why, keep, true)
}

func (t *Table[H, R]) retire(h H, why string, keep func() R, now bool) (took bool, d *Drop[H]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.held[h]
	if e == nil || e.st != live {
		return false, nil
	}
	t.keepLocked(e, keep)
	if now {
		d := t.takeLocked(e, why)
		return true, &d
	}
	return true, t.retireLocked(e, why)
}

// keepLocked records keep's reset for e's key when a session names e.
func (t *Table[H, R]) keepLocked(e *entry[H], keep func() R) {
	if keep == nil || len(e.sessions) == 0 || t.closed {
		return
	}
	t.resets[e.key] = &Reset[R]{Value: keep(), sessions: maps.Clone(e.sessions)}
}

// NewReset returns a reset of v for session, not in any table: what a
// New lease's caller keeps of the session's sandbox of another spec
// (Lease.Stale) while it makes the new one (kubernetes carries the
// workspace over from it), given to Restore when that start fails, so
// the session's next try gets it and Release of the session hands it
// back.
func NewReset[R any](session string, v R) *Reset[R] {
	return &Reset[R]{Value: v, sessions: map[string]bool{session: true}}
}

// Restore gives a reset taken by a New lease (Lease.Reset) back to key k
// after the sandbox failed to start, so the session's next try gets it.
// It reports false, keeping nothing, when the table is closed.
func (t *Table[H, R]) Restore(k Key, r *Reset[R]) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || r == nil {
		return false
	}
	t.resets[k] = r
	return true
}

// Forget takes h out of the table for good, as a sandbox the backend
// found gone: it is never handed back (no Drop, not at Close), and its
// key's next Acquire makes a new one. It reports whether h was in its
// key's place.
func (t *Table[H, R]) Forget(h H) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.held[h]
	if e == nil {
		return false
	}
	was := e.st == live
	if t.live[e.key] == e {
		delete(t.live, e.key)
	}
	e.st = gone
	delete(t.held, h)
	return was
}

// Verdict is Idle's answer.
type Verdict uint8

const (
	// Left: h is no longer in its key's place (or the table closed):
	// stop watching it.
	Left Verdict = iota
	// Busy: a command holds h, or one ended less than idle ago.
	Busy
	// Taken: h was idle, and is retired (its Drop returned).
	Taken
)

// Idle retires h, with keep's reset as Retire does, when no command
// holds it and none has ended for idle (kubernetes.idle_timeout).
func (t *Table[H, R]) Idle(h H, idle time.Duration, keep func() R) (Verdict, *Drop[H]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.held[h]
	if t.closed || e == nil || e.st != live {
		return Left, nil
	}
	if e.refs > 0 || t.now().Sub(e.last) < idle {
		return Busy, nil
	}
	t.keepLocked(e, keep)
	return Taken, t.retireLocked(e, "idle timeout")
}

// Use reports whether h is in the table (ok), held by a command now
// (busy), and when its last command ended (or it was made).
func (t *Table[H, R]) Use(h H) (busy bool, last time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.held[h]
	if t.closed || e == nil || e.st != live {
		return false, time.Time{}, false
	}
	return e.refs > 0, e.last, true
}

// Release ends session's use of its sandboxes: each that no other
// session names is handed back (WhyEnded), held or not. resets are the
// values of the resets no session names any more
// (kubernetes deletes the workspace volume they kept). Releasing a
// session twice, or one the table never saw, returns nothing.
func (t *Table[H, R]) Release(session string) (drops []Drop[H], resets []R) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, r := range t.resets {
		if !r.sessions[session] {
			continue
		}
		delete(r.sessions, session)
		if len(r.sessions) == 0 {
			delete(t.resets, k)
			resets = append(resets, r.Value)
		}
	}
	for _, e := range t.live {
		if !e.sessions[session] {
			continue
		}
		delete(e.sessions, session)
		if len(e.sessions) == 0 {
			drops = append(drops, t.takeLocked(e, WhyEnded))
		}
	}
	return drops, resets
}

// Close refuses later Acquires and hands back every sandbox the table
// holds, busy or not (WhyStopped), and every reset's value. first
// reports whether this call closed the table; a later one returns
// nothing.
func (t *Table[H, R]) Close() (drops []Drop[H], resets []R, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, nil, false
	}
	t.closed = true
	for _, e := range t.held {
		e.why = WhyStopped
		drops = append(drops, *t.goneLocked(e))
	}
	clear(t.live)
	for _, r := range t.resets {
		resets = append(resets, r.Value)
	}
	clear(t.resets)
	return drops, resets, true
}

// Entry is one sandbox in its key's place (Entries).
type Entry[H any] struct {
	Key    Key
	Handle H
	// Sessions are the sessions naming it, sorted.
	Sessions []string
	// Refs counts the commands holding it.
	Refs int
}

// Entries returns the sandboxes in their keys' places, in no order.
func (t *Table[H, R]) Entries() []Entry[H] {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Entry[H], 0, len(t.live))
	for k, e := range t.live {
		s := slices.Sorted(maps.Keys(e.sessions))
		out = append(out, Entry[H]{Key: k, Handle: e.h, Sessions: s, Refs: e.refs})
	}
	return out
}

// ResetEntry is a reset waiting for its key's next sandbox (Resets).
type ResetEntry[R any] struct {
	Key      Key
	Value    R
	Sessions []string
}

// Resets returns the resets waiting in the table, in no order.
func (t *Table[H, R]) Resets() []ResetEntry[R] {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ResetEntry[R], 0, len(t.resets))
	for k, r := range t.resets {
		out = append(out, ResetEntry[R]{Key: k, Value: r.Value, Sessions: slices.Sorted(maps.Keys(r.sessions))})
	}
	return out
}

// Live reports whether h is in its key's place.
func (t *Table[H, R]) Live(h H) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.held[h]
	return e != nil && e.st == live
}
