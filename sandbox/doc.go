// Package sandbox holds what every corral backend shares: the request a
// backend runs (argv, working directory, profile, limits, binds), the result
// it returns, the sentinel errors front ends match with errors.Is, the
// environment policy (which host variables a sandboxed command may see) and
// the exit codes the corral CLI documents.
//
// The package is pure: nothing in it spawns a process or writes a file.
// Backends live under backend/ (backend/bwrap, backend/local) and implement
// [Backend].
package sandbox
