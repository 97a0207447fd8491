package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// TestOwnDirAt: a workspace that holds one of corral's own directories,
// or lies in one, is found; a sibling is not.
func TestOwnDirAt(t *testing.T) {
	hidden := []string{"/home/u/.config/corral", "/home/u/.local/state/corral", "/home/u/.cache/corral/helper"}
	for _, tc := range []struct {
		ws, want string
	}{
		{"/home/u", "/home/u/.config/corral"},
		{"/home/u/.cache", "/home/u/.cache/corral/helper"},
		{"/home/u/.local/state/corral", "/home/u/.local/state/corral"},
		{"/home/u/.local/state/corral/sessions", "/home/u/.local/state/corral"},
		{"/home/u/proj", ""},
		{"/home/u/.configx", ""},
		{"/home/u2", ""},
	} {
		if got := ownDirAt(tc.ws, hidden); got != tc.want {
			t.Errorf("ownDirAt(%s) = %q, want %q", tc.ws, got, tc.want)
		}
	}
}

// TestWorkspaceHoldingOwnDirsRefused: on docker, a working directory that
// holds corral's own directories (the home directory) is refused before
// any container is made: the hostile trial wrote backend: local into
// corral's settings from a container whose workspace was the home
// directory, and the next command ran unsandboxed.
func TestWorkspaceHoldingOwnDirsRefused(t *testing.T) {
	home := t.TempDir()
	own := filepath.Join(home, ".config", "corral")
	if err := os.MkdirAll(own, 0o700); err != nil {
		t.Fatal(err)
	}
	e := NewEngine(Options{HiddenDirs: []string{own}})
	defer e.Close()
	for _, wd := range []string{home, own} {
		_, err := e.Backend(DefaultSettings).Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: wd, Profile: sandbox.ProfileWorkspace}})
		if !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), "corral's own directories") {
			t.Errorf("working directory %s: %v; want a policy refusal naming corral's own directories", wd, err)
		}
	}
}
