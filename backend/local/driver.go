package local

import (
	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/sandbox"
)

// Name is the local backend's name, the value of the backend setting that
// selects it.
const Name = "local"

// driver is the backend's entry in backend/registry.
var driver = registry.Driver{
	Doc:  "local (no sandbox, for debugging)",
	Name: Name,
	Open: func(d registry.Deps) registry.Instance { return instance{New(d.Logger)} },
}

func init() { registry.Register(&driver) }

// instance is the local backend in one Host: one Backend, which holds
// nothing between commands.
type instance struct{ b *Backend }

// Backend implements registry.Instance.
func (in instance) Backend(*config.Settings) (sandbox.Backend, error) { return in.b, nil }

// Close implements registry.Instance.
func (instance) Close() error { return nil }
