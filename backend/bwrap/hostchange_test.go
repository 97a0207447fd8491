package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/sandbox"
)

// countHandler counts log records by message.
type countHandler struct {
	mu sync.Mutex
	n  map[string]int
	kv map[string]int64 // the "count" attribute of each message's last record
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "count" {
			if h.kv == nil {
				h.kv = map[string]int64{}
			}
			h.kv[r.Message] = a.Value.Int64()
		}
		return true
	})
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }
func (h *countHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// TestHostMountsChangeWhileStarting: the host's mounts change while
// sandboxes are being built, as on a machine where Docker mounts and
// unmounts container layers and homes are made and removed: tmpfs mounts
// come and go under a directory of the test tree (bwrap copies them with
// the root and remounts them read-only: `Unable to apply mount flags:
// remount ...`), and a home-like directory whose credential store the plan
// masks appears and disappears (`Can't mkdir parents for .../.aws:
// Read-only file system`). Every Run must either run its command exactly
// once and report it, or run nothing and say the host changed
// (sandbox.ErrHostChanged); never that the machine cannot sandbox, never
// bwrap's failure as the command's result, and no bwrap message of a
// retried attempt in the output.
func TestHostMountsChangeWhileStarting(t *testing.T) {
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: it mounts and unmounts tmpfs on the host while sandboxes start (CI's root pass runs it)")
	}
	e := newEnv(t)
	churn := filepath.Join(e.base, "churn")
	other := filepath.Join(e.base, "other")
	creds := filepath.Join(other, ".aws")
	if err := os.MkdirAll(churn, 0o755); err != nil {
		t.Fatal(err)
	}
	logs := &countHandler{n: map[string]int{}}
	e.backend = New(Options{StateDir: e.state, Logger: slog.New(logs),
		HiddenDirs: []string{filepath.Join(e.home, ".config", "corral"), creds}})

	cycles, stopChurn := churnMounts(churn, creds, other)
	defer stopChurn()

	const workers, perWorker = 4, 30
	type outcome struct {
		id       string
		err      error
		res      *sandbox.Result
		out, msg string
	}
	results := make(chan outcome, workers*perWorker)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for j := 0; j < perWorker; j++ {
				id := fmt.Sprintf("r%d-%d", w, j)
				var so, se bytes.Buffer
				res, err := e.backend.Run(context.Background(), &sandbox.Request{
					Argv:   []string{"/bin/sh", "-c", `echo "$1" >> ran && echo "ok $1"`, "sh", id},
					Env:    e.envv,
					Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits}, Stdin: strings.NewReader("input that a retry must not lose\n"),
					Stdout:  &so,
					Stderr:  &se,
					Timeout: 60 * time.Second,
				})
				results <- outcome{id, err, res, so.String(), se.String()}
			}
		}(w)
	}
	wg.Wait()
	close(results)
	data, _ := os.ReadFile(filepath.Join(e.work, "ran"))
	ran := map[string]int{}
	for _, l := range strings.Fields(string(data)) {
		ran[l]++
	}
	ok, named := 0, 0
	for r := range results {
		switch {
		case r.err == nil:
			if r.res.ExitCode != 0 || r.out != "ok "+r.id+"\n" || ran[r.id] != 1 || strings.Contains(r.msg, "bwrap:") {
				t.Errorf("%s: exit %d, stdout %q, stderr %q, ran %d times; want exit 0, its output, once, and no bwrap message", r.id, r.res.ExitCode, r.out, r.msg, ran[r.id])
				continue
			}
			ok++
		case errors.Is(r.err, sandbox.ErrHostChanged) && !errors.Is(r.err, sandbox.ErrUnavailable):
			if ran[r.id] != 0 {
				t.Errorf("%s: reported as not run (%v), but ran %d times", r.id, r.err, ran[r.id])
			}
			named++
		default:
			t.Errorf("%s: %v (ran %d times); want a result, or sandbox.ErrHostChanged", r.id, r.err, ran[r.id])
		}
	}
	retried := logs.count("bwrap.start.retry")
	t.Logf("%d runs: %d ran, %d named the host's change; %d attempts retried; %d churn cycles", workers*perWorker, ok, named, retried, cycles.Load())
	if retried == 0 && named == 0 && !t.Failed() {
		t.Skip("the host's mounts never changed under a starting sandbox here, so nothing was shown")
	}
}

// Holding bwrap's lines back changes nothing the command sees: one writer
// given for stdout and stderr stays one pipe (os/exec's rule), in order.
func TestOneWriterStaysOnePipe(t *testing.T) {
	e := newEnv(t)
	var both bytes.Buffer
	res, err := e.backend.Run(context.Background(), &sandbox.Request{
		Argv: []string{"/bin/sh", "-c", `[ "$(readlink /proc/$$/fd/1)" = "$(readlink /proc/$$/fd/2)" ] && echo same; echo 1; echo 2 >&2; echo 3`},
		Env:  e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace}, Stdout: &both, Stderr: &both,
	})
	if err != nil || res.ExitCode != 0 || both.String() != "same\n1\n2\n3\n" {
		t.Errorf("Run = %+v, %v; output %q, want same\\n1\\n2\\n3\\n", res, err, both.String())
	}
}

// churnMounts mounts and unmounts tmpfs under churn, about four at any
// time, each living four cycles (bwrap copies them with the root and
// remounts them read-only: a removed one fails that with `Unable to apply
// mount flags: remount ...`), and makes and removes creds (under other),
// until stop; it counts its cycles. Removing a directory detaches what is
// mounted on it in other mount namespaces too (a starting sandbox's copy).
func churnMounts(churn, creds, other string) (cycles *atomic.Int64, stop func()) {
	done := make(chan struct{})
	var churned sync.WaitGroup
	cycles = new(atomic.Int64)
	churned.Add(1)
	go func() {
		defer churned.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			d := filepath.Join(churn, fmt.Sprintf("m%d", i%8))
			_ = os.Mkdir(d, 0o755)
			_ = unix.Mount("tmpfs", d, "tmpfs", 0, "size=64k")
			old := filepath.Join(churn, fmt.Sprintf("m%d", (i+4)%8))
			_ = unix.Unmount(old, unix.MNT_DETACH)
			_ = os.Remove(old)
			if creds != "" {
				if i%2 == 0 {
					_ = os.MkdirAll(creds, 0o700)
				} else {
					_ = os.RemoveAll(other)
				}
			}
			cycles.Add(1)
		}
	}()
	return cycles, func() {
		close(done)
		churned.Wait()
		for i := 0; i < 8; i++ {
			_ = unix.Unmount(filepath.Join(churn, fmt.Sprintf("m%d", i)), unix.MNT_DETACH)
		}
	}
}

// TestEgressStartsWhileHostMountsChange: the allowlist profile's network
// holder (a bwrap sandbox of its own, binding the host's root read-only)
// starts while the host's mounts change, as on a machine running Docker:
// every command runs once and is reported, or runs nothing and says the
// host changed; never "the allowlist profile's network namespace could
// not be set up" for a host that can sandbox.
func TestEgressStartsWhileHostMountsChange(t *testing.T) {
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: it mounts and unmounts tmpfs on the host while sandboxes start (CI's root pass runs it)")
	}
	e := newEnv(t)
	w := newWorld(t, e)
	churn := filepath.Join(e.base, "churn")
	if err := os.MkdirAll(churn, 0o755); err != nil {
		t.Fatal(err)
	}
	logs := &countHandler{n: map[string]int{}}
	e.backend = New(Options{StateDir: e.state, HiddenDirs: []string{filepath.Join(e.home, ".config", "corral")}, Egress: w.pool, Logger: slog.New(logs)})
	cycles, stopChurn := churnMounts(churn, "", "")
	defer stopChurn()
	const runs = 24
	ok, named := 0, 0
	for i := 0; i < runs; i++ {
		id := fmt.Sprintf("e%d", i)
		var so, se bytes.Buffer
		r := &sandbox.Request{Argv: []string{"/bin/sh", "-c", `echo "$1" >> ran && echo "ok $1"`, "sh", id}, Env: e.envv,
			Policy: sandbox.Policy{Workdir: e.work}, Stdout: &so, Stderr: &se, Timeout: 60 * time.Second}
		allowlist(r)
		r.Session = "churn-" + id // a new holder for each
		res, err := e.backend.Run(context.Background(), r)
		switch {
		case err == nil && res.ExitCode == 0 && so.String() == "ok "+id+"\n":
			ok++
		case errors.Is(err, sandbox.ErrHostChanged) && !errors.Is(err, sandbox.ErrUnavailable):
			named++
		default:
			t.Errorf("%s: %+v, %v; stdout %q, stderr %q", id, res, err, so.String(), se.String())
		}
	}
	data, _ := os.ReadFile(filepath.Join(e.work, "ran"))
	if got := len(strings.Fields(string(data))); got != ok {
		t.Errorf("%d commands ran, %d reported", got, ok)
	}
	t.Logf("%d runs: %d ran, %d named the host's change; %d holder starts retried; %d churn cycles", runs, ok, named, logs.count("bwrap.egress.retry"), cycles.Load())
}
