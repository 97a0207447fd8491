package bwrap

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// TestSkills: a skill directory in a hidden dot entry of the home directory
// is shown read-only at its own path; the rest of that dot entry stays
// hidden.
func TestSkills(t *testing.T) {
	e := newEnv(t)
	script := e.write(".agents/skills/hello/run.sh", "echo skill-ran\n")
	e.write(".agents/secret.txt", "s3cret\n")
	skills := filepath.Dir(filepath.Dir(script))
	o := e.sh(`sh `+script+`; touch `+filepath.Join(skills, "x")+` 2>&1 | grep -o 'Read-only file system'; cat `+filepath.Join(e.home, ".agents", "secret.txt")+` 2>&1 | grep -o 'No such file'`,
		func(r *sandbox.Request) { r.Skills = []string{skills} })
	if got := o.stdout; got != "skill-ran\nRead-only file system\nNo such file\n" {
		t.Errorf("skills: %q\n%s", got, o)
	}
	// Without the setting the skill stays hidden with its dot entry.
	o = e.sh(`sh ` + script + ` 2>&1 | grep -c 'No such file'`)
	if strings.TrimSpace(o.stdout) != "1" {
		t.Errorf("without skills: %s", o)
	}
}
