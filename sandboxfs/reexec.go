package sandboxfs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/netproxy"
)

// EnvServe, set to "serve" in the environment of corral's own executable,
// makes it run the file server on stdin and stdout instead of its main
// (the reexec pattern, as in Docker's pkg/reexec). EnvWritable carries the
// writable roots as a JSON list; EnvProtect the protected paths as a JSON
// object {"roots": [...], "patterns": [...]} (see sandbox.Request.Protected).
const (
	EnvServe    = "CORRAL_SANDBOXFS"
	EnvWritable = "CORRAL_SANDBOXFS_WRITABLE"
	EnvProtect  = "CORRAL_SANDBOXFS_PROTECT"
)

// protectSpec is what EnvProtect carries: the directories (as the sandbox
// sees them) at whose top the patterns apply.
type protectSpec struct {
	Roots    []string `json:"roots"`
	Patterns []string `json:"patterns"`
}

func init() {
	if os.Getenv(EnvServe) != "serve" {
		return
	}
	if len(os.Args) > 1 && (os.Args[1] == netproxy.ForwarderArg || os.Args[1] == netproxy.TrampolineArg) {
		// Under the allowlist profile the server runs behind the proxy
		// forwarder and its trampoline, which are corral's executable too
		// and see the same environment: they dispatch in package egress.
		return
	}
	var roots []string
	_ = json.Unmarshal([]byte(os.Getenv(EnvWritable)), &roots)
	s := &server{}
	for _, r := range roots {
		if filepath.IsAbs(r) {
			s.writable = append(s.writable, filepath.Clean(r))
		}
	}
	var prot protectSpec
	if err := json.Unmarshal([]byte(os.Getenv(EnvProtect)), &prot); err != nil && os.Getenv(EnvProtect) != "" {
		fmt.Fprintln(os.Stderr, "sandboxfs: bad", EnvProtect+":", err)
		os.Exit(1)
	}
	s.protectRoots, s.patterns = resolveRoots(prot.Roots), prot.Patterns
	os.Unsetenv(EnvServe)
	os.Unsetenv(EnvWritable)
	os.Unsetenv(EnvProtect)
	if err := s.serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sandboxfs:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
