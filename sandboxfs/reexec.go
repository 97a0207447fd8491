package sandboxfs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/reexec"
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

// init registers the file server with reexec: corral's executable started
// with EnvServe=serve runs serveMain instead of its main. An argv helper
// (the allowlist profile's forwarder and trampoline, which run in front of
// the server and see the same environment) takes precedence.
func init() {
	reexec.RegisterEnv(EnvServe, "serve", serveMain)
}

// serveMain is the file server's entry point: it reads its settings from
// the environment (and removes them from it), then serves requests on
// standard input and output until standard input ends. It returns 0, or 1
// after printing the error on standard error.
func serveMain([]string) int {
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
		return 1
	}
	s.protectRoots, s.patterns = resolveRoots(prot.Roots), prot.Patterns
	os.Unsetenv(EnvServe)
	os.Unsetenv(EnvWritable)
	os.Unsetenv(EnvProtect)
	if err := s.serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sandboxfs:", err)
		return 1
	}
	return 0
}
