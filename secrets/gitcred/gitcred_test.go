package gitcred

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestAnswer(t *testing.T) {
	specs := Specs([]sandbox.Secret{
		{Name: "GITHUB_TOKEN", Hosts: []string{"github.com", "*.github.com"}},
		{Name: "GITLAB_TOKEN", Hosts: []string{"gitlab.example"}, Username: "oauth2"},
		{Name: "UNSET", Hosts: []string{"unset.example"}},
	})
	env := map[string]string{"GITHUB_TOKEN": "ghp_stand", "GITLAB_TOKEN": "glpat-stand"}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		name, action string
		attrs        map[string]string
		want         string
	}{
		{"github", "get", map[string]string{"protocol": "https", "host": "github.com", "path": "o/r.git"}, "username=x-access-token\npassword=ghp_stand\n"},
		{"subdomain with port, case", "get", map[string]string{"protocol": "https", "host": "Gist.GitHub.com:8443"}, "username=x-access-token\npassword=ghp_stand\n"},
		{"declared username", "get", map[string]string{"protocol": "https", "host": "gitlab.example"}, "username=oauth2\npassword=glpat-stand\n"},
		{"plain http gets nothing", "get", map[string]string{"protocol": "http", "host": "github.com"}, ""},
		{"other host gets nothing", "get", map[string]string{"protocol": "https", "host": "evilgithub.com"}, ""},
		{"unset variable gets nothing", "get", map[string]string{"protocol": "https", "host": "unset.example"}, ""},
		{"store is ignored", "store", map[string]string{"protocol": "https", "host": "github.com", "password": "p"}, ""},
		{"erase is ignored", "erase", map[string]string{"protocol": "https", "host": "github.com"}, ""},
	} {
		if got := Answer(specs, tc.action, tc.attrs, getenv); got != tc.want {
			t.Errorf("%s: Answer = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSpecRoundTrip(t *testing.T) {
	s := Spec{Name: "T", Username: "u", Hosts: []string{"a.example", "*.b.example"}}
	got, err := ParseSpec(s.String())
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Errorf("ParseSpec(%q) = %+v, %v", s.String(), got, err)
	}
	for _, bad := range []string{"", "T", "T:u", ":u:h", "T:u:"} {
		if _, err := ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q) accepted", bad)
		}
	}
	if got := ReadAttrs(strings.NewReader("protocol=https\nhost=h\n\nafter=x\n")); !reflect.DeepEqual(got, map[string]string{"protocol": "https", "host": "h"}) {
		t.Errorf("ReadAttrs = %v", got)
	}
}

// TestEnvWithGit has a real git read Env's configuration and run the
// helper it names (a shell script standing in for corral's executable,
// at a path with a space and a quote) through git credential fill.
func TestEnvWithGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed (apt-get install git)")
	}
	if Env("/x", nil) != nil {
		t.Error("Env without secrets is not nil")
	}
	dir := filepath.Join(t.TempDir(), "a b'c")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "corral")
	// The script checks its mode argument and answers as the helper does.
	script := "#!/bin/sh\n[ \"$1\" = " + Mode + " ] || exit 9\nshift\ncat >/dev/null\necho \"args=$*\" >&2\n[ \"$2\" = get ] && printf 'username=x-access-token\\npassword=stand\\n'\nexit 0\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "credential", "fill")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0"},
		Env(exe, []sandbox.Secret{{Name: "GITHUB_TOKEN", Hosts: []string{"github.com"}}})...)
	cmd.Stdin = strings.NewReader("protocol=https\nhost=github.com\n\n")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "password=stand") || !strings.Contains(stderr.String(), "args=GITHUB_TOKEN:x-access-token:github.com get") {
		t.Errorf("git credential fill: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
}
