package metrics

import (
	"bytes"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/procfs"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's start
// time: 100 on every Linux architecture Go supports (proc(5), "starttime";
// sysconf(_SC_CLK_TCK) returns this constant).
const clockTicks = 100

// RegisterProcess adds the process and Go families Prometheus's client
// libraries export under the same names (process_*, go_*; the "process
// metrics" of the client library guidelines, prometheus.io/docs/instrumenting/writing_clientlibs/),
// each read at scrape time from /proc/self, getrusage(2), getrlimit(2)
// and runtime/metrics, so that a process that never serves a scrape pays
// nothing for them:
//
//   - process_cpu_seconds_total: user and system CPU time, seconds;
//   - process_resident_memory_bytes, process_virtual_memory_bytes: from
//     /proc/self/statm, bytes;
//   - process_open_fds, process_max_fds: descriptors open, RLIMIT_NOFILE;
//   - process_start_time_seconds: the start, seconds since the epoch;
//   - go_goroutines, go_threads; go_memstats_heap_alloc_bytes (live heap
//     objects), go_gc_cycles_total; go_info{version}.
//
// A figure that cannot be read is left out of that scrape.
func RegisterProcess(r *Registry) {
	one := func(v float64, ok bool) []Sample {
		if !ok {
			return nil
		}
		return []Sample{{Value: v}}
	}
	r.CounterFunc("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", nil, func() []Sample {
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
			return nil
		}
		tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
		return []Sample{{Value: tv(ru.Utime) + tv(ru.Stime)}}
	})
	r.GaugeFunc("process_resident_memory_bytes", "Resident memory size in bytes.", nil, func() []Sample {
		_, rss, ok := statm()
		return one(float64(rss), ok)
	})
	r.GaugeFunc("process_virtual_memory_bytes", "Virtual memory size in bytes.", nil, func() []Sample {
		vsz, _, ok := statm()
		return one(float64(vsz), ok)
	})
	r.GaugeFunc("process_open_fds", "Number of open file descriptors.", nil, func() []Sample {
		ents, err := os.ReadDir("/proc/self/fd")
		return one(float64(len(ents)-1), err == nil) // less the descriptor of the listing itself
	})
	r.GaugeFunc("process_max_fds", "Maximum number of open file descriptors.", nil, func() []Sample {
		var rl syscall.Rlimit
		err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
		return one(float64(rl.Cur), err == nil)
	})
	r.GaugeFunc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", nil, func() []Sample {
		return one(startTime())
	})
	r.GaugeFunc("go_goroutines", "Number of goroutines that currently exist.", nil, func() []Sample {
		return []Sample{{Value: float64(runtime.NumGoroutine())}}
	})
	r.GaugeFunc("go_threads", "Number of OS threads created.", nil, func() []Sample {
		n, _ := runtime.ThreadCreateProfile(nil)
		return []Sample{{Value: float64(n)}}
	})
	r.GaugeFunc("go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and still in use.", nil, func() []Sample {
		return one(runtimeMetric("/memory/classes/heap/objects:bytes"))
	})
	r.CounterFunc("go_gc_cycles_total", "Number of completed GC cycles.", nil, func() []Sample {
		return one(runtimeMetric("/gc/cycles/total:gc-cycles"))
	})
	r.GaugeFunc("go_info", "Information about the Go environment.", []string{"version"}, func() []Sample {
		return []Sample{{Labels: []string{runtime.Version()}, Value: 1}}
	})
}

// runtimeMetric reads one uint64 metric of runtime/metrics.
func runtimeMetric(name string) (float64, bool) {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return float64(s[0].Value.Uint64()), true
}

// statm returns the virtual and resident sizes of /proc/self/statm, in
// bytes (its first two fields are pages).
func statm() (vsz, rss uint64, ok bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, 0, false
	}
	v, err1 := strconv.ParseUint(f[0], 10, 64)
	r, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	page := uint64(os.Getpagesize())
	return v * page, r * page, true
}

// startTime is the process's start, seconds since the epoch: its start
// in clock ticks after boot (/proc/self/stat) plus the boot time (btime
// of /proc/stat).
func startTime() (float64, bool) {
	ticks, ok := procfs.StartTime(os.Getpid())
	if !ok {
		return 0, false
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(b) {
		if rest, found := bytes.CutPrefix(line, []byte("btime ")); found {
			bt, err := strconv.ParseUint(string(bytes.TrimSpace(rest)), 10, 64)
			if err != nil {
				return 0, false
			}
			return float64(bt) + float64(ticks)/clockTicks, true
		}
	}
	return 0, false
}
