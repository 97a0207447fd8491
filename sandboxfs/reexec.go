package sandboxfs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// EnvServe, set to "serve" in the environment of corral's own executable,
// makes it run the file server on stdin and stdout instead of its main
// (the reexec pattern, as in Docker's pkg/reexec). EnvWritable carries the
// writable roots as a JSON list.
const (
	EnvServe    = "CORRAL_SANDBOXFS"
	EnvWritable = "CORRAL_SANDBOXFS_WRITABLE"
)

func init() {
	if os.Getenv(EnvServe) != "serve" {
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
	os.Unsetenv(EnvServe)
	os.Unsetenv(EnvWritable)
	if err := s.serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sandboxfs:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
