// Package hostview holds the rules of what a sandbox may see of the host,
// shared by every backend that shows it host paths (bwrap, docker) and by
// the file tools and transfers: the protected paths found in a writable
// tree (FindProtected, MatchProtectedIn, on the pattern language of
// package sandbox), the bind policy (DecideBind, on facts read by
// GatherBindHost and InspectBindSource), the home rules and credential
// stores (DefaultHomeAllow, CredentialStores, SystemTrees), the
// environment policy (FilterEnvPolicy, DefaultEnvDeny) and the
// explanation of a command's denials from its output (ExplainDenials).
//
// The policies are pure functions; the few functions that read the file
// system (FindProtected, MatchProtectedIn, the bind facts) say so. The
// package imports sandbox and never the reverse, so the backend contract
// stays apart from the rules.
package hostview
