package corral

// The backends corral has: the one list (issue 28). Each package
// registers itself with backend/registry from its init; a new backend is
// its folder and a line here (TestBackendBoundary fails on any other
// import of a backend's package outside its folder).
import (
	_ "github.com/corralhq/corral/backend/bwrap"
	_ "github.com/corralhq/corral/backend/docker"
	_ "github.com/corralhq/corral/backend/kubernetes"
	_ "github.com/corralhq/corral/backend/local"
)
