package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// lostTrack is the real backend that, after the command ran or before
// it started, fails the way a lost engine, a dead helper or a failed
// build does: the error wraps sandbox.ErrUnavailable and so, taken alone,
// says nothing ran.
type lostTrack struct {
	sandbox.Backend
	// after: run the command first (OnStart is called), then fail.
	after bool
	// mark is applied to the failure (sandbox.NotStarted, or nothing).
	mark func(error) error
}

func (l lostTrack) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	err := fmt.Errorf("%w: the engine went away", sandbox.ErrUnavailable)
	if l.mark != nil {
		err = l.mark(err)
	}
	if l.after {
		if _, rerr := l.Backend.Run(ctx, req); rerr != nil {
			return nil, rerr
		}
	}
	return nil, err
}

// TestMayHaveRunIsNeverNotRun: once a backend started the command, a
// failure is reported as "may have run" whatever its cause says; before
// that, and when the backend knows the command never started, it stays
// what it was. Both for a session's commands and background ones.
func TestMayHaveRunIsNeverNotRun(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name       string
		be         lostTrack
		ran        bool
		mayHaveRun bool
	}{
		{"lost after the command ran", lostTrack{after: true}, true, true},
		{"failed before the start", lostTrack{}, false, false},
		{"started, but known not to have run", lostTrack{after: false, mark: sandbox.NotStarted}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.be.Backend = f.be
			f.spec.Backend = tc.be
			s := f.open("outcome-" + fmt.Sprint(len(tc.name)))
			mark := filepath.Join(f.work, fmt.Sprintf("ran-%d", len(tc.name)))
			_, err := s.Exec(context.Background(), ExecRequest{Command: "touch " + mark})
			_, statErr := os.Stat(mark)
			if ran := statErr == nil; ran != tc.ran {
				t.Fatalf("ran = %v, want %v", ran, tc.ran)
			}
			if err == nil {
				t.Fatal("no error")
			}
			if got := errors.Is(err, sandbox.ErrMayHaveRun); got != tc.mayHaveRun {
				t.Errorf("Exec: ErrMayHaveRun = %v, want %v: %v", got, tc.mayHaveRun, err)
			}
			os.Remove(mark)
			p, err := s.Start(StartRequest{Command: "touch " + mark})
			if err != nil {
				t.Fatal(err)
			}
			<-p.Done()
			c, err := s.Output(p.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			if c.Error == "" || c.MayHaveRun != tc.mayHaveRun {
				t.Errorf("Start: error %q, MayHaveRun = %v, want %v", c.Error, c.MayHaveRun, tc.mayHaveRun)
			}
			os.Remove(mark)
		})
	}
}

// TestMayHaveRunOfSuccess: a run that succeeded is no failure, begun or
// not (a background command's outcome goes through mayHaveRun whatever
// it is; a nil became "corral lost track of it (%!w(<nil>))").
func TestMayHaveRunOfSuccess(t *testing.T) {
	for _, began := range []bool{false, true} {
		if err := mayHaveRun(nil, began); err != nil {
			t.Errorf("mayHaveRun(nil, %v) = %v", began, err)
		}
	}
}
