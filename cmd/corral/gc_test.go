package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// The servers' collector target is serverGCPercent, unless GOGC is set.
func TestTuneServerGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	debug.SetGCPercent(100)
	tuneServerGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, the target became %d, want it left at 100", got)
	}
	os.Unsetenv("GOGC") // t.Setenv above puts the value from before the test back
	tuneServerGC()
	if got := debug.SetGCPercent(100); got != serverGCPercent {
		t.Errorf("without GOGC, the target is %d, want %d", got, serverGCPercent)
	}
}
