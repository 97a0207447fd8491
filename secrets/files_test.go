package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestExpandFilePath(t *testing.T) {
	tests := []struct {
		in, home, want, why string
	}{
		{"~/.netrc", "/home/u", "/home/u/.netrc", ""},
		{"~/x/../.npmrc", "/home/u", "/home/u/.npmrc", ""},
		{"/etc//docker/config.json", "/home/u", "/etc/docker/config.json", ""},
		{".netrc", "/home/u", "", "is not an absolute path or ~/path"},
		{"~bob/.netrc", "/home/u", "", "is not an absolute path or ~/path"},
		{"~/.netrc", "", "", "caller's home directory is unknown"},
		{"~/", "/home/u", "", "is a directory"},
		{"/", "/home/u", "", "is a directory"},
		{"/a\x00b", "/home/u", "", "NUL"},
	}
	for _, tc := range tests {
		got, why := ExpandFilePath(tc.in, tc.home)
		if got != tc.want || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("ExpandFilePath(%q, %q) = %q, %q; want %q, %q", tc.in, tc.home, got, why, tc.want, tc.why)
		}
	}
}

func TestReplaceValues(t *testing.T) {
	gh := Secret{Name: "GH", Value: "ghp_REALREALREAL", StandIn: "ghp_StandInStand"}
	npm := Secret{Name: "NPM", Value: "npm_realtokenvalue", StandIn: "npm_xxxxxxxxxxxxxx"}
	// A value that holds another must be replaced whole.
	long := Secret{Name: "L", Value: "ghp_REALREALREAL_more", StandIn: "ghp_LongStandIn_abcde"}
	aws := Secret{Name: "AK", Kind: KindAWS, Value: "AKIAREALREALREAL1234", StandIn: "AKIASTANDSTANDST5678", SecretValue: "secret/REAL+key", SecretStandIn: "secret/FAKE+key"}
	tests := []struct {
		name, in, want string
		secs           []Secret
	}{
		{"netrc", "machine github.test login x password ghp_REALREALREAL\n", "machine github.test login x password ghp_StandInStand\n", []Secret{gh}},
		{"npmrc", "//registry.test/:_authToken=npm_realtokenvalue\nfoo=bar\n", "//registry.test/:_authToken=npm_xxxxxxxxxxxxxx\nfoo=bar\n", []Secret{gh, npm}},
		{"every occurrence", "a ghp_REALREALREAL b ghp_REALREALREAL", "a ghp_StandInStand b ghp_StandInStand", []Secret{gh}},
		{"no value", "nothing here\n", "nothing here\n", []Secret{gh}},
		{"longest first", "x=ghp_REALREALREAL_more y=ghp_REALREALREAL", "x=" + long.StandIn + " y=ghp_StandInStand", []Secret{gh, long}},
		{"aws pair", "[default]\naws_access_key_id = AKIAREALREALREAL1234\naws_secret_access_key = secret/REAL+key\n", "[default]\naws_access_key_id = AKIASTANDSTANDST5678\naws_secret_access_key = secret/FAKE+key\n", []Secret{aws}},
		{"empty", "", "", []Secret{gh}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			got := ReplaceValues(in, tc.secs)
			if string(got) != tc.want {
				t.Errorf("ReplaceValues = %q, want %q", got, tc.want)
			}
			if string(in) != tc.in {
				t.Errorf("ReplaceValues changed its input to %q", in)
			}
			if holdsValue(got, tc.secs) {
				t.Errorf("the result %q holds a real value", got)
			}
		})
	}
}

func TestCredentialFiles(t *testing.T) {
	home := t.TempDir()
	state := filepath.Join(t.TempDir(), "secretfiles")
	gh := Secret{Name: "GH", Value: "ghp_REALREALREAL", StandIn: "ghp_StandInStand"}
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(home, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(".netrc", "machine github.test login x password ghp_REALREALREAL\n")
	spec := sandbox.Secret{Name: "GH", Files: []string{"~/.netrc"}}
	got, err := CredentialFiles(state, home, []sandbox.Secret{spec}, []Secret{gh})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Path != filepath.Join(home, ".netrc") || got[0].Secret != "GH" {
		t.Fatalf("CredentialFiles = %+v", got)
	}
	b, err := os.ReadFile(got[0].Copy)
	if err != nil || string(b) != "machine github.test login x password ghp_StandInStand\n" {
		t.Fatalf("copy = %q, %v", b, err)
	}
	for p, want := range map[string]os.FileMode{got[0].Copy: 0o600, state: 0o700} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, st.Mode().Perm(), err, want)
		}
	}
	// Again, unchanged: the same copy. Changed: a new one.
	again, err := CredentialFiles(state, home, []sandbox.Secret{spec}, []Secret{gh})
	if err != nil || again[0].Copy != got[0].Copy {
		t.Errorf("unchanged source: copy %v (%v), want %s", again, err, got[0].Copy)
	}
	write(".netrc", "machine other.test password ghp_REALREALREAL\n")
	changed, err := CredentialFiles(state, home, []sandbox.Secret{spec}, []Secret{gh})
	if err != nil || changed[0].Copy == got[0].Copy {
		t.Fatalf("changed source: copy %v (%v), want a new one", changed, err)
	}
	if b, _ := os.ReadFile(changed[0].Copy); string(b) != "machine other.test password ghp_StandInStand\n" {
		t.Errorf("changed copy = %q", b)
	}

	if err := os.WriteFile(filepath.Join(home, "big"), make([]byte, MaxCredentialFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(home, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	bad := []struct{ file, want string }{
		{"relative/.netrc", `GH files[0] "relative/.netrc": is not an absolute path`},
		{"~/missing", `GH files[0] "~/missing": cannot open the file`},
		{"~/dir", `GH files[0] "~/dir": is not a regular file`},
		{"~/big", `GH files[0] "~/big": is larger than 1048576 bytes`},
	}
	for _, tc := range bad {
		_, err := CredentialFiles(state, home, []sandbox.Secret{{Name: "GH", Files: []string{tc.file}}}, []Secret{gh})
		if !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want an ErrBadRequest with %q", tc.file, err, tc.want)
		}
	}
}
