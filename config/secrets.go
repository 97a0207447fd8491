package config

import (
	"fmt"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/secrets"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/corralhq/corral/sandbox"
)

// secretFields are the fields of a secrets entry.
var secretFields = []string{"name", "from", "hosts", "headers", "username", "kind", "secret_from", "secret_name", "files"}

// reservedSecretNames returns, upper-cased, the variables a secret may not
// be called: the basics of a process's environment and those corral sets
// itself in a sandbox (every proxy variable of netproxy.ProxyEnv, the CA
// bundle variables of secrets.CABundleVars), so a stand-in there would
// break the sandbox's egress or hide corral's CA. Taken from where they
// are set, so the list cannot drift from them.
func reservedSecretNames() []string {
	out := []string{"PATH", "HOME", "TMPDIR", "TMP", "TEMP", "SHELL", "USER", "PWD", "SSL_CERT_DIR", "NODE_USE_ENV_PROXY"}
	for _, kv := range netproxy.ProxyEnv(1, 1, "/nodeshim.cjs") {
		k, _, _ := strings.Cut(kv, "=")
		out = append(out, strings.ToUpper(k))
	}
	return append(out, secrets.CABundleVars...)
}

// parseSecrets checks the value of the secrets key (or a route's
// secrets): a list of {name, from, hosts, headers} mappings.
//
//   - name: an environment variable name ([A-Za-z_][A-Za-z0-9_]*, not
//     CORRAL_*, not a variable corral sets itself), unique in the list;
//   - from: "env:VAR" (VAR a variable name) or "file:/abs/path" (clean
//     absolute path; "~" is not expanded: the file is read by corral,
//     and an explicit path says which);
//   - hosts: a non-empty list of host names or "*.domain" as for
//     network.allow; IP addresses are refused (corral's certificate
//     authority mints certificates for names only);
//   - headers: optional header names (RFC 9110 section 5.1 tokens), not
//     Host and not hop-by-hop fields a proxy drops anyway;
//   - files: optional credential files ("~/.netrc", "/abs/path"), kept
//     as written ("~/" is expanded against the caller's home when a
//     command starts, by secrets.CredentialFiles), unique in the list.
//
// Nothing is read here: from is a reference, resolved when a command
// starts, so a missing variable or file fails that command, not Load.
func parseSecrets(raw any) ([]sandbox.Secret, *problem) {
	if m, ok := stringMap(raw); ok {
		raw = []any{m}
	}
	items, ok := raw.([]any)
	if !ok {
		return nil, &problem{value: raw, reason: "is not a list of {name, from, hosts, headers} mappings"}
	}
	out := make([]sandbox.Secret, 0, len(items))
	for i, it := range items {
		s, p := parseSecret(it)
		if p != nil {
			p.sub = fmt.Sprintf("[%d]", i) + p.sub
			return nil, p
		}
		if slices.ContainsFunc(out, func(o sandbox.Secret) bool { return o.Name == s.Name }) {
			return nil, &problem{sub: fmt.Sprintf("[%d].name", i), value: s.Name, reason: "names a secret declared earlier in the list"}
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSecret(raw any) (sandbox.Secret, *problem) {
	var s sandbox.Secret
	m, ok := stringMap(raw)
	if !ok {
		return s, &problem{value: raw, reason: "is not a {name, from, hosts, headers} mapping"}
	}
	for f := range m {
		if !slices.Contains(secretFields, f) {
			return s, &problem{value: raw, reason: fmt.Sprintf("has unknown field %q (want name, from, hosts, headers, username, kind, secret_from, secret_name, files)", f)}
		}
	}
	name, ok := m["name"].(string)
	if !ok {
		return s, &problem{sub: ".name", value: m["name"], reason: "is not a variable name such as GITHUB_TOKEN"}
	}
	if reason := secretName(name); reason != "" {
		return s, &problem{sub: ".name", value: name, reason: reason}
	}
	s.Name = name
	from, ok := m["from"].(string)
	if !ok {
		return s, &problem{sub: ".from", value: m["from"], reason: `is not "env:VAR" or "file:/abs/path"`}
	}
	if reason := secretFrom(from); reason != "" {
		return s, &problem{sub: ".from", value: from, reason: reason}
	}
	s.From = from
	if p, ok := strings.CutPrefix(from, "file:"); ok {
		s.From = "file:" + filepath.Clean(p)
	}
	hosts, ok := m["hosts"].([]any)
	if !ok || len(hosts) == 0 {
		return s, &problem{sub: ".hosts", value: m["hosts"], reason: `is not a non-empty list of host names such as ["github.com", "api.github.com"]`}
	}
	for i, h := range hosts {
		hs, ok := h.(string)
		if !ok {
			return s, &problem{sub: fmt.Sprintf(".hosts[%d]", i), value: h, reason: "is not a string"}
		}
		norm, reason := netPattern(hs)
		if reason == "" {
			if _, err := netip.ParseAddr(strings.Trim(norm, "[]")); err == nil {
				reason = "is an IP address; a secret's hosts must be names (corral's certificate authority mints certificates for names only)"
			}
		}
		if reason != "" {
			return s, &problem{sub: fmt.Sprintf(".hosts[%d]", i), value: h, reason: reason}
		}
		s.Hosts = append(s.Hosts, strings.ToLower(strings.TrimSuffix(norm, ".")))
	}
	if v, ok := m["headers"]; ok && v != nil {
		hdrs, ok := v.([]any)
		if !ok {
			return s, &problem{sub: ".headers", value: v, reason: `is not a list of header names such as ["PRIVATE-TOKEN"]`}
		}
		for i, h := range hdrs {
			hs, ok := h.(string)
			if !ok {
				return s, &problem{sub: fmt.Sprintf(".headers[%d]", i), value: h, reason: "is not a string"}
			}
			if reason := secretHeader(hs); reason != "" {
				return s, &problem{sub: fmt.Sprintf(".headers[%d]", i), value: h, reason: reason}
			}
			s.Headers = append(s.Headers, strings.TrimSpace(hs))
		}
	}
	if v, ok := m["username"]; ok && v != nil {
		u, ok := v.(string)
		if !ok || u == "" || len(u) > 128 || strings.IndexFunc(u, func(r rune) bool { return r <= ' ' || r == ':' || r >= 0x7f }) >= 0 {
			return s, &problem{sub: ".username", value: v, reason: "is not a user name for git's credential helper (printable ASCII, no space or colon, at most 128 bytes)"}
		}
		s.Username = u
	}
	if v, ok := m["files"]; ok && v != nil {
		files, ok := v.([]any)
		if !ok {
			return s, &problem{sub: ".files", value: v, reason: `is not a list of credential files such as ["~/.netrc"]`}
		}
		for i, f := range files {
			fs, ok := f.(string)
			reason := "is not a string"
			if ok {
				reason = secretFile(fs)
			}
			if reason == "" && slices.Contains(s.Files, secretFileClean(fs)) {
				reason = "names a file listed earlier"
			}
			if reason != "" {
				return s, &problem{sub: fmt.Sprintf(".files[%d]", i), value: f, reason: reason}
			}
			s.Files = append(s.Files, secretFileClean(fs))
		}
	}
	return parseSecretKind(s, m)
}

// secretFile returns why f cannot be a secret's credential file, or "":
// it must be absolute or start with "~/" (a relative path would depend on
// where corral runs), name a file below "/" or the home, and hold no NUL.
// Whether it exists, is regular and small enough is checked when a
// command starts (secrets.CredentialFiles).
func secretFile(f string) string {
	switch {
	case strings.IndexByte(f, 0) >= 0:
		return "contains a NUL byte"
	case strings.HasPrefix(f, "~/"):
		if secretFileClean(f) == "~/" {
			return "is the home directory, not a credential file"
		}
		return ""
	case !filepath.IsAbs(f):
		return "is not an absolute path or ~/path (a relative path would depend on where corral runs)"
	case filepath.Clean(f) == "/":
		return "is the root directory, not a credential file"
	}
	return ""
}

// secretFileClean cleans a files entry, keeping a leading "~/".
func secretFileClean(f string) string {
	if rest, ok := strings.CutPrefix(f, "~/"); ok {
		return "~/" + strings.TrimPrefix(filepath.Clean("/"+rest), "/")
	}
	return filepath.Clean(f)
}

// parseSecretKind reads kind, secret_from and secret_name: kind aws (an
// AWS key pair, see sandbox.Secret.Kind) needs secret_from; the other
// two belong to aws only.
func parseSecretKind(s sandbox.Secret, m map[string]any) (sandbox.Secret, *problem) {
	kind, _ := m["kind"].(string)
	if v, ok := m["kind"]; ok && v != nil && kind != "aws" && kind != "token" {
		return s, &problem{sub: ".kind", value: v, reason: `is not "token" (the default) or "aws" (an AWS key pair)`}
	}
	if kind != "aws" {
		for _, f := range []string{"secret_from", "secret_name"} {
			if v, ok := m[f]; ok && v != nil {
				return s, &problem{sub: "." + f, value: v, reason: "belongs to kind: aws only"}
			}
		}
		return s, nil
	}
	s.Kind = "aws"
	from, ok := m["secret_from"].(string)
	if !ok {
		return s, &problem{sub: ".secret_from", value: m["secret_from"], reason: `is not "env:VAR" or "file:/abs/path" (kind aws needs the secret access key's source)`}
	}
	if reason := secretFrom(from); reason != "" {
		return s, &problem{sub: ".secret_from", value: from, reason: reason}
	}
	s.SecretFrom = from
	if p, ok := strings.CutPrefix(from, "file:"); ok {
		s.SecretFrom = "file:" + filepath.Clean(p)
	}
	if v, ok := m["secret_name"]; ok && v != nil {
		name, _ := v.(string)
		if reason := secretName(name); reason != "" {
			return s, &problem{sub: ".secret_name", value: v, reason: reason}
		}
		if name == s.Name {
			return s, &problem{sub: ".secret_name", value: v, reason: "is the key id's variable too"}
		}
		s.SecretName = name
	}
	return s, nil
}

// isVarName reports whether s is a shell identifier.
func isVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range []byte(s) {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// secretName returns why name cannot name a secret's variable, or "".
func secretName(name string) string {
	switch {
	case !isVarName(name):
		return "is not a variable name (letters, digits and _, not starting with a digit)"
	case strings.HasPrefix(strings.ToUpper(name), envPrefix):
		return "starts with CORRAL_, which is corral's own"
	case slices.Contains(reservedSecretNames(), strings.ToUpper(name)):
		return "is a variable corral sets in every sandbox"
	}
	return ""
}

// secretFrom returns why from cannot be a secret's source, or "".
func secretFrom(from string) string {
	if v, ok := strings.CutPrefix(from, "env:"); ok {
		if !isVarName(v) {
			return `is not "env:VAR" with VAR a variable name`
		}
		return ""
	}
	if p, ok := strings.CutPrefix(from, "file:"); ok {
		if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
			return `is not "file:/abs/path" with an absolute path`
		}
		return ""
	}
	return `is not "env:VAR" or "file:/abs/path"`
}

// secretHeader returns why h cannot be a secret's extra header, or "".
func secretHeader(h string) string {
	h = strings.TrimSpace(h)
	if h == "" {
		return "is empty"
	}
	for _, c := range []byte(h) {
		// tchar, RFC 9110 section 5.6.2.
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return "is not an HTTP header name (RFC 9110 section 5.6.2 token)"
		}
	}
	switch strings.ToLower(h) {
	case "host", "connection", "proxy-authorization", "proxy-connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "content-length":
		return "is a header the proxy must not rewrite"
	}
	return ""
}
