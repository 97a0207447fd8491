package docker

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// BenchmarkDocker compares, in one run, a session command on the docker
// backend (session.Exec of `true`: the bash wrapper in the session's
// container, with cwd and variables saved) with `docker exec CONTAINER bash
// -c true` through the Docker CLI against the same container. Target (issue
// "Docker backend"): at most half the CLI's time. bench/docker.sh prints
// the ratio.
func BenchmarkDocker(b *testing.B) {
	f := newFixture(b, nil)
	m := sessionFixture(b, f)
	s, err := m.Open("bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Exec(ctx, session.ExecRequest{Command: "true"}); err != nil {
		b.Fatal(err)
	}
	names := f.containers("bench")
	if len(names) != 1 {
		b.Fatalf("containers %v", names)
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("no docker CLI to compare with")
	}
	b.Run("session-command", func(b *testing.B) {
		for b.Loop() {
			r, err := s.Exec(ctx, session.ExecRequest{Command: "true"})
			if err != nil || r.ExitCode != 0 {
				b.Fatal(err, r)
			}
		}
	})
	b.Run("docker-exec-cli", func(b *testing.B) {
		for b.Loop() {
			if out, err := exec.Command(docker, "exec", names[0], "bash", "-c", "true").CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
}

// BenchmarkDockerReview compares, in one run, a session command that
// writes a file under workspace_mode direct and under review (the overlay
// volume), in containers of the same settings.
func BenchmarkDockerReview(b *testing.B) {
	f := newFixture(b, nil)
	for _, review := range []bool{false, true} {
		name := "direct"
		if review {
			name = "review"
		}
		m := session.NewManager(session.Options{StateDir: filepath.Join(dockertest.TestDir(b), "state"), Resolve: func(string) (*session.Spec, error) {
			return &session.Spec{Backend: f.b, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: f.ws}, Timeout: time.Minute,
				OutputLimit: 1 << 20, Env: []string{"PATH=/usr/bin:/bin"}, Review: review}, nil
		}})
		b.Cleanup(m.Close)
		s, err := m.Open("bench-" + name)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		start := time.Now()
		if _, err := s.Exec(ctx, session.ExecRequest{Command: "true"}); err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: first command (container start) %v", name, time.Since(start))
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				r, err := s.Exec(ctx, session.ExecRequest{Command: "echo x > written"})
				if err != nil || r.ExitCode != 0 {
					b.Fatal(err, r)
				}
			}
		})
	}
}
