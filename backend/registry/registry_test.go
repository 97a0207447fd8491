package registry

import (
	"slices"
	"testing"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/sandbox"
)

type nopInstance struct{}

func (nopInstance) Backend(*config.Settings) (sandbox.Backend, error) { return nil, nil }
func (nopInstance) Close() error                                      { return nil }

func nop(Deps) Instance { return nopInstance{} }

// TestRegister: drivers are found by name and listed sorted; a name
// taken twice, an empty or upper-case name and a driver without Open are
// a program's bug and panic at its start.
func TestRegister(t *testing.T) {
	Register(&Driver{Name: "zeta", Open: nop})
	Register(&Driver{Name: "alpha", Open: nop})
	if d, ok := Lookup("zeta"); !ok || d.Name != "zeta" {
		t.Errorf("Lookup(zeta) = %v, %v", d, ok)
	}
	if _, ok := Lookup("nosuch"); ok {
		t.Error("Lookup(nosuch) found one")
	}
	if got := Names(); !slices.Equal(got, []string{"alpha", "zeta"}) {
		t.Errorf("Names() = %q", got)
	}
	for _, bad := range []Driver{{Name: "zeta", Open: nop}, {Name: "", Open: nop}, {Name: "Beta", Open: nop}, {Name: "beta"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q, open %v) did not panic", bad.Name, bad.Open != nil)
				}
			}()
			Register(&bad)
		}()
	}
	if got, want := (&UnknownError{Name: "x"}).Error(), `unknown backend "x" (want alpha or zeta)`; got != want {
		t.Errorf("UnknownError = %q, want %q", got, want)
	}
}

func TestOrList(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{{nil, ""}, {[]string{"a"}, "a"}, {[]string{"a", "b"}, "a or b"}, {[]string{"a", "b", "c"}, "a, b or c"}} {
		if got := orList(tc.in); got != tc.want {
			t.Errorf("orList(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestUses: the backend setting or any route's backend uses a backend.
func TestUses(t *testing.T) {
	st := config.Defaults()
	st.Backend = "bwrap"
	st.Routes = []config.Route{{Sessions: "tg:*", Backend: "docker"}, {Sessions: "x"}}
	for name, want := range map[string]bool{"bwrap": true, "docker": true, "kubernetes": false, "": false} {
		if got := Uses(st, name); got != want {
			t.Errorf("Uses(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestSecretCarriers: the carriers are the flagged drivers, sorted.
func TestSecretCarriers(t *testing.T) {
	saved := drivers
	defer func() { drivers = saved }()
	drivers = nil
	for _, d := range []*Driver{{Name: "zeta", Secrets: true}, {Name: "plain"}, {Name: "alpha", Secrets: true}} {
		d.next, drivers = drivers, d
	}
	if got := SecretCarriers(); !slices.Equal(got, []string{"alpha", "zeta"}) {
		t.Errorf("SecretCarriers() = %q", got)
	}
}
