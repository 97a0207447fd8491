//go:build !race

package transfer

// raceDetector says the test binary runs under the race detector.
const raceDetector = false
