// Package sandbox is the contract between corral's front ends and its
// backends: the request a backend runs (argv, working directory, profile,
// limits, binds, policy) and its one Validate, the result it returns, the
// sentinel errors front ends match with errors.Is, the profiles and limits,
// the Traits a backend states instead of being tested by name, the
// protected-path pattern language (DefaultProtected, CheckProtected,
// MatchProtected) and the exit codes the corral CLI documents.
//
// What a sandbox may see of the host (the protected-path scan, the bind
// policy, the home rules and credential stores, the environment policy,
// the explanation of denials) is package hostview's.
//
// Nothing in the package spawns a process or reads or writes a file.
//
// Backends live under backend/ (backend/bwrap, backend/docker,
// backend/kubernetes, backend/local) and implement [Backend].
package sandbox
