package sandbox

import "errors"

// Sentinel errors returned (wrapped) by backends and policy code. Front ends
// match them with errors.Is and map them to exit codes and messages.
var (
	// ErrUnavailable means the sandbox cannot be had on this machine (bwrap
	// missing, unprivileged user namespaces blocked, Docker down). The
	// wrapping error names the fix. Nothing is ever run outside the sandbox
	// when this is returned.
	ErrUnavailable = errors.New("sandbox unavailable")

	// ErrPolicy means the request was refused by corral's sandbox policy
	// (a bind source in a hidden path, a working directory of /, ...). The
	// wrapping error names the offending path or setting.
	ErrPolicy = errors.New("refused by sandbox policy")

	// ErrBadRequest means the request itself is malformed (empty argv,
	// relative paths where absolute ones are needed, NUL bytes).
	ErrBadRequest = errors.New("bad request")

	// ErrHostChanged means the sandbox could not be built this time because
	// the host's mounts changed while it was being built (a mount bwrap was
	// copying went away as Docker unmounted a container's layers, a
	// directory it was to mount over was removed). The machine can
	// sandbox, and nothing was run: the same request may well succeed
	// again. Backends retry a few times before they return it. It does not
	// match ErrUnavailable.
	ErrHostChanged = errors.New("the host's mounts changed while the sandbox was being built")
)
