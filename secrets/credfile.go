package secrets

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/lazyre"
)

// Credential files (issue 26): a secret's files are parsed, and the
// sandbox's copy holds only the entries that carry a declared secret's
// real value, with the stand-in in its place in the encoding the format
// uses there (base64 of user:password in an .npmrc's _auth or a Docker
// config's auth, percent-encoding in a .git-credentials URL). Every other
// credential of the file stays hidden, as the whole file was by default.

// CredentialFormat is a kind of credential file corral can parse.
type CredentialFormat string

// The credential file formats.
const (
	// FormatNpmrc is npm's configuration (.npmrc): "key=value" lines,
	// credentials under "//registry/path/:" prefixes (_authToken, _auth,
	// username and _password, email, certfile, keyfile) or without one.
	FormatNpmrc CredentialFormat = "npmrc"
	// FormatNetrc is .netrc (machine, login, password, account,
	// default, macdef), as curl, git and Python's netrc read it.
	FormatNetrc CredentialFormat = "netrc"
	// FormatGitCredentials is git's credential store: one
	// "scheme://user:password@host/path" URL a line.
	FormatGitCredentials CredentialFormat = "git-credentials"
	// FormatDockerConfig is Docker's config.json: "auths", each registry
	// with "auth" (base64 of user:password), "username", "password",
	// "identitytoken", "registrytoken".
	FormatDockerConfig CredentialFormat = "docker config.json"
	// FormatPypirc is .pypirc, an INI file: a section per index with
	// username and password.
	FormatPypirc CredentialFormat = "pypirc"
	// FormatValueFile is a file that holds one real value and nothing
	// else (a trailing newline aside): a secret's file: source, which a
	// secret may list among its files to show its stand-in there.
	FormatValueFile CredentialFormat = "a secret's value file"
)

// ErrUnparsable means a secret's credential file is not in a format
// corral can parse, or not valid in its format: it is refused rather
// than shown whole. It wraps ErrUnusable.
var ErrUnparsable = fmt.Errorf("%w: credential file", ErrUnusable)

// parseError says why a credential file cannot be parsed; it wraps
// ErrUnparsable.
type parseError struct{ msg string }

func (e *parseError) Error() string { return e.msg }
func (e *parseError) Unwrap() error { return ErrUnparsable }

func unparsable(format string, a ...any) error { return &parseError{fmt.Sprintf(format, a...)} }

// KnownFormats says which files FormatOf knows, for messages.
const KnownFormats = ".npmrc (npmrc), .netrc (_netrc, netrc), .git-credentials (git/credentials), Docker's config.json, .pypirc, and a file that is a secret's file: source"

// FormatOf returns the format of a credential file by its name: the
// first of paths (the entry as given, then the file it leads to) whose
// base name is known; "" when none is. Pure.
func FormatOf(paths ...string) CredentialFormat {
	for _, p := range paths {
		switch base := filepath.Base(p); base {
		case ".npmrc", "npmrc":
			return FormatNpmrc
		case ".netrc", "_netrc", "netrc":
			return FormatNetrc
		case ".git-credentials", "git-credentials":
			return FormatGitCredentials
		case "credentials":
			if filepath.Base(filepath.Dir(p)) == "git" {
				return FormatGitCredentials
			}
		case "config.json":
			return FormatDockerConfig
		case ".pypirc":
			return FormatPypirc
		}
	}
	return ""
}

// standIns maps each real value of secs (for kind aws, both halves) to
// its stand-in.
func standIns(secs []Secret) map[string]string {
	m := map[string]string{}
	for _, s := range secs {
		if s.Value != "" {
			m[s.Value] = s.StandIn
		}
		if s.Kind == KindAWS && s.SecretValue != "" {
			m[s.SecretValue] = s.SecretStandIn
		}
	}
	return m
}

// FilterCredentials returns the sandbox's copy of data, a credential file
// of format f: only the entries that hold a real value of secs, each with
// that value replaced by its stand-in in the format's encoding; entries
// that hold other credentials are left out (their identity fields, such
// as a login, with them), and so are comments, which may hold anything.
// Settings that are no credentials (an .npmrc's registry, a .pypirc's
// [distutils]) are kept as they are, unless they hold a URL with a
// password, which then counts as a credential. Errors wrap ErrUnparsable,
// name the line or field, and never quote a value. Pure.
func FilterCredentials(f CredentialFormat, data []byte, secs []Secret) ([]byte, error) {
	vals := standIns(secs)
	switch f {
	case FormatNpmrc:
		return filterNpmrc(data, vals)
	case FormatNetrc:
		return filterNetrc(data, vals)
	case FormatGitCredentials:
		return filterGitCredentials(data, vals)
	case FormatDockerConfig:
		return filterDockerConfig(data, vals)
	case FormatPypirc:
		return filterPypirc(data, vals)
	case FormatValueFile:
		v, end := string(data), ""
		for _, e := range []string{"\r\n", "\n"} {
			if strings.HasSuffix(v, e) {
				v, end = strings.TrimSuffix(v, e), e
				break
			}
		}
		nv, ok := vals[v]
		if !ok {
			return nil, unparsable("the file holds more than a secret's value")
		}
		return []byte(nv + end), nil
	}
	return nil, unparsable("corral parses %s only", KnownFormats)
}

// lines splits data into lines without their ends ("\n" or "\r\n").
func lines(data []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, MaxCredentialFileBytes+1)
	for sc.Scan() {
		out = append(out, strings.TrimSuffix(sc.Text(), "\r"))
	}
	return out
}

// basicPair decodes base64 "user:password"; ok false when it is not.
func basicPair(v string) (user, pass string, ok bool) {
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return "", "", false
	}
	user, pass, ok = strings.Cut(string(raw), ":")
	return user, pass, ok
}

// swapBasic returns base64 "user:password" v with a user or password
// that is a real value replaced by its stand-in, and whether one was.
func swapBasic(v string, vals map[string]string) (string, bool) {
	user, pass, ok := basicPair(v)
	if !ok {
		return v, false
	}
	nu, uok := vals[user]
	np, pok := vals[pass]
	if !uok && !pok {
		return v, false
	}
	if uok {
		user = nu
	}
	if pok {
		pass = np
	}
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass)), true
}

// urlPassword matches a URL with a user and password, for settings that
// hold one.
var urlPassword = lazyre.New(`[A-Za-z][A-Za-z0-9+.-]*://[^/@\s"']*:[^/@\s"']*@`)

// swapURLs returns v with each URL password (or user) that is a real
// value replaced by its stand-in (percent-encoded as URLs are); ok false
// when v holds a URL with a password that is not one (v must then be
// hidden).
func swapURLs(v string, vals map[string]string) (string, bool) {
	ok := true
	out := urlPassword.Get().ReplaceAllStringFunc(v, func(m string) string {
		scheme, rest, _ := strings.Cut(m, "://")
		userinfo := strings.TrimSuffix(rest, "@")
		eu, ep, _ := strings.Cut(userinfo, ":")
		user, err1 := url.PathUnescape(eu)
		pass, err2 := url.PathUnescape(ep)
		nu, uok := vals[user]
		np, pok := vals[pass]
		if err1 != nil || err2 != nil || !uok && !pok {
			ok = false
			return m
		}
		if uok {
			eu = url.PathEscape(nu)
		}
		if pok {
			ep = url.PathEscape(np)
		}
		return scheme + "://" + eu + ":" + ep + "@"
	})
	return out, ok
}

// npmSecret returns how an .npmrc key's value is encoded when the key is
// a credential ("raw", "basic": base64 of user:password, "base64"), else
// ""; npmIdentityKeys go with them.
func npmSecret(key string) string {
	switch key {
	case "_authToken", "password":
		return "raw"
	case "_auth":
		return "basic"
	case "_password":
		return "base64"
	}
	return ""
}

var npmIdentityKeys = []string{"username", "email", "certfile", "keyfile", "always-auth"}

// npmNeverKeys are .npmrc keys whose values are credentials that no
// declared secret stands for (an inline TLS client key and its
// certificate, npm's "key" and "cert"; a one-time password): a copy never
// holds them.
var npmNeverKeys = []string{"key", "cert", "otp"}

// urlQueryCredential matches a URL query parameter whose name says it
// carries a credential (?access_token=, &api_key=, &sig=, ...), with its
// value in group 2: registries take tokens that way too.
var urlQueryCredential = lazyre.New(`(?i)([?&](?:[a-z0-9_.-]*(?:token|auth|key|secret|passw|pass|pwd|sig|signature|credential|session)[a-z0-9_.-]*)=)([^&#\s"']*)`)

// swapURLQueries returns v with each credential query value (see
// urlQueryCredential) that is a real value replaced by its stand-in
// (query-escaped); ok false when one is not a real value (v must then be
// hidden).
func swapURLQueries(v string, vals map[string]string) (string, bool) {
	ok := true
	re := urlQueryCredential.Get()
	out := re.ReplaceAllStringFunc(v, func(m string) string {
		sub := re.FindStringSubmatch(m)
		val, err := url.QueryUnescape(sub[2])
		if sub[2] == "" || strings.Contains(sub[2], "${") {
			return m
		}
		nv, found := vals[val]
		if err != nil || !found {
			ok = false
			return m
		}
		return sub[1] + url.QueryEscape(nv)
	})
	return out, ok
}

// npmLine is one line of an .npmrc.
type npmLine struct {
	text       string // as written
	scope, key string // scope "//host/path/:" or ""; key "" for a blank line
	valueAt    int    // where the value starts in text
	value      string // unquoted
}

// filterNpmrc: see FilterCredentials. A group is a scope ("//host/path/:"
// or none): its credential lines and identity lines are kept together
// when one credential is a declared value, left out together when one
// is another credential. A credential that names a variable ("${VAR}")
// is no value and is kept as written.
func filterNpmrc(data []byte, vals map[string]string) ([]byte, error) {
	var ls []npmLine
	declared, other := map[string]bool{}, map[string]bool{}
	for i, text := range lines(data) {
		t := strings.TrimSpace(text)
		if t == "" {
			ls = append(ls, npmLine{text: text})
			continue
		}
		if t[0] == '#' || t[0] == ';' {
			continue
		}
		if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
			ls = append(ls, npmLine{text: text, key: "[section]"})
			continue
		}
		k, _, found := strings.Cut(text, "=")
		if !found {
			return nil, unparsable(".npmrc line %d is not key=value", i+1)
		}
		l := npmLine{text: text, valueAt: len(k) + 1}
		l.key = strings.TrimSpace(k)
		raw := strings.TrimSpace(text[l.valueAt:])
		l.valueAt = strings.Index(text[l.valueAt:], raw) + l.valueAt
		l.value = raw
		if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
			if err := json.Unmarshal([]byte(raw), &l.value); err != nil {
				return nil, unparsable(".npmrc line %d has a quoted value that does not end well", i+1)
			}
		}
		if strings.HasPrefix(l.key, "//") {
			if j := strings.LastIndex(l.key, ":"); j > 0 {
				l.scope, l.key = l.key[:j+1], l.key[j+1:]
			}
		}
		if enc := npmSecret(l.key); enc != "" && !strings.Contains(l.value, "${") {
			if _, ok := npmSwap(enc, l.value, vals); ok {
				declared[l.scope] = true
			} else {
				other[l.scope] = true
			}
		}
		ls = append(ls, l)
	}
	var b strings.Builder
	for _, l := range ls {
		switch {
		case l.key == "" || l.key == "[section]":
			b.WriteString(l.text)
		case slices.Contains(npmNeverKeys, l.key):
			continue
		case l.scope != "" && npmSecret(l.key) == "" && !slices.Contains(npmIdentityKeys, l.key):
			// A key of a registry's scope that npm does not define as a
			// credential or an identity (an "authToken" some tool reads,
			// say): its value may be one. It is kept only as a declared
			// value's stand-in.
			nv, ok := vals[l.value]
			if !ok {
				continue
			}
			b.WriteString(l.text[:l.valueAt] + nv)
		case npmSecret(l.key) != "" || slices.Contains(npmIdentityKeys, l.key):
			if !declared[l.scope] && (other[l.scope] || npmSecret(l.key) != "" && !strings.Contains(l.value, "${")) {
				continue
			}
			v := l.value
			if enc := npmSecret(l.key); enc != "" && !strings.Contains(v, "${") {
				nv, ok := npmSwap(enc, v, vals)
				if !ok {
					continue // another credential in a declared group
				}
				v = nv
			}
			b.WriteString(l.text[:l.valueAt] + v)
		default:
			v, ok := swapURLs(l.value, vals)
			if !ok {
				continue
			}
			if v, ok = swapURLQueries(v, vals); !ok {
				continue
			}
			if v == l.value {
				b.WriteString(l.text)
			} else {
				b.WriteString(l.text[:l.valueAt] + v)
			}
		}
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}

// npmSwap replaces the real value in an .npmrc credential encoded as enc
// ("raw", "base64" of a password, "basic" base64 user:password).
func npmSwap(enc, v string, vals map[string]string) (string, bool) {
	switch enc {
	case "raw":
		nv, ok := vals[v]
		return nv, ok
	case "base64":
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return v, false
		}
		nv, ok := vals[string(raw)]
		return base64.StdEncoding.EncodeToString([]byte(nv)), ok
	case "basic":
		return swapBasic(v, vals)
	}
	return v, false
}

// netrcEntry is one machine (or default) of a .netrc.
type netrcEntry struct {
	machine string // "" for default
	fields  [][2]string
}

// netrcTokens splits a .netrc into tokens: words separated by white
// space, or double-quoted strings with backslash escapes (as curl reads
// them); a macdef's body (up to an empty line) is one token.
func netrcTokens(data []byte) ([]string, error) {
	var out []string
	s := string(data)
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"':
			var b strings.Builder
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, unparsable(".netrc has a quoted string without its end")
			}
			i++
			out = append(out, b.String())
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\r\n", rune(s[j])) {
				j++
			}
			out = append(out, s[i:j])
			i = j
			if out[len(out)-1] == "macdef" {
				// The name, then the body up to an empty line.
				for i < len(s) && s[i] != '\n' {
					i++
				}
				end := strings.Index(s[i:], "\n\n")
				if end < 0 {
					end = len(s) - i
				}
				out = append(out, "\x00macro")
				i += end
			}
		}
	}
	return out, nil
}

// filterNetrc: see FilterCredentials. An entry is kept when its
// password, account or login is a declared value, written again as one
// line; macros are left out.
func filterNetrc(data []byte, vals map[string]string) ([]byte, error) {
	toks, err := netrcTokens(data)
	if err != nil {
		return nil, err
	}
	var ents []netrcEntry
	for i := 0; i < len(toks); i++ {
		switch t := toks[i]; t {
		case "machine", "default":
			e := netrcEntry{}
			if t == "machine" {
				if i+1 >= len(toks) {
					return nil, unparsable(".netrc ends with a machine without a name")
				}
				i++
				e.machine = toks[i]
			}
			ents = append(ents, e)
		case "login", "password", "account":
			if len(ents) == 0 || i+1 >= len(toks) {
				return nil, unparsable(".netrc has %s outside a machine or without a value", t)
			}
			i++
			ents[len(ents)-1].fields = append(ents[len(ents)-1].fields, [2]string{t, toks[i]})
		case "macdef":
			i++ // the macro's placeholder
		default:
			return nil, unparsable(".netrc has the unknown word %q (want machine, default, login, password, account, macdef)", clip(t))
		}
	}
	var b strings.Builder
	for _, e := range ents {
		keep := false
		for _, f := range e.fields {
			if _, ok := vals[f[1]]; ok {
				keep = true
			}
		}
		if !keep {
			continue
		}
		if e.machine == "" {
			b.WriteString("default")
		} else {
			b.WriteString("machine " + netrcQuote(e.machine))
		}
		for _, f := range e.fields {
			v, ok := vals[f[1]]
			if !ok {
				if f[0] != "login" {
					continue // another credential of a declared entry
				}
				v = f[1]
			}
			b.WriteString(" " + f[0] + " " + netrcQuote(v))
		}
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}

// netrcQuote quotes a .netrc token that needs it.
func netrcQuote(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\r\n\"\\#") {
		return v
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// clip shortens a word for a message (it might be a value).
func clip(s string) string {
	if len(s) > 12 {
		return s[:4] + "..."
	}
	return s
}

// filterGitCredentials: see FilterCredentials. A line is kept when its
// password or user, percent-decoded, is a declared value.
func filterGitCredentials(data []byte, vals map[string]string) ([]byte, error) {
	var b strings.Builder
	for i, l := range lines(data) {
		t := strings.TrimSpace(l)
		if t == "" {
			continue
		}
		u, err := url.Parse(t)
		if err != nil || u.User == nil || u.Host == "" || u.Scheme == "" {
			return nil, unparsable(".git-credentials line %d is not a URL with a user and password", i+1)
		}
		user := u.User.Username()
		pass, _ := u.User.Password()
		nu, uok := vals[user]
		np, pok := vals[pass]
		if !uok && !pok {
			continue
		}
		if uok {
			user = nu
		}
		if pok {
			pass = np
		}
		u.User = url.UserPassword(user, pass)
		b.WriteString(u.String() + "\n")
	}
	return []byte(b.String()), nil
}

// dockerSecretFields are the credential fields of a Docker config's auths
// entry (besides auth, base64 user:password).
var dockerSecretFields = []string{"password", "identitytoken", "registrytoken"}

// filterDockerConfig: see FilterCredentials. Only "auths" is kept, with
// the registries whose auth, password or token is a declared value;
// credsStore, credHelpers and the rest are left out (they send the
// client to other credentials).
func filterDockerConfig(data []byte, vals map[string]string) ([]byte, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, unparsable("Docker config.json is not a JSON object")
	}
	var auths map[string]map[string]any
	if raw, ok := cfg["auths"]; ok {
		if err := json.Unmarshal(raw, &auths); err != nil {
			return nil, unparsable("Docker config.json's auths is not an object of objects")
		}
	}
	kept := map[string]map[string]any{}
	for reg, e := range auths {
		out := map[string]any{}
		declared := false
		for k, v := range e {
			s, isStr := v.(string)
			switch {
			case k == "auth" && isStr:
				if nv, ok := swapBasic(s, vals); ok {
					out[k], declared = nv, true
				}
			case slices.Contains(dockerSecretFields, k) && isStr:
				if nv, ok := vals[s]; ok {
					out[k], declared = nv, true
				}
			case k == "auth" || slices.Contains(dockerSecretFields, k):
				return nil, unparsable("Docker config.json's auths[%q].%s is not a string", reg, k)
			default:
				out[k] = v
			}
		}
		if declared {
			kept[reg] = out
		}
	}
	b, err := json.MarshalIndent(map[string]any{"auths": kept}, "", "\t")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// filterPypirc: see FilterCredentials. A section with a password is kept
// when it is a declared value, else left out with its username; sections
// without one ([distutils], an index's repository alone) are kept.
func filterPypirc(data []byte, vals map[string]string) ([]byte, error) {
	type section struct {
		lines    []string
		password int // index in lines, -1 when none
		declared bool
	}
	var secs []*section
	cur := &section{password: -1}
	secs = append(secs, cur)
	key := ""
	for i, l := range lines(data) {
		t := strings.TrimSpace(l)
		switch {
		case t == "" || t[0] == '#' || t[0] == ';':
			continue
		case strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]"):
			cur = &section{password: -1, lines: []string{l}}
			secs = append(secs, cur)
			key = ""
			continue
		case l[0] == ' ' || l[0] == '\t':
			if key == "" {
				return nil, unparsable(".pypirc line %d continues no setting", i+1)
			}
			if key == "password" {
				return nil, unparsable(".pypirc line %d continues a password over lines", i+1)
			}
			cur.lines = append(cur.lines, l)
			continue
		}
		j := strings.IndexAny(l, "=:")
		if j <= 0 || len(cur.lines) == 0 {
			return nil, unparsable(".pypirc line %d is not a [section] or a key = value in one", i+1)
		}
		key = strings.ToLower(strings.TrimSpace(l[:j]))
		if key == "password" {
			v := strings.TrimSpace(l[j+1:])
			nv, ok := vals[v]
			if ok {
				cur.declared = true
				l = l[:j+1] + " " + nv
			}
			cur.password = len(cur.lines)
		}
		cur.lines = append(cur.lines, l)
	}
	var b strings.Builder
	for _, s := range secs {
		if s.password >= 0 && !s.declared {
			continue
		}
		for _, l := range s.lines {
			b.WriteString(l + "\n")
		}
	}
	return []byte(b.String()), nil
}
