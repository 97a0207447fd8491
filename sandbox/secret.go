package sandbox

import (
	"fmt"
	"strings"
)

// Secret is a credential a sandboxed command may use but never see (the
// secrets setting, issue 14). Inside the sandbox the variable Name holds a
// stand-in of the same length and shape as the real value; corral's
// egress proxy puts the real value, read on the host from From, into the
// request headers of requests to Hosts only (see package secrets and
// netproxy). It is data only: reading From and making the stand-in are
// the backends' business.
type Secret struct {
	// Name is the environment variable the sandbox sees ("GITHUB_TOKEN"):
	// a shell identifier, [A-Za-z_][A-Za-z0-9_]*.
	Name string `json:"name" yaml:"name"`
	// From says where the real value is read on the host: "env:VAR" (the
	// caller's environment; VAR is also removed from the sandbox's
	// environment, even when env_allow names it) or "file:/abs/path" (the
	// whole file, one trailing newline dropped).
	From string `json:"from" yaml:"from"`
	// Hosts are the host names the real value is sent to: exact names or
	// "*.example.com" (strict subdomains), as netproxy.Policy matches
	// them; never IP addresses. They are implicitly allowed egress.
	Hosts []string `json:"hosts" yaml:"hosts"`
	// Headers are extra request header names, beside Authorization and
	// x-api-key, whose whole value may be the stand-in ("PRIVATE-TOKEN").
	Headers []string `json:"headers,omitempty" yaml:"headers,omitempty"`
	// Username is the user name corral's git credential helper gives
	// with the stand-in for the secret's hosts ("" means x-access-token,
	// GitHub's; see package secrets/gitcred). No colon, space or control
	// character (RFC 7617: the Basic user-id holds no colon).
	Username string `json:"username,omitempty" yaml:"username,omitempty"`
	// Kind is "" (a token) or "aws": an AWS key pair, Name and From being
	// the access key id's variable and source, SecretName (default
	// AWS_SECRET_ACCESS_KEY) and SecretFrom the secret access key's; the
	// proxy signs requests again with the real pair (AWS Signature
	// Version 4) instead of replacing a header.
	Kind       string `json:"kind,omitempty" yaml:"kind,omitempty"`
	SecretName string `json:"secret_name,omitempty" yaml:"secret_name,omitempty"`
	SecretFrom string `json:"secret_from,omitempty" yaml:"secret_from,omitempty"`
	// Files are credential files ("~/.netrc", "/abs/path"; "~/" is the
	// caller's home) that appear read-only in the sandbox at their own
	// path with every occurrence of the real value (for kind aws, of the
	// secret access key too) replaced by the stand-in, so tools that read
	// credentials from files work through the proxy (issue 14). Each must
	// be a regular file of at most 1 MiB when a command starts.
	Files []string `json:"files,omitempty" yaml:"files,omitempty"`
}

// DefaultAWSSecretName is the variable of an aws secret's secret access
// key when SecretName is empty: the one AWS SDKs and the CLI read.
const DefaultAWSSecretName = "AWS_SECRET_ACCESS_KEY"

// SecretVar returns the variable that holds the secret access key of an
// aws secret ("" for other kinds).
func (s Secret) SecretVar() string {
	if s.Kind != "aws" {
		return ""
	}
	if s.SecretName != "" {
		return s.SecretName
	}
	return DefaultAWSSecretName
}

// Sources returns s.From and, for an aws secret, s.SecretFrom.
func (s Secret) Sources() []string {
	if s.Kind == "aws" {
		return []string{s.From, s.SecretFrom}
	}
	return []string{s.From}
}

// FromEnv returns VAR when s.From is "env:VAR".
func (s Secret) FromEnv() (string, bool) {
	return strings.CutPrefix(s.From, "env:")
}

// FromFile returns the path when s.From is "file:/path".
func (s Secret) FromFile() (string, bool) {
	return strings.CutPrefix(s.From, "file:")
}

// SourceEnv returns VAR when the source src is "env:VAR".
func SourceEnv(src string) (string, bool) { return strings.CutPrefix(src, "env:") }

// SourceFile returns the path when the source src is "file:/path".
func SourceFile(src string) (string, bool) { return strings.CutPrefix(src, "file:") }

// CheckSecrets refuses a policy that declares secrets under a profile
// other than allowlist: the stand-in is swapped for the real value by
// corral's egress proxy, which only the allowlist profile has (network
// gives the host's network directly; restricted and workspace have no
// egress at all). The error wraps ErrBadRequest and names allowlist.
func CheckSecrets(p Policy) error {
	if len(p.Secrets) == 0 {
		return nil
	}
	prof := p.Profile
	if prof == "" {
		prof = DefaultProfile
	}
	if prof == ProfileAllowlist {
		return nil
	}
	names := make([]string, len(p.Secrets))
	for i, s := range p.Secrets {
		names[i] = s.Name
	}
	return fmt.Errorf("%w: secrets (%s) need the allowlist profile, whose egress proxy swaps the stand-in for the real value; profile %s has no such proxy (set profile: allowlist and list the hosts, or remove the secrets)",
		ErrBadRequest, strings.Join(names, ", "), prof)
}

// NoSecretsBackendError is the refusal of a policy with secrets by a
// backend without corral's egress proxy (local): it names the secrets and
// carriers, the backends that have that proxy (registry.SecretCarriers).
// It wraps ErrBadRequest. Pure.
func NoSecretsBackendError(backend string, p Policy, carriers []string) error {
	names := make([]string, len(p.Secrets))
	for i, s := range p.Secrets {
		names[i] = s.Name
	}
	return fmt.Errorf("%w: secrets (%s) need a backend with corral's egress proxy under the allowlist profile: %s; the %s backend has none (use one of those, or leave the secrets out for this session, for example with a route's secrets: [])",
		ErrBadRequest, strings.Join(names, ", "), strings.Join(carriers, ", "), backend)
}

// SecretHosts returns the hosts of every secret, in order, for the
// allowlist (a secret's hosts are implicitly allowed egress).
func SecretHosts(secrets []Secret) []string {
	var out []string
	for _, s := range secrets {
		out = append(out, s.Hosts...)
	}
	return out
}
