//go:build corralbench

package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/corralhq/corral/sandbox"
)

// RootFloor returns a function that runs req's raw bwrap command line
// (Command's argv and environment) the way a root caller's sandbox must
// start and nothing more: as req's RunAs identity, from a thread in the
// mount namespace prepared for req's plan (startAs, enterHostView),
// waiting for it (and, with capture, for its output to end). It leaves
// out what corral adds beyond that design: the limits gate, the syscall
// filter, the memory cgroup, the status pipe, the session's state. Used by
// bench/sessionbench and bench/mcpbench to print the floor of a root
// caller's command next to raw bwrap's; it exists only in builds with
// -tags corralbench. Errors: not root, or the plan's.
func (b *Backend) RootFloor(ctx context.Context, req *sandbox.Request) (func(capture bool) error, error) {
	if os.Getuid() != 0 {
		return nil, errors.New("the root floor is a root caller's: run as root")
	}
	argv, env, _, err := b.Command(ctx, req)
	if err != nil {
		return nil, err
	}
	_, facts, err := b.prepareSecrets(req)
	if err != nil {
		return nil, err
	}
	host, err := b.hostFor(facts)
	if err != nil {
		return nil, err
	}
	plan, err := BuildPlan(req, host)
	if err != nil {
		return nil, err
	}
	if err := b.identity(plan); err != nil {
		return nil, err
	}
	return func(capture bool) error {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		var out bytes.Buffer
		if capture {
			cmd.Stdout, cmd.Stderr = &out, &out
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		release, err := b.startAs(plan, *plan.RunAs, nil, cmd.Start)
		if err != nil {
			return err
		}
		defer release()
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("%w: %s", err, out.Bytes())
		}
		return nil
	}, nil
}
