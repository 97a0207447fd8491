package secrets

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/hostmatch"
)

// Secret is one resolved secret: the real value and its stand-in, with
// the hosts it belongs to. Its String, GoString, Format and LogValue show
// the name only, so that a Secret printed or logged by mistake never shows
// the value.
type Secret struct {
	// Name is the variable the sandbox sees.
	Name string
	// Value is the real value, read on the host; never in the sandbox.
	Value string
	// StandIn is what the sandbox sees instead ([StandIn]).
	StandIn string
	// Hosts are the names the real value is sent to: exact names or
	// "*.example.com" (strict subdomains), lower case ([MatchHost]).
	Hosts []string
	// Headers are extra header names whose whole value may be the
	// stand-in, beside Authorization and x-api-key.
	Headers []string
	// Kind is "" for a token, or KindAWS for an AWS key pair: then Value
	// and StandIn are the access key ids, and the secret access key's
	// real value and stand-in (the variable SecretName) follow; the proxy
	// re-signs SigV4 requests ([ResignAWS]) instead of replacing headers.
	Kind                                   string
	SecretName, SecretValue, SecretStandIn string
}

// String implements fmt.Stringer: the name only.
func (s Secret) String() string { return "secret " + s.Name }

// GoString implements fmt.GoStringer: the name only.
func (s Secret) GoString() string { return "secrets.Secret{Name: " + fmt.Sprintf("%q", s.Name) + "}" }

// Format implements fmt.Formatter so that every verb (%v, %+v, %s, %q)
// prints the name only.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = fmt.Fprint(f, s.GoString())
		return
	}
	_, _ = fmt.Fprint(f, s.String())
}

// LogValue implements slog.LogValuer: the name only.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.Name) }

// Belongs reports whether the real value may be sent to host.
func (s Secret) Belongs(host string) bool {
	return slices.ContainsFunc(s.Hosts, func(p string) bool { return MatchHost(p, host) })
}

// MatchHost reports whether host matches pattern by the rule of
// netproxy.Policy (the one function both use, internal/hostmatch): names
// compare without regard to ASCII case and one trailing dot is ignored;
// "*.example.com" matches strict subdomains ("a.example.com",
// "a.b.example.com"), never example.com itself; any other pattern matches
// that name only. host may carry no port.
func MatchHost(pattern, host string) bool { return hostmatch.Match(pattern, host) }

// Declares reports whether some secret of secs belongs to host: the hosts
// for which the egress proxy terminates TLS.
func Declares(secs []Secret, host string) bool {
	return slices.ContainsFunc(secs, func(s Secret) bool { return s.Belongs(host) })
}

// Result is what [Substitute] did to one request.
type Result struct {
	// Used names the secrets whose real value was put in, in the order
	// of secs.
	Used []string
	// Misdirected names the secrets whose stand-in was found in the
	// request (any header, the decoded user or password of Basic
	// authorization, or the request target) on its way to a host it does
	// not belong to, or over plain HTTP. When it is not empty the headers
	// were left unchanged and the request must be refused.
	Misdirected []string
}

// Substitute rewrites the header h of one request for host (no port),
// target being the request-target as received (path and query, or the
// absolute URL of a forward request), overTLS whether the request goes
// upstream over TLS.
//
// First every stand-in of secs is looked for in every header value, in
// the decoded credentials of "Authorization: Basic", and in target; one
// found for a secret that does not belong to host, or any found when
// overTLS is false (a real value never leaves in clear text), makes the
// secret misdirected, and then nothing is changed. Otherwise, for each
// secret that belongs to host, a header value that is exactly the
// stand-in is replaced by the real value in these places:
//
//   - Authorization: "SCHEME STANDIN" (Bearer, token, any scheme) becomes
//     "SCHEME VALUE"; for Basic, the base64 user:password is decoded, a
//     user or password equal to the stand-in is replaced, and it is
//     encoded again (RFC 7617);
//   - x-api-key, and each of the secret's Headers: the whole value,
//     surrounding spaces ignored.
//
// Header names compare without regard to case. A stand-in elsewhere (a
// longer token containing it, another header, the query string) is left
// as it is: the server sees a useless stand-in. The body is never
// looked at: a request body carrying a stand-in passes unchanged.
func Substitute(h http.Header, target, host string, overTLS bool, secs []Secret) Result {
	var res Result
	for _, s := range secs {
		if s.StandIn == "" || !carries(h, target, s.StandIn) && (s.SecretStandIn == "" || !carries(h, target, s.SecretStandIn)) {
			continue
		}
		if !overTLS || !s.Belongs(host) {
			res.Misdirected = append(res.Misdirected, s.Name)
		}
	}
	if len(res.Misdirected) > 0 {
		return res
	}
	for _, s := range secs {
		if s.StandIn == "" || !s.Belongs(host) {
			continue
		}
		used := false
		for key, vals := range h {
			switch {
			case strings.EqualFold(key, "Authorization"):
				for i, v := range vals {
					if nv, ok := replaceAuthorization(v, s); ok {
						vals[i], used = nv, true
					}
				}
			case strings.EqualFold(key, "X-Api-Key") || slices.ContainsFunc(s.Headers, func(d string) bool { return strings.EqualFold(d, key) }):
				for i, v := range vals {
					if strings.TrimSpace(v) == s.StandIn {
						vals[i], used = s.Value, true
					}
				}
			}
		}
		if used {
			res.Used = append(res.Used, s.Name)
		}
	}
	return res
}

// carries reports whether standIn occurs in a header value, a decoded
// Basic credential or target.
func carries(h http.Header, target, standIn string) bool {
	if strings.Contains(target, standIn) {
		return true
	}
	for key, vals := range h {
		for _, v := range vals {
			if strings.Contains(v, standIn) {
				return true
			}
			if strings.EqualFold(key, "Authorization") || strings.EqualFold(key, "Proxy-Authorization") {
				if user, pass, ok := basic(v); ok && (strings.Contains(user, standIn) || strings.Contains(pass, standIn)) {
					return true
				}
			}
		}
	}
	return false
}

// basic decodes "Basic base64(user:pass)".
func basic(v string) (user, pass string, ok bool) {
	scheme, cred, found := strings.Cut(strings.TrimSpace(v), " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", "", false
	}
	user, pass, ok = strings.Cut(string(raw), ":")
	return user, pass, ok
}

// replaceAuthorization returns v with s's stand-in replaced, when v is
// "SCHEME STANDIN" or a Basic credential whose user or password is the
// stand-in.
func replaceAuthorization(v string, s Secret) (string, bool) {
	scheme, cred, found := strings.Cut(strings.TrimSpace(v), " ")
	if !found {
		return v, false
	}
	cred = strings.TrimSpace(cred)
	if strings.EqualFold(scheme, "Basic") {
		user, pass, ok := basic(v)
		if !ok || user != s.StandIn && pass != s.StandIn {
			return v, false
		}
		if user == s.StandIn {
			user = s.Value
		}
		if pass == s.StandIn {
			pass = s.Value
		}
		return scheme + " " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)), true
	}
	if cred != s.StandIn {
		return v, false
	}
	return scheme + " " + s.Value, true
}
