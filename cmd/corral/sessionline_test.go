package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSessionLine(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"pwd; echo $A"}, "pwd; echo $A"},
		{[]string{"cd", "sub", "&&", "export", "A=1"}, "cd sub && export A=1"},
		{[]string{"echo", "$HOME", "*.go", "|", "wc"}, "echo $HOME *.go | wc"},
		{[]string{"sh", "-c", "cd sub && export X=1"}, "sh -c 'cd sub && export X=1'"},
		{[]string{"bash", "-c", "echo 'it''s'\nexit 3"}, `bash -c 'echo '\''it'\'''\''s'\''` + "\nexit 3'"},
		{[]string{"grep", "", "file"}, "grep '' file"},
		{[]string{"printf", "a\tb"}, "printf 'a\tb'"},
	} {
		if got := sessionLine(tc.words); got != tc.want {
			t.Errorf("sessionLine(%q) = %q, want %q", tc.words, got, tc.want)
		}
	}
}

// TestChildShellCarriesNothing: in a session, as in a terminal, a child
// shell's cd and export stay in the child: `corral run --session S -- sh
// -c 'cd sub && export X=1'` carries neither (the words were joined bare,
// so the session's own shell ran the export and X carried over while the
// cwd did not); the session shell's own cd and export carry both.
func TestChildShellCarriesNothing(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	os.MkdirAll(filepath.Join(c.work, "sub"), 0o755)
	for _, child := range [][]string{
		{"sh", "-c", "cd sub && export X=1"},
		{"bash", "-c", "cd sub && export X=1"},
		{"(cd sub && export X=1)"},
	} {
		name := "child-" + strings.Fields(child[0])[0]
		if code, so, se := c.run(nil, append([]string{"run", "--session", name, "--"}, child...)...); code != 0 {
			t.Fatalf("%q: %d %q %q", child, code, so, se)
		}
		if code, so, se := c.run(nil, "run", "--session", name, "--", `echo "$PWD X=$X"`); code != 0 || so != c.work+" X=\n" {
			t.Errorf("after %q: %d %q %q; want %q (neither carried over)", child, code, so, se, c.work+" X=")
		}
	}
	if code, so, se := c.run(nil, "run", "--session", "own", "--", "cd", "sub", "&&", "export", "X=1"); code != 0 {
		t.Fatalf("own shell: %d %q %q", code, so, se)
	}
	if code, so, se := c.run(nil, "run", "--session", "own", "--", `echo "$PWD X=$X"`); code != 0 || so != filepath.Join(c.work, "sub")+" X=1\n" {
		t.Errorf("after the session shell's own cd and export: %d %q %q", code, so, se)
	}
}
