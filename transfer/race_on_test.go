//go:build race

package transfer

// raceDetector says the test binary runs under the race detector, whose
// shadow memory and bookkeeping add to a process's RSS (about 3x here).
const raceDetector = true
