package bwrap

import (
	"errors"
	"testing"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/egress"
)

// TestInstance: the bwrap driver's instance keeps one Backend per bwrap
// path, run_as and settings file, and builds none after Close (a command
// that races the Host's Close gets an error, not a Backend nobody
// closes).
func TestInstance(t *testing.T) {
	d, ok := registry.Lookup(Name)
	if !ok || !d.Default {
		t.Fatalf("bwrap not registered as the default backend: %v %v", d, ok)
	}
	in := d.Open(registry.Deps{StateDir: t.TempDir(), Egress: func() *egress.Pool { return nil }, Helper: func(bool) string { return "" }})
	st := config.Defaults()
	a, err := in.Backend(st)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := in.Backend(st); b != a {
		t.Error("a second Backend for the same settings is another")
	}
	other := st.Clone()
	other.RunAs = "nobody"
	if b, _ := in.Backend(other); b == a {
		t.Error("another run_as got the same Backend")
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Backend(st); !errors.Is(err, errInstanceClosed) {
		t.Errorf("Backend after Close: %v", err)
	}
}
