// Command sessionbench compares, in one run, a session command (`true`
// through session.Exec, cwd and variables carried over) with the raw bwrap
// command that runs `true` in the same sandbox, and prints the medians and
// their ratio. Target (issue "Sessions"): at most 1.5.
//
//	go run ./bench/sessionbench [-n 200]
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/corralhq/corral/reexec"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

func main() {
	reexec.Init() // the binary serves as its sandboxes' helpers, as corral does
	n := flag.Int("n", 200, "iterations of each")
	flag.Parse()
	base, err := os.MkdirTemp("/var/tmp", "corral-sessionbench-*")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(base)
	work := filepath.Join(base, "work")
	state := filepath.Join(base, "state")
	os.MkdirAll(work, 0o755)
	be := bwrap.New(bwrap.Options{StateDir: state})
	spec := &session.Spec{Backend: be, Profile: sandbox.ProfileWorkspace, Limits: limits(), Workdir: work, Timeout: time.Minute, Env: os.Environ()}
	m := session.NewManager(session.Options{StateDir: state, Resolve: func(string) (*session.Spec, error) { return spec, nil }})
	defer m.Close()
	s, err := m.Open("bench")
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	if _, err := s.Exec(ctx, session.ExecRequest{Command: "export A=1; cd ."}); err != nil {
		fail(err)
	}
	argv, env, _, err := be.Command(ctx, &sandbox.Request{Argv: []string{"/bin/true"}, Env: os.Environ(), Workdir: work, Profile: sandbox.ProfileWorkspace, ScratchDir: s.ScratchDir()})
	if err != nil {
		fail(err)
	}
	var sess, raw []time.Duration
	for i := 0; i < *n; i++ {
		t := time.Now()
		r, err := s.Exec(ctx, session.ExecRequest{Command: "true"})
		if err != nil || r.ExitCode != 0 {
			fail(fmt.Errorf("session exec: %v %+v", err, r))
		}
		sess = append(sess, time.Since(t))
		t = time.Now()
		c := exec.Command(argv[0], argv[1:]...)
		c.Env = env
		if err := c.Run(); err != nil {
			fail(err)
		}
		raw = append(raw, time.Since(t))
	}
	ms, mr := median(sess), median(raw)
	fmt.Printf("raw bwrap true median       %7.2f ms\n", ms2(mr))
	fmt.Printf("session command median      %7.2f ms\n", ms2(ms))
	fmt.Printf("ratio (session/raw)         %7.2f  (target <= 1.50)\n", float64(ms)/float64(mr))
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func ms2(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "sessionbench:", err)
	os.Exit(1)
}

func limits() sandbox.Limits {
	l := sandbox.DefaultLimits
	if os.Getenv("BENCH_NO_PROCS") != "" {
		l.MaxProcs = 0
	}
	return l
}
