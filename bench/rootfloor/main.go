//go:build corralbench

// Command rootfloor runs `true` once in a sandbox the way a root caller's
// must start and nothing more (bwrap.Backend.RootFloor: bwrap as the
// sandbox's unprivileged identity, from the mount namespace prepared for
// it), in the current directory under the workspace profile: the floor of
// `corral run -- true` for a root caller, which bench/run.sh times next
// to it. Root only; builds with -tags corralbench only.
//
//	go build -tags corralbench -o rootfloor ./bench/rootfloor && ./rootfloor STATE_DIR
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/sandbox"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: rootfloor STATE_DIR")
		os.Exit(2)
	}
	work, err := os.Getwd()
	check(err)
	scratch, err := os.MkdirTemp(filepath.Join(os.Args[1]), "scratch-")
	check(err)
	defer os.RemoveAll(scratch)
	be := bwrap.New(bwrap.Options{StateDir: os.Args[1]})
	run, err := be.RootFloor(context.Background(), &sandbox.Request{
		Argv:       []string{"/bin/true"},
		Env:        os.Environ(),
		Policy:     sandbox.Policy{Workdir: work, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits},
		ScratchDir: scratch,
	})
	check(err)
	check(run(false))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "rootfloor:", err)
		os.Exit(1)
	}
}
