package corral

import (
	"slices"
	"testing"

	"github.com/corralhq/corral/config"
)

// TestBackendsUsed: readiness checks the backend setting (its default
// when unset) and every route's backend, each once, in the registry's
// order.
func TestBackendsUsed(t *testing.T) {
	for _, c := range []struct {
		name string
		st   config.Settings
		want []string
	}{
		{"unset is the default", config.Settings{}, []string{config.DefaultBackend()}},
		{"the setting", config.Settings{Backend: "docker"}, []string{"docker"}},
		{"routes add theirs", config.Settings{Backend: "bwrap", Routes: []config.Route{{Sessions: "k:*", Backend: "kubernetes"}, {Sessions: "d:*", Backend: "docker"}, {Sessions: "x", Backend: "docker"}}},
			[]string{"bwrap", "docker", "kubernetes"}},
		{"a route without a backend adds none", config.Settings{Backend: "local", Routes: []config.Route{{Sessions: "*", Profile: "network"}}}, []string{"local"}},
	} {
		if got := backendsUsed(&c.st); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
