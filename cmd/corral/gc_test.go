package main

import (
	"context"
	"os"
	"runtime/debug"
	"testing"
)

// The servers' collector target: serverGCPercent for a small live heap,
// lowered to keep within serverGCHeadroom, never under Go's default.
func TestGCPercentFor(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, serverGCPercent},
		{1 << 20, serverGCPercent},
		{16 << 20, serverGCPercent},
		{32 << 20, 200},
		{48 << 20, 133},
		{64 << 20, 100},
		{1 << 30, 100},
	} {
		if got := gcPercentFor(tc.live); got != tc.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", tc.live>>20, got, tc.want)
		}
	}
}

// tuneServerGC sets the target unless GOGC is set.
func TestTuneServerGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Setenv("GOGC", "")
	debug.SetGCPercent(100)
	tuneServerGC(ctx)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, the target became %d, want it left at 100", got)
	}
	os.Unsetenv("GOGC") // t.Setenv above puts the value from before the test back
	// The target follows the live heap as the last collection found it,
	// whatever the tests before this one left (gcPercentFor is
	// table-tested): the one before the call, or a collection's during it.
	before := gcPercentFor(liveHeap())
	tuneServerGC(ctx)
	after := gcPercentFor(liveHeap())
	if got := debug.SetGCPercent(100); got != before && got != after {
		t.Errorf("without GOGC, the target is %d, want %d (gcPercentFor of the live heap)", got, before)
	}
}
