// Package sandbox holds what every corral backend shares: the request a
// backend runs (argv, working directory, profile, limits, binds), the result
// it returns, the sentinel errors front ends match with errors.Is, the
// environment policy (which host variables a sandboxed command may see),
// the lists of the home rules and the bind policy (DecideBind, on facts
// read by GatherBindHost and InspectBindSource), and the exit codes the
// corral CLI documents.
//
// Nothing in the package spawns a process or writes a file; the policies
// are pure functions, and the few functions that read the file system
// (FindProtected, the bind facts) say so.
//
// Backends live under backend/ (backend/bwrap, backend/docker,
// backend/local) and implement
// [Backend].
package sandbox
