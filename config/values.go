package config

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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
	case KindStringList, KindBinds:
	default:
		return text, nil
	}
	t := strings.TrimSpace(text)
	if t == "" {
		return []any{}, nil
	}
	if t[0] != '[' && t[0] != '{' {
		if k.Kind == KindBinds {
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
	if m, ok := v.(map[string]any); ok && k.Kind == KindBinds {
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
		s, ok := raw.(string)
		if !ok || strings.IndexByte(s, 0) >= 0 {
			return nil, k.not(raw)
		}
		return s, nil

	case KindEnum:
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
			if k.item != nil {
				norm, reason := k.item(s)
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
// duration strings, nil lists as empty lists.
func jsonValue(v any) any {
	switch v := v.(type) {
	case time.Duration:
		return v.String()
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
	}
	return v
}
