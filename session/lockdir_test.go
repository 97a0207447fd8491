package session

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestLockDir(t *testing.T) {
	dir := t.TempDir()
	release, err := lockFile(filepath.Join(dir, "lock")) // a command running
	if err != nil {
		t.Fatal(err)
	}
	if _, held, err := LockDir(dir, false); !held || err != nil {
		t.Fatalf("held by a command: held=%v %v", held, err)
	}
	release()
	r2, held, err := LockDir(dir, false)
	if held || err != nil || r2 == nil {
		t.Fatalf("free lock: held=%v %v", held, err)
	}
	r2()
	r3, held, err := LockDir(dir, true)
	if held || err != nil {
		t.Fatalf("waiting lock: %v %v", held, err)
	}
	r3()
	if _, _, err := LockDir(filepath.Join(dir, "none"), false); err == nil {
		t.Error("a missing session directory locked")
	}
}

// heldStart is the real backend whose Run waits for gate first: a
// background command's sandbox that is slow to come up.
type heldStart struct {
	sandbox.Backend
	gate chan struct{}
}

func (h heldStart) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	<-h.gate
	return h.Backend.Run(ctx, req)
}

// TestLockDirWaitsForStartingBackground: between Start's return and its
// sandbox's existence, LockDir (corral apply) is held off, and once it
// has the lock the process is among Background's: apply can never see a
// session with no background command and then have one start on the
// layer it is changing.
func TestLockDirWaitsForStartingBackground(t *testing.T) {
	f := newFixture(t)
	gate := make(chan struct{})
	f.spec.Backend = heldStart{Backend: f.be, gate: gate}
	s := f.open("bg-start")
	p, err := s.Start(StartRequest{Command: "sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	if _, held, err := LockDir(s.Dir(), false); !held || err != nil {
		t.Fatalf("LockDir while a sandbox starts: held=%v %v", held, err)
	}
	type locked struct {
		release func()
		bg      []BackgroundProcess
	}
	got := make(chan locked, 1)
	go func() {
		release, _, err := LockDir(s.Dir(), true)
		if err != nil {
			t.Error(err)
			got <- locked{}
			return
		}
		got <- locked{release, Background(s.Dir())}
	}()
	close(gate)
	l := <-got
	if l.release == nil {
		t.FailNow()
	}
	if len(l.bg) != 1 || l.bg[0].ID != p.ID || l.bg[0].Command != "sleep 60" || l.bg[0].PID <= 0 {
		t.Errorf("Background under LockDir: %+v", l.bg)
	}
	l.release()
	if err := s.Kill(p.ID); err != nil {
		t.Fatal(err)
	}
	release, held, err := LockDir(s.Dir(), false)
	if held || err != nil {
		t.Fatalf("LockDir after the kill: held=%v %v", held, err)
	}
	release()
	if bg := Background(s.Dir()); len(bg) != 0 {
		t.Errorf("Background after the kill: %+v", bg)
	}
}

// failedStart is a backend that cannot make a sandbox (bwrap missing,
// the engine down).
type failedStart struct{ sandbox.Backend }

func (failedStart) Run(context.Context, *sandbox.Request) (*sandbox.Result, error) {
	return nil, sandbox.ErrUnavailable
}

// TestStartFailureReleasesLockDir: a background command whose sandbox
// never starts does not hold LockDir.
func TestStartFailureReleasesLockDir(t *testing.T) {
	f := newFixture(t)
	f.spec.Backend = failedStart{f.be}
	s := f.open("bg-fail")
	p, err := s.Start(StartRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	<-p.done
	if c, _ := s.Output(p.ID, 0); c.Error == "" {
		t.Fatalf("the start did not fail: %+v", c)
	}
	release, held, err := LockDir(s.Dir(), false)
	if held || err != nil {
		t.Fatalf("LockDir after a failed start: held=%v %v", held, err)
	}
	release()
}
