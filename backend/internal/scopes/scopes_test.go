package scopes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestKeyFor(t *testing.T) {
	for _, tc := range []struct {
		session string
		shared  bool
		want    Key
		str     string
	}{
		{"", false, Key{Kind: Once, Hash: "h"}, "once:0"},
		{"", true, Key{Kind: Once, Hash: "h"}, "once:0"},
		{"a", false, Key{Kind: PerSession, Session: "a", Hash: "h"}, "s:a|h"},
		{"a", true, Key{Kind: Shared, Hash: "h"}, "shared|h"},
		{"a|b", false, Key{Kind: PerSession, Session: "a|b", Hash: "h"}, "s:a|b|h"},
	} {
		k := KeyFor(tc.session, tc.shared, "h")
		if k != tc.want || k.String() != tc.str {
			t.Errorf("KeyFor(%q, %v) = %+v %q, want %+v %q", tc.session, tc.shared, k, k, tc.want, tc.str)
		}
	}
	// Two one-command sandboxes never share a key.
	tb := New[*sb, string](nil)
	l1, _ := tb.Acquire("", KeyFor("", false, "h"), func() *sb { return &sb{"1"} })
	l2, _ := tb.Acquire("", KeyFor("", false, "h"), func() *sb { return &sb{"2"} })
	if l1.Key == l2.Key || !l1.New || !l2.New || l1.Handle == l2.Handle {
		t.Errorf("once keys %v %v new %v %v", l1.Key, l2.Key, l1.New, l2.New)
	}
}

// sb is a test's sandbox handle.
type sb struct{ name string }

// run plays steps on a new table with a clock the steps move ("tick S"),
// each step a line "op args => want" (see play).
func run(t *testing.T, steps []string) {
	t.Helper()
	now := time.Unix(1e9, 0)
	tb := New[*sb, string](func() time.Time { return now })
	hs := map[string]*sb{}
	var lastReset *Reset[string]
	var lastKey Key
	n := 0
	drops := func(ds []Drop[*sb]) []string {
		var out []string
		for _, d := range ds {
			out = append(out, "drop "+d.Handle.name+":"+d.Why)
		}
		slices.Sort(out)
		return out
	}
	for i, s := range steps {
		line, want, _ := strings.Cut(s, "=>")
		f := strings.Fields(line)
		want = strings.TrimSpace(want)
		var got []string
		switch f[0] {
		case "acq", "acqs": // acq SESSION HASH ("-": no session); acqs: shared
			sess := f[1]
			if sess == "-" {
				sess = ""
			}
			l, ok := tb.Acquire(sess, KeyFor(sess, f[0] == "acqs", f[2]), func() *sb {
				n++
				h := &sb{"h" + strconv.Itoa(n)}
				hs[h.name] = h
				return h
			})
			if !ok {
				got = append(got, "closed")
				break
			}
			if l.New {
				got = append(got, "new "+l.Handle.name)
			} else {
				got = append(got, "got "+l.Handle.name)
			}
			if l.Reset != nil {
				got = append(got, "reset "+l.Reset.Value)
				lastReset, lastKey = l.Reset, l.Key
			}
			got = append(got, drops(l.Stale)...)
		case "done":
			if d := tb.Done(hs[f[1]]); d != nil {
				got = drops([]Drop[*sb]{*d})
			}
		case "rel":
			ds, rs := tb.Release(f[1])
			got = drops(ds)
			slices.Sort(rs)
			for _, r := range rs {
				got = append(got, "reset "+r)
			}
		case "retire": // retire H WHY [KEEP]
			var keep func() string
			if len(f) > 3 {
				keep = func() string { return f[3] }
			}
			took, d := tb.Retire(hs[f[1]], f[2], keep)
			got = append(got, map[bool]string{true: "took", false: "no"}[took])
			if d != nil {
				got = append(got, drops([]Drop[*sb]{*d})...)
			}
		case "take": // take H WHY [KEEP]
			var keep func() string
			if len(f) > 3 {
				keep = func() string { return f[3] }
			}
			took, d := tb.Take(hs[f[1]], f[2], keep)
			got = append(got, map[bool]string{true: "took", false: "no"}[took])
			if d != nil {
				got = append(got, drops([]Drop[*sb]{*d})...)
			}
		case "restore":
			got = append(got, strconv.FormatBool(tb.Restore(lastKey, lastReset)))
		case "forget":
			got = append(got, strconv.FormatBool(tb.Forget(hs[f[1]])))
		case "idle": // idle H SECONDS [KEEP]
			sec, _ := strconv.Atoi(f[2])
			var keep func() string
			if len(f) > 3 {
				keep = func() string { return f[3] }
			}
			v, d := tb.Idle(hs[f[1]], time.Duration(sec)*time.Second, keep)
			got = append(got, []string{"left", "busy", "taken"}[v])
			if d != nil {
				got = append(got, drops([]Drop[*sb]{*d})...)
			}
		case "tick":
			sec, _ := strconv.Atoi(f[1])
			now = now.Add(time.Duration(sec) * time.Second)
		case "close":
			ds, rs, first := tb.Close()
			got = append(got, strconv.FormatBool(first))
			got = append(got, drops(ds)...)
			slices.Sort(rs)
			for _, r := range rs {
				got = append(got, "reset "+r)
			}
		case "live": // live H...: which of them are in their key's place
			for _, h := range f[1:] {
				got = append(got, h+"="+strconv.FormatBool(tb.Live(hs[h])))
			}
		case "entries":
			es := tb.Entries()
			slices.SortFunc(es, func(a, b Entry[*sb]) int { return strings.Compare(a.Handle.name, b.Handle.name) })
			for _, e := range es {
				got = append(got, fmt.Sprintf("%s:%s:%s:%d", e.Handle.name, e.Key, strings.Join(e.Sessions, ","), e.Refs))
			}
		case "resets":
			rs := tb.Resets()
			slices.SortFunc(rs, func(a, b ResetEntry[string]) int { return strings.Compare(a.Key.String(), b.Key.String()) })
			for _, r := range rs {
				got = append(got, fmt.Sprintf("%s:%s:%s", r.Key, r.Value, strings.Join(r.Sessions, ",")))
			}
		default:
			t.Fatalf("step %d: unknown op %q", i, f[0])
		}
		if g := strings.Join(got, "; "); g != want {
			t.Fatalf("step %d %q: got %q, want %q", i, line, g, want)
		}
	}
}

func TestTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string
	}{
		{"one command's sandbox goes at its Done", []string{
			"acq - x => new h1",
			"entries => h1:once:1::1",
			"done h1 => drop h1:command done",
			"done h1 =>", // a second Done is nothing
			"entries =>",
			"acq - x => new h2",
		}},
		{"a session's sandbox is reused, and goes at Release", []string{
			"acq a x => new h1",
			"done h1 =>",
			"done h1 =>", // one Done too many counts for nothing
			"acq a x => got h1",
			"entries => h1:s:a|x:a:1",
			"idle h1 0 => busy",
			"done h1 =>",
			"rel a => drop h1:session ended",
			"rel a =>", // double Release
			"rel nobody =>",
			"acq a x => new h2",
		}},
		{"Release during a running command: the sandbox goes at once, its command's Done is nothing, the session's next command gets a new one", []string{
			"acq a x => new h1",
			"rel a => drop h1:session ended",
			"live h1 => h1=false",
			"acq a x => new h2",
			"done h1 =>",
			"done h2 =>",
			"rel a => drop h2:session ended",
		}},
		{"spec change while the old sandbox is idle: it goes at once", []string{
			"acq a x => new h1",
			"done h1 =>",
			"acq a y => new h2; drop h1:settings changed",
			"done h1 =>",
			"entries => h2:s:a|y:a:1",
		}},
		{"spec change while the old sandbox is busy: it goes at once, and its command's Done is nothing", []string{
			"acq a x => new h1", // a background process, or the file server
			"acq a y => new h2; drop h1:settings changed",
			"live h1 h2 => h1=false; h2=true",
			"acq a x => new h3; drop h2:settings changed", // back to x: a new one
			"done h1 =>",
			"done h2 =>",
			"done h3 =>",
			"rel a => drop h3:session ended",
		}},
		{"the sweep is the session's own: other sessions, and names that share a prefix, keep theirs", []string{
			"acq a x => new h1",
			"acq a|b x => new h2",
			"acq ab x => new h3",
			"done h1 =>", "done h2 =>", "done h3 =>",
			"acq a y => new h4; drop h1:settings changed",
			"live h2 h3 => h2=true; h3=true",
		}},
		{"a shared sandbox goes when its last session ends", []string{
			"acqs a x => new h1",
			"acqs b x => got h1",
			"entries => h1:shared|x:a,b:2",
			"done h1 =>", "done h1 =>",
			"rel a =>",
			"rel b => drop h1:session ended",
		}},
		{"a shared key's spec change sweeps nothing: the session still names the old one", []string{
			"acqs a x => new h1",
			"done h1 =>",
			"acqs a y => new h2",
			"done h2 =>",
			"rel a => drop h1:session ended; drop h2:session ended",
		}},
		{"a lost sandbox leaves a reset for its key's next one", []string{
			"acq a x => new h1",
			"retire h1 lost pvc1 => took",
			"retire h1 lost pvc2 => no", // a second report records nothing
			"resets => s:a|x:pvc1:a",
			"acq a x => new h2; reset pvc1",
			"resets =>",
			"done h1 => drop h1:lost",
			"done h2 =>",
		}},
		{"a broken sandbox is handed back at once, held or not, and its holders' Done is nothing", []string{
			"acqs a x => new h1",
			"acqs b x => got h1",
			"take h1 restarted pvc => took; drop h1:restarted",
			"take h1 restarted pvc => no",
			"resets => shared|x:pvc:a,b",
			"acqs a x => new h2; reset pvc",
			"done h1 =>",
			"done h1 =>",
			"done h2 =>",
			"close => true; drop h2:corral stopped",
		}},
		{"a session's reset follows it to its sandbox of another spec", []string{
			"acq a x => new h1",
			"done h1 =>",
			"idle h1 0 idle-pvc => taken; drop h1:idle timeout",
			"acq b y => new h2", // another session's reset stays its own
			"acq a y => new h3; reset idle-pvc",
			"resets =>",
		}},
		{"a shared sandbox's reset stays with its key", []string{
			"acqs a x => new h1",
			"take h1 lost pvc => took; drop h1:lost",
			"acqs a y => new h2",
			"resets => shared|x:pvc:a",
		}},
		{"a one-command sandbox that is lost leaves no reset, and goes at its Done", []string{
			"acq - x => new h1",
			"retire h1 lost pvc => took",
			"resets =>",
			"done h1 => drop h1:lost",
		}},
		{"retiring an idle sandbox hands it back at once", []string{
			"acq a x => new h1",
			"done h1 =>",
			"retire h1 gone pvc => took; drop h1:gone",
			"acq a x => new h2; reset pvc",
		}},
		{"a failed start gives the reset back for the next try", []string{
			"acq a x => new h1",
			"retire h1 lost pvc => took",
			"done h1 => drop h1:lost",
			"acq a x => new h2; reset pvc",
			"acq a x => got h2", // a second command waits for h2
			"retire h2 start-failed => took",
			"restore => true",
			"done h2 =>",
			"done h2 => drop h2:start-failed",
			"acq a x => new h3; reset pvc",
		}},
		{"Release of the last session naming a reset hands its value back", []string{
			"acqs a x => new h1",
			"acqs b x => got h1",
			"retire h1 lost pvc => took",
			"done h1 =>",
			"done h1 => drop h1:lost",
			"rel a =>",
			"resets => shared|x:pvc:b",
			"rel b => reset pvc",
			"rel b =>",
		}},
		{"idle: only with no command held for the time given", []string{
			"acq a x => new h1",
			"tick 100",
			"idle h1 60 pvc => busy", // held
			"done h1 =>",
			"tick 59",
			"idle h1 60 pvc => busy",
			"tick 1",
			"idle h1 60 pvc => taken; drop h1:idle timeout",
			"idle h1 60 pvc => left",
			"acq a x => new h2; reset pvc",
			"done h2 =>",
			"rel a => drop h2:session ended",
			"resets =>",
		}},
		{"forget: never handed back, not even at Close", []string{
			"acq a x => new h1",
			"forget h1 => true",
			"forget h1 => false",
			"done h1 =>",
			"acq a x => new h2",
			"rel a => drop h2:session ended",
			"done h2 =>",
			"acq b x => new h3",
			"close => true; drop h3:corral stopped",
		}},
		{"close hands back every sandbox, busy and retired, and every reset", []string{
			"acq - x => new h1", // busy, then retired (lost)
			"retire h1 lost => took",
			"acq a y => new h2",
			"done h2 =>",
			"acq b x => new h3",
			"retire h3 lost pvc => took",
			"close => true; drop h1:corral stopped; drop h2:corral stopped; drop h3:corral stopped; reset pvc",
			"close => false",
			"done h1 =>",
			"acq a x => closed",
			"rel a =>",
			"idle h2 0 => left",
			"retire h2 lost => no",
			"entries =>",
		}},
		{"after close, a failed start keeps no reset", []string{
			"acq a x => new h1",
			"retire h1 lost pvc => took",
			"done h1 => drop h1:lost",
			"acq a x => new h2; reset pvc",
			"close => true; drop h2:corral stopped",
			"restore => false",
			"resets =>",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { run(t, tc.steps) })
	}
}

// TestConcurrent: sessions acquire and release per-session and shared
// sandboxes of two specs side by side, and end now and then. Every
// sandbox is handed back exactly once, by Done never while a command
// holds it, and each was made by one lease.
func TestConcurrent(t *testing.T) {
	type hnd struct {
		id   int
		held atomic.Int32
	}
	tb := New[*hnd, string](nil)
	var mu sync.Mutex
	dropped := map[*hnd]int{}
	made := map[*hnd]int{}
	var badDrops atomic.Int32
	var next atomic.Int64
	note := func(ds []Drop[*hnd], check bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range ds {
			dropped[d.Handle]++
			if check && d.Handle.held.Load() != 0 {
				badDrops.Add(1)
			}
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			sess := "s" + strconv.Itoa(g%4) // two goroutines per session
			for i := range 300 {
				hash := strconv.Itoa(i % 2)
				l, ok := tb.Acquire(sess, KeyFor(sess, g%3 == 0, hash), func() *hnd {
					return &hnd{id: int(next.Add(1))}
				})
				if !ok {
					t.Error("closed")
					return
				}
				l.Handle.held.Add(1)
				if l.New {
					mu.Lock()
					made[l.Handle]++
					mu.Unlock()
				}
				note(l.Stale, false) // held or not
				if i%7 == 0 {
					ds, _ := tb.Release(sess) // while holding: it goes at once
					note(ds, false)
				}
				l.Handle.held.Add(-1)
				if d := tb.Done(l.Handle); d != nil {
					note([]Drop[*hnd]{*d}, true)
				}
			}
		})
	}
	wg.Wait()
	ds, _, _ := tb.Close()
	note(ds, false)
	if n := badDrops.Load(); n > 0 {
		t.Errorf("%d sandboxes handed back while a command held them", n)
	}
	if len(made) == 0 {
		t.Fatal("nothing made")
	}
	for h, n := range made {
		if n != 1 {
			t.Errorf("sandbox %d made by %d leases", h.id, n)
		}
		if dropped[h] != 1 {
			t.Errorf("sandbox %d handed back %d times", h.id, dropped[h])
		}
	}
	for h := range dropped {
		if made[h] == 0 {
			t.Errorf("sandbox %d handed back but never made", h.id)
		}
	}
}

// A reset made by NewReset for a session, restored to a key after a
// failed start, is the key's next New lease's, and Release of the
// session hands it back when no lease took it.
func TestNewReset(t *testing.T) {
	tb := New[*sb, string](nil)
	k := KeyFor("a", false, "h2")
	if !tb.Restore(k, NewReset("a", "old pod")) {
		t.Fatal("Restore refused")
	}
	l, _ := tb.Acquire("a", k, func() *sb { return &sb{"2"} })
	if !l.New || l.Reset == nil || l.Reset.Value != "old pod" {
		t.Fatalf("lease %+v, want New with the reset", l)
	}
	tb.Retire(l.Handle, "start failed", nil)
	tb.Done(l.Handle)
	tb.Restore(l.Key, l.Reset)
	if drops, resets := tb.Release("b"); len(drops) != 0 || len(resets) != 0 {
		t.Errorf("Release of another session: %v %v", drops, resets)
	}
	if _, resets := tb.Release("a"); !slices.Equal(resets, []string{"old pod"}) {
		t.Errorf("Release: resets %q, want the restored one", resets)
	}
	if _, resets, _ := tb.Close(); len(resets) != 0 {
		t.Errorf("Close after Release: resets %q", resets)
	}
}
