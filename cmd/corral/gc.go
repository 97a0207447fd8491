package main

import (
	"os"
	"runtime/debug"
)

// serverGCPercent is the garbage collector's target (runtime/debug
// SetGCPercent: the heap may grow by this percentage of the live heap
// before the next collection) for the verbs that serve many calls in one
// process, mcp and serve. Each MCP call allocates about 0.5 MB, half of
// it in the MCP SDK's decoders (a new 32 KiB buffer per value), so at
// Go's default of 100 a server of a ~10 MB live heap collected every few
// calls, concurrently with the command it was starting. At 400, measured
// with `bash true` calls as the plain user (docs/benchmarks.md): 8.56 ->
// 8.33 ms a call, and a peak resident set of 33 -> 46 MB.
const serverGCPercent = 400

// tuneServerGC sets serverGCPercent unless the user set GOGC, which then
// stands as the runtime read it.
func tuneServerGC() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	debug.SetGCPercent(serverGCPercent)
}
