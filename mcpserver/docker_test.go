package mcpserver

import (
	"strings"
	"testing"

	"github.com/corralhq/corral/backend/docker"
	"github.com/corralhq/corral/internal/dockertest"
)

// TestToolsOnDocker: every kind of tool runs in the session's container:
// bash, run_code (its script written in the container, not in the host's
// scratch directory), and the file tools.
func TestToolsOnDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("docker test (-short)")
	}
	eng := dockertest.Engine(t)
	f := newFixture(t)
	st := docker.DefaultSettings
	st.Image = dockertest.Image(t, eng)
	e := docker.NewEngine(docker.Options{Helper: dockertest.StaticHelper(t)})
	t.Cleanup(func() { e.Close() })
	f.mu.Lock()
	f.spec.Backend = e.Backend(st)
	f.mu.Unlock()
	cs := f.connect(nil)
	if r := bash(t, cs, "test -e /.corral/corral && echo in-container").ok(t); !strings.Contains(r.str("output"), "in-container") {
		t.Errorf("bash: %+v", r)
	}
	r := callTool(t, cs, "run_code", map[string]any{"language": "python", "code": "import os\nprint('py', os.getcwd())"}).ok(t)
	if !strings.Contains(r.str("output"), "py "+f.work) {
		t.Errorf("run_code: %+v", r)
	}
	if r := bash(t, cs, "ls /tmp/.corral-code | wc -l").ok(t); strings.TrimSpace(r.str("output")) != "0" {
		t.Errorf("run_code left its script: %+v", r)
	}
	callTool(t, cs, "write_file", map[string]any{"path": "a.txt", "content": "alpha\n"}).ok(t)
	if r := callTool(t, cs, "read_file", map[string]any{"path": "a.txt"}).ok(t); !strings.Contains(r.str("content"), "alpha") {
		t.Errorf("read_file: %+v", r)
	}
}
