package corral

// Counts returns how many times the Host has checked its settings file
// for a change (a stat) and resolved a Spec, for tests that hold a front
// end's call to one of each.
func (h *Host) Counts() (stats, specs int64) { return h.stats.Load(), h.specs.Load() }
