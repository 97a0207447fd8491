package docker

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRootCallerPersonsWorkspace: with docker.user "", a root caller's
// commands in a workspace that belongs to a person run as that person, so
// the container does not hold host uid 0 and what it writes is theirs.
func TestRootCallerPersonsWorkspace(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it tests what a root caller's container holds (CI runs it as root)")
	}
	f := newFixture(t, nil)
	if err := os.Chown(f.ws, 4242, 4243); err != nil {
		t.Fatal(err)
	}
	res, out := f.run("person", `id -u; id -g; touch made`)
	if res.ExitCode != 0 || out != "4242\n4243\n" {
		t.Fatalf("exit %d: %q, want uid 4242 and gid 4243", res.ExitCode, out)
	}
	st, err := os.Stat(filepath.Join(f.ws, "made"))
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 4242 {
		t.Errorf("a file the container made belongs to %d, want 4242", sys.Uid)
	}
}
