package main

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// serverGCPercent is the garbage collector's target (runtime/debug
// SetGCPercent: the heap may grow by this percentage of the live heap
// before the next collection) for the verbs that serve many calls in one
// process, mcp and serve, while the live heap is small. Each MCP call
// allocates about 0.5 MB, half of it in the MCP SDK's decoders (a new
// 32 KiB buffer per value), so at Go's default of 100 a server of a ~10 MB
// live heap collected every few calls, concurrently with the command it
// was starting. At 400, measured with `bash true` calls as the plain user
// (docs/benchmarks.md): 8.56 -> 8.33 ms a call, peak resident set 33 ->
// 46 MB.
const serverGCPercent = 400

// serverGCHeadroom bounds what the raised target may add: the heap grows
// by at most this many bytes beyond the live heap before a collection,
// and never by less than Go's default 100%. A server holding much (many
// sessions, large outputs) collects as Go's default would.
const serverGCHeadroom = 64 << 20

// gcPercentFor returns the collector's target for a live heap of live
// bytes: serverGCPercent, lowered so that live*percent/100 stays within
// serverGCHeadroom, and no lower than 100.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return serverGCPercent
	}
	p := uint64(serverGCHeadroom) * 100 / live
	switch {
	case p > serverGCPercent:
		return serverGCPercent
	case p < 100:
		return 100
	}
	return int(p)
}

// tuneServerGC keeps the collector's target at gcPercentFor the live heap,
// read every second (runtime/metrics /gc/heap/live:bytes, as of the last
// collection) until ctx ends, unless the user set GOGC, which then stands
// as the runtime read it.
func tuneServerGC(ctx context.Context) {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	cur := -1
	apply := func() {
		if p := gcPercentFor(liveHeap()); p != cur {
			debug.SetGCPercent(p)
			cur = p
		}
	}
	apply()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				apply()
			}
		}
	}()
}

// liveHeap returns the bytes of heap the last collection found live (0
// before the first).
func liveHeap() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		return sample[0].Value.Uint64()
	}
	return 0
}
