// Package hostmatch is the one rule by which corral matches a host name
// against a pattern: netproxy's allowlist policy (netproxy.Policy) and the
// hosts of a secret (secrets.MatchHost) both use it, so a secret's host
// and the allowlist can never disagree on what "*.example.com" covers.
package hostmatch

import "strings"

// Normalize lower-cases name (ASCII) and drops one trailing dot: names
// compare without regard to case (RFC 4343) and "example.com." is the
// fully qualified spelling of "example.com".
func Normalize(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// Subdomain reports whether name is a strict subdomain of suffix: at
// least one more label before ".suffix". Both must be normalized.
// "*.example.com" covers "a.example.com" and "a.b.example.com", never
// "example.com" or "xexample.com".
func Subdomain(name, suffix string) bool {
	return len(name) > len(suffix)+1 && strings.HasSuffix(name, suffix) && name[len(name)-len(suffix)-1] == '.'
}

// Match reports whether host matches pattern, a name or "*." and a name:
// both normalized first; a wildcard matches strict subdomains
// ([Subdomain]), a name itself only. An empty host matches nothing.
func Match(pattern, host string) bool {
	pattern, host = Normalize(pattern), Normalize(host)
	if host == "" {
		return false
	}
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return Subdomain(host, suffix)
	}
	return host == pattern
}
