package bwrap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/sandbox"
)

// BenchmarkSandboxTrue measures one `true` in a new sandbox through
// Backend.Run (policy, plan, limits gate, spawn, wait), in-process.
func BenchmarkSandboxTrue(b *testing.B) {
	e := newBenchEnv(b)
	req := &sandbox.Request{Argv: []string{"/bin/true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits}}
	b.ResetTimer()
	cpu := cpuNow()
	for i := 0; i < b.N; i++ {
		res, err := e.backend.Run(context.Background(), req)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v %+v", err, res)
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkRawBwrapTrue runs the same bwrap argv directly with os/exec: the
// floor BenchmarkSandboxTrue is compared against.
func BenchmarkRawBwrapTrue(b *testing.B) {
	e := newBenchEnv(b)
	req := &sandbox.Request{Argv: []string{"/bin/true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits}}
	argv, env, _, err := e.backend.Command(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSandboxTrueRepo is BenchmarkSandboxTrue in a git repository
// with nested directories, with the default protected paths (the scan, the
// read-only binds, the check after the command) and with none: the
// difference is what protection costs per command.
func BenchmarkSandboxTrueRepo(b *testing.B) {
	e := newBenchEnv(b)
	for _, d := range []string{".git/hooks", ".git/objects", ".git/refs", ".vscode", "src/a", "src/b", "docs", "vendor/lib/.git/hooks"} {
		if err := os.MkdirAll(filepath.Join(e.work, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range []string{".git/HEAD", ".git/config", "vendor/lib/.git/HEAD", "vendor/lib/.git/config"} {
		if err := os.WriteFile(filepath.Join(e.work, f), []byte("x\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		protected []string
	}{{"protected", nil}, {"unprotected", []string{}}} {
		b.Run(tc.name, func(b *testing.B) {
			req := &sandbox.Request{Argv: []string{"/bin/true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits, Protected: tc.protected}}
			for i := 0; i < b.N; i++ {
				res, err := e.backend.Run(context.Background(), req)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("run: %v %+v", err, res)
				}
			}
		})
	}
}

// BenchmarkPlanRepo measures BuildPlan alone in the same repository, with
// and without protected paths.
func BenchmarkPlanRepo(b *testing.B) {
	e := newBenchEnv(b)
	for _, d := range []string{".git/hooks", "src/a", "vendor/lib/.git/hooks"} {
		os.MkdirAll(filepath.Join(e.work, d), 0o755)
	}
	os.WriteFile(filepath.Join(e.work, ".git/HEAD"), []byte("x\n"), 0o644)
	host, err := e.backend.host()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		protected []string
	}{{"protected", nil}, {"unprotected", []string{}}} {
		b.Run(tc.name, func(b *testing.B) {
			req := &sandbox.Request{Argv: []string{"/bin/true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Protected: tc.protected}}
			for i := 0; i < b.N; i++ {
				if _, err := BuildPlan(req, host); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFilterAndProxy measures, in one run and interleaved so that the
// machine's drift hits all alike, what the syscall filter and the
// allowlist's proxy bridge cost per command: `true` under workspace without
// the filter, under workspace with it (every command now), and under
// allowlist (filter, the session's network namespace entered at the gate; its proxy server and the namespace's holder
// reused, as between a session's commands). It reports each median in ms
// and the ratios to the unfiltered workspace command.
func BenchmarkFilterAndProxy(b *testing.B) {
	e := newBenchEnv(b)
	pool := egress.NewPool(egress.Options{Dir: filepath.Join(e.base, "net")})
	defer pool.Close()
	filtered := New(Options{StateDir: e.state, Egress: pool})
	bare := New(Options{StateDir: e.state, Egress: pool})
	bare.noFilter = true
	variants := []struct {
		name    string
		be      *Backend
		profile sandbox.Profile
	}{
		{"workspace-nofilter", bare, sandbox.ProfileWorkspace},
		{"workspace", filtered, sandbox.ProfileWorkspace},
		{"allowlist", filtered, sandbox.ProfileAllowlist},
	}
	times := make([][]time.Duration, len(variants))
	run := func(i int) {
		v := variants[i]
		req := &sandbox.Request{Argv: []string{"/bin/true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: v.profile, Limits: sandbox.DefaultLimits, NetworkAllow: []string{"example.com"}}, Session: "bench"}
		var errb bytes.Buffer
		req.Stderr = &errb
		start := time.Now()
		res, err := v.be.Run(context.Background(), req)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%s: %v %+v\n%s", v.name, err, res, &errb)
		}
		times[i] = append(times[i], time.Since(start))
	}
	for i := range variants { // warm up: caches, the proxy server
		run(i)
		times[i] = nil
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range variants {
			run((i + n) % len(variants))
		}
	}
	b.StopTimer()
	median := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / float64(time.Millisecond)
	}
	base := median(times[0])
	for i, v := range variants {
		m := median(times[i])
		b.ReportMetric(m, v.name+"-ms")
		if i > 0 {
			b.ReportMetric(m/base, v.name+"/nofilter")
		}
	}
	b.ReportMetric(0, "ns/op") // the per-variant medians are the result
}

// BenchmarkUnixMediation measures what the connect(2) mediation of the
// confined profiles costs: `true` under workspace with and without it (the
// two injected calls and the supervisor), and, in one sandbox, the mean
// time of connect(2) to a Unix socket of the sandbox and to a loopback TCP
// port, mediated (workspace) and not (network). Run with -benchtime=1x for
// the connect figures (2000 connects per run, reported as ns/connect).
//
// Measured 2026-12-01 on the 2-core machine under load (load average 3-9):
// `true` 71-80 ms mediated, 65-76 ms not (no difference beyond noise);
// connect+accept+close of a Unix socket 220-230 us mediated, 25-35 us not;
// of loopback TCP 180-225 us mediated, about 70 us not.
func BenchmarkUnixMediation(b *testing.B) {
	e := newBenchEnv(b)
	for _, tc := range []struct {
		name string
		off  bool
	}{{"true/mediated", false}, {"true/unmediated", true}} {
		b.Run(tc.name, func(b *testing.B) {
			e.backend.noUnixMediation = tc.off
			defer func() { e.backend.noUnixMediation = false }()
			req := &sandbox.Request{Argv: []string{"/bin/true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits}}
			for i := 0; i < b.N; i++ {
				res, err := e.backend.Run(context.Background(), req)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("run: %v %+v", err, res)
				}
			}
		})
	}
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("python3 is not installed")
	}
	const probe = `
import os, socket, sys, time
n = 2000
def measure(fam, addr):
    srv = socket.socket(fam); srv.bind(addr); srv.listen(128)
    if fam == socket.AF_INET: addr = srv.getsockname()
    t = time.perf_counter_ns()
    for _ in range(n):
        c = socket.socket(fam); c.connect(addr); c.close(); srv.accept()[0].close()
    return (time.perf_counter_ns() - t) // n
print(measure(socket.AF_UNIX, "/tmp/bench-%d.sock" % os.getpid()), measure(socket.AF_INET, ("127.0.0.1", 0)))
`
	for _, p := range []sandbox.Profile{sandbox.ProfileWorkspace, sandbox.ProfileNetwork} {
		b.Run("connect/"+string(p), func(b *testing.B) {
			var unixNs, tcpNs float64
			for i := 0; i < b.N; i++ {
				var so, se bytes.Buffer
				req := &sandbox.Request{Argv: []string{"python3", "-c", probe}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: p, Limits: sandbox.DefaultLimits}, Stdout: &so, Stderr: &se}
				res, err := e.backend.Run(context.Background(), req)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("run: %v %+v\n%s", err, res, se.String())
				}
				var u, t float64
				if _, err := fmt.Sscan(so.String(), &u, &t); err != nil {
					b.Fatalf("output %q: %v", so.String(), err)
				}
				unixNs += u
				tcpNs += t
			}
			b.ReportMetric(unixNs/float64(b.N), "unix-ns/connect")
			b.ReportMetric(tcpNs/float64(b.N), "tcp-ns/connect")
		})
	}
}

// reportCPU reports the CPU time (user+sys, getrusage(2)) of this process
// ("self-cpu-ms/op") and of it plus its waited-for children, bwrap and the
// command ("cpu-ms/op"), per iteration since start: on a loaded machine
// CPU time compares runs where wall time does not.
func reportCPU(b *testing.B, start [2]time.Duration) {
	end := cpuNow()
	n := float64(b.N)
	b.ReportMetric(float64(end[0]-start[0])/1e6/n, "self-cpu-ms/op")
	b.ReportMetric(float64(end[0]+end[1]-start[0]-start[1])/1e6/n, "cpu-ms/op")
}

// cpuNow is the user+sys CPU time of this process and of its waited-for
// children.
func cpuNow() [2]time.Duration {
	var self, kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	tv := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return [2]time.Duration{tv(self.Utime) + tv(self.Stime), tv(kids.Utime) + tv(kids.Stime)}
}
