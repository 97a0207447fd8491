// Command sessionbench compares, in one run, a session command (`true`
// through session.Exec, cwd and variables carried over) with the raw bwrap
// command that runs `true` in the same sandbox, and prints the medians and
// their ratios. Target (issue 28): at most 1.35 times the raw bwrap
// running `bash -c true`, the floor named below. It measures the
// session command three ways, interleaved: with a fixed Spec (the floor),
// through a corral.Host (settings cached, one backend kept), and through
// a resolver that reads the settings and builds a new bwrap backend for
// every command (what the CLI and the MCP server did before the Host).
//
// A session command is a shell command: bash runs it (and saves the cwd
// and exported variables it leaves), so the same raw bwrap running
// `bash -c true` is measured too, the floor of any design that gives each
// command a sandbox of its own and a shell.
//
// Run as root, a command's sandbox holds an unprivileged identity, never
// uid 0, and bwrap starts as that identity in a mount namespace prepared
// for it (backend/bwrap/runas.go): the raw bwrap above, run by root as
// root, does less than any root caller's sandbox must. In builds with
// -tags corralbench the same raw bwrap is also run that way
// (bwrap.Backend.RootFloor: the prepared namespace, the identity, nothing
// else of corral's), and the root caller's ratio is printed against it.
//
//	go run -tags corralbench ./bench/sessionbench [-n 200]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"github.com/corralhq/corral/reexec"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/config"
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
	cfg := filepath.Join(base, "config.yaml")
	if err := os.WriteFile(cfg, []byte("profile: workspace\ncwd: "+work+"\n"+limitsYAML()), 0o600); err != nil {
		fail(err)
	}
	be := bwrap.New(bwrap.Options{StateDir: state})
	spec := &session.Spec{Backend: be, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Limits: limits(), Workdir: work}, Timeout: time.Minute, Env: os.Environ()}
	m := session.NewManager(session.Options{StateDir: state, Resolve: func(string) (*session.Spec, error) { return spec, nil }})
	defer m.Close()
	// Before the Host: the settings read and a bwrap backend built for
	// every command.
	perCommand := session.NewManager(session.Options{StateDir: state, Resolve: func(name string) (*session.Spec, error) {
		st, err := config.Load(cfg, os.Environ())
		if err != nil {
			return nil, err
		}
		st = st.ForSession(name)
		pol, err := corral.PolicyOf(st)
		if err != nil {
			return nil, err
		}
		b := bwrap.New(bwrap.Options{StateDir: state, SecretFiles: []string{st.Path}, HiddenDirs: []string{config.ConfigDir()}})
		return &session.Spec{Backend: b, Policy: pol, Timeout: st.Timeout, OutputLimit: st.OutputLimit, Env: os.Environ()}, nil
	}})
	defer perCommand.Close()
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state})
	if err != nil {
		fail(err)
	}
	defer h.Close()
	ctx := context.Background()
	open := func(m *session.Manager, name string) *session.Session {
		s, err := m.Open(name)
		if err != nil {
			fail(err)
		}
		if _, err := s.Exec(ctx, session.ExecRequest{Command: "export A=1; cd ."}); err != nil {
			fail(err)
		}
		return s
	}
	s := open(m, "bench")
	viaHost := open(h.Manager(), "bench-host")
	viaOld := open(perCommand, "bench-per-command")
	argv, env, _, err := be.Command(ctx, &sandbox.Request{Argv: []string{"/bin/true"}, Env: os.Environ(), Policy: sandbox.Policy{Workdir: work, Profile: sandbox.ProfileWorkspace}, ScratchDir: s.ScratchDir()})
	if err != nil {
		fail(err)
	}
	run := func(s *session.Session) time.Duration {
		t := time.Now()
		r, err := s.Exec(ctx, session.ExecRequest{Command: "true"})
		if err != nil || r.ExitCode != 0 {
			fail(fmt.Errorf("session exec: %v %+v", err, r))
		}
		return time.Since(t)
	}
	bashArgv := append(append([]string{}, argv[:len(argv)-1]...), "/bin/bash", "--noprofile", "--norc", "-c", "true")
	var floor func(bool) error
	if rootFloor != nil && os.Getuid() == 0 {
		floor, err = rootFloor(be, ctx, &sandbox.Request{Argv: bashArgv[len(argv)-1:], Env: os.Environ(), Policy: sandbox.Policy{Workdir: work, Profile: sandbox.ProfileWorkspace}, ScratchDir: s.ScratchDir()})
		if err != nil {
			fail(err)
		}
	}
	timed := func(argv []string, capture bool) time.Duration {
		t := time.Now()
		c := exec.Command(argv[0], argv[1:]...)
		c.Env = env
		var out bytes.Buffer
		if capture {
			// Read to its end, as a session command's output is: the
			// pipe closes only when the sandbox's last process (bwrap's
			// pid 1, whose files the kernel releases after its mount
			// namespace is gone) has let go of it.
			c.Stdout, c.Stderr = &out, &out
		}
		if err := c.Run(); err != nil {
			fail(err)
		}
		return time.Since(t)
	}
	var sess, host, old, raw, rawBash, rawBashOut, rootBash []time.Duration
	for i := 0; i < *n; i++ {
		if floor != nil {
			t := time.Now()
			if err := floor(true); err != nil {
				fail(err)
			}
			rootBash = append(rootBash, time.Since(t))
		}
		sess = append(sess, run(s))
		host = append(host, run(viaHost))
		old = append(old, run(viaOld))
		raw = append(raw, timed(argv, false))
		rawBash = append(rawBash, timed(bashArgv, false))
		rawBashOut = append(rawBashOut, timed(bashArgv, true))
	}
	ms, mr, mh, mo, mb, mbo := median(sess), median(raw), median(host), median(old), median(rawBash), median(rawBashOut)
	fmt.Printf("raw bwrap true median       %7.2f ms\n", ms2(mr))
	fmt.Printf("raw bwrap bash -c true      %7.2f ms  (a shell: the floor of a session command)\n", ms2(mb))
	fmt.Printf("  its output read to EOF    %7.2f ms  (as a session command reads it)\n", ms2(mbo))
	fmt.Printf("session command median      %7.2f ms  (fixed Spec)\n", ms2(ms))
	fmt.Printf("  through corral.Host       %7.2f ms\n", ms2(mh))
	fmt.Printf("  settings+backend per cmd  %7.2f ms  (before the Host)\n", ms2(mo))
	fmt.Printf("ratio (session/raw)         %7.2f\n", float64(ms)/float64(mr))
	fmt.Printf("ratio (Host/raw)            %7.2f\n", float64(mh)/float64(mr))
	fmt.Printf("ratio (per command/raw)     %7.2f\n", float64(mo)/float64(mr))
	fmt.Printf("ratio (session/raw bash)    %7.2f  (target <= 1.35, issue 28; floor: raw bwrap bash -c true)\n", float64(ms)/float64(mb))
	fmt.Printf("ratio (session/raw bash, output read) %.2f\n", float64(ms)/float64(mbo))
	fmt.Printf("floor (raw bash/raw)        %7.2f\n", float64(mb)/float64(mr))
	switch {
	case floor != nil:
		mf := median(rootBash)
		fmt.Printf("root caller's floor         %7.2f ms  (raw bwrap bash -c true as the sandbox's identity, from the view prepared for it; output read)\n", ms2(mf))
		fmt.Printf("  its ratio to raw bash     %7.2f  (what running a root caller's sandbox as another identity costs)\n", float64(mf)/float64(mbo))
		fmt.Printf("ratio (session/root floor)  %7.2f  (target <= 1.35, issue 28, for a root caller)\n", float64(ms)/float64(mf))
	case os.Getuid() == 0:
		fmt.Println("(build with -tags corralbench for a root caller's floor)")
	}
}

// rootFloor is bwrap.Backend.RootFloor in builds with -tags corralbench
// (floor_corralbench.go), else nil.
var rootFloor func(b *bwrap.Backend, ctx context.Context, req *sandbox.Request) (func(bool) error, error)

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func ms2(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "sessionbench:", err)
	os.Exit(1)
}

// limitsYAML is the settings text of limits().
func limitsYAML() string {
	l := limits()
	return fmt.Sprintf("memory_mb: %d\ncpu_seconds: %d\nmax_procs: %d\n", l.MemoryMB, l.CPUSeconds, l.MaxProcs)
}

func limits() sandbox.Limits {
	l := sandbox.DefaultLimits
	if os.Getenv("BENCH_NO_PROCS") != "" {
		l.MaxProcs = 0
	}
	return l
}
