package corral

import (
	"context"
	"time"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
)

// ReadyCheck is one line of [Host.Ready]: what was checked and, when it
// does not hold, why.
type ReadyCheck struct {
	// Name is "settings" (the settings file reads), or a backend's name
	// ("bwrap", "docker", "kubernetes").
	Name string
	// Err is nil when the check holds, else what is missing, worded for
	// a person (the backend's own error: its probe's cause, the engine's
	// address, the permissions not held).
	Err error
}

// ReadyCacheFor is how long [Host.Ready] keeps its answer: a storm of
// probes (several replicas' kubelets, a load balancer's checks) costs one
// round of checks every 3 s, not one each.
const ReadyCacheFor = 3 * time.Second

// ReadyTimeout bounds one round of Host.Ready's checks, all backends
// together.
const ReadyTimeout = 10 * time.Second

// readyState is the Host's cached readiness (guarded by its own mutex,
// held across a round of checks so that concurrent callers share one).
type readyState struct {
	at     time.Time
	checks []ReadyCheck
}

// Ready reports whether the Host can take work: the settings read, and
// each backend they use (the backend setting, else its default, and every
// route's backend) passes its driver's readiness check
// (registry.Driver.Ready: bwrap's probe sandbox, docker's engine ping,
// kubernetes' API server and permissions; a backend without one, local,
// always passes). Checks run one after another under ReadyTimeout,
// independent of ctx's cancellation (a caller that gives up does not
// spoil the answer others wait for), and the answer is kept for
// ReadyCacheFor. ok is true when every check holds.
func (h *Host) Ready(ctx context.Context) (checks []ReadyCheck, ok bool) {
	h.readyMu.Lock()
	defer h.readyMu.Unlock()
	if h.ready.checks != nil && time.Since(h.ready.at) < ReadyCacheFor {
		return h.ready.checks, allHold(h.ready.checks)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReadyTimeout)
	defer cancel()
	checks = h.readyChecks(ctx)
	h.logReadyChanges(h.ready.checks, checks)
	h.ready = readyState{at: time.Now(), checks: checks}
	return checks, allHold(checks)
}

// readyChecks runs one round of Ready's checks.
func (h *Host) readyChecks(ctx context.Context) []ReadyCheck {
	st, err := h.Settings()
	if err != nil {
		return []ReadyCheck{{Name: "settings", Err: err}}
	}
	out := []ReadyCheck{{Name: "settings"}}
	for _, name := range backendsUsed(st) {
		c := ReadyCheck{Name: name}
		d, found := registry.Lookup(name)
		in, err := h.Engine(name)
		switch {
		case !found || err != nil:
			c.Err = err
		case d.Ready != nil:
			c.Err = d.Ready(ctx, in, st)
		}
		out = append(out, c)
	}
	return out
}

// backendsUsed names the backends st uses, in the registry's order: the
// backend setting (its default when unset) and every route's backend.
// Pure.
func backendsUsed(st *config.Settings) []string {
	def := st.Backend
	if def == "" {
		def = config.DefaultBackend()
	}
	var out []string
	for _, name := range registry.Names() {
		if name == def || registry.Uses(st, name) {
			out = append(out, name)
		}
	}
	return out
}

// logReadyChanges logs host.ready.failed for a check that fails where it
// did not (or failed otherwise) in the round before, and
// host.ready.recovered for one that holds again: a probe every few
// seconds logs changes, not every round.
func (h *Host) logReadyChanges(before, now []ReadyCheck) {
	was := map[string]string{}
	for _, c := range before {
		if c.Err != nil {
			was[c.Name] = c.Err.Error()
		}
	}
	for _, c := range now {
		prev, failed := was[c.Name]
		switch {
		case c.Err != nil && (!failed || prev != c.Err.Error()):
			h.log.Warn("host.ready.failed", "check", c.Name, "error", c.Err)
		case c.Err == nil && failed:
			h.log.Info("host.ready.recovered", "check", c.Name)
		}
	}
}

func allHold(cs []ReadyCheck) bool {
	for _, c := range cs {
		if c.Err != nil {
			return false
		}
	}
	return true
}
