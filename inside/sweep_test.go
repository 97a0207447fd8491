package inside

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/reaper"
)

func TestOrphans(t *testing.T) {
	// 10 is a live reaper with a command below it; 20 a dead reaper's
	// orphan with a child.
	desc := []reaper.Proc{{Pid: 10, PPid: 1}, {Pid: 20, PPid: 1}, {Pid: 11, PPid: 10}, {Pid: 21, PPid: 20}, {Pid: 12, PPid: 11}}
	var got []int
	for _, p := range orphans(1, map[int]bool{10: true}, desc) {
		got = append(got, p.Pid)
	}
	if !slices.Equal(got, []int{20, 21}) {
		t.Errorf("orphans = %v, want [20 21]", got)
	}
}

// TestReaperKilled: a command that SIGKILLs its own reaper gets status
// 125, and what it started is swept by the helper (a subreaper too).
func TestReaperKilled(t *testing.T) {
	becomeSubreaper()
	m := fmt.Sprint(7000000 + os.Getpid()%100000)
	ex := runCommand(command{Argv: []string{"sh", "-c", `setsid sleep ` + m + ` & sleep ` + m + ` & kill -KILL $PPID; wait`}, Env: os.Environ()},
		func(byte, []byte) error { return nil }, nil)
	if ex.Code != 125 {
		t.Errorf("exit %+v, want 125", ex)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var left []string
		files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ") == "sleep "+m {
				left = append(left, f)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, f := range left {
				st, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "stat"))
				t.Logf("%s", st)
			}
			t.Logf("self %d", os.Getpid())
			t.Fatalf("left running: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
