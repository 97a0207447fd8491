package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/sandbox"
)

// Entry is one setting's effective value, as `corral config get` and
// `corral config list` show it.
type Entry struct {
	// Key is the setting's name ("memory_mb").
	Key string `json:"key"`
	// Value is the effective value in a JSON-friendly form: string, int,
	// []string or []sandbox.Bind; durations are Go duration strings
	// ("3m0s") and lists are never nil.
	Value any `json:"value"`
	// Text is Value as text that `corral config set` accepts back: scalars
	// plainly, lists as JSON.
	Text string `json:"-"`
	// Source is the layer the value came from.
	Source Source `json:"source"`
	// Origin is the file's path for SourceFile and the variable's name for
	// SourceEnv, else empty.
	Origin string `json:"origin,omitempty"`
	// Doc is the key's one-line description.
	Doc string `json:"doc"`
	// Builtin is set when the key is unset and Value is the built-in
	// list it then means (protected_paths, approval_patterns).
	Builtin bool `json:"builtin,omitempty"`
}

func entry(s *Settings, k *Key) Entry {
	v, _ := s.Value(k.Name)
	src, where := s.Source(k.Name)
	e := Entry{Key: k.Name, Value: jsonValue(v), Text: format(v), Source: src, Origin: where, Doc: k.Doc}
	if l, isList := v.([]string); isList && l == nil && k.builtin != nil {
		// Unset means the built-in list ([] would mean none): show it.
		e.Value, e.Text = k.builtin(), format(k.builtin())
		e.Builtin = true
	}
	if secretKey(k.Name) && e.Text != "" {
		// Shown only as set or not: `config list` output ends up in
		// terminals, logs and bug reports.
		e.Value, e.Text = "(set, hidden)", "(set, hidden)"
	}
	return e
}

// secretKey reports whether a setting's value `corral config get/list`
// never prints.
func secretKey(name string) bool { return name == "token" }

// Get returns the effective value of key, as [Load] computes it from the
// file at path ("" as for Load) and the process environment. Errors are an
// *UnknownKeyError for a key the registry does not know, or whatever Load
// returns.
func Get(path, key string) (Entry, error) {
	return get(path, key, os.Environ())
}

func get(path, key string, environ []string) (Entry, error) {
	k, err := lookupKey(key)
	if err != nil {
		return Entry{}, err
	}
	s, err := Load(path, environ)
	if err != nil {
		return Entry{}, err
	}
	return entry(s, k), nil
}

// List returns the effective value of every key, in registry order, as
// [Load] computes it from the file at path ("" as for Load) and the process
// environment.
func List(path string) ([]Entry, error) {
	return list(path, os.Environ())
}

func list(path string, environ []string) ([]Entry, error) {
	s, err := Load(path, environ)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(registry()))
	for i := range registry() {
		out[i] = entry(s, &registry()[i])
	}
	return out, nil
}

// Set stores key = value in the settings file at path ("" as for Load),
// after checking value with the registry; a bad value is a *ValueError and
// leaves the file alone. value is written as for the environment: scalars
// plainly, lists as JSON or YAML flow syntax (`[{src: /data}]`,
// `[".gitconfig"]`) or, for string lists, comma-separated.
//
// The file and its parent directories are created when missing (mode 0600
// and 0700); an existing file keeps its mode, its other keys and its
// comments. Nested keys are stored nested (docker.image as docker: {image:
// ...}). The new contents are written to a temporary file in the same
// directory and renamed over the old one, so readers see either version
// whole; a symlinked settings file is updated at its target. Other keys
// of the file are not checked, so Set can repair a file one key at a time.
func Set(path, key, value string) error {
	return set(path, key, value, os.Environ())
}

func set(path, key, value string, environ []string) error {
	k, err := lookupKey(key)
	if err != nil {
		return err
	}
	getenv := lookupIn(environ)
	home := homeOnce(getenv)
	v, err := k.fromUser(value, home, "", "")
	if err != nil {
		return err
	}
	node, err := valueNode(k, value, v)
	if err != nil {
		return err
	}
	if path, err = resolvePath(path, getenv, home); err != nil {
		return err
	}
	doc, err := readDoc(path)
	if err != nil {
		return err
	}
	setIn(doc.Content[0], strings.Split(k.Name, "."), node)
	return writeDoc(path, doc)
}

// Unset removes key from the settings file at path ("" as for Load), so
// that the environment or the default applies again. It reports whether
// the key was in the file; a missing file or key is not an error. A key
// the registry does not know can be removed too (to repair a typo), but is
// an *UnknownKeyError when the file does not hold it. The file is
// rewritten as by [Set], and a section left empty (docker: after
// docker.image) is removed with it.
func Unset(path, key string) (bool, error) {
	return unset(path, key, os.Environ())
}

func unset(path, key string, environ []string) (bool, error) {
	getenv := lookupIn(environ)
	path, err := resolvePath(path, getenv, homeOnce(getenv))
	if err != nil {
		return false, err
	}
	_, known := byName()[key]
	if key == "" {
		known = false
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		if !known {
			return false, &UnknownKeyError{Key: key}
		}
		return false, nil
	}
	doc, err := readDoc(path)
	if err != nil {
		return false, err
	}
	if key == "" || !unsetIn(doc.Content[0], strings.Split(key, ".")) {
		if !known {
			return false, &UnknownKeyError{Key: key}
		}
		return false, nil
	}
	return true, writeDoc(path, doc)
}

// valueNode returns the YAML node Set stores for k: the canonical value,
// except that scalars keep the user's spelling where it is valid as is
// ("5m" stays "5m", "~/src" stays "~/src").
func valueNode(k *Key, text string, v any) (*yaml.Node, error) {
	var out any
	switch k.Kind {
	case KindInt:
		out = v.(int)
	case KindDuration:
		if n, ok := toInt(text); ok {
			out = n
		} else {
			out = strings.TrimSpace(text)
		}
	case KindEnum:
		out = format(v)
	case KindString, KindPath:
		out = text
	case KindStringList:
		out = v.([]string)
	case KindBinds:
		out = v.([]sandbox.Bind)
	case KindRoutes:
		out = v.([]Route)
	case KindPorts:
		out = v.([]int)
	case KindSecrets:
		out = v.([]sandbox.Secret)
	default:
		return nil, fmt.Errorf("config: key %s has a kind Set does not know", k.Name)
	}
	n := &yaml.Node{}
	if err := n.Encode(out); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", k.Name, err)
	}
	return n, nil
}

// readDoc parses the settings file as a YAML document whose root is a
// mapping; a missing or empty file gives an empty mapping.
func readDoc(path string) (*yaml.Node, error) {
	data, err := readSettings(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("cannot read settings file %s: %w", path, err)
	}
	doc := &yaml.Node{}
	if len(data) > 0 {
		if err := yaml.Unmarshal(data, doc); err != nil {
			return nil, fmt.Errorf("settings file %s is not valid YAML: %s", path, yamlMessage(err))
		}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		doc = &yaml.Node{
			Kind:        yaml.DocumentNode,
			HeadComment: "corral settings; `corral config list` shows every key",
			Content:     []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}},
		}
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		*root = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", HeadComment: root.HeadComment}
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("settings file %s is not a YAML mapping of settings (key: value lines)", path)
	}
	return doc, nil
}

// find returns the index in mapping m of the key node named name, or -1.
func find(m *yaml.Node, name string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name {
			return i
		}
	}
	return -1
}

// setIn stores val under the key path parts in mapping m. At each level a
// flat dotted key already in the file ("docker.image: x") is preferred, so
// Set never writes a second copy of a key; new keys are nested.
func setIn(m *yaml.Node, parts []string, val *yaml.Node) {
	for i := len(parts); i >= 1; i-- {
		j := find(m, strings.Join(parts[:i], "."))
		if j < 0 {
			continue
		}
		if i == len(parts) {
			old := m.Content[j+1]
			val.LineComment = old.LineComment
			m.Content[j+1] = val
			return
		}
		child := m.Content[j+1]
		if child.Kind != yaml.MappingNode {
			child = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			m.Content[j+1] = child
		}
		setIn(child, parts[i:], val)
		return
	}
	key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: parts[0]}
	if len(parts) == 1 {
		m.Content = append(m.Content, key, val)
		return
	}
	child := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	m.Content = append(m.Content, key, child)
	setIn(child, parts[1:], val)
}

// unsetIn removes the key path parts from mapping m, and any mapping the
// removal leaves empty, reporting whether the key was there.
func unsetIn(m *yaml.Node, parts []string) bool {
	for i := len(parts); i >= 1; i-- {
		j := find(m, strings.Join(parts[:i], "."))
		if j < 0 {
			continue
		}
		if i == len(parts) {
			m.Content = append(m.Content[:j], m.Content[j+2:]...)
			return true
		}
		child := m.Content[j+1]
		if child.Kind == yaml.MappingNode && unsetIn(child, parts[i:]) {
			if len(child.Content) == 0 {
				m.Content = append(m.Content[:j], m.Content[j+2:]...)
			}
			return true
		}
	}
	return false
}

// writeDoc encodes doc and writes it to path atomically.
func writeDoc(path string, doc *yaml.Node) error {
	var buf bytes.Buffer
	root := doc.Content[0]
	if len(root.Content) > 0 || doc.HeadComment != "" || root.HeadComment != "" || doc.FootComment != "" || root.FootComment != "" {
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(doc); err != nil {
			return fmt.Errorf("encoding settings file %s: %w", path, err)
		}
		if err := enc.Close(); err != nil {
			return fmt.Errorf("encoding settings file %s: %w", path, err)
		}
	}
	return writeAtomic(path, buf.Bytes())
}

// writeAtomic replaces the file at path (or, when path is a symlink, its
// target) with data: it writes a temporary file in the same directory,
// syncs it and renames it over the old one. Missing parent directories are
// created with mode 0700; a new file gets mode 0600, an existing one keeps
// its mode. The temporary file is removed on failure.
func writeAtomic(path string, data []byte) (err error) {
	target := path
	if real, err := filepath.EvalSymlinks(path); err == nil {
		target = real
	}
	dir := filepath.Dir(target)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating settings directory: %w", err)
	}
	mode := fs.FileMode(0o600)
	if st, err := os.Stat(target); err == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("settings file %s is not a regular file", target)
		}
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(target)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing settings file %s: %w", target, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("writing settings file %s: %w", target, err)
	}
	if err = tmp.Chmod(mode); err != nil {
		return fmt.Errorf("writing settings file %s: %w", target, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("writing settings file %s: %w", target, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing settings file %s: %w", target, err)
	}
	if err = os.Rename(tmp.Name(), target); err != nil {
		return fmt.Errorf("writing settings file %s: %w", target, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() // best effort: make the rename durable
		d.Close()
	}
	return nil
}

// maxSettingsFile bounds a settings file: a person's settings are a few
// kilobytes; a device such as /dev/zero would otherwise be read forever.
const maxSettingsFile = 1 << 20

// readSettings returns the settings file's bytes. It refuses what is not
// a regular file (a fifo would block open(2) and read(2), a device read
// without end) and a file over maxSettingsFile: opened with O_NONBLOCK,
// checked with fstat(2) before a byte is read. Following a symlink is
// fine: it is the person's own file. A missing file's error matches
// fs.ErrNotExist; the others are *fs.PathError.
func readSettings(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("not a regular file (%s): corral reads its settings only from a regular file", fi.Mode().Type())}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSettingsFile+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if len(b) > maxSettingsFile {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("over %d bytes: not a settings file", maxSettingsFile)}
	}
	return b, nil
}

// settingsFile is a koanf.Provider of the settings file's bytes, read by
// readSettings (koanf's file provider reads whatever is at the path).
type settingsFile string

// ReadBytes implements koanf.Provider.
func (p settingsFile) ReadBytes() ([]byte, error) { return readSettings(string(p)) }

// Read implements koanf.Provider; a parser is always given.
func (p settingsFile) Read() (map[string]any, error) {
	return nil, errors.New("settingsFile: needs a parser")
}
