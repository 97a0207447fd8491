package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	koanfenv "github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/v2"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/startdir"
	"github.com/corralhq/corral/sandbox"
)

// Settings are corral's effective settings: one typed field per key of
// corral's own, and each backend's keys in its section's struct
// ([Settings.Section], [RegisterSection]). The zero value is not useful;
// get one from [Load] or [Defaults].
type Settings struct {
	// Backend is the sandbox backend, one of BackendNames (key
	// backend).
	Backend string
	// Profile selects write and network access (key profile).
	Profile sandbox.Profile
	// MemoryMB caps memory, in MiB (sandbox.Limits.MemoryMB); 0
	// disables (key memory_mb).
	MemoryMB int
	// CPUSeconds caps each process's CPU time, in seconds; 0 disables
	// (key cpu_seconds).
	CPUSeconds int
	// MaxProcs caps the processes and threads of a command; 0 disables
	// (key max_procs).
	MaxProcs int
	// Binds are extra mounts; Src and Dest are clean absolute paths (Dest
	// may be empty, meaning Src) and ReadOnly defaults to true (key binds).
	Binds []sandbox.Bind
	// HomeAllow lists clean paths relative to the home directory, never
	// absolute, empty or climbing out with ".." (key home_allow).
	HomeAllow []string
	// Skills are directories of agent skills shown read-only at their host
	// paths in every sandbox (key skills): absolute or "~/..." paths; ones
	// that do not exist are left out.
	Skills []string
	// Cwd is the commands' working directory: a clean absolute path with
	// "~" expanded, or "" for the directory corral was started in (key cwd).
	Cwd string
	// Timeout ends a command after this long; always > 0 (key timeout).
	Timeout time.Duration
	// HomeMode is HomeModeHost or HomeModeSession (key home_mode).
	HomeMode string
	// WorkspaceMode is WorkspaceDirect or WorkspaceReview (key
	// workspace_mode).
	WorkspaceMode string
	// ToolCaches is ToolCachesShared, ToolCachesSession or ToolCachesOff
	// (key tool_caches).
	ToolCaches string
	// DegradedMode is DegradedDegrade or DegradedFail (key degraded_mode,
	// deprecated: nothing reads it; see Key.Deprecated).
	DegradedMode string
	// TmpSizeMB is the size of /tmp and /dev/shm in MiB (key tmp_size_mb).
	TmpSizeMB int
	// EnvDeny and EnvAllow adjust the environment deny list (keys env_deny,
	// env_allow): name patterns as in hostview.DefaultEnvDeny.
	EnvDeny, EnvAllow []string
	// RunAs is the host identity that holds sandboxes when corral runs as
	// root (key run_as; see bwrap.Options.RunAs).
	RunAs string
	// Bwrap is the bwrap executable, or "" for the fixed system locations
	// (key bwrap, CORRAL_BWRAP).
	Bwrap string
	// OutputLimit is the number of bytes of output shown to agents before
	// it is cut; always > 0 (key output_limit).
	OutputLimit int
	// Routes choose the backend and profile by session name, first match
	// winning (key routes); see [Settings.ForSession].
	Routes []Route
	// Listen is the host:port `corral serve` listens on, or "" for
	// [DefaultListen] (key listen).
	Listen string
	// Token is the bearer token HTTP clients must present, or "" for the one
	// `corral serve` makes and keeps in the state directory;
	// when set it is at least 16 characters without spaces (key token,
	// CORRAL_TOKEN).
	Token string
	// Approval is ApprovalAsk or ApprovalOff: what happens to commands that
	// match ApprovalPatterns (key approval).
	Approval string
	// ApprovalPatterns are the dangerous command patterns, in the syntax of
	// package approval, each one checked and trimmed; empty means
	// approval.DefaultPatterns (key approval_patterns).
	ApprovalPatterns []string
	// AuditMaxMB is the size in MiB at which the audit log is rotated;
	// always > 0 (key audit_max_mb).
	AuditMaxMB int
	// NetworkAllow and NetworkDeny are the host lists of the allowlist
	// profile (keys network.allow, network.deny): each entry passed
	// netproxy.ValidatePattern and is trimmed ("example.com",
	// "*.example.com", an IP address); deny is checked first. A route's
	// allow and deny replace them for the sessions it catches (see
	// [Settings.ForSession]).
	NetworkAllow, NetworkDeny []string
	// Ports are the TCP ports of a session's background servers that the
	// MCP server forwards to the host's loopback once one listens (key
	// ports; see package portfwd).
	Ports []int
	// Secrets are the credentials commands use through stand-ins (key
	// secrets; see sandbox.Secret), each checked by [parseSecrets]. A
	// route's secrets replace them for the sessions it catches.
	Secrets []sandbox.Secret
	// ProtectedPaths are the protected-path patterns (key protected_paths):
	// nil when the key is not set (sandbox.DefaultProtected applies), an
	// empty non-nil list when it is set to [] (nothing is protected).
	ProtectedPaths []string
	// Path is the settings file Load consulted, whether or not it exists;
	// empty for Defaults.
	Path string

	origins map[string]origin
	// sections are the backends' sections (RegisterSection) by name, each
	// a pointer to the section's struct; Section returns them.
	sections map[string]any
}

// origin records where one key's value came from.
type origin struct {
	source Source
	where  string // file path or variable name
}

// SourceFlag marks a value given to [Settings.Apply], typically from a
// command-line flag.
const SourceFlag Source = "flag"

// SourceRoute marks a backend or profile chosen by a route of the routes
// key for one session (see [Settings.ForSession]); the origin is the
// route's place in the list ("routes[0]").
const SourceRoute Source = "route"

// Defaults returns the settings every key's default gives.
func Defaults() *Settings {
	s := &Settings{origins: make(map[string]origin, len(registry())), sections: map[string]any{}}
	for sec := sections; sec != nil; sec = sec.next {
		s.sections[sec.Name] = sec.New()
	}
	for i := range registry() {
		k := &registry()[i]
		s.assign(k, clone(k.Default), origin{source: SourceDefault})
	}
	return s
}

// Section returns the section called name (RegisterSection) of s: a
// pointer to its struct, whose fields are the section's keys' values; nil
// for a section that is not registered. The caller must not change it
// (Clone the settings first). Settings not made by Defaults or Load get
// the section's zero value.
func (s *Settings) Section(name string) any {
	if v := s.sections[name]; v != nil {
		return v
	}
	sec := sectionNamed(name)
	if sec == nil {
		return nil
	}
	if s.sections == nil {
		s.sections = map[string]any{}
	}
	v := sec.New()
	s.sections[name] = v
	return v
}

// Limits returns the resource limits of s, for sandbox.Request.Limits.
func (s *Settings) Limits() sandbox.Limits {
	return sandbox.Limits{MemoryMB: s.MemoryMB, CPUSeconds: s.CPUSeconds, MaxProcs: s.MaxProcs}
}

// Source returns where the value of key came from and, for SourceFile and
// SourceEnv, the file's path or the variable's name. It returns "" for an
// unknown key.
func (s *Settings) Source(key string) (Source, string) {
	o := s.origins[key]
	return o.source, o.where
}

// DeprecatedSet returns a warning for each key with no effect
// (Key.Deprecated) that the settings file or the environment sets, in
// registry order: "degraded_mode (set in FILE) has no effect: WHY". A key
// left at its default gives none. Nil when there is none.
func (s *Settings) DeprecatedSet() []string {
	var out []string
	for i := range registry() {
		k := &registry()[i]
		if k.Deprecated == "" {
			continue
		}
		src, where := s.Source(k.Name)
		if src != SourceFile && src != SourceEnv {
			continue
		}
		out = append(out, fmt.Sprintf("%s (set in %s) has no effect: %s", k.Name, where, k.Deprecated))
	}
	return out
}

// Value returns the value of key with its Settings field's Go type
// (string, int, bool, time.Duration, sandbox.Profile, []string,
// []sandbox.Bind, []Route, []sandbox.Secret), or an *UnknownKeyError.
func (s *Settings) Value(key string) (any, error) {
	k, err := lookupKey(key)
	if err != nil {
		return nil, err
	}
	switch p := k.Field(s).(type) {
	case *string:
		return *p, nil
	case *int:
		return *p, nil
	case *bool:
		return *p, nil
	case *time.Duration:
		return *p, nil
	case *sandbox.Profile:
		return *p, nil
	case *[]string:
		return *p, nil
	case *[]sandbox.Bind:
		return *p, nil
	case *[]Route:
		return *p, nil
	case *[]int:
		return *p, nil
	case *[]sandbox.Secret:
		return *p, nil
	}
	panic("config: key " + key + " has a field of unsupported type")
}

// Apply sets key from text, written as for `corral config set` (lists as
// JSON or YAML flow syntax), after checking it with the registry. It is
// meant for command-line flags, which beat every other source; the key's
// Source becomes SourceFlag. Errors are *UnknownKeyError or *ValueError
// (with an empty Source).
func (s *Settings) Apply(key, text string) error {
	k, err := lookupKey(key)
	if err != nil {
		return err
	}
	v, err := k.fromUser(text, homeOnce(os.Getenv), "", "")
	if err != nil {
		return err
	}
	s.assign(k, v, origin{source: SourceFlag})
	return nil
}

// fromUser turns text into k's typed value, reporting problems as
// *ValueError with the given source.
func (k *Key) fromUser(text string, home homeFunc, src Source, where string) (any, error) {
	raw, p := k.fromText(text)
	if p == nil {
		var v any
		if v, p = k.parse(raw, home); p == nil {
			return v, nil
		}
	}
	return nil, k.valueError(p, src, where)
}

func (k *Key) valueError(p *problem, src Source, where string) *ValueError {
	return &ValueError{Key: k.Name + p.sub, Value: p.value, Reason: p.reason, Source: src, Origin: where}
}

// assign stores v, which has the field's type, in k's field of s.
func (s *Settings) assign(k *Key, v any, o origin) {
	switch p := k.Field(s).(type) {
	case *string:
		*p = v.(string)
	case *int:
		*p = v.(int)
	case *bool:
		// A KindEnum of the words true and false: parse gives the word,
		// a default the bool.
		if b, ok := v.(bool); ok {
			*p = b
		} else {
			*p = v.(string) == "true"
		}
	case *time.Duration:
		*p = v.(time.Duration)
	case *sandbox.Profile:
		*p = v.(sandbox.Profile)
	case *[]string:
		*p = v.([]string)
	case *[]sandbox.Bind:
		*p = v.([]sandbox.Bind)
	case *[]Route:
		*p = v.([]Route)
	case *[]int:
		*p = v.([]int)
	case *[]sandbox.Secret:
		*p = v.([]sandbox.Secret)
	default:
		panic("config: key " + k.Name + " has a field of unsupported type")
	}
	if s.origins == nil {
		s.origins = make(map[string]origin, len(registry()))
	}
	s.origins[k.Name] = o
}

// Route chooses how the sessions whose names match Sessions run: one entry
// of the routes key. Empty fields leave the backend, profile,
// network.allow and network.deny keys' values in force. The zero Route
// matches every session and changes nothing, which pins the defaults for
// the sessions it catches (the first matching route wins).
type Route struct {
	// Sessions is a glob over session names: '*' matches any run of
	// characters (also '/' and ':'), '?' one character, [abc], [a-z] and
	// [!abc] a character of a set, and '\' makes the next character
	// literal. Empty matches every session.
	Sessions string `json:"sessions,omitempty" yaml:"sessions,omitempty"`
	// Backend is one of BackendNames, or "" to keep the backend key.
	Backend string `json:"backend,omitempty" yaml:"backend,omitempty"`
	// Profile is a sandbox profile, or "" to keep the profile key.
	Profile sandbox.Profile `json:"profile,omitempty" yaml:"profile,omitempty"`
	// Allow and Deny, when not empty, replace network.allow and
	// network.deny for the sessions of the route (entries as there; they
	// matter under the allowlist profile only).
	Allow []string `json:"allow,omitempty" yaml:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty" yaml:"deny,omitempty"`
	// Ports, when not empty, replaces the ports key for the sessions of
	// the route.
	Ports []int `json:"ports,omitempty" yaml:"ports,omitempty"`
	// WorkspaceMode, when set, replaces the workspace_mode key for the
	// sessions of the route.
	WorkspaceMode string `json:"workspace_mode,omitempty" yaml:"workspace_mode,omitempty"`
	// Secrets, when not nil, replace the secrets key for the sessions of
	// the route (entries as there): an empty list (secrets: []) leaves
	// them none of the secrets they would inherit; nil (left out) keeps
	// the key's.
	Secrets []sandbox.Secret `json:"secrets,omitempty" yaml:"secrets,omitempty"`
}

// MarshalJSON implements json.Marshaler: the fields as tagged, and
// "secrets": [] for a route that empties the list (which omitempty would
// drop, turning it into one that inherits them).
func (r Route) MarshalJSON() ([]byte, error) {
	type plain Route
	b, err := json.Marshal(plain(r))
	if err != nil || r.Secrets == nil || len(r.Secrets) > 0 {
		return b, err
	}
	if string(b) == "{}" {
		return []byte(`{"secrets":[]}`), nil
	}
	return append(b[:len(b)-1:len(b)-1], `,"secrets":[]}`...), nil
}

// MarshalYAML implements yaml.Marshaler, as MarshalJSON: `corral config
// set routes` writes the file through it, and a route that empties the
// list must be written with secrets: [].
func (r Route) MarshalYAML() (any, error) {
	type plain Route
	if r.Secrets == nil || len(r.Secrets) > 0 {
		return plain(r), nil
	}
	var n yamlv3.Node
	if err := n.Encode(plain(r)); err != nil {
		return nil, err
	}
	n.Content = append(n.Content, &yamlv3.Node{Kind: yamlv3.ScalarNode, Value: "secrets"},
		&yamlv3.Node{Kind: yamlv3.SequenceNode, Tag: "!!seq", Style: yamlv3.FlowStyle})
	return &n, nil
}

// Match reports whether the session called name matches r.Sessions. A
// malformed pattern (refused by Load) matches nothing.
func (r Route) Match(name string) bool {
	if r.Sessions == "" {
		return true
	}
	re, err := globRegexp(r.Sessions)
	return err == nil && re.MatchString(name)
}

// RouteFor returns the first route that matches the session called name
// and its index in s.Routes, or -1 when none does.
func (s *Settings) RouteFor(name string) (Route, int) {
	for i, r := range s.Routes {
		if r.Match(name) {
			return r, i
		}
	}
	return Route{}, -1
}

// Clone returns a copy of s that can be changed (fields assigned, Apply
// called) without changing s. Slices and maps of values are shared: assign
// new ones rather than change their elements.
func (s *Settings) Clone() *Settings {
	out := *s
	out.origins = make(map[string]origin, len(s.origins))
	for k, v := range s.origins {
		out.origins[k] = v
	}
	// A copy of each section's struct (a pointer each), so that a change
	// of the copy's does not reach s.
	out.sections = make(map[string]any, len(s.sections))
	for k, v := range s.sections {
		c := reflect.New(reflect.TypeOf(v).Elem())
		c.Elem().Set(reflect.ValueOf(v).Elem())
		out.sections[k] = c.Interface()
	}
	return &out
}

// ForSession returns the settings the session called name runs with: a
// copy of s whose backend, profile, network.allow, network.deny and
// secrets come from the first matching route, where that route sets them
// (allow and deny when not empty; secrets when given, an empty list
// included). Their [Settings.Source] is then SourceRoute with
// the origin "routes[N]". A value given by [Settings.Apply] (a
// command-line flag) beats the route. s is not changed.
func (s *Settings) ForSession(name string) *Settings {
	out := *s.Clone()
	r, i := s.RouteFor(name)
	if i < 0 {
		return &out
	}
	o := origin{source: SourceRoute, where: fmt.Sprintf("routes[%d]", i)}
	if r.Backend != "" && out.origins["backend"].source != SourceFlag {
		out.Backend = r.Backend
		out.origins["backend"] = o
	}
	if r.Profile != "" && out.origins["profile"].source != SourceFlag {
		out.Profile = r.Profile
		out.origins["profile"] = o
	}
	if len(r.Allow) > 0 && out.origins["network.allow"].source != SourceFlag {
		out.NetworkAllow = slices.Clone(r.Allow)
		out.origins["network.allow"] = o
	}
	if len(r.Deny) > 0 && out.origins["network.deny"].source != SourceFlag {
		out.NetworkDeny = slices.Clone(r.Deny)
		out.origins["network.deny"] = o
	}
	if len(r.Ports) > 0 && out.origins["ports"].source != SourceFlag {
		out.Ports = slices.Clone(r.Ports)
		out.origins["ports"] = o
	}
	if r.WorkspaceMode != "" && out.origins["workspace_mode"].source != SourceFlag {
		out.WorkspaceMode = r.WorkspaceMode
		out.origins["workspace_mode"] = o
	}
	if r.Secrets != nil && out.origins["secrets"].source != SourceFlag {
		out.Secrets = slices.Clone(r.Secrets)
		out.origins["secrets"] = o
	}
	return &out
}

// Load returns the effective settings: the defaults, overridden by the
// settings file, overridden by CORRAL_<KEY> variables of environ
// ("KEY=value" entries, as os.Environ returns; the last of duplicates
// wins, and empty values count as unset).
//
// path names the settings file; "" means $CORRAL_CONFIG (taken from
// environ) or else [DefaultPath]. A missing file is not an error. A file
// that cannot be read or is not a YAML mapping is, naming the file. Every
// unknown key in the file is an *UnknownKeyError and every bad value, in
// the file or the environment, a *ValueError; Load reports all of them,
// joined with errors.Join, and returns nil Settings.
//
// Load reads the file once and nothing else (the passwd database only
// when "~" must be expanded and $HOME is unset), so it is cheap enough to
// call for every sandbox.
func Load(path string, environ []string) (*Settings, error) {
	getenv := lookupIn(environ)
	home := homeOnce(getenv)
	p, err := resolvePath(path, getenv, home)
	if err != nil {
		return nil, err
	}
	fk, err := readFile(p)
	if err != nil {
		return nil, err
	}
	ek, err := readEnv(environ)
	if err != nil {
		return nil, err
	}

	s := Defaults()
	s.Path = p
	var errs []error
	if fk != nil {
		for _, name := range fk.Keys() {
			if _, ok := byName()[name]; ok {
				continue
			}
			if _, ok := underKey(name); ok {
				continue // a mapping where a value belongs; parse reports it
			}
			if isSection(name) {
				if v := fk.Get(name); v == nil {
					continue // "docker:" with nothing below
				} else if m, ok := v.(map[string]any); ok && len(m) == 0 {
					continue // "docker: {}"
				}
			}
			errs = append(errs, &UnknownKeyError{Key: name, Origin: p})
		}
	}
	for i := range registry() {
		k := &registry()[i]
		if fk != nil && fk.Exists(k.Name) {
			v, prob := k.parse(fk.Get(k.Name), home)
			if prob != nil {
				errs = append(errs, k.valueError(prob, SourceFile, p))
			} else {
				s.assign(k, v, origin{source: SourceFile, where: p})
			}
		}
		if ek.Exists(k.Name) {
			text, _ := ek.Get(k.Name).(string)
			v, err := k.fromUser(text, home, SourceEnv, k.EnvName())
			if err != nil {
				errs = append(errs, err)
			} else {
				s.assign(k, v, origin{source: SourceEnv, where: k.EnvName()})
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// readFile loads the settings file with koanf; it returns nil, nil when
// the file does not exist.
func readFile(path string) (*koanf.Koanf, error) {
	ko := koanf.New(".")
	err := ko.Load(settingsFile(path), yaml.Parser())
	if err == nil {
		return ko, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("cannot read settings file %s: %w", path, pe.Err)
	}
	var te *yamlv3.TypeError
	if errors.As(err, &te) && strings.Contains(strings.Join(te.Errors, ""), "cannot unmarshal") {
		return nil, fmt.Errorf("settings file %s is not a YAML mapping of settings (key: value lines): %s", path, strings.Join(te.Errors, "; "))
	}
	if errors.As(err, &te) {
		return nil, fmt.Errorf("settings file %s is not valid YAML: %s", path, strings.Join(te.Errors, "; "))
	}
	return nil, fmt.Errorf("settings file %s is not valid YAML: %s", path, yamlMessage(err))
}

// readEnv loads the CORRAL_* variables of environ that name a registered
// key, under the key's name. The registry maps names back, so
// CORRAL_MEMORY_MB is memory_mb, never memory.mb.
func readEnv(environ []string) (*koanf.Koanf, error) {
	ko := koanf.New(".")
	err := ko.Load(koanfenv.Provider(".", koanfenv.Opt{
		Prefix:      envPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			k, ok := byEnv()[name]
			if !ok || value == "" {
				return "", nil
			}
			return k.Name, value
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("reading the environment: %w", err)
	}
	return ko, nil
}

// lookupIn returns a getenv over environ ("KEY=value" entries, the last
// duplicate winning).
func lookupIn(environ []string) func(string) string {
	return func(name string) string {
		v, _ := hostview.LookupEnv(environ, name)
		return v
	}
}

// homeOnce returns a homeFunc that looks the home directory up once.
func homeOnce(getenv func(string) string) homeFunc {
	return sync.OnceValues(func() (string, error) { return homeDir(getenv) })
}

// homeDir returns $HOME when it is absolute, else os.UserHomeDir, else the
// passwd entry of the current user.
//
// As root, a $HOME owned by another user (sudo -E, or HOME=... corral) is
// not used: corral's own files would be made there owned by root, and the
// user's corral could no longer write them. The passwd entry wins then.
func homeDir(getenv func(string) string) (string, error) {
	if h := getenv("HOME"); filepath.IsAbs(h) {
		if os.Geteuid() != 0 || ownedByRoot(h) {
			return filepath.Clean(h), nil
		}
		if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) {
			return filepath.Clean(u.HomeDir), nil
		}
	}
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		return filepath.Clean(h), nil
	}
	if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) {
		return filepath.Clean(u.HomeDir), nil
	}
	return "", errors.New("cannot find the home directory: $HOME is not set and the user has no passwd entry")
}

// xdgDir returns $<envName>/corral when that variable holds an absolute
// path (the XDG Base Directory spec ignores relative ones), else
// ~/<fallback>/corral.
func xdgDir(getenv func(string) string, home homeFunc, envName, fallback string) (string, error) {
	if d := getenv(envName); filepath.IsAbs(d) {
		return filepath.Join(d, "corral"), nil
	}
	h, err := home()
	if err != nil {
		return "", err
	}
	return filepath.Join(h, fallback, "corral"), nil
}

// ConfigDir returns corral's configuration directory:
// $XDG_CONFIG_HOME/corral, or ~/.config/corral when XDG_CONFIG_HOME is
// unset or relative. It returns "" when there is no home directory
// ($HOME unset and no passwd entry), meaning there is no configuration
// directory to read or to hide from sandboxes.
func ConfigDir() string {
	d, _ := xdgDir(os.Getenv, homeOnce(os.Getenv), "XDG_CONFIG_HOME", ".config")
	return d
}

// DefaultPath returns the default settings file, config.yaml in
// [ConfigDir], or "" when there is no home directory. It ignores
// CORRAL_CONFIG; see [ResolvePath] for the file actually in use.
func DefaultPath() string {
	p, _ := defaultPath(os.Getenv, homeOnce(os.Getenv))
	return p
}

func defaultPath(getenv func(string) string, home homeFunc) (string, error) {
	d, err := xdgDir(getenv, home, "XDG_CONFIG_HOME", ".config")
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "config.yaml"), nil
}

// StateDir returns corral's state directory (sessions, caches):
// $XDG_STATE_HOME/corral, or ~/.local/state/corral when XDG_STATE_HOME is
// unset or relative. It does not create the directory. It returns "" when
// there is no home directory ($HOME unset and no passwd entry); there is
// deliberately no fallback under /tmp, where another user could plant it.
func StateDir() string {
	d, _ := xdgDir(os.Getenv, homeOnce(os.Getenv), "XDG_STATE_HOME", filepath.Join(".local", "state"))
	return d
}

// ResolvePath returns the settings file to use: path when not empty (a
// leading "~/" expanded, made absolute), else $CORRAL_CONFIG from environ,
// else [DefaultPath] computed from environ. It fails only when the home
// directory is needed and cannot be found.
func ResolvePath(path string, environ []string) (string, error) {
	getenv := lookupIn(environ)
	return resolvePath(path, getenv, homeOnce(getenv))
}

func resolvePath(path string, getenv func(string) string, home homeFunc) (string, error) {
	if path == "" {
		path = getenv(EnvConfig)
	}
	if path == "" {
		return defaultPath(getenv, home)
	}
	if path == "~" || strings.HasPrefix(path, "~/") {
		h, err := home()
		if err != nil {
			return "", err
		}
		path = filepath.Join(h, path[1:])
	}
	abs, err := startdir.Abs(path)
	if err != nil {
		return "", fmt.Errorf("settings file %s: %w", path, err)
	}
	return abs, nil
}

// ownedByRoot reports whether path is missing or owned by uid 0.
func ownedByRoot(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return true
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Uid == 0
	}
	return true
}
