package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDoctorBrokenSettings: doctor, which now probes through the Host,
// still reports on a machine whose settings file is broken: the settings'
// error (naming the key), not ready, and the sandbox and the Docker engine
// probed all the same (with the defaults).
func TestDoctorBrokenSettings(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	cfg := filepath.Join(c.home, "broken.yaml")
	if err := os.WriteFile(cfg, []byte("memory_mb: lots\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, so, se := c.run([]string{"CORRAL_CONFIG=" + cfg}, "doctor", "--json")
	var rep struct {
		Ready       bool   `json:"ready"`
		ConfigError string `json:"config_error"`
		Backend     string `json:"backend"`
		Bwrap       struct {
			ProbeOK bool `json:"probe_ok"`
		} `json:"bwrap"`
		Docker struct {
			Host string `json:"host"`
		} `json:"docker"`
	}
	if err := json.Unmarshal([]byte(so), &rep); err != nil {
		t.Fatalf("doctor --json: exit %d, %v\n%s%s", code, err, so, se)
	}
	if code != 1 || rep.Ready || !strings.Contains(rep.ConfigError, "memory_mb") {
		t.Errorf("doctor with a broken settings file: exit %d, ready %v, config_error %q; want 1, false, an error naming memory_mb", code, rep.Ready, rep.ConfigError)
	}
	if !rep.Bwrap.ProbeOK || rep.Docker.Host == "" || rep.Backend != "bwrap" {
		t.Errorf("doctor with a broken settings file did not probe the defaults: probe %v, docker host %q, backend %q\n%s", rep.Bwrap.ProbeOK, rep.Docker.Host, rep.Backend, so)
	}
}

// TestDegradedModeDeprecated: degraded_mode has no effect (corral never
// runs a command unsandboxed), yet a settings file naming it still loads
// and is used; config set and doctor say it is ignored, and doctor's
// verdict does not change for it.
func TestDegradedModeDeprecated(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	cfg := filepath.Join(c.home, "old.yaml")
	env := []string{"CORRAL_CONFIG=" + cfg}
	code, _, se := c.run(env, "config", "set", "degraded_mode", "fail")
	if code != 0 || !strings.Contains(se, "corral: warning: degraded_mode is deprecated and has no effect: corral never runs a command outside its sandbox") {
		t.Errorf("config set degraded_mode fail: exit %d, stderr %q; want 0 and the warning", code, se)
	}
	if code, so, se := c.run(env, "config", "get", "degraded_mode"); code != 0 || strings.TrimSpace(so) != "fail" {
		t.Errorf("config get degraded_mode: exit %d, %q %q; want fail", code, so, se)
	}
	if code, so, se := c.run(env, "run", "--", "echo", "ran"); code != 0 || so != "ran\n" {
		t.Errorf("run with degraded_mode set: exit %d, %q %q; want the command run", code, so, se)
	}
	code, so, se := c.run(env, "doctor")
	want := "warn settings: degraded_mode (set in " + cfg + ") has no effect: "
	if code != 0 || !strings.Contains(so, want) {
		t.Errorf("doctor with degraded_mode set: exit %d, want 0 and %q:\n%s%s", code, want, so, se)
	}
	// Unset, no warning.
	if code, _, se := c.run(env, "config", "unset", "degraded_mode"); code != 0 {
		t.Fatalf("config unset degraded_mode: exit %d %s", code, se)
	}
	if _, so, _ := c.run(env, "doctor"); strings.Contains(so, "degraded_mode") {
		t.Errorf("doctor without degraded_mode still warns of it:\n%s", so)
	}
}

// TestCleanupBrokenSettings: cleanup, which now works through the Host,
// still removes what a dead corral left when the settings file is
// broken, then fails naming the settings' error (the kubernetes part
// needs them), as before.
func TestCleanupBrokenSettings(t *testing.T) {
	c := newCLI(t)
	cfg := filepath.Join(c.home, "broken.yaml")
	if err := os.WriteFile(cfg, []byte("backend: nonsense\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(c.home, ".local", "state", "corral", "net", fmt.Sprintf("%d-1", dead.Process.Pid))
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	code, so, se := c.run([]string{"CORRAL_CONFIG=" + cfg}, "cleanup")
	if code != 125 || !strings.Contains(se, "backend") {
		t.Errorf("cleanup with a broken settings file: exit %d, stderr %q; want 125 naming the backend setting", code, se)
	}
	if _, err := os.Stat(left); err == nil || !strings.Contains(so, "removed "+left+"\n") {
		t.Errorf("cleanup with a broken settings file left %s (stat: %v):\n%s", left, err, so)
	}
}
