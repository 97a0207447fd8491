package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/corralhq/corral/backend/bwrap"
)

// TestDoctorMemory: doctor says which kind of memory limit holds for this
// caller (the whole command in a memory cgroup, as root on this machine's
// cgroup v1; RLIMIT_DATA per process, with the reason, for an
// unprivileged user here), for the configured memory_mb.
func TestDoctorMemory(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	env := []string{"CORRAL_MEMORY_MB=300"}
	code, so, se := c.run(env, "doctor", "--json")
	var rep struct {
		Memory string `json:"memory"`
	}
	if err := json.Unmarshal([]byte(so), &rep); err != nil {
		t.Fatalf("doctor --json: exit %d, %v\n%s%s", code, err, so, se)
	}
	// The doctor runs in this test's cgroup as this test's user.
	want := bwrap.MemoryLimit(nil, 300)
	if rep.Memory != want {
		t.Errorf("doctor memory = %q, want %q", rep.Memory, want)
	}
	if !strings.HasPrefix(want, "memory: 300 MiB for the whole command (cgroup v") &&
		!strings.HasPrefix(want, "memory: 300 MiB of memory per process (RLIMIT_DATA); no cgroup memory controller corral can use (") {
		t.Errorf("MemoryLimit = %q: neither kind", want)
	}
	_, so, _ = c.run(env, "doctor")
	if !strings.Contains(so, "     "+want+"\n") {
		t.Errorf("doctor text lacks %q:\n%s", want, so)
	}
}
