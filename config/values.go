package config

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/corralhq/corral/sandbox"
)

// problem is a refused value. sub is appended to the key name to locate the
// value inside a list ("[0].src"); value is the offending value and reason
// the rest of the sentence ("is not an absolute path").
type problem struct {
	sub    string
	value  any
	reason string
}

// homeFunc returns the home directory; it is called only to expand "~".
type homeFunc func() (string, error)

// not returns the usual problem: value is not what k accepts.
func (k *Key) not(value any) *problem {
	return &problem{value: value, reason: "is not " + k.Accepts}
}

// fromText turns text (an environment variable's value, a `config set`
// argument) into the raw value a YAML file would hold for k: the text itself
// for scalar kinds, a decoded sequence for list kinds.
func (k *Key) fromText(text string) (any, *problem) {
	switch k.Kind {
	case KindStringList, KindBinds, KindRoutes, KindSecrets, KindPorts:
	default:
		return text, nil
	}
	t := strings.TrimSpace(text)
	if t == "" {
		return []any{}, nil
	}
	if t[0] != '[' && t[0] != '{' {
		if k.Kind == KindBinds || k.Kind == KindRoutes || k.Kind == KindSecrets {
			return nil, k.not(text)
		}
		var out []any
		for item := range strings.SplitSeq(t, ",") {
			out = append(out, strings.TrimSpace(item))
		}
		return out, nil
	}
	var v any
	if err := yaml.Unmarshal([]byte(t), &v); err != nil {
		return nil, &problem{value: text, reason: "is not valid JSON or YAML (" + yamlMessage(err) + "); want " + k.Accepts}
	}
	if m, ok := v.(map[string]any); ok && (k.Kind == KindBinds || k.Kind == KindRoutes || k.Kind == KindSecrets) {
		return []any{m}, nil
	}
	return v, nil
}

// yamlMessage strips the "yaml: " prefix of go-yaml's errors.
func yamlMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// parse checks raw (as decoded from YAML, or produced by fromText) against k
// and returns the value with the Go type of k's Settings field.
func (k *Key) parse(raw any, home homeFunc) (any, *problem) {
	switch k.Kind {
	case KindString:
		if _, isText := raw.(string); !isText && k.Check != nil {
			if n, isInt := toInt(raw); isInt {
				// A bare number where the value is text with a form of
				// its own (kubernetes.cpus: 2, idle_timeout: 0): YAML
				// reads it as a number; the form's check decides.
				raw = strconv.Itoa(n)
			}
		}
		s, ok := raw.(string)
		if !ok || strings.IndexByte(s, 0) >= 0 {
			return nil, k.not(raw)
		}
		if k.Check != nil {
			norm, reason := k.Check(s)
			if reason != "" {
				return nil, &problem{value: raw, reason: reason + "; want " + k.Accepts}
			}
			s = norm
		}
		return s, nil

	case KindEnum:
		if b, isBool := raw.(bool); isBool {
			raw = strconv.FormatBool(b) // YAML's true/false for a true|false enum
		}
		s, ok := raw.(string)
		if !ok {
			return nil, k.not(raw)
		}
		s = strings.TrimSpace(s)
		if !slices.Contains(k.Values, s) {
			return nil, k.not(raw)
		}
		if k.Name == "profile" {
			p, err := sandbox.ParseProfile(s)
			if err != nil {
				return nil, k.not(raw)
			}
			return p, nil
		}
		return s, nil

	case KindInt:
		n, ok := toInt(raw)
		if !ok || n < k.Min {
			return nil, k.not(raw)
		}
		return n, nil

	case KindDuration:
		var d time.Duration
		if n, ok := toInt(raw); ok {
			if n > math.MaxInt64/int(time.Second) {
				return nil, k.not(raw)
			}
			d = time.Duration(n) * time.Second
		} else if s, ok := raw.(string); ok {
			var err error
			if d, err = time.ParseDuration(strings.TrimSpace(s)); err != nil {
				return nil, k.not(raw)
			}
		} else {
			return nil, k.not(raw)
		}
		if d <= 0 {
			return nil, k.not(raw)
		}
		return d, nil

	case KindPath:
		if raw == nil {
			return nil, &problem{value: raw, reason: `is not a path (YAML reads a bare ~ as null: write "~" in quotes); want ` + k.Accepts}
		}
		s, ok := raw.(string)
		if !ok {
			return nil, k.not(raw)
		}
		if s == "" {
			return "", nil
		}
		p, reason := absPath(s, home)
		if reason != "" {
			return nil, &problem{value: raw, reason: reason + "; want " + k.Accepts}
		}
		return p, nil

	case KindStringList:
		items, ok := raw.([]any)
		if !ok {
			return nil, k.not(raw)
		}
		out := make([]string, 0, len(items))
		for i, it := range items {
			s, ok := it.(string)
			if !ok {
				return nil, &problem{sub: fmt.Sprintf("[%d]", i), value: it, reason: "is not a string; want " + k.Accepts}
			}
			if k.Check != nil {
				norm, reason := k.Check(s)
				if reason != "" {
					return nil, &problem{sub: fmt.Sprintf("[%d]", i), value: it, reason: reason}
				}
				s = norm
			} else if strings.IndexByte(s, 0) >= 0 {
				return nil, &problem{sub: fmt.Sprintf("[%d]", i), value: it, reason: "contains a NUL byte"}
			}
			out = append(out, s)
		}
		return out, nil

	case KindPorts:
		return parsePorts(raw, k.Accepts)

	case KindBinds:
		items, ok := raw.([]any)
		if !ok {
			return nil, k.not(raw)
		}
		out := make([]sandbox.Bind, 0, len(items))
		for i, it := range items {
			b, p := parseBind(it, home)
			if p != nil {
				p.sub = fmt.Sprintf("[%d]", i) + p.sub
				return nil, p
			}
			out = append(out, b)
		}
		return out, nil

	case KindRoutes:
		items, ok := raw.([]any)
		if !ok {
			return nil, k.not(raw)
		}
		out := make([]Route, 0, len(items))
		for i, it := range items {
			r, p := parseRoute(it)
			if p != nil {
				p.sub = fmt.Sprintf("[%d]", i) + p.sub
				return nil, p
			}
			out = append(out, r)
		}
		return out, nil

	case KindSecrets:
		return parseSecrets(raw)
	}
	return nil, &problem{value: raw, reason: "has a kind corral does not know"}
}

// toInt accepts whole numbers as YAML decodes them and as text.
func toInt(raw any) (int, bool) {
	switch v := raw.(type) {
	case int:
		return v, true
	case int64:
		return int(v), true
	case uint64:
		if v > math.MaxInt {
			return 0, false
		}
		return int(v), true
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		return n, err == nil
	}
	return 0, false
}

// bindFields are the fields of a binds entry.
var bindFields = []string{"src", "dest", "readonly"}

// parseBind checks one binds entry; readonly defaults to true.
func parseBind(raw any, home homeFunc) (sandbox.Bind, *problem) {
	m, ok := stringMap(raw)
	if !ok {
		return sandbox.Bind{}, &problem{value: raw, reason: "is not a {src, dest, readonly} mapping"}
	}
	for f := range m {
		if !slices.Contains(bindFields, f) {
			return sandbox.Bind{}, &problem{value: raw, reason: fmt.Sprintf("has unknown field %q (want src, dest, readonly)", f)}
		}
	}
	b := sandbox.Bind{ReadOnly: true}
	src, ok := m["src"]
	if !ok {
		return b, &problem{value: raw, reason: "has no src (the absolute host path to mount)"}
	}
	s, ok := src.(string)
	if !ok {
		return b, &problem{sub: ".src", value: src, reason: "is not an absolute host path"}
	}
	p, reason := absPath(s, home)
	if reason != "" {
		return b, &problem{sub: ".src", value: src, reason: reason}
	}
	b.Src = p
	if dest, ok := m["dest"]; ok && dest != nil {
		s, ok := dest.(string)
		if !ok {
			return b, &problem{sub: ".dest", value: dest, reason: "is not an absolute path inside the sandbox"}
		}
		if s != "" {
			if strings.IndexByte(s, 0) >= 0 {
				return b, &problem{sub: ".dest", value: dest, reason: "contains a NUL byte"}
			}
			if !filepath.IsAbs(s) {
				return b, &problem{sub: ".dest", value: dest, reason: "is not an absolute path inside the sandbox (or empty for the same path as src)"}
			}
			b.Dest = filepath.Clean(s)
		}
	}
	if ro, ok := m["readonly"]; ok {
		v, ok := ro.(bool)
		if !ok {
			return b, &problem{sub: ".readonly", value: ro, reason: "is not true or false"}
		}
		b.ReadOnly = v
	}
	return b, nil
}

// routeFields are the fields of a routes entry.
var routeFields = []string{"sessions", "backend", "profile", "allow", "deny", "secrets", "workspace_mode", "ports"}

// parseRoute checks one routes entry. A field that is null counts as left
// out.
func parseRoute(raw any) (Route, *problem) {
	m, ok := stringMap(raw)
	if !ok {
		return Route{}, &problem{value: raw, reason: "is not a {" + strings.Join(routeFields, ", ") + "} mapping"}
	}
	for f := range m {
		if !slices.Contains(routeFields, f) {
			return Route{}, &problem{value: raw, reason: fmt.Sprintf("has unknown field %q (want %s)", f, strings.Join(routeFields, ", "))}
		}
	}
	var r Route
	text := func(field string) (string, *problem) {
		v, ok := m[field]
		if !ok || v == nil {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", &problem{sub: "." + field, value: v, reason: "is not a string"}
		}
		return strings.TrimSpace(s), nil
	}
	var p *problem
	if r.Sessions, p = text("sessions"); p != nil {
		p.reason += ` (want a glob over session names such as "tg:*")`
		return r, p
	}
	if _, err := globRegexp(r.Sessions); err != nil {
		return r, &problem{sub: ".sessions", value: m["sessions"], reason: "is not a valid glob: " + err.Error()}
	}
	if r.Backend, p = text("backend"); p != nil {
		p.reason += " (want " + orList(BackendNames()) + ")"
		return r, p
	}
	if r.Backend != "" && !slices.Contains(BackendNames(), r.Backend) {
		return r, &problem{sub: ".backend", value: m["backend"], reason: "is not one of " + strings.Join(BackendNames(), ", ")}
	}
	if r.WorkspaceMode, p = text("workspace_mode"); p != nil {
		p.reason += " (want direct or review)"
		return r, p
	}
	if r.WorkspaceMode != "" && r.WorkspaceMode != WorkspaceDirect && r.WorkspaceMode != WorkspaceReview {
		return r, &problem{sub: ".workspace_mode", value: m["workspace_mode"], reason: "is not one of direct, review"}
	}
	var prof string
	if prof, p = text("profile"); p != nil {
		p.reason += " (want " + strings.Join(profileNames(), ", ") + ")"
		return r, p
	}
	if prof != "" {
		pr, err := sandbox.ParseProfile(prof)
		if err != nil {
			return r, &problem{sub: ".profile", value: m["profile"], reason: "is not one of " + strings.Join(profileNames(), ", ")}
		}
		r.Profile = pr
	}
	for _, f := range []struct {
		name string
		dst  *[]string
	}{{"allow", &r.Allow}, {"deny", &r.Deny}} {
		v, ok := m[f.name]
		if !ok || v == nil {
			continue
		}
		items, ok := v.([]any)
		if !ok {
			return r, &problem{sub: "." + f.name, value: v, reason: `is not a list of host names such as ["pypi.org", "*.pythonhosted.org"]`}
		}
		for i, it := range items {
			s, ok := it.(string)
			if !ok {
				return r, &problem{sub: fmt.Sprintf(".%s[%d]", f.name, i), value: it, reason: "is not a string"}
			}
			norm, reason := netPattern(s)
			if reason != "" {
				return r, &problem{sub: fmt.Sprintf(".%s[%d]", f.name, i), value: it, reason: reason}
			}
			*f.dst = append(*f.dst, norm)
		}
	}
	if v, ok := m["ports"]; ok && v != nil {
		ports, p := parsePorts(v, "a list of TCP ports from 1 to 65535 such as [3000, 5173]")
		if p != nil {
			p.sub = ".ports" + p.sub
			return r, p
		}
		r.Ports = ports
	}
	if v, ok := m["secrets"]; ok && v != nil {
		secs, p := parseSecrets(v)
		if p != nil {
			p.sub = ".secrets" + p.sub
			return r, p
		}
		r.Secrets = secs
	}
	return r, nil
}

// parsePorts checks a list of TCP ports (KindPorts, a route's ports):
// numbers, or text of numbers, from 1 to 65535; duplicates are dropped.
func parsePorts(raw any, accepts string) ([]int, *problem) {
	items, ok := raw.([]any)
	if !ok {
		return nil, &problem{value: raw, reason: "is not " + accepts}
	}
	out := make([]int, 0, len(items))
	for i, it := range items {
		n, ok := toInt(it)
		if !ok || n < 1 || n > 65535 {
			return nil, &problem{sub: fmt.Sprintf("[%d]", i), value: it, reason: "is not a TCP port from 1 to 65535"}
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// globs caches the compiled session-name globs, keyed by pattern.
var globs sync.Map // string -> *regexp.Regexp

// globRegexp compiles a session-name glob (see [Route.Sessions]) to an
// anchored regular expression. An empty pattern matches everything.
func globRegexp(pattern string) (*regexp.Regexp, error) {
	if re, ok := globs.Load(pattern); ok {
		return re.(*regexp.Regexp), nil
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		return nil, fmt.Errorf("contains a NUL byte")
	}
	var b strings.Builder
	b.WriteString(`(?s)^`)
	rs := []rune(pattern)
	for i := 0; i < len(rs); i++ {
		switch c := rs[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(rs) {
				return nil, fmt.Errorf(`ends with a lone "\"`)
			}
			i++
			b.WriteString(regexp.QuoteMeta(string(rs[i])))
		case '[':
			j := i + 1
			if j < len(rs) && (rs[j] == '!' || rs[j] == '^') {
				j++
			}
			if j < len(rs) && rs[j] == ']' {
				j++ // a leading ']' is literal
			}
			for j < len(rs) && rs[j] != ']' {
				j++
			}
			if j >= len(rs) {
				return nil, fmt.Errorf(`has a "[" without its "]"`)
			}
			body := rs[i+1 : j]
			b.WriteByte('[')
			if len(body) > 0 && (body[0] == '!' || body[0] == '^') {
				b.WriteByte('^')
				body = body[1:]
			}
			for _, r := range body {
				if r == '\\' || r == '[' || r == ']' || r == '^' {
					b.WriteByte('\\')
				}
				b.WriteRune(r)
			}
			b.WriteByte(']')
			i = j
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteByte('$')
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("bad character set (%v)", err)
	}
	globs.Store(pattern, re)
	return re, nil
}

// listenAddr checks a listen value: empty, or host:port with a numeric
// port. It returns the reason it is refused, or "".
func listenAddr(s string) (string, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", ""
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", "is not a host:port address"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", "has no port number between 0 and 65535"
	}
	return s, ""
}

// bearerToken checks a token value: empty, or at least 16 printable
// characters without spaces (it travels in an HTTP header), once the
// white space around it is dropped: a token kept in a file ends with the
// newline `openssl rand -hex 32 > token` writes, and a Kubernetes Secret
// made from that file (kustomize's secretGenerator, `kubectl create
// secret --from-file`) keeps it in the variable it sets. It returns the
// token and the reason it is refused, or "".
func bearerToken(s string) (string, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", ""
	}
	if len(s) < 16 {
		return "", "is too short to guess safely (generate one with `openssl rand -hex 32`)"
	}
	for _, r := range s {
		if r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' ' {
			return "", "has spaces, control or non-ASCII characters, which an HTTP header cannot carry"
		}
	}
	return s, ""
}

// stringMap accepts the maps YAML and koanf produce.
func stringMap(raw any) (map[string]any, bool) {
	switch m := raw.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			s, ok := k.(string)
			if !ok {
				return nil, false
			}
			out[s] = v
		}
		return out, true
	}
	return nil, false
}

// absPath expands "~" and "~/x" and checks that s is a clean absolute
// path. It returns the reason s is refused, or "".
func absPath(s string, home homeFunc) (string, string) {
	if strings.IndexByte(s, 0) >= 0 {
		return "", "contains a NUL byte"
	}
	if s == "~" || strings.HasPrefix(s, "~/") {
		h, err := home()
		if err != nil {
			return "", "cannot be expanded: " + err.Error()
		}
		s = filepath.Join(h, s[1:])
	}
	if !filepath.IsAbs(s) {
		return "", "is not an absolute path"
	}
	return filepath.Clean(s), ""
}

// homeRelative checks a home_allow entry: a path inside the home
// directory, relative to it. A leading "~/" is dropped.
func homeRelative(s string) (string, string) {
	const want = `; want a path relative to the home directory such as ".config/nvim"`
	if strings.IndexByte(s, 0) >= 0 {
		return "", "contains a NUL byte"
	}
	p := strings.TrimPrefix(strings.TrimSpace(s), "~/")
	switch {
	case p == "":
		return "", "is empty" + want
	case filepath.IsAbs(p) || p == "~":
		return "", "is absolute" + want + " (use binds for other paths)"
	case slices.Contains(strings.Split(p, "/"), ".."):
		return "", `climbs out with ".."` + want
	}
	p = filepath.Clean(p)
	if p == "." {
		return "", "names the home directory itself" + want
	}
	return p, ""
}

// showValue renders a bad value for an error message: strings quoted,
// anything else as JSON.
func showValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case nil:
		return "null"
	}
	if b, err := json.Marshal(jsonSafe(v)); err == nil {
		return string(b)
	}
	return fmt.Sprintf("%v", v)
}

// jsonSafe converts map[any]any, which encoding/json refuses, to
// map[string]any, recursively.
func jsonSafe(v any) any {
	switch v := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[fmt.Sprint(k)] = jsonSafe(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = jsonSafe(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonSafe(e)
		}
		return out
	}
	return v
}

// format renders a typed setting value as text that `corral config set`
// accepts back: scalars plainly, lists as JSON.
func format(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case sandbox.Profile:
		return string(v)
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	case time.Duration:
		return v.String()
	}
	b, err := json.Marshal(jsonValue(v))
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// jsonValue returns v as it should appear in JSON output: durations as Go
// duration strings, nil lists as empty lists, bools as their words.
func jsonValue(v any) any {
	switch v := v.(type) {
	case time.Duration:
		return v.String()
	case bool:
		// A true|false enum's word, as the file holds it.
		return strconv.FormatBool(v)
	case sandbox.Profile:
		return string(v)
	case []string:
		if v == nil {
			return []string{}
		}
	case []sandbox.Bind:
		if v == nil {
			return []sandbox.Bind{}
		}
	case []Route:
		if v == nil {
			return []Route{}
		}
	case []int:
		if v == nil {
			return []int{}
		}
	case []sandbox.Secret:
		if v == nil {
			return []sandbox.Secret{}
		}
	}
	return v
}

// clone copies list values so Settings never share a default's backing
// array.
func clone(v any) any {
	switch v := v.(type) {
	case []string:
		return slices.Clone(v)
	case []sandbox.Bind:
		return slices.Clone(v)
	case []Route:
		return slices.Clone(v)
	case []int:
		return slices.Clone(v)
	case []sandbox.Secret:
		return slices.Clone(v)
	}
	return v
}

// runAs checks a run_as value (sandbox.ParseRunAs).
func runAs(s string) (string, string) {
	s = strings.TrimSpace(s)
	if _, _, err := sandbox.ParseRunAs(s); err != nil {
		_, why, _ := strings.Cut(err.Error(), fmt.Sprintf("run_as %q ", s))
		why, _, _ = strings.Cut(why, " (want ") // the key's Accepts says it
		return "", why
	}
	return s, ""
}

// skillPath checks a skills entry: an absolute path or one starting "~/",
// without NUL bytes; it is cleaned.
func skillPath(s string) (string, string) {
	s = strings.TrimSpace(s)
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "", "contains a NUL byte"
	case strings.HasPrefix(s, "~/"):
		return "~/" + strings.TrimPrefix(filepath.Clean("/"+strings.TrimPrefix(s, "~/")), "/"), ""
	case filepath.IsAbs(s) && filepath.Clean(s) != "/":
		return filepath.Clean(s), ""
	}
	return "", "is not an absolute path or ~/path below /"
}
