//go:build corralbench

package netproxy

// SetScrubbing turns the scrubbing of secrets' hosts' answers on or off,
// so that bench/scrubbench can measure what it costs on the same server.
// It exists only in builds with -tags corralbench: corral itself never
// has a way to turn scrubbing off.
func (s *Server) SetScrubbing(on bool) { s.noScrub.Store(!on) }
