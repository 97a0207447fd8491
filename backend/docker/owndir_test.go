package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
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

// TestOwnFilesProtected: corral's executable and a helper beside it,
// when they lie in the workspace (README's build in the project), are
// bound read-only like the protected paths: the hostile trial replaced
// ./corral from a container, and the person's next ./corral ran its code.
func TestOwnFilesProtected(t *testing.T) {
	ws := t.TempDir()
	for _, f := range []string{"corral", "corral-helper", "other"} {
		os.WriteFile(filepath.Join(ws, f), []byte("x"), 0o755)
	}
	got, _, err := protectedIn(workspace{Host: ws, Writable: true}, &sandbox.Request{}, []string{filepath.Join(ws, "corral"), filepath.Join(ws, "corral-helper"), "/elsewhere/corral"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"corral", "corral-helper"} {
		if !slices.Contains(got, want) {
			t.Errorf("protected %q lacks %s", got, want)
		}
	}
	if slices.Contains(got, "other") {
		t.Errorf("protected %q holds a file of the project's own", got)
	}
	if exe, _ := os.Executable(); !slices.Contains(ownFiles(), exe) && !slices.Contains(ownFiles(), resolved(exe)) {
		t.Errorf("ownFiles %q lacks this executable %s", ownFiles(), exe)
	}
}
