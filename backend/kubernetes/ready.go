package kubernetes

import (
	"context"
	"errors"
	"strings"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
)

// Ready reports whether the backend can take work under st, for a
// readiness probe: doctor's Diagnose without its NetworkPolicy probe pod
// (the API server's /version, the namespace, a SelfSubjectAccessReview for
// each of Permissions, the runtime classes: about 15 API requests), then
// readyError. The caller bounds ctx and caches the answer.
func (e *Engine) Ready(ctx context.Context, st Settings) error {
	return readyError(e.Diagnose(ctx, st, false))
}

// readyError is the readiness decision on a diagnosis (pure): ready when
// Verdict found no problem (valid settings, the API server answers, the
// namespace is not known to be missing, every permission of Permissions
// held, the runtime class named is the cluster's); warnings (NetworkPolicy
// not enforced, RuntimeDefault seccomp) do not make it unready, as they
// do not stop doctor. Otherwise the error lists the problems.
func readyError(d *Diagnosis) error {
	if len(d.Problems) == 0 {
		return nil
	}
	return errors.New("kubernetes: " + strings.Join(d.Problems, "; "))
}

// ready is registry.Driver.Ready.
func ready(ctx context.Context, in registry.Instance, st *config.Settings) error {
	i, ok := in.(*instance)
	if !ok {
		return errors.New("kubernetes: no engine")
	}
	return i.e.Ready(ctx, SettingsOf(st))
}
