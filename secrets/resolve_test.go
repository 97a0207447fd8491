package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tok")
	if err := os.WriteFile(file, []byte("glpat-FILEFILEFILE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GH_REAL": "ghp_ENVENVENVENVENV0", "SHORT": "abc", "SPACE": "abc defgh ijk"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	got, err := Resolve([]sandbox.Secret{
		{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"GitHub.com."}},
		{Name: "GITLAB_TOKEN", From: "file:" + file, Hosts: []string{"gitlab.example"}, Headers: []string{"PRIVATE-TOKEN"}},
	}, getenv, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Value != "ghp_ENVENVENVENVENV0" || got[0].Hosts[0] != "github.com" || !strings.HasPrefix(got[0].StandIn, "ghp_") {
		t.Errorf("env secret = %+v / %q", got[0], got[0].StandIn)
	}
	if got[1].Value != "glpat-FILEFILEFILE" || len(got[1].StandIn) != len(got[1].Value) {
		t.Errorf("file secret: value %d bytes, stand-in %q", len(got[1].Value), got[1].StandIn)
	}
	if e := Env(got); e[0] != "GITHUB_TOKEN="+got[0].StandIn || e[1] != "GITLAB_TOKEN="+got[1].StandIn {
		t.Errorf("Env = %q", e)
	}

	for _, tc := range []struct {
		name string
		spec sandbox.Secret
		want string
	}{
		{"unset variable", sandbox.Secret{Name: "T", From: "env:NOPE"}, "T (from env:NOPE): the variable NOPE is not set"},
		{"missing file", sandbox.Secret{Name: "T", From: "file:" + dir + "/nope"}, "cannot open the file: no such file"},
		{"directory", sandbox.Secret{Name: "T", From: "file:" + dir}, "not a regular file"},
		{"short", sandbox.Secret{Name: "T", From: "env:SHORT"}, "shorter than 8 bytes"},
		{"space", sandbox.Secret{Name: "T", From: "env:SPACE"}, "space, control or non-ASCII byte at offset 3"},
	} {
		_, err := Resolve([]sandbox.Secret{tc.spec}, getenv, testKey)
		if !errors.Is(err, ErrUnusable) || !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrUnusable containing %q", tc.name, err, tc.want)
		}
		for _, v := range env {
			if len(v) > 3 && err != nil && strings.Contains(err.Error(), v) {
				t.Errorf("%s: error %q shows a value", tc.name, err)
			}
		}
	}
	if v := SourceVars([]sandbox.Secret{{From: "env:A"}, {From: "file:/x"}, {From: "env:B"}}); strings.Join(v, ",") != "A,B" {
		t.Errorf("SourceVars = %q", v)
	}
}

// TestResolveProtectsProcess: once Resolve has read a value the process
// is not dumpable (no core of it can hold the value).
func TestResolveProtectsProcess(t *testing.T) {
	getenv := func(string) (string, bool) { return "ghp_RealRealRealReal01", true }
	if _, err := Resolve([]sandbox.Secret{{Name: "GH", From: "env:X", Hosts: []string{"h.example"}}}, getenv, []byte("0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	if d, err := Dumpable(); err != nil || d {
		t.Errorf("Dumpable() = %v, %v after Resolve; want false", d, err)
	}
}
