// Command reviewbench compares, in one run, a session in workspace_mode
// review with one in direct mode over the same project (by default 50,000
// files, 1 GB): the session's start (its first command: in review mode the
// layer's base is recorded and its overlay mounted) and a command after it
// (`true`, medians, interleaved). Targets (issue 15): at most 1.1x per
// command, a start under a second.
//
//	go run ./bench/reviewbench [-files 50000] [-mb 1024] [-n 100]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

func main() {
	reexec.Init() // the binary serves as the layer's holder, as corral does
	files := flag.Int("files", 50000, "files in the project")
	mb := flag.Int("mb", 1024, "the project's size in MiB")
	n := flag.Int("n", 100, "commands of each kind")
	flag.Parse()
	base, err := os.MkdirTemp("/var/tmp", "corral-reviewbench-*")
	check(err)
	defer os.RemoveAll(base)
	work := filepath.Join(base, "project")
	state := filepath.Join(base, "state")
	check(os.MkdirAll(state, 0o700))
	t0 := time.Now()
	makeProject(work, *files, int64(*mb)<<20)
	fmt.Printf("project: %d files, %d MiB (made in %s)\n", *files, *mb, time.Since(t0).Round(time.Millisecond))

	be := bwrap.New(bwrap.Options{StateDir: state})
	defer be.Close()
	spec := func(review bool) *session.Spec {
		return &session.Spec{Backend: be, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits, Workdir: work}, Timeout: time.Minute, Review: review, Env: []string{"PATH=/usr/bin:/bin", "HOME=" + base}}
	}
	m := session.NewManager(session.Options{StateDir: state, Resolve: func(name string) (*session.Spec, error) { return spec(name == "review"), nil }})
	defer m.Close()
	ctx := context.Background()
	run := func(s *session.Session) time.Duration {
		t := time.Now()
		r, err := s.Exec(ctx, session.ExecRequest{Command: "true"})
		if err != nil || r.ExitCode != 0 {
			check(fmt.Errorf("exec: %v %+v", err, r))
		}
		return time.Since(t)
	}
	direct, err := m.Open("direct")
	check(err)
	review, err := m.Open("review")
	check(err)
	startDirect := run(direct)
	startReview := run(review)
	var d, r []time.Duration
	for i := 0; i < *n; i++ {
		d = append(d, run(direct))
		r = append(r, run(review))
	}
	md, mr := median(d), median(r)
	fmt.Printf("session start, direct        %8.1f ms\n", ms(startDirect))
	fmt.Printf("session start, review        %8.1f ms  (target < 1000 ms)\n", ms(startReview))
	fmt.Printf("command median, direct       %8.2f ms\n", ms(md))
	fmt.Printf("command median, review       %8.2f ms\n", ms(mr))
	fmt.Printf("ratio (review/direct)        %8.2f  (target <= 1.10)\n", float64(mr)/float64(md))
}

// makeProject writes files files of total bytes under dir, 100 to a
// directory, the directories three levels deep (10 by 10 at the top, as a
// project's source tree grows: the protected-path scan reads the top two
// levels).
func makeProject(dir string, files int, total int64) {
	per := total / int64(max(files, 1))
	buf := make([]byte, per)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	for i := 0; i < files; i++ {
		n := i / 100
		d := filepath.Join(dir, fmt.Sprintf("a%d", n%10), fmt.Sprintf("b%d", n/10%10), fmt.Sprintf("c%d", n/100))
		if i%100 == 0 {
			check(os.MkdirAll(d, 0o755))
		}
		check(os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.txt", i%100)), buf, 0o644))
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "reviewbench:", err)
		os.Exit(1)
	}
}
