package mcpserver

import (
	"errors"
	"fmt"
	"strings"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/sandboxfs"
)

// files returns the session's file client (package sandboxfs: one
// long-lived sandbox per session with the same view as its commands).
func (c *call) files() (*sandboxfs.Client, error) {
	fc, err := sandboxfs.For(c.sess)
	if err != nil {
		return nil, toolError(err)
	}
	return fc, nil
}

// fileError words a file operation's failure for the model.
func fileError(err error) error {
	var fe *sandboxfs.Error
	if errors.As(err, &fe) {
		return &ToolError{Msg: fe.Message, Err: err}
	}
	if errors.Is(err, sandbox.ErrPolicy) || errors.Is(err, sandboxfs.ErrUnavailable) && strings.Contains(err.Error(), "("+sandbox.ErrPolicy.Error()+": ") {
		// The file server's sandbox was refused, as bash's command would
		// be (its stderr carries the refusal): not a fault to report.
		return &ToolError{Msg: fmt.Sprintf("refused by corral's sandbox policy, so nothing was done: %v. The policy is the person's setting: choose another path, or ask them", err), Err: err}
	}
	if errors.Is(err, sandboxfs.ErrUnavailable) && (sandbox.IsTransient(err) || sandbox.IsTransientText(err.Error())) {
		// Too many open files, for one: it passes, as for bash.
		return &ToolError{Msg: fmt.Sprintf("nothing was done: the file tools' sandbox could not be reached (%v). This passes by itself; call the tool again (if it fails the same way several times, use bash and tell the person running corral)", err), Err: err}
	}
	if errors.Is(err, sandboxfs.ErrUnavailable) {
		return &ToolError{Msg: fmt.Sprintf("the file tools' sandbox could not be reached (%v); use bash (cat, sed) for now, and tell the person running corral", err), Err: err}
	}
	return toolError(err)
}
