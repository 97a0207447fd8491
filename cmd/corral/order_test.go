package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/internal/testkit"
)

// TestOutputOrderOnePipe (issues 23 and 25): when corral's stdout and
// stderr are one file (`2>&1 | less`, `>log 2>&1`, one terminal), the
// command's two streams reach it in the order the command wrote them,
// through corral run, run --session and run without limits. corral gave
// the backends two writers, which read two pipes apart: a new user saw
// "a c b" in 55 runs of 100. The kernel keeps one pipe's order, so the
// verdict depends on no timing.
func TestOutputOrderOnePipe(t *testing.T) {
	requireBwrap(t)
	checkOutputOrder(t, newCLI(t))
}

// TestOutputOrderOnePipeDocker is TestOutputOrderOnePipe on the docker
// backend.
func TestOutputOrderOnePipeDocker(t *testing.T) {
	c, _ := dockerCLI(t)
	checkOutputOrder(t, c)
}

// checkOutputOrder runs TestOutputOrderOnePipe's cases through c.
func checkOutputOrder(t *testing.T, c *cli) {
	for _, tc := range []struct {
		name  string
		env   []string
		args  []string
		toLog bool
	}{
		{"run", nil, []string{"run", "--", "bash", "-c", testkit.OrderScript}, false},
		{"run without limits", []string{"CORRAL_MEMORY_MB=0", "CORRAL_MAX_PROCS=0"}, []string{"run", "--", "bash", "-c", testkit.OrderScript}, false},
		{"run into a file", nil, []string{"run", "--", "bash", "-c", testkit.OrderScript}, true},
		{"session", nil, []string{"run", "--session", "order", "--", testkit.OrderScript}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 3; i++ {
				cmd := exec.Command(corralBin, tc.args...)
				cmd.Dir = c.work
				cmd.Env = append(append([]string{}, c.env...), tc.env...)
				var both bytes.Buffer
				var log *os.File
				if tc.toLog {
					var err error
					if log, err = os.Create(filepath.Join(t.TempDir(), "log")); err != nil {
						t.Fatal(err)
					}
					cmd.Stdout, cmd.Stderr = log, log
				} else {
					cmd.Stdout, cmd.Stderr = &both, &both // os/exec: one pipe for both
				}
				err := cmd.Run()
				if log != nil {
					b, rerr := os.ReadFile(log.Name())
					log.Close()
					if rerr != nil {
						t.Fatal(rerr)
					}
					both.Write(b)
				}
				if err != nil || both.String() != testkit.OrderWant() {
					t.Fatalf("try %d: %v; the lines are not in the order written:\n%.600s", i, err, both.String())
				}
			}
		})
	}
}
