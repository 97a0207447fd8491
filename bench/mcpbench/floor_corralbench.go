//go:build corralbench

package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/sandbox"
)

func init() {
	rootFloor = func(base, work string) (func(bool) error, error) {
		state := filepath.Join(base, "state", "corral")
		scratch := filepath.Join(state, "floor-scratch")
		if err := os.MkdirAll(scratch, 0o700); err != nil {
			return nil, err
		}
		be := bwrap.New(bwrap.Options{StateDir: state})
		return be.RootFloor(context.Background(), &sandbox.Request{
			Argv:       []string{"/bin/bash", "--noprofile", "--norc", "-c", "true"},
			Env:        []string{"PATH=/usr/bin:/bin"},
			Policy:     sandbox.Policy{Workdir: work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits},
			ScratchDir: scratch,
		})
	}
}
