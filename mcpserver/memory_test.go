package mcpserver

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// peakRSS returns the peak resident set size of process pid in KiB
// (VmHWM, proc(5)).
func peakRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return n
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestServeMemoryBounded: a gigabyte of output from one command, in the
// foreground and in the background (read through bash_output), leaves
// `corral serve` under 64 MiB of resident memory: output is kept as a head
// and a tail of output_limit, never whole.
func TestServeMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a gigabyte through corral serve (-short)")
	}
	c := newCLIEnv(t, "profile: workspace\ncpu_seconds: 0\n")
	// A timeout no loaded machine reaches: a command that ran must not be
	// reported as timed out.
	p := c.serve(t, []string{"CORRAL_TIMEOUT=900"}, "--listen", "127.0.0.1:0")
	cs, err := p.connect(t, "")
	if err != nil {
		t.Fatal(err)
	}
	const gig = "head -c 1073741824 /dev/zero | tr '\\0' 'x'"
	r := bash(t, cs, gig+"; echo; echo done")
	if !strings.HasSuffix(r.str("output"), "done\n") || r.num("output_bytes") < 1<<30 {
		t.Fatalf("foreground gigabyte: %d bytes, output ends %q", int64(r.num("output_bytes")), tailOf(r.str("output"), 40))
	}
	bg := callTool(t, cs, "bash", map[string]any{"command": gig + "; echo; echo bg-done", "background": true}).ok(t)
	id := bg.str("id")
	deadline := time.Now().Add(5 * time.Minute)
	offset := 0.0
	for {
		o := callTool(t, cs, "bash_output", map[string]any{"id": id, "offset": offset}).ok(t)
		if n := o.num("next_offset"); n > offset {
			offset = n
		}
		if running, _ := o.data["running"].(bool); !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background gigabyte did not end in 5 minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if kib := peakRSS(t, p.cmd.Process.Pid); kib > 64<<10 {
		t.Errorf("corral serve peaked at %d MiB of resident memory after 2 GiB of output, want under 64 MiB", kib>>10)
	} else {
		t.Logf("corral serve peaked at %d MiB", kib>>10)
	}
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
