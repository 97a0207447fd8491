package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral"
)

// TestVersion: --version and `version` print one line naming the version
// and toolchain, and `version --json` the build information, as the
// executable's own build info (`go version -m`) has it. A build stamped
// from this repository (-buildvcs=true) names its revision.
func TestVersion(t *testing.T) {
	c := newCLI(t)
	code, out, errOut := c.run(nil, "--version")
	if code != 0 || !strings.HasPrefix(out, "corral ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, " go1.") {
		t.Errorf("--version: %d %q %q", code, out, errOut)
	}
	if code, out2, _ := c.run(nil, "version"); code != 0 || out2 != out {
		t.Errorf("version: %d %q, --version said %q", code, out2, out)
	}
	code, js, errOut := c.run(nil, "version", "--json")
	var b corral.BuildInfo
	if err := json.Unmarshal([]byte(js), &b); code != 0 || err != nil || b.Version == "" || !strings.HasPrefix(b.GoVersion, "go1.") {
		t.Fatalf("version --json: %d %v %q %q", code, err, js, errOut)
	}
	if mv, err := exec.Command("go", "version", "-m", corralBin).Output(); err == nil {
		if rev := settingOf(string(mv), "vcs.revision"); rev != b.Revision {
			t.Errorf("version --json revision %q, the build info says %q", b.Revision, rev)
		}
	}

	// A build stamped from the repository names its commit.
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git to stamp a build with")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Logf("not in a git checkout (%v): the stamped build is not checked", err)
		return
	}
	bin := filepath.Join(t.TempDir(), "corral")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	out3, err := exec.Command(bin, "version", "--json").Output()
	if err != nil || json.Unmarshal(out3, &b) != nil || b.Revision != strings.TrimSpace(string(head)) || b.Time == "" {
		t.Errorf("stamped build: %v %q, want revision %s", err, out3, head)
	}
	if line, _ := exec.Command(bin, "--version").Output(); !strings.Contains(string(line), "("+b.Revision[:12]) {
		t.Errorf("stamped --version %q does not name %s", line, b.Revision[:12])
	}
}

// settingOf returns a build setting's value from `go version -m` output.
func settingOf(mv, key string) string {
	for line := range strings.SplitSeq(mv, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "build" && strings.HasPrefix(f[1], key+"=") {
			return strings.TrimPrefix(f[1], key+"=")
		}
	}
	return ""
}
