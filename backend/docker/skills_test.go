package docker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/sandbox"
)

// TestSkills: a skill directory of the home directory is shown read-only
// in the container at its host path, the rest of its dot entry not at all.
func TestSkills(t *testing.T) {
	f := newFixture(t, nil)
	// A home of its own, the caller's (the container runs as the caller).
	home := dockertest.TestDir(t)
	t.Setenv("HOME", home)
	skills := filepath.Join(home, ".agents", "skills")
	if err := os.MkdirAll(filepath.Join(skills, "hello"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skills, "hello", "run.sh"), []byte("echo skill-ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".agents", "secret.txt"), []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, out := f.run("skills", `sh `+filepath.Join(skills, "hello", "run.sh")+`; touch `+filepath.Join(skills, "x")+` 2>&1 | grep -o 'Read-only file system'; cat `+filepath.Join(home, ".agents", "secret.txt")+` 2>&1 | grep -o 'No such file'`,
		func(r *sandbox.Request) { r.Skills = []string{skills} })
	if out != "skill-ran\nRead-only file system\nNo such file\n" {
		t.Errorf("skills in the container: %q", out)
	}
}
