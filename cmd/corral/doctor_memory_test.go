package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/corralhq/corral/backend/bwrap"
)

// TestDoctorMemory: doctor says which bound holds memory_mb for this
// caller (the whole sandbox in a memory cgroup, as root on this machine's
// cgroup v1; RLIMIT_DATA per process, with the reason and what would give
// a cgroup, for an unprivileged user here), and never RLIMIT_AS.
func TestDoctorMemory(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	env := []string{"CORRAL_MEMORY_MB=300"}
	code, so, se := c.run(env, "doctor", "--json")
	var rep struct {
		Memory     string `json:"memory"`
		MemoryKind string `json:"memory_kind"`
	}
	if err := json.Unmarshal([]byte(so), &rep); err != nil {
		t.Fatalf("doctor --json: exit %d, %v\n%s%s", code, err, so, se)
	}
	// The doctor runs in this test's cgroup as this test's user.
	want := bwrap.DiagnoseMemory(nil, 300)
	if rep.Memory != want.Line || rep.MemoryKind != want.Kind {
		t.Errorf("doctor memory = %q (%s), want %q (%s)", rep.Memory, rep.MemoryKind, want.Line, want.Kind)
	}
	switch want.Kind {
	case bwrap.MemoryCgroupV1, bwrap.MemoryCgroupV2:
		if !strings.HasPrefix(want.Line, "memory: cgroup v") || !strings.Contains(want.Line, " 300 MiB for the whole sandbox") {
			t.Errorf("MemoryLimit = %q", want.Line)
		}
	case bwrap.MemoryRlimitData:
		if !strings.HasPrefix(want.Line, "memory: RLIMIT_DATA 300 MiB per process (no memory cgroup for this user: ") ||
			!strings.Contains(want.Line, "a memory bomb is held per process, not in total") {
			t.Errorf("MemoryLimit = %q", want.Line)
		}
	default:
		t.Errorf("memory kind %q (%q): neither a cgroup nor RLIMIT_DATA", want.Kind, want.Line)
	}
	if strings.Contains(want.Line, "RLIMIT_AS") || strings.Contains(want.Line, "address space") {
		t.Errorf("MemoryLimit = %q: RLIMIT_AS is never the bound", want.Line)
	}
	_, so, _ = c.run(env, "doctor")
	if !strings.Contains(so, "     "+want.Line+"\n") {
		t.Errorf("doctor text lacks %q:\n%s", want.Line, so)
	}
}
