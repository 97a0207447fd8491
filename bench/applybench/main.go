// Command applybench compares, in one run, review mode's apply of many
// new small files (layer.Apply: checks, a journal, temporary files
// renamed into place, the filesystem synced, the layer cleaned) with
// `cp -a` of the same tree (issue 24: 100,000 files took 6 min 26 s;
// target at most 3x cp -a).
//
//	go run ./bench/applybench [-files 100000] [-per-dir 100] [-size 200] [-name-len 11] [-rounds 3] [-diff]
//
// One flat directory of long names (issue 24: 300,000 names of 250 bytes
// held 146 MiB in a diff when listed whole):
//
//	go run ./bench/applybench -files 300000 -per-dir 300000 -size 0 -name-len 250 -rounds 1 -diff
//
// Both start from a synced filesystem (sync(2) before each), so neither
// pays for the other's writes; cp -a is timed alone and with a sync
// after it (apply's own syncs make what it wrote durable). Each round
// makes a fresh layer; the ratio is of the medians.
//
// It prints the peak resident memory of each apply (and, with -diff, of
// a diff of the same layer before it, written to /dev/null): the peak
// (VmHWM) is reset before each (/proc/self/clear_refs, 5) and read after
// it, so that it counts what that step needed on top of what the process
// already held; issue 24 bounds it at 64 MiB whatever the number of files.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/layer"
)

func main() {
	files := flag.Int("files", 100000, "new files in the layer")
	perDir := flag.Int("per-dir", 100, "files per directory")
	size := flag.Int("size", 200, "bytes per file")
	nameLen := flag.Int("name-len", 11, "bytes per file name (at least 11, at most 255)")
	rounds := flag.Int("rounds", 3, "rounds (cp -a, then apply, each on a fresh copy); medians are compared")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the applies to this file")
	withDiff := flag.Bool("diff", false, "also time a diff of the layer (layer.DiffLayer to /dev/null) before each apply, with its peak memory")
	flag.Parse()
	dir := os.Getenv("CORRAL_TEST_DIR")
	if dir == "" {
		dir = "/var/tmp"
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		check(err)
		defer pprof.StopCPUProfile()
		check(pprof.StartCPUProfile(f))
	}
	var cps, syncs, applies []time.Duration
	for r := 0; r < *rounds; r++ {
		cp, cpSync, apply := round(dir, *files, *perDir, *size, *nameLen, r == 0, *withDiff)
		cps, syncs, applies = append(cps, cp), append(syncs, cpSync), append(applies, apply)
		fmt.Printf("round %d: cp -a %.2f s (then sync %.2f s), apply %.2f s\n", r+1, cp.Seconds(), cpSync.Seconds(), apply.Seconds())
	}
	fmt.Printf("peak RSS, most of any step   %8d MiB (target < 64)\n", maxPeak>>10)
	cp, apply := median(cps), median(applies)
	fmt.Printf("cp -a                median %8.2f s\n", cp.Seconds())
	fmt.Printf("cp -a, then sync     median %8.2f s\n", median(syncs).Seconds())
	fmt.Printf("apply                median %8.2f s\n", apply.Seconds())
	fmt.Printf("ratio (apply/cp -a)         %8.2f  (target <= 3)\n", apply.Seconds()/cp.Seconds())
}

// round makes a layer of files new files, then times cp -a of its tree
// (alone, and with a sync after) and the apply of the layer.
func round(dir string, files, perDir, size, nameLen int, say, withDiff bool) (cp, cpSync, apply time.Duration) {
	base, err := os.MkdirTemp(dir, "corral-applybench-*")
	check(err)
	defer os.RemoveAll(base)
	lower := filepath.Join(base, "lower")
	check(os.Mkdir(lower, 0o755))
	check(os.WriteFile(filepath.Join(lower, "README"), []byte("project\n"), 0o644))
	l := layer.New(filepath.Join(base, "layer"), lower)
	check(l.Ensure())
	t0 := time.Now()
	var content []byte
	if size > 0 {
		content = []byte(strings.Repeat("x", size-1) + "\n")
	}
	pad := strings.Repeat("n", min(max(nameLen, 11), 255)-11)
	for i := 0; i < files; i++ {
		d := filepath.Join(l.Upper(), "src", fmt.Sprintf("d%04d", i/perDir))
		if i%perDir == 0 {
			check(os.MkdirAll(d, 0o755))
		}
		check(os.WriteFile(filepath.Join(d, fmt.Sprintf("f%06d%s.txt", i, pad)), content, 0o644))
	}
	if say {
		fmt.Printf("layer: %d new files of %d bytes, names of %d bytes, %d to a directory (made in %s)\n", files, size, 11+len(pad), perDir, time.Since(t0).Round(time.Millisecond))
	}

	unix.Sync()
	t0 = time.Now()
	out, err := exec.Command("cp", "-a", filepath.Join(l.Upper(), "src"), filepath.Join(base, "cp-copy")).CombinedOutput()
	if err != nil {
		check(fmt.Errorf("cp -a: %v: %s", err, out))
	}
	cp = time.Since(t0)
	unix.Sync()
	cpSync = time.Since(t0)

	want := files + (files+perDir-1)/perDir + 1 // the files, their directories, src
	if withDiff {
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		check(err)
		resetPeak()
		t0 = time.Now()
		n, err := layer.DiffLayer(null, l, nil, layer.DiffOptions{})
		check(err)
		null.Close()
		fmt.Printf("diff  %.2f s, peak RSS %d MiB\n", time.Since(t0).Seconds(), peakKiB()>>10)
		maxPeak = max(maxPeak, peakKiB())
		if n != want {
			check(fmt.Errorf("diff of %d changes, want %d", n, want))
		}
	}
	resetPeak()
	t0 = time.Now()
	res, err := layer.Apply(l, nil, layer.ApplyOptions{Logger: log})
	check(err)
	apply = time.Since(t0)
	fmt.Printf("apply %.2f s, peak RSS %d MiB\n", apply.Seconds(), peakKiB()>>10)
	maxPeak = max(maxPeak, peakKiB())
	if res.AppliedTotal != want {
		check(fmt.Errorf("applied %d changes, want %d", res.AppliedTotal, want))
	}
	return cp, cpSync, apply
}

// maxPeak is the most any diff or apply's peak RSS reached, in KiB.
var maxPeak int

// resetPeak sets the process's peak RSS (VmHWM) to what it holds now
// (proc(5), /proc/pid/clear_refs, since Linux 4.0).
func resetPeak() {
	runtime.GC() // what the layer's making left is not counted
	debug.FreeOSMemory()
	check(os.WriteFile("/proc/self/clear_refs", []byte("5"), 0))
}

// peakKiB is VmHWM of /proc/self/status, in KiB.
func peakKiB() int {
	b, err := os.ReadFile("/proc/self/status")
	check(err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			check(err)
			return n
		}
	}
	check(fmt.Errorf("no VmHWM in /proc/self/status"))
	return 0
}

// log prints apply's event, with its phases' times.
var log = slog.New(slog.NewTextHandler(os.Stdout, nil))

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "applybench:", err)
		os.Exit(1)
	}
}
