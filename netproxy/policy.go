package netproxy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/hostmatch"
)

// Policy is the host allowlist of one sandbox. It is a value: the zero
// Policy refuses every host.
//
// Each entry of Allow and Deny is one of (see [ValidatePattern]):
//
//   - a host name, "example.com": that name only;
//   - a wildcard, "*.example.com": every strict subdomain of example.com
//     ("api.example.com", "a.b.example.com"), never example.com itself;
//   - an IP address, "192.0.2.7", "2001:db8::1" or "[2001:db8::1]": that
//     address only. Ranges (CIDR) are not supported.
//
// Entries never carry a port, a scheme or a path: the policy decides on
// host names alone, whatever the port.
type Policy struct {
	// Allow lists the hosts a sandboxed command may reach.
	Allow []string
	// Deny lists hosts refused even when Allow matches them; it is checked
	// first.
	Deny []string
}

// Validate checks every entry of p with [ValidatePattern] and returns the
// first failure, naming the list and index ("allow[2]: ..."). The error
// wraps [ErrInvalidPattern]. [Start] refuses a policy that does not
// validate.
func (p Policy) Validate() error {
	for i, s := range p.Deny {
		if err := ValidatePattern(s); err != nil {
			return fmt.Errorf("deny[%d]: %w", i, err)
		}
	}
	for i, s := range p.Allow {
		if err := ValidatePattern(s); err != nil {
			return fmt.Errorf("allow[%d]: %w", i, err)
		}
	}
	return nil
}

// Decide tells whether a connection to host may be made, with a short
// reason for logs ("allowed by \"*.example.com\"", "not in allowlist").
//
// host is a bare host: a DNS name, an IPv4 or IPv6 address, or an IPv6
// address in brackets as it appears in a URL; it carries no port. Names
// compare without regard to ASCII case and one trailing dot is ignored, so
// "API.Example.COM." is "api.example.com". The rules, in order:
//
//  1. A host that is not a well-formed name or address is refused: names
//     are ASCII letters, digits, '-' and '_' in dot-separated labels of 1
//     to 63 bytes, at most 253 bytes in all (RFC 1035 section 2.3.4);
//     internationalized names must be given in their ASCII ("xn--") form.
//     A name whose last label is numeric ("127.1", "0x7f.1") is refused
//     too: resolvers may read it as an IPv4 address in a legacy notation.
//  2. A host matched by a Deny entry is refused.
//  3. A host matched by an Allow entry is allowed.
//  4. Anything else is refused.
//
// An IP address is matched only by an entry that names the same address
// (IPv4-mapped IPv6 addresses compare equal to their IPv4 form); wildcards
// never match addresses. Entries that do not pass [ValidatePattern] never
// match.
func (p Policy) Decide(host string) (allowed bool, reason string) {
	h, ok := parseHost(host)
	if !ok {
		return false, "malformed host name"
	}
	if h.numeric {
		return false, "numeric host name that is not an IP address"
	}
	for _, s := range p.Deny {
		if pat, err := parsePattern(s); err == nil && pat.matches(h) {
			return false, "denied by " + strconv.Quote(s)
		}
	}
	for _, s := range p.Allow {
		if pat, err := parsePattern(s); err == nil && pat.matches(h) {
			return true, "allowed by " + strconv.Quote(s)
		}
	}
	if h.isIP {
		return false, "IP address not in allowlist"
	}
	return false, "not in allowlist"
}

// ValidatePattern reports whether s is a well-formed [Policy] entry. It
// returns nil or an error wrapping [ErrInvalidPattern] that says what is
// wrong.
//
// Accepted: a host name as [Policy.Decide] defines it (case and one
// trailing dot are ignored), "*." followed by such a name, or an IP address
// (IPv6 optionally in brackets). A wildcard over a single label, such as
// "*.test" or "*.internal", is accepted: it allows every name under that
// top-level domain, which is what a private zone needs, and is as explicit
// as any other entry. Refused: the empty string, white space, a bare "*"
// (allow everything is not expressible, on purpose), "*" anywhere but as
// the whole first label ("*example.com", "a.*.com", "**.com"), ports
// ("example.com:443"), URLs and paths ("https://example.com/"), CIDR ranges
// ("10.0.0.0/8"), and names whose last label is numeric.
func ValidatePattern(s string) error {
	_, err := parsePattern(s)
	return err
}

// host is a parsed, normalized host as Decide sees it.
type host struct {
	name    string     // lower case, no trailing dot; empty for addresses
	ip      netip.Addr // unmapped; valid only when isIP
	isIP    bool
	numeric bool // a name whose last label is numeric
}

// pattern is a parsed Policy entry.
type pattern struct {
	name     string // for wildcards, the suffix after "*." (without the dot)
	wildcard bool
	ip       netip.Addr
	isIP     bool
}

func (p pattern) matches(h host) bool {
	switch {
	case p.isIP || h.isIP:
		return p.isIP && h.isIP && p.ip == h.ip
	case p.wildcard:
		return hostmatch.Subdomain(h.name, p.name)
	default:
		return h.name == p.name
	}
}

// parseHost normalizes s; ok is false when s is neither a well-formed name
// nor an IP address.
func parseHost(s string) (h host, ok bool) {
	if ip, isIP := parseIP(s); isIP {
		return host{ip: ip, isIP: true}, true
	}
	name, ok := normalizeName(s)
	if !ok {
		return host{}, false
	}
	return host{name: name, numeric: numericLastLabel(name)}, true
}

// parseIP parses an IPv4 or IPv6 address, the latter optionally in
// brackets. Mapped IPv4 addresses are unmapped so that both spellings of one
// address compare equal.
func parseIP(s string) (netip.Addr, bool) {
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// normalizeName lower-cases s, drops one trailing dot and checks the
// result against the name rules of Decide.
func normalizeName(s string) (string, bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return "", false
	}
	b := []byte(s)
	labelLen := 0
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + ('a' - 'A')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.':
			if labelLen == 0 {
				return "", false
			}
			labelLen = 0
			continue
		default:
			return "", false
		}
		labelLen++
		if labelLen > 63 {
			return "", false
		}
	}
	if labelLen == 0 {
		return "", false
	}
	return string(b), true
}

// numericLastLabel reports whether the last label of a normalized name is
// all decimal digits or a 0x-prefixed hexadecimal number, which some
// resolvers (inet_aton) read as part of an IPv4 address.
func numericLastLabel(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	digits := last
	if strings.HasPrefix(last, "0x") {
		digits = last[2:]
		if digits == "" {
			return true
		}
		for _, c := range []byte(digits) {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for _, c := range []byte(digits) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func parsePattern(s string) (pattern, error) {
	bad := func(why string) (pattern, error) {
		return pattern{}, fmt.Errorf("%w %q: %s", ErrInvalidPattern, s, why)
	}
	switch {
	case s == "":
		return bad("empty")
	case strings.ContainsAny(s, " \t\r\n\v\f"):
		return bad("contains white space")
	case s == "*" || s == "*.":
		return bad("a bare wildcard would allow every host; name the domains")
	case strings.Contains(s, "://") || strings.Contains(s, "/"):
		return bad("URLs, paths and CIDR ranges are not supported; give a host name, *.domain or one IP address")
	}
	if ip, ok := parseIP(s); ok {
		return pattern{ip: ip, isIP: true}, nil
	}
	if strings.Contains(s, ":") {
		return bad("ports are not supported; the policy matches hosts on every port")
	}
	wildcard := false
	rest := s
	if strings.HasPrefix(s, "*.") {
		wildcard = true
		rest = s[2:]
	}
	if strings.Contains(rest, "*") {
		return bad(`"*" is only allowed as the whole first label, as in "*.example.com"`)
	}
	name, ok := normalizeName(rest)
	if !ok {
		return bad("not a valid host name (ASCII letters, digits, '-', '_' in dot-separated labels of 1-63 bytes)")
	}
	if numericLastLabel(name) {
		return bad("the last label is numeric; give an IP address in standard form instead")
	}
	return pattern{name: name, wildcard: wildcard}, nil
}
