package inside

import (
	"os"
	"os/exec"
	"testing"
)

// TestAgentsCountsOthers: ModeAgents counts the agents in the container
// but those of one owner (--except-owner: the mark agentFor puts on every
// agent of one corral process, so that one of its own that is still
// ending is never taken for another corral's) and one pid (--except). It
// runs in a PID namespace of its own (unshare(1)), where the agents it
// starts are all there is to count.
func TestAgentsCountsOthers(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is needed for a PID namespace of the test's own")
	}
	// Each agent waits for frames on a pipe that stays open; the script
	// waits (bounded) until all three have started before counting.
	script := `
agent() { sleep 600 | "$EXE" ` + ModeAgent + ` --owner "$1" >/dev/null & }
agent mine; agent mine; agent theirs
for i in $(seq 600); do [ "$("$EXE" ` + ModeAgents + `)" = 3 ] && break; sleep 0.1; done
a=$(pgrep -f -- "__corral-agen[t] --owner mine" | head -1)
echo "all $("$EXE" ` + ModeAgents + `)"
echo "not-mine $("$EXE" ` + ModeAgents + ` --except-owner mine)"
echo "not-theirs-not-a $("$EXE" ` + ModeAgents + ` --except-owner theirs --except "$a")"
echo "not-a $("$EXE" ` + ModeAgents + ` --except "$a")"
pkill sleep
`
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "EXE="+exe)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unshare: %v\n%s", err, out)
	}
	if want := "all 3\nnot-mine 1\nnot-theirs-not-a 1\nnot-a 2\n"; string(out) != want {
		t.Errorf("counts:\n%s\nwant:\n%s", out, want)
	}
}
