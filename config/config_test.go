package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/corralhq/corral/sandbox"
)

// writeFile writes a settings file in a fresh temporary directory.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func missing(t *testing.T) string {
	return filepath.Join(t.TempDir(), "none", "config.yaml")
}

var testEnv = []string{"HOME=/home/u", "PATH=/usr/bin"}

func env(kv ...string) []string { return append(append([]string{}, testEnv...), kv...) }

// defaultSkills is the skills default: where agents keep their skills.
var defaultSkills = []string{"~/.agents/skills", "~/.claude/skills", "~/.codex/skills"}

// testSection is a section of settings as a backend declares one
// (RegisterSection): config's machinery for sections is tested with it;
// the real ones (docker.*, kubernetes.*) are tested in their backends.
type testSection struct {
	Word  string
	Flag  bool
	Count int
	List  []string
}

func sec(s *Settings) *testSection { return s.Section("testsec").(*testSection) }

var testSec = Section{Name: "testsec", New: func() any { return new(testSection) }, Keys: func() []Key {
	return []Key{
		{Name: "testsec.word", Kind: KindString, Default: "hello", Accepts: "a word", Doc: "testsec: a word", Check: NonEmpty,
			Field: func(s *Settings) any { return &sec(s).Word }},
		{Name: "testsec.flag", Kind: KindEnum, Default: true, Values: []string{"true", "false"}, Accepts: "true or false", Doc: "testsec: a flag",
			Field: func(s *Settings) any { return &sec(s).Flag }},
		{Name: "testsec.count", Kind: KindInt, Default: 3, Min: 1, Accepts: "a whole number of at least 1", Doc: "testsec: a count",
			Field: func(s *Settings) any { return &sec(s).Count }},
		{Name: "testsec.list", Kind: KindStringList, Default: []string(nil), Accepts: "a list of words", Doc: "testsec: a list",
			Field: func(s *Settings) any { return &sec(s).List }},
	}
}}

// testBackends are the backend key's values in config's tests, as
// corral's backends declare them (backend/registry registers each).
var testBackends = []Backend{
	{Name: "bwrap", Doc: "bwrap (bubblewrap)", Default: true},
	{Name: "docker", Doc: "docker (a container per session, see docker.*)"},
	{Name: "kubernetes", Doc: "kubernetes (a pod per session, see kubernetes.*; preview)"},
	{Name: "local", Doc: "local (no sandbox, for debugging)"},
}

func init() {
	RegisterSection(&testSec)
	for i := range testBackends {
		RegisterBackend(&testBackends[i])
	}
}

// TestSection: a registered section's keys load from the file and the
// environment into the section's struct, with their defaults, checks and
// sources, sit before listen in the registry, are listed with a bool's
// word, and a Clone's section is its own.
func TestSection(t *testing.T) {
	s, err := Load(writeFile(t, "testsec:\n  word: \" hi \"\n  flag: false\n"), env("CORRAL_TESTSEC_COUNT=7"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := *sec(s), (testSection{Word: "hi", Flag: false, Count: 7}); !reflect.DeepEqual(got, want) {
		t.Errorf("section = %+v, want %+v", got, want)
	}
	if src, where := s.Source("testsec.count"); src != SourceEnv || where != "CORRAL_TESTSEC_COUNT" {
		t.Errorf("Source(testsec.count) = %s %s", src, where)
	}
	if got := *sec(Defaults()); !reflect.DeepEqual(got, testSection{Word: "hello", Flag: true, Count: 3}) {
		t.Errorf("defaults = %+v", got)
	}
	if _, err := Load(writeFile(t, "testsec:\n  count: 0\n  flag: maybe\n  word: \"\"\n"), testEnv); err == nil ||
		!strings.Contains(err.Error(), "testsec.count: 0 is not a whole number of at least 1") ||
		!strings.Contains(err.Error(), `testsec.flag: "maybe" is not true or false`) || !strings.Contains(err.Error(), `testsec.word: "" is empty; want a word`) {
		t.Errorf("bad values: %v", err)
	}
	names := Names()
	at, listen := slices.Index(names, "testsec.word"), slices.Index(names, "listen")
	if at < 0 || listen != at+4 {
		t.Errorf("testsec.* at %d, listen at %d: %q", at, listen, names)
	}
	es, err := list(writeFile(t, "testsec:\n  flag: false\n"), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Key == "testsec.flag" && (e.Text != "false" || e.Value != "false") {
			t.Errorf("list testsec.flag: %q %#v", e.Text, e.Value)
		}
	}
	c := s.Clone()
	sec(c).Word = "changed"
	if sec(s).Word != "hi" {
		t.Errorf("a change of the clone's section reached the original: %q", sec(s).Word)
	}
	if (&Settings{}).Section("testsec").(*testSection).Word != "" || (&Settings{}).Section("nosuch") != nil {
		t.Error("Section of a zero Settings")
	}
}

func TestDefaults(t *testing.T) {
	s, err := Load(missing(t), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := &Settings{
		Backend: "bwrap", Profile: sandbox.ProfileNetwork,
		MemoryMB: 1024, CPUSeconds: 30, MaxProcs: 256,
		Timeout: 180 * time.Second, HomeMode: "host", WorkspaceMode: "direct", ToolCaches: "shared", DegradedMode: "degrade",
		TmpSizeMB: 512, OutputLimit: 65536,
		Approval: "ask", AuditMaxMB: 10, Skills: defaultSkills,
	}
	s.Path, s.origins, s.sections = "", nil, nil
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Load = %+v, want %+v", s, want)
	}
	if s.Limits() != sandbox.DefaultLimits {
		t.Errorf("Limits = %+v, want %+v", s.Limits(), sandbox.DefaultLimits)
	}
	d := Defaults()
	for _, k := range Keys() {
		if src, _ := d.Source(k.Name); src != SourceDefault {
			t.Errorf("Source(%s) = %q, want default", k.Name, src)
		}
		v, err := d.Value(k.Name)
		if err != nil || !reflect.DeepEqual(v, k.Default) {
			t.Errorf("Value(%s) = %#v, %v; want %#v", k.Name, v, err, k.Default)
		}
		if k.Doc == "" || k.Accepts == "" {
			t.Errorf("key %s lacks Doc or Accepts", k.Name)
		}
	}
}

func TestFileValues(t *testing.T) {
	p := writeFile(t, `
backend: local
profile: workspace
memory_mb: 0
cpu_seconds: 600
max_procs: 1024
binds:
  - src: /data
  - {src: /srv/cache/, dest: /cache, readonly: false}
home_allow: [.gitconfig, .config/nvim/, "~/.zz-tool"]
cwd: ~/src
timeout: 5m
home_mode: session
degraded_mode: fail
output_limit: 1000
`)
	s, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := &Settings{
		Backend: "local", Profile: sandbox.ProfileWorkspace,
		MemoryMB: 0, CPUSeconds: 600, MaxProcs: 1024,
		Binds: []sandbox.Bind{
			{Src: "/data", ReadOnly: true},
			{Src: "/srv/cache", Dest: "/cache", ReadOnly: false},
		},
		HomeAllow: []string{".gitconfig", ".config/nvim", ".zz-tool"},
		Cwd:       "/home/u/src", Timeout: 5 * time.Minute,
		HomeMode: "session", WorkspaceMode: "direct", ToolCaches: "shared", DegradedMode: "fail", OutputLimit: 1000, TmpSizeMB: 512,
		Approval: "ask", AuditMaxMB: 10, Skills: defaultSkills,
	}
	if src, where := s.Source("memory_mb"); src != SourceFile || where != p {
		t.Errorf("Source(memory_mb) = %q, %q; want file, %q", src, where, p)
	}
	if s.Path != p {
		t.Errorf("Path = %q, want %q", s.Path, p)
	}
	s.Path, s.origins, s.sections = "", nil, nil
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Load =\n%+v\nwant\n%+v", s, want)
	}
}

func TestScalarForms(t *testing.T) {
	tests := []struct {
		name, file string
		environ    []string
		check      func(*Settings) bool
	}{
		{"timeout int in file is seconds", "timeout: 90", nil, func(s *Settings) bool { return s.Timeout == 90*time.Second }},
		{"timeout duration in file", "timeout: 1h30m", nil, func(s *Settings) bool { return s.Timeout == 90*time.Minute }},
		{"timeout int in env is seconds", "", env("CORRAL_TIMEOUT=45"), func(s *Settings) bool { return s.Timeout == 45*time.Second }},
		{"timeout duration in env", "", env("CORRAL_TIMEOUT=90s"), func(s *Settings) bool { return s.Timeout == 90*time.Second }},
		{"int as quoted string in file", `memory_mb: "512"`, nil, func(s *Settings) bool { return s.MemoryMB == 512 }},
		{"cwd tilde alone", "", env("CORRAL_CWD=~"), func(s *Settings) bool { return s.Cwd == "/home/u" }},
		{"cwd cleaned", "cwd: /a/b/../c/", nil, func(s *Settings) bool { return s.Cwd == "/a/c" }},
		{"cwd empty", `cwd: ""`, nil, func(s *Settings) bool { return s.Cwd == "" }},
		{"home_allow comma list from env", "", env("CORRAL_HOME_ALLOW=.a, .b/c"), func(s *Settings) bool {
			return reflect.DeepEqual(s.HomeAllow, []string{".a", ".b/c"})
		}},
		{"home_allow JSON from env", "", env(`CORRAL_HOME_ALLOW=[".x"]`), func(s *Settings) bool {
			return reflect.DeepEqual(s.HomeAllow, []string{".x"})
		}},
		{"empty list in env clears file", "home_allow: [.x]", env("CORRAL_HOME_ALLOW=[]"), func(s *Settings) bool {
			return s.HomeAllow != nil && len(s.HomeAllow) == 0
		}},
		{"empty env var counts as unset", "memory_mb: 7", env("CORRAL_MEMORY_MB="), func(s *Settings) bool { return s.MemoryMB == 7 }},
		{"last duplicate env var wins", "", env("CORRAL_MAX_PROCS=1", "CORRAL_MAX_PROCS=2"), func(s *Settings) bool { return s.MaxProcs == 2 }},
		{"empty file", "", nil, func(s *Settings) bool { return s.MemoryMB == 1024 }},
		{"comment-only file", "# nothing\n", nil, func(s *Settings) bool { return s.MemoryMB == 1024 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			environ := tc.environ
			if environ == nil {
				environ = testEnv
			}
			s, err := Load(writeFile(t, tc.file), environ)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("unexpected settings %+v", s)
			}
		})
	}
}

func TestEnvOverridesFile(t *testing.T) {
	p := writeFile(t, "memory_mb: 512\nprofile: restricted\nbinds: [{src: /file}]\ntimeout: 10\n")
	s, err := Load(p, env(
		"CORRAL_MEMORY_MB=1024",
		"CORRAL_PROFILE=workspace",
		`CORRAL_BINDS=[{"src":"/data"},{"src":"/rw","dest":"/mnt/rw","readonly":false}]`,
	))
	if err != nil {
		t.Fatal(err)
	}
	if s.MemoryMB != 1024 || s.Profile != sandbox.ProfileWorkspace {
		t.Errorf("MemoryMB, Profile = %d, %q; want 1024, workspace", s.MemoryMB, s.Profile)
	}
	wantBinds := []sandbox.Bind{{Src: "/data", ReadOnly: true}, {Src: "/rw", Dest: "/mnt/rw"}}
	if !reflect.DeepEqual(s.Binds, wantBinds) {
		t.Errorf("Binds = %+v, want %+v", s.Binds, wantBinds)
	}
	if s.Timeout != 10*time.Second {
		t.Errorf("Timeout = %v, want the file's 10s", s.Timeout)
	}
	if src, where := s.Source("memory_mb"); src != SourceEnv || where != "CORRAL_MEMORY_MB" {
		t.Errorf("Source(memory_mb) = %q, %q; want env, CORRAL_MEMORY_MB", src, where)
	}
	if src, _ := s.Source("timeout"); src != SourceFile {
		t.Errorf("Source(timeout) = %q, want file", src)
	}
}

func TestEnvNames(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"memory_mb", "CORRAL_MEMORY_MB"},
		{"cpu_seconds", "CORRAL_CPU_SECONDS"},
		{"home_allow", "CORRAL_HOME_ALLOW"},
		{"docker.image", "CORRAL_DOCKER_IMAGE"},
		{"docker.pids_limit", "CORRAL_DOCKER_PIDS_LIMIT"},
	} {
		if got := EnvName(tc.key); got != tc.want {
			t.Errorf("EnvName(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	// Every key has its own variable, distinct from CORRAL_CONFIG, and
	// names are lower-case words joined by '_' and '.'.
	seen := map[string]string{EnvConfig: "(settings file)"}
	for _, k := range Keys() {
		if prev, dup := seen[k.EnvName()]; dup {
			t.Errorf("keys %s and %s share %s", prev, k.Name, k.EnvName())
		}
		seen[k.EnvName()] = k.Name
		if strings.Trim(k.Name, "abcdefghijklmnopqrstuvwxyz0123456789_.") != "" {
			t.Errorf("key %q has characters outside [a-z0-9_.]", k.Name)
		}
	}
	// Variables map back through the registry: underscores inside a key
	// are not levels, and unknown CORRAL_* variables are ignored.
	s, err := Load(missing(t), env(
		"CORRAL_MEMORY_MB=64", "CORRAL_CPU_SECONDS=5", "CORRAL_MAX_PROCS=9",
		"CORRAL_OUTPUT_LIMIT=10", "CORRAL_HOME_MODE=session", "CORRAL_DEGRADED_MODE=fail",
		"CORRAL_MEMORY=lots", "CORRAL_SESSION=abc", "CORRAL_memory_mb=bad", "MEMORY_MB=bad",
	))
	if err != nil {
		t.Fatal(err)
	}
	if s.MemoryMB != 64 || s.CPUSeconds != 5 || s.MaxProcs != 9 || s.OutputLimit != 10 ||
		s.HomeMode != "session" || s.DegradedMode != "fail" {
		t.Errorf("env not applied: %+v", s)
	}
}

func TestBindsReadonlyDefault(t *testing.T) {
	tests := []struct {
		name, file string
		environ    []string
		want       []sandbox.Bind
	}{
		{"file, omitted", "binds: [{src: /a}]", nil, []sandbox.Bind{{Src: "/a", ReadOnly: true}}},
		{"file, true", "binds: [{src: /a, readonly: true}]", nil, []sandbox.Bind{{Src: "/a", ReadOnly: true}}},
		{"file, false", "binds: [{src: /a, readonly: false}]", nil, []sandbox.Bind{{Src: "/a"}}},
		{"file, dest", "binds: [{src: /a, dest: /b}]", nil, []sandbox.Bind{{Src: "/a", Dest: "/b", ReadOnly: true}}},
		{"env JSON, omitted", "", env(`CORRAL_BINDS=[{"src":"/data"}]`), []sandbox.Bind{{Src: "/data", ReadOnly: true}}},
		{"env YAML flow, omitted", "", env(`CORRAL_BINDS=[{src: /data}]`), []sandbox.Bind{{Src: "/data", ReadOnly: true}}},
		{"env single mapping", "", env(`CORRAL_BINDS={"src":"/data","readonly":false}`), []sandbox.Bind{{Src: "/data"}}},
		{"env tilde src", "", env(`CORRAL_BINDS=[{src: ~/x}]`), []sandbox.Bind{{Src: "/home/u/x", ReadOnly: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			environ := tc.environ
			if environ == nil {
				environ = testEnv
			}
			s, err := Load(writeFile(t, tc.file), environ)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Binds, tc.want) {
				t.Errorf("Binds = %+v, want %+v", s.Binds, tc.want)
			}
		})
	}
}

func TestBadValues(t *testing.T) {
	tests := []struct {
		name string
		file string   // settings file body, or
		env  []string // extra variables
		want []string // substrings of the error
	}{
		{"int text", "", []string{"CORRAL_MEMORY_MB=lots"},
			[]string{`memory_mb: "lots" is not a whole number of MiB (0 disables)`, "CORRAL_MEMORY_MB"}},
		{"int negative", "cpu_seconds: -1", nil, []string{"cpu_seconds: -1 is not a whole number of seconds", "set in "}},
		{"int fraction", "max_procs: 2.5", nil, []string{"max_procs: 2.5 is not a whole number of processes"}},
		{"int list", "memory_mb: [1]", nil, []string{"memory_mb: [1] is not"}},
		{"int zero where > 0", "output_limit: 0", nil, []string{"output_limit: 0 is not a whole number of bytes greater than 0"}},
		{"int null", "memory_mb:", nil, []string{"memory_mb: null is not"}},
		{"enum backend", "backend: podman", nil, []string{`backend: "podman" is not one of bwrap, docker, kubernetes, local`}},
		{"enum profile", "", []string{"CORRAL_PROFILE=open"}, []string{`profile: "open" is not one of restricted, workspace, allowlist, network`, "CORRAL_PROFILE"}},
		{"enum case", "home_mode: Host", nil, []string{`home_mode: "Host" is not one of host, session`}},
		{"enum degraded", "degraded_mode: warn", nil, []string{`degraded_mode: "warn" is not one of degrade, fail`}},
		{"enum not a string", "backend: 1", nil, []string{"backend: 1 is not one of"}},
		{"duration zero", "timeout: 0", nil, []string{`timeout: 0 is not a duration greater than 0`}},
		{"duration negative", "", []string{"CORRAL_TIMEOUT=-5s"}, []string{`timeout: "-5s" is not a duration greater than 0`}},
		{"duration garbage", "timeout: soon", nil, []string{`timeout: "soon" is not a duration`}},
		{"duration overflow", "timeout: 99999999999999", nil, []string{"timeout: 99999999999999 is not"}},
		{"cwd relative", "cwd: src", nil, []string{`cwd: "src" is not an absolute path`}},
		{"cwd bare tilde is null", "cwd: ~", nil, []string{`cwd: null`, `write "~" in quotes`}},
		{"cwd tilde user", "", []string{"CORRAL_CWD=~bob/x"}, []string{`cwd: "~bob/x" is not an absolute path`}},
		{"cwd NUL", "", []string{"CORRAL_CWD=/a\x00b"}, []string{`cwd: "/a\x00b" contains a NUL byte`}},
		{"home_allow absolute", "home_allow: [/etc]", nil, []string{`home_allow[0]: "/etc" is absolute; want a path relative to the home directory`}},
		{"home_allow dotdot", "home_allow: [.ok, ../x]", nil, []string{`home_allow[1]: "../x" climbs out with ".."`}},
		{"home_allow dotdot inside", "", []string{"CORRAL_HOME_ALLOW=.a/../../x"}, []string{`home_allow[0]: ".a/../../x" climbs out`}},
		{"home_allow empty", `home_allow: [""]`, nil, []string{`home_allow[0]: "" is empty`}},
		{"home_allow dot", `home_allow: ["."]`, nil, []string{`home_allow[0]: "." names the home directory itself`}},
		{"home_allow not a list", "home_allow: .x", nil, []string{`home_allow: ".x" is not a list`}},
		{"home_allow not strings", "home_allow: [1]", nil, []string{`home_allow[0]: 1 is not a string`}},
		{"home_allow bad JSON", "", []string{`CORRAL_HOME_ALLOW=[".x"`}, []string{`home_allow: "[\".x\"" is not valid JSON or YAML`}},
		{"binds relative src", "binds: [{src: data}]", nil, []string{`binds[0].src: "data" is not an absolute path`}},
		{"binds relative dest", "binds: [{src: /a, dest: b}]", nil, []string{`binds[0].dest: "b" is not an absolute path`}},
		{"binds missing src", "binds: [{dest: /b}]", nil, []string{`binds[0]: {"dest":"/b"} has no src`}},
		{"binds unknown field", "binds: [{src: /a, ro: true}]", nil, []string{`binds[0]: {"ro":true,"src":"/a"} has unknown field "ro"`}},
		{"binds readonly not bool", `binds: [{src: /a, readonly: "yes"}]`, nil, []string{`binds[0].readonly: "yes" is not true or false`}},
		{"binds item not a mapping", "binds: [/a]", nil, []string{`binds[0]: "/a" is not a {src, dest, readonly} mapping`}},
		{"binds not a list", "binds: {src: /a}", nil, []string{`binds: {"src":"/a"} is not a list`}},
		{"binds env plain path", "", []string{"CORRAL_BINDS=/data"}, []string{`binds: "/data" is not a list`, "CORRAL_BINDS"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, tc.file)
			_, err := Load(p, env(tc.env...))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not match ErrInvalid", err)
			}
			var ve *ValueError
			if !errors.As(err, &ve) {
				t.Fatalf("error %q is not a *ValueError", err)
			}
			want := tc.want
			if tc.file != "" {
				want = append(want, p) // names the file
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestAllErrorsReported(t *testing.T) {
	_, err := Load(writeFile(t, "memory_mb: x\ntimeout: y\nbogus: 1\n"), testEnv)
	for _, w := range []string{"memory_mb:", "timeout:", `"bogus"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not mention %s", err, w)
		}
	}
}

func TestUnknownKeyInFile(t *testing.T) {
	tests := []struct{ file, key, suggest string }{
		{"memroy_mb: 1", "memroy_mb", "memory_mb"},
		{"Profile: network", "Profile", "profile"},
		{"home-allow: [.x]", "home-allow", "home_allow"},
		{"testsec:\n  wrod: x", "testsec.wrod", "testsec.word"},
		{"wholly_unrelated: 1", "wholly_unrelated", ""},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			p := writeFile(t, tc.file)
			_, err := Load(p, testEnv)
			var ue *UnknownKeyError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("Load error = %v, want an *UnknownKeyError", err)
			}
			if ue.Key != tc.key || ue.Origin != p {
				t.Errorf("UnknownKeyError = %+v, want key %q in %q", ue, tc.key, p)
			}
			msg := err.Error()
			if !strings.Contains(msg, p) || !strings.Contains(msg, "valid keys: backend, profile") {
				t.Errorf("message %q lacks the file or the valid keys", msg)
			}
			if tc.suggest != "" && !strings.Contains(msg, "did you mean "+tc.suggest+"?") {
				t.Errorf("message %q does not suggest %s", msg, tc.suggest)
			}
			if tc.suggest == "" && strings.Contains(msg, "did you mean") {
				t.Errorf("message %q suggests a key", msg)
			}
		})
	}
}

func TestBadFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, path, want string }{
		{"syntax", writeFile(t, "memory_mb: [1\n"), "is not valid YAML"},
		{"top-level list", writeFile(t, "- memory_mb\n"), "is not a YAML mapping"},
		{"directory", dir, "cannot read settings file"},
		{"tabs", writeFile(t, "memory_mb:\t\n\t- 1\n"), "is not valid YAML"},
		{"duplicate key", writeFile(t, "memory_mb: 1\nmemory_mb: 2\n"), `is not valid YAML: line 2: mapping key "memory_mb" already defined`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.path, testEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("Load error = %v, want %q naming %s", err, tc.want, tc.path)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_STATE_HOME", "")
	check := func(name string, f func() string, want string) {
		t.Helper()
		if got := f(); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	check("DefaultPath", DefaultPath, "/home/u/.config/corral/config.yaml")
	check("ConfigDir", ConfigDir, "/home/u/.config/corral")
	check("StateDir", StateDir, "/home/u/.local/state/corral")
	t.Setenv("XDG_CONFIG_HOME", "/xdg/config")
	t.Setenv("XDG_STATE_HOME", "/xdg/state")
	check("DefaultPath", DefaultPath, "/xdg/config/corral/config.yaml")
	check("StateDir", StateDir, "/xdg/state/corral")
	t.Setenv("XDG_CONFIG_HOME", "relative/ignored")
	check("DefaultPath", DefaultPath, "/home/u/.config/corral/config.yaml")

	for _, tc := range []struct {
		path    string
		environ []string
		want    string
	}{
		{"", []string{"HOME=/h"}, "/h/.config/corral/config.yaml"},
		{"", []string{"HOME=/h", "XDG_CONFIG_HOME=/c"}, "/c/corral/config.yaml"},
		{"", []string{"HOME=/h", "CORRAL_CONFIG=/etc/corral.yaml"}, "/etc/corral.yaml"},
		{"/x/y.yaml", []string{"HOME=/h", "CORRAL_CONFIG=/etc/corral.yaml"}, "/x/y.yaml"},
		{"~/c.yaml", []string{"HOME=/h"}, "/h/c.yaml"},
	} {
		if got, err := ResolvePath(tc.path, tc.environ); err != nil || got != tc.want {
			t.Errorf("ResolvePath(%q, %q) = %q, %v; want %q", tc.path, tc.environ, got, err, tc.want)
		}
	}

	// Load with path "" reads $CORRAL_CONFIG from environ.
	p := writeFile(t, "max_procs: 3")
	s, err := Load("", env("CORRAL_CONFIG="+p))
	if err != nil || s.MaxProcs != 3 || s.Path != p {
		t.Errorf("Load via CORRAL_CONFIG = %+v, %v", s, err)
	}
}

func TestSetGetUnset(t *testing.T) {
	const orig = "# my settings\nprofile: workspace # keep me\nmemory_mb: 512\nbinds:\n  - {src: /data}\n"
	p := writeFile(t, orig)
	steps := []struct {
		op, key, value string
		want           string // Get's text afterwards
		source         Source
	}{
		{"set", "memory_mb", "2048", "2048", SourceFile},
		{"set", "cpu_seconds", "0", "0", SourceFile},
		{"set", "timeout", "5m", "5m0s", SourceFile},
		{"set", "timeout", "90", "1m30s", SourceFile},
		{"set", "profile", "network", "network", SourceFile},
		{"set", "home_allow", "[.gitconfig, .config/nvim]", `[".gitconfig",".config/nvim"]`, SourceFile},
		{"set", "home_allow", ".a,.b", `[".a",".b"]`, SourceFile},
		{"set", "binds", `[{src: /srv, dest: /mnt}]`, `[{"src":"/srv","dest":"/mnt","readonly":true}]`, SourceFile},
		{"set", "binds", `[{"src":"/rw","readonly":false}]`, `[{"src":"/rw","readonly":false}]`, SourceFile},
		{"set", "cwd", "~/src", "/home/u/src", SourceFile},
		{"unset", "cpu_seconds", "", "30", SourceDefault},
		{"unset", "memory_mb", "", "1024", SourceDefault},
		{"unset", "memory_mb", "", "1024", SourceDefault}, // twice is fine
	}
	for _, st := range steps {
		var err error
		switch st.op {
		case "set":
			err = set(p, st.key, st.value, testEnv)
		case "unset":
			_, err = unset(p, st.key, testEnv)
		}
		if err != nil {
			t.Fatalf("%s %s %q: %v", st.op, st.key, st.value, err)
		}
		e, err := get(p, st.key, testEnv)
		if err != nil {
			t.Fatalf("get %s after %s: %v", st.key, st.op, err)
		}
		if e.Text != st.want || e.Source != st.source {
			t.Errorf("after %s %s %q: get = %q from %s, want %q from %s", st.op, st.key, st.value, e.Text, e.Source, st.want, st.source)
		}
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	body := string(data)
	for _, w := range []string{"# my settings", "profile: network # keep me", "timeout: 90", "cwd: ~/src", "src: /rw"} {
		if !strings.Contains(body, w) {
			t.Errorf("file lost %q:\n%s", w, body)
		}
	}
	if strings.Contains(body, "memory_mb") || strings.Contains(body, "cpu_seconds") {
		t.Errorf("unset keys still in the file:\n%s", body)
	}

	// The unset keys report whether they were there.
	if was, err := unset(p, "timeout", testEnv); !was || err != nil {
		t.Errorf("unset timeout = %v, %v; want true, nil", was, err)
	}
	if was, err := unset(p, "timeout", testEnv); was || err != nil {
		t.Errorf("second unset timeout = %v, %v; want false, nil", was, err)
	}

	// Bad values and unknown keys leave the file alone.
	before, _ := os.ReadFile(p)
	for _, bad := range []struct{ key, value string }{
		{"memory_mb", "lots"}, {"timeout", "0"}, {"binds", "/data"}, {"binds", "[{src: rel}]"},
		{"home_allow", "[/etc]"}, {"profile", "open"}, {"memroy_mb", "1"}, {"cwd", "rel"},
	} {
		err := set(p, bad.key, bad.value, testEnv)
		if err == nil {
			t.Errorf("set %s %q succeeded", bad.key, bad.value)
			continue
		}
		if !strings.Contains(err.Error(), bad.key) {
			t.Errorf("set %s %q: error %q does not name the key", bad.key, bad.value, err)
		}
	}
	if _, err := get(p, "nope", testEnv); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("get nope: %v, want ErrUnknownKey", err)
	}
	if _, err := unset(p, "nope", testEnv); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unset nope: %v, want ErrUnknownKey", err)
	}
	after, _ := os.ReadFile(p)
	if string(before) != string(after) {
		t.Errorf("failed operations changed the file:\n%s\n---\n%s", before, after)
	}
}

func TestUnsetRepairsUnknownKey(t *testing.T) {
	p := writeFile(t, "memroy_mb: 1\nmax_procs: 4\n")
	if _, err := Load(p, testEnv); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Load: %v, want ErrUnknownKey", err)
	}
	if was, err := unset(p, "memroy_mb", testEnv); !was || err != nil {
		t.Fatalf("unset memroy_mb = %v, %v", was, err)
	}
	s, err := Load(p, testEnv)
	if err != nil || s.MaxProcs != 4 {
		t.Errorf("Load after repair = %+v, %v", s, err)
	}
}

func TestSetCreatesFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	p := filepath.Join(dir, "config.yaml")
	if err := set(p, "backend", "local", testEnv); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{dir, 0o700}, {filepath.Dir(dir), 0o700}, {p, 0o600}} {
		st, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != c.mode {
			t.Errorf("%s has mode %v, want %v", c.path, st.Mode().Perm(), c.mode)
		}
	}
	s, err := Load(p, testEnv)
	if err != nil || s.Backend != "local" {
		t.Errorf("Load = %+v, %v", s, err)
	}
	// Unsetting the last key leaves a loadable file.
	if _, err := unset(p, "backend", testEnv); err != nil {
		t.Fatal(err)
	}
	if s, err := Load(p, testEnv); err != nil || s.Backend != "bwrap" {
		t.Errorf("Load after unset = %+v, %v", s, err)
	}
	// Unset on a missing file creates nothing.
	q := filepath.Join(t.TempDir(), "x", "config.yaml")
	if was, err := unset(q, "backend", testEnv); was || err != nil {
		t.Errorf("unset on missing file = %v, %v", was, err)
	}
	if _, err := os.Stat(filepath.Dir(q)); !os.IsNotExist(err) {
		t.Errorf("unset on a missing file created %s", filepath.Dir(q))
	}
}

func TestAtomicWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte("max_procs: 1\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"1", "2", "3", "4"} {
		if err := set(p, "memory_mb", v, testEnv); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if _, err := unset(p, "max_procs", testEnv); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = set(p, "memory_mb", "bad", testEnv) // refused before writing
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "config.yaml" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only config.yaml", names)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o640 {
		t.Errorf("mode = %v, want the existing 0640 kept", st.Mode().Perm())
	}

	// A symlinked settings file is updated at its target.
	real := filepath.Join(dir, "real.yaml")
	if err := os.WriteFile(real, []byte("max_procs: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := set(link, "memory_mb", "8", testEnv); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("symlink replaced: %v, %v", fi, err)
	}
	if data, _ := os.ReadFile(real); !strings.Contains(string(data), "memory_mb: 8") {
		t.Errorf("target not updated:\n%s", data)
	}
}

// TestNestedKeys checks the YAML editing for dotted keys (docker.image)
// that later settings will use.
func TestNestedKeys(t *testing.T) {
	node := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
	render := func(doc *yaml.Node) string {
		out, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	tests := []struct {
		name, file string
		set        string // key to set to "v", or
		unset      string // key to unset
		want       string
	}{
		{"new nested", "a: 1\n", "docker.image", "", "a: 1\ndocker:\n    image: v\n"},
		{"into existing section", "docker:\n    pull: x\n", "docker.image", "", "docker:\n    pull: x\n    image: v\n"},
		{"replace nested", "docker:\n    image: old\n", "docker.image", "", "docker:\n    image: v\n"},
		{"replace flat dotted", "docker.image: old\n", "docker.image", "", "docker.image: v\n"},
		{"three levels", "", "a.b.c", "", "a:\n    b:\n        c: v\n"},
		{"unset drops empty section", "x: 1\ndocker:\n    image: old\n", "", "docker.image", "x: 1\n"},
		{"unset keeps sibling", "docker:\n    image: old\n    pull: x\n", "", "docker.image", "docker:\n    pull: x\n"},
		{"unset flat dotted", "docker.image: old\nx: 1\n", "", "docker.image", "x: 1\n"},
		{"unset underscore key is not nested", "memory_mb: 1\nmemory:\n    mb: 2\n", "", "memory_mb", "memory:\n    mb: 2\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := readDoc(writeFile(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			doc.HeadComment = ""
			if tc.set != "" {
				setIn(doc.Content[0], strings.Split(tc.set, "."), node("v"))
			} else if !unsetIn(doc.Content[0], strings.Split(tc.unset, ".")) {
				t.Fatalf("unset %s found nothing", tc.unset)
			}
			if got := render(doc); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestList(t *testing.T) {
	p := writeFile(t, "memory_mb: 512\n")
	entries, err := list(p, env("CORRAL_PROFILE=restricted"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(Keys()) {
		t.Fatalf("list has %d entries, want %d", len(entries), len(Keys()))
	}
	got := map[string]Entry{}
	for _, e := range entries {
		got[e.Key] = e
	}
	checks := []struct {
		key    string
		value  any
		source Source
		origin string
	}{
		{"memory_mb", 512, SourceFile, p},
		{"profile", "restricted", SourceEnv, "CORRAL_PROFILE"},
		{"timeout", "3m0s", SourceDefault, ""},
		{"binds", []sandbox.Bind{}, SourceDefault, ""},
		{"home_allow", []string{}, SourceDefault, ""},
		// Unset means the built-in list ([] would mean none): shown.
		{"protected_paths", sandbox.DefaultProtected, SourceDefault, ""},
	}
	for _, c := range checks {
		e := got[c.key]
		if !reflect.DeepEqual(e.Value, c.value) || e.Source != c.source || e.Origin != c.origin || e.Doc == "" {
			t.Errorf("entry %s = %+v, want value %#v from %s %s", c.key, e, c.value, c.source, c.origin)
		}
	}
	if e := got["protected_paths"]; !e.Builtin || !strings.Contains(e.Text, ".git/hooks") {
		t.Errorf("unset protected_paths: %+v, want the built-in list", e)
	}
	// Set to [], it is [] (nothing protected), not the built-in list.
	entries, err = list(writeFile(t, "protected_paths: []\n"), env())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Key == "protected_paths" && (e.Builtin || e.Text != "[]") {
			t.Errorf("protected_paths []: %+v", e)
		}
	}
}

func TestApply(t *testing.T) {
	s := Defaults()
	if err := s.Apply("memory_mb", "64"); err != nil || s.MemoryMB != 64 {
		t.Errorf("Apply memory_mb 64: %v, %d", err, s.MemoryMB)
	}
	if src, _ := s.Source("memory_mb"); src != SourceFlag {
		t.Errorf("Source = %q, want flag", src)
	}
	if err := s.Apply("binds", "[{src: /a}]"); err != nil || !reflect.DeepEqual(s.Binds, []sandbox.Bind{{Src: "/a", ReadOnly: true}}) {
		t.Errorf("Apply binds: %v, %+v", err, s.Binds)
	}
	err := s.Apply("memory_mb", "lots")
	if err == nil || err.Error() != `memory_mb: "lots" is not a whole number of MiB (0 disables)` {
		t.Errorf("Apply memory_mb lots: %v", err)
	}
	if err := s.Apply("nope", "1"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("Apply nope: %v", err)
	}
	// Defaults never share list storage between Settings.
	a, b := Defaults(), Defaults()
	a.HomeAllow = append(a.HomeAllow, ".x")
	if len(b.HomeAllow) != 0 {
		t.Error("Defaults share HomeAllow")
	}
}

// TestProtectedPathsNilVsEmpty: unset gives nil (the built-in list), []
// gives an empty, non-nil list (nothing protected).
func TestProtectedPathsNilVsEmpty(t *testing.T) {
	s, err := Load(missing(t), testEnv)
	if err != nil || s.ProtectedPaths != nil {
		t.Fatalf("unset: %#v %v", s.ProtectedPaths, err)
	}
	for _, text := range []string{"protected_paths: []", "protected_paths: [.git/hooks, \"**/.vscode\"]"} {
		s, err := Load(writeFile(t, text), testEnv)
		if err != nil || s.ProtectedPaths == nil {
			t.Errorf("%s: %#v %v", text, s.ProtectedPaths, err)
		}
	}
	s, err = Load(missing(t), env("CORRAL_PROTECTED_PATHS=[]"))
	if err != nil || s.ProtectedPaths == nil || len(s.ProtectedPaths) != 0 {
		t.Errorf("env []: %#v %v", s.ProtectedPaths, err)
	}
	if _, err := Load(writeFile(t, "protected_paths: [/abs]"), testEnv); err == nil || !strings.Contains(err.Error(), "protected-path pattern") {
		t.Errorf("absolute pattern: %v", err)
	}
}

// TestDeprecatedSet: a key with no effect (degraded_mode) still loads from
// the file and the environment (old files keep working), and is warned of
// only when one of them sets it, naming where; routes and defaults do not.
func TestDeprecatedSet(t *testing.T) {
	for _, k := range Keys() {
		if k.Name == "degraded_mode" && k.Deprecated == "" {
			t.Fatal("degraded_mode is not marked deprecated")
		}
	}
	p := writeFile(t, "degraded_mode: fail\n")
	empty := writeFile(t, "memory_mb: 10\n")
	tests := []struct {
		name string
		file string
		env  []string
		want string // "" for no warning, else where the warning says it is set
	}{
		{"defaults", empty, nil, ""},
		{"file", p, nil, p},
		{"env", empty, []string{"CORRAL_DEGRADED_MODE=degrade"}, "CORRAL_DEGRADED_MODE"},
		{"env over file", p, []string{"CORRAL_DEGRADED_MODE=degrade"}, "CORRAL_DEGRADED_MODE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Load(tt.file, append(slices.Clone(testEnv), tt.env...))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			got := s.DeprecatedSet()
			if tt.want == "" {
				if got != nil {
					t.Errorf("DeprecatedSet = %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.HasPrefix(got[0], "degraded_mode (set in "+tt.want+") has no effect: corral never runs a command outside its sandbox") {
				t.Errorf("DeprecatedSet = %q, want one warning naming %s", got, tt.want)
			}
			if got := s.Clone().DeprecatedSet(); len(got) != 1 {
				t.Errorf("a clone's DeprecatedSet = %q: Clone lost where the key came from", got)
			}
		})
	}
	if got := Defaults().DeprecatedSet(); got != nil {
		t.Errorf("Defaults().DeprecatedSet() = %q, want none", got)
	}
}
