package bwrap

import (
	"context"
	"os/exec"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// BenchmarkSandboxTrue measures one `true` in a new sandbox through
// Backend.Run (policy, plan, limits gate, spawn, wait), in-process.
func BenchmarkSandboxTrue(b *testing.B) {
	t := &testing.T{}
	_ = t
	e := newBenchEnv(b)
	req := &sandbox.Request{Argv: []string{"/bin/true"}, Env: e.envv, Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := e.backend.Run(context.Background(), req)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v %+v", err, res)
		}
	}
}

// BenchmarkRawBwrapTrue runs the same bwrap argv directly with os/exec: the
// floor BenchmarkSandboxTrue is compared against.
func BenchmarkRawBwrapTrue(b *testing.B) {
	e := newBenchEnv(b)
	req := &sandbox.Request{Argv: []string{"/bin/true"}, Env: e.envv, Workdir: e.work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits}
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
