package sandbox

// Exit codes of the corral CLI. They follow the convention of `docker run`
// (docs.docker.com/engine/containers/run/#exit-status) and of POSIX shells:
// corral's own failures are 125, a command that cannot be run is 126, one
// that is not found is 127, and a command killed by signal N is 128+N.
const (
	// ExitTimedOut is returned when the timeout ended the command, as
	// timeout(1) does.
	ExitTimedOut = 124
	// ExitCorralError is returned when corral itself fails: bad flags or
	// settings, the sandbox cannot be built, the backend is unavailable.
	ExitCorralError = 125
	// ExitCannotInvoke is returned when the command exists but cannot be
	// run (permission denied, the working directory is gone).
	ExitCannotInvoke = 126
	// ExitNotFound is returned when the command is not found.
	ExitNotFound = 127
	// ExitSignalBase is added to a signal number for a command killed by
	// that signal (shell convention: SIGKILL gives 137).
	ExitSignalBase = 128
)

// ExitStatus is the exit status corral reports for a command that ran, the
// same everywhere (corral run and exec, a session's result, the MCP tools
// bash and bash_output, the audit log): ExitTimedOut when its timeout ended
// it, as timeout(1) and the README's table say (the backend's ExitCode is
// then the signal that ended it, 143 or 137: MCP reported 143 where corral
// run exited 124), else res.ExitCode.
func ExitStatus(res *Result) int {
	if res.TimedOut {
		return ExitTimedOut
	}
	return res.ExitCode
}
