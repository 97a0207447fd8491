// Command corral-helper is corral's helper modes alone: what runs inside a
// sandbox, container or pod (the agent, relay, pause, prepare, kill, tar
// and untar of package inside; the pod tunnel; the allowlist's forwarder
// and trampoline; the file server; the port relay; the git credential
// helper), linked without the CLI, the backends' clients (client-go, the
// moby client), the MCP SDK or net/http, so that it is a fraction of
// corral's executable in size and start-up (docs/benchmarks.md). Every
// mode is the same code corral's own executable runs for it (package
// reexec): corral can hand a sandbox either.
//
// It is started by corral, never by hand: without a mode in its arguments
// or environment it says so and exits with status 2.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/corralhq/corral/reexec"

	// The modes that run inside sandboxes, registered at init; the same
	// list as cmd/corral's helperPackages test (deps_test.go) checks.
	_ "github.com/corralhq/corral/egress/inside"
	_ "github.com/corralhq/corral/inside"
	_ "github.com/corralhq/corral/inside/tunnel"
	_ "github.com/corralhq/corral/portfwd"
	_ "github.com/corralhq/corral/sandboxfs"
	_ "github.com/corralhq/corral/secrets/gitcred"
)

func main() {
	reexec.Init()
	fmt.Fprintf(os.Stderr, "corral-helper: no helper mode in the arguments or environment: corral starts it, with one of %s\n", strings.Join(reexec.Modes(), ", "))
	os.Exit(2)
}
