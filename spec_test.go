package corral_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// TestHostSpecReused: while the settings file is unchanged, a session's
// Spec is the one resolved before (no settings copy, policy, approval
// patterns or backend lookup again: 6 allocations here, not 41), handed
// out as a copy the caller may change; its skill directories are looked
// up at every call, so one made or removed between two commands shows at
// the second; a changed file resolves afresh; a closed Host refuses.
func TestHostSpecReused(t *testing.T) {
	project, state, cfg := hostDirs(t)
	skills := filepath.Join(filepath.Dir(project), "skills")
	writeSettings(t, cfg, "cwd: "+project+"\nprofile: workspace\nports: [8080]\nskills: ["+skills+"]\n")
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	spec := func() *session.Spec {
		t.Helper()
		sp, err := h.Spec("a")
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	first := spec()
	if len(first.Skills) != 0 {
		t.Errorf("skills before the directory exists: %q; want none", first.Skills)
	}
	if n := testing.AllocsPerRun(50, func() { spec() }); n > 10 {
		t.Errorf("Spec of a session under unchanged settings: %.0f allocations; want at most 10 (the Spec resolved before, copied)", n)
	}
	// The caller's copy is its own.
	first.Profile = sandbox.ProfileRestricted
	first.Ports[0] = 1
	if sp := spec(); sp.Profile != sandbox.ProfileWorkspace || !slices.Equal(sp.Ports, []int{8080}) {
		t.Errorf("after the caller changed its Spec: profile %q, ports %v; want workspace, [8080]", sp.Profile, sp.Ports)
	}
	if err := os.Mkdir(skills, 0o755); err != nil {
		t.Fatal(err)
	}
	if sp := spec(); !slices.Equal(sp.Skills, []string{skills}) {
		t.Errorf("skills after the directory was made: %q; want [%s]", sp.Skills, skills)
	}
	if err := os.Remove(skills); err != nil {
		t.Fatal(err)
	}
	if sp := spec(); len(sp.Skills) != 0 {
		t.Errorf("skills after the directory was removed: %q; want none", sp.Skills)
	}
	writeSettings(t, cfg, "cwd: "+project+"\nprofile: restricted\n")
	if sp := spec(); sp.Profile != sandbox.ProfileRestricted || len(sp.Ports) != 0 {
		t.Errorf("after the settings changed: profile %q, ports %v; want restricted, none", sp.Profile, sp.Ports)
	}
	h.Close()
	if _, err := h.Spec("a"); !errors.Is(err, session.ErrClosed) {
		t.Errorf("Spec after Close: %v; want session.ErrClosed", err)
	}
}

// TestSkillDirs: the skills setting's directories that exist, "~/"
// expanded, symlinks resolved; a missing path, a file and a dangling
// symlink are left out.
func TestSkillDirs(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	real := filepath.Join(home, "real")
	for _, d := range []string{filepath.Join(home, ".agents", "skills"), real} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{"link": real, "dangling": filepath.Join(home, "gone")} {
		if err := os.Symlink(to, filepath.Join(home, link)); err != nil {
			t.Fatal(err)
		}
	}
	rhome, err := filepath.EvalSymlinks(home)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		entries []string
		want    []string
	}{
		{"none", nil, nil},
		{"home relative", []string{"~/.agents/skills", "~/.claude/skills"}, []string{filepath.Join(rhome, ".agents", "skills")}},
		{"absolute", []string{real}, []string{filepath.Join(rhome, "real")}},
		{"symlink resolved", []string{filepath.Join(home, "link")}, []string{filepath.Join(rhome, "real")}},
		{"file", []string{filepath.Join(home, "file")}, nil},
		{"dangling symlink", []string{filepath.Join(home, "dangling")}, nil},
		{"missing parent", []string{filepath.Join(home, "no", "skills")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := corral.SkillDirs(tc.entries); !slices.Equal(got, tc.want) {
				t.Errorf("SkillDirs(%q) = %q, want %q", tc.entries, got, tc.want)
			}
		})
	}
}

// BenchmarkHostSpec: a session's Spec under unchanged settings, as every
// MCP command and session command asks for it.
func BenchmarkHostSpec(b *testing.B) {
	project, state, cfg := hostDirs(b)
	writeSettings(b, cfg, "profile: workspace\ncwd: "+project+"\n")
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env()})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Spec("bench"); err != nil {
			b.Fatal(err)
		}
	}
}
