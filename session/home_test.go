package session

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// homeBackend is a real bwrap backend whose sessions' home (turn, state,
// running marker) is kept here, as a kubernetes pod keeps it under
// scope cluster: what package session does with a sandbox.TurnBackend,
// whatever the sandbox.
type homeBackend struct {
	sandbox.Backend
	mu          sync.Mutex
	state       []byte
	stateError  string
	interrupted string
	saves       int
	ends        int
	refuse      error
}

func (h *homeBackend) Turn(ctx context.Context, req *sandbox.Request, marker string) (*sandbox.SessionTurn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuse != nil {
		return nil, h.refuse
	}
	if req.Session == "" || !strings.Contains(marker, "corral pid") {
		return nil, errors.New("bad turn request")
	}
	t := &sandbox.SessionTurn{State: h.state, StateError: h.stateError, Interrupted: h.interrupted}
	h.interrupted = ""
	t.End = func(state []byte) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.ends++
		if state != nil {
			h.state = append([]byte(nil), state...)
			h.saves++
		}
	}
	return t, nil
}

// TestHomeState: under a TurnBackend, two managers on state directories
// of their own (two corral processes) see one session's cwd and
// variables, both ways, through the state its sandbox keeps; a command
// that changes nothing saves nothing; a state there that is damaged or
// unreadable starts from the host's copy or afresh with a note; a
// command cut off when its corral was lost is said once; a turn refused
// runs nothing.
func TestHomeState(t *testing.T) {
	f := newFixture(t)
	hb := &homeBackend{Backend: f.be}
	f.spec.Backend = hb
	m1 := f.manager()
	defer m1.Close()
	m2 := NewManager(Options{StateDir: filepath.Join(f.base, "state2"), Resolve: func(string) (*Spec, error) { sp := f.spec; return &sp, nil }})
	defer m2.Close()
	s1, err := m1.Open("home")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := m2.Open("home")
	if err != nil {
		t.Fatal(err)
	}
	f.exec(s1, "mkdir -p a && cd a && export V=one")
	if r := f.exec(s2, `echo "$PWD|$V"; cd ..; export V=two`); r.Output.Text != f.work+"/a|one\n" {
		t.Fatalf("second manager saw %q", r.Output.Text)
	}
	if r := f.exec(s1, `echo "$PWD|$V"`); r.Output.Text != f.work+"|two\n" {
		t.Fatalf("first manager saw %q", r.Output.Text)
	}
	// A command that changes nothing saves nothing (on bwrap each
	// manager's scratch directory is TMPDIR: the command before this
	// one, from the other manager, changed it).
	hb.mu.Lock()
	saves, ends := hb.saves, hb.ends
	hb.mu.Unlock()
	f.exec(s1, "true")
	hb.mu.Lock()
	if hb.saves != saves || hb.ends != ends+1 {
		t.Errorf("an unchanged command: %d saves in %d turns, was %d in %d", hb.saves, hb.ends, saves, ends)
	}
	hb.mu.Unlock()

	hb.mu.Lock()
	hb.interrupted = "started ... by corral pid 1 on x: make\x1b[2J deploy"
	hb.mu.Unlock()
	r := f.exec(s2, "true")
	note := strings.Join(r.Notes, "\n")
	if !strings.Contains(note, "cut off") || !strings.Contains(note, "may have run") || !strings.Contains(note, "make [2J deploy") || strings.Contains(note, "\x1b") {
		t.Errorf("notes %q: want the cut-off command, made printable", r.Notes)
	}
	if r := f.exec(s2, "true"); strings.Contains(strings.Join(r.Notes, "\n"), "cut off") {
		t.Errorf("said again: %q", r.Notes)
	}

	// Damaged there: afresh, with a note; the sandbox's copy is replaced.
	hb.mu.Lock()
	hb.state = []byte("{")
	hb.mu.Unlock()
	r = f.exec(s1, `echo "$PWD|${V-unset}"`)
	if r.Output.Text != f.work+"|unset\n" || !strings.Contains(strings.Join(r.Notes, "\n"), "damaged") {
		t.Errorf("damaged state: %q notes %q", r.Output.Text, r.Notes)
	}
	hb.mu.Lock()
	fixed := string(hb.state)
	hb.mu.Unlock()
	if !strings.Contains(fixed, `"cwd"`) {
		t.Errorf("the damaged state was not replaced: %q", fixed)
	}

	// Unreadable there: the host's copy, with a note.
	f.exec(s1, "export W=host")
	hb.mu.Lock()
	hb.state, hb.stateError = nil, "/x/state is not a regular file"
	hb.mu.Unlock()
	r = f.exec(s1, `echo "${W-unset}"`)
	if r.Output.Text != "host\n" || !strings.Contains(strings.Join(r.Notes, "\n"), "could not be read") {
		t.Errorf("unreadable state: %q notes %q", r.Output.Text, r.Notes)
	}

	// A turn refused: nothing runs.
	hb.mu.Lock()
	hb.refuse = sandbox.Transient(errors.New("no agent"))
	hb.mu.Unlock()
	if _, err := s1.Exec(context.Background(), ExecRequest{Command: "touch " + f.work + "/ran"}); err == nil {
		t.Error("a refused turn ran the command")
	}
	if _, err := filepath.Glob(f.work + "/ran"); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(f.work + "/ran"); len(m) != 0 {
		t.Error("a refused turn ran the command")
	}
}
