package handback

import "testing"

func TestHeldNotice(t *testing.T) {
	q := "/st/quarantine/20261203T124537Z-1"
	six := []Held{{Path: "a"}, {Path: "b"}, {Path: "c"}, {Path: "d"}, {Path: "e"}, {Path: "f"}, {Path: "g"}, {Path: "h"}}
	for _, tc := range []struct {
		name string
		held []Held
		dir  string
		want string
	}{
		{"none", nil, q, ""},
		{"git init", []Held{{Path: ".git/hooks"}, {Path: ".git/config", Kept: keptGitConfigNote(nil)}}, q,
			"held 2 protected paths the command made (programs on the host run them): .git/hooks, .git/config (its settings, all safe, written back); see them: ls -A " + q + " (move one back to release it)"},
		{"one", []Held{{Path: ".bashrc"}}, q,
			"held 1 protected path the command made (programs on the host run them): .bashrc; see them: ls -A " + q + " (move one back to release it)"},
		{"removed only", []Held{{Path: ".envrc", Removed: true}}, "",
			"held 1 protected path the command made (programs on the host run them): .envrc (removed)"},
		{"dropped settings", []Held{{Path: "x/.git/config", Removed: true, Kept: keptGitConfigNote([]string{"core.fsmonitor"})}}, "",
			"held 1 protected path the command made (programs on the host run them): x/.git/config (removed; its safe settings (remotes, branches, the repository format) written back, without core.fsmonitor)"},
		{"many", six, q,
			"held 8 protected paths the command made (programs on the host run them): a, b, c, d, e, f and 2 more; see them: ls -A " + q + " (move one back to release it)"},
		{"a name that drives a terminal", []Held{{Path: "a\x1b[2Jb"}}, "",
			"held 1 protected path the command made (programs on the host run them): \"a\\033[2Jb\""},
	} {
		if got := HeldNotice(tc.held, tc.dir); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
