package corral_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/backend/kubernetes"
	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// TestMain lets the test binary serve as corral's helpers (as an
// embedding program's main must, see reexec), and leaves out the examples,
// saying so, where bubblewrap is missing: an Example cannot skip, and it
// runs commands in bwrap sandboxes.
func TestMain(m *testing.M) {
	reexec.Init()
	flag.Parse()
	if _, err := exec.LookPath("bwrap"); err != nil {
		fmt.Fprintln(os.Stderr, "corral_test: skipping the examples: bwrap is missing (apt-get install bubblewrap)")
		_ = flag.Set("test.run", "^Test")
	}
	os.Exit(m.Run())
}

// hostDirs returns a project, a state directory and a settings file path
// under $CORRAL_TEST_DIR (else /var/tmp), removed after the test.
func hostDirs(t testing.TB) (project, state, cfg string) {
	t.Helper()
	base := os.Getenv("CORRAL_TEST_DIR")
	if base == "" {
		base = "/var/tmp"
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp(base, "corral-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	project, state = filepath.Join(root, "project"), filepath.Join(root, "state")
	for _, d := range []string{project, state} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return project, state, filepath.Join(root, "config.yaml")
}

// writeSettings writes a settings file (YAML text) as `corral config set`
// does: a new file renamed over the old one.
func writeSettings(t testing.TB, path, text string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// env is a test Host's environment: no CORRAL_* variables of the person
// running the tests.
func env() []string { return []string{"HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH")} }

func TestHostResolvesPerSession(t *testing.T) {
	project, state, cfg := hostDirs(t)
	writeSettings(t, cfg, "cwd: "+project+"\nprofile: workspace\nmemory_mb: 100\nroutes:\n  - {sessions: \"tg:*\", profile: restricted}\n")
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, tc := range []struct {
		session string
		want    sandbox.Profile
	}{{"dir:x", sandbox.ProfileWorkspace}, {"tg:1", sandbox.ProfileRestricted}} {
		sp, err := h.Spec(tc.session)
		if err != nil {
			t.Fatal(err)
		}
		if sp.Profile != tc.want || sp.Workdir != project || sp.Limits.MemoryMB != 100 {
			t.Errorf("Spec(%q) = profile %q, workdir %q, memory %d; want %q, %q, 100", tc.session, sp.Profile, sp.Workdir, sp.Limits.MemoryMB, tc.want, project)
		}
	}
	// The backend is built once and kept (with its caches).
	a, _ := h.Spec("a")
	b, _ := h.Spec("b")
	if a.Backend != b.Backend {
		t.Errorf("two commands got two bwrap backends (%p, %p); want one kept", a.Backend, b.Backend)
	}
	// A changed settings file takes effect at the next command.
	writeSettings(t, cfg, "cwd: "+project+"\nprofile: restricted\n")
	sp, err := h.Spec("dir:x")
	if err != nil {
		t.Fatal(err)
	}
	if sp.Profile != sandbox.ProfileRestricted || sp.Limits.MemoryMB != 1024 {
		t.Errorf("after the settings changed: profile %q, memory %d; want restricted, 256", sp.Profile, sp.Limits.MemoryMB)
	}
	// A broken settings file refuses the command, naming the key.
	writeSettings(t, cfg, "profile: nonsense\n")
	if _, err := h.Spec("dir:x"); err == nil || !strings.Contains(err.Error(), "profile") {
		t.Errorf("Spec with a bad profile setting: %v; want an error naming profile", err)
	}
}

func TestHostOverride(t *testing.T) {
	project, state, cfg := hostDirs(t)
	writeSettings(t, cfg, "cwd: "+project+"\nroutes:\n  - {sessions: \"*\", profile: network}\n")
	refuse := errors.New("refused by the override")
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env(), Override: func(st *config.Settings) error {
		if st.Cwd == "" {
			return refuse
		}
		st.Profile = sandbox.ProfileRestricted
		st.Binds = append(slices.Clip(st.Binds), sandbox.Bind{Src: "/srv", ReadOnly: true})
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i := 0; i < 2; i++ { // the cached settings are not changed by the override
		sp, err := h.Spec("s")
		if err != nil {
			t.Fatal(err)
		}
		if sp.Profile != sandbox.ProfileRestricted || len(sp.Binds) != 1 {
			t.Errorf("Spec #%d: profile %q, binds %v; want the override's restricted and one bind", i, sp.Profile, sp.Binds)
		}
	}
	c, err := h.Command([]string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Request.Profile != sandbox.ProfileRestricted || c.Request.Workdir != project || c.Backend.Name() != "bwrap" {
		t.Errorf("Command: profile %q, workdir %q, backend %s", c.Request.Profile, c.Request.Workdir, c.Backend.Name())
	}
	writeSettings(t, cfg, "")
	if _, err := h.Spec("s"); !errors.Is(err, refuse) {
		t.Errorf("Spec when the override refuses: %v; want its error", err)
	}
}

func TestHostErrors(t *testing.T) {
	project, state, cfg := hostDirs(t)
	writeSettings(t, cfg, "no_such_key: 1\n")
	if _, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env()}); !errors.Is(err, config.ErrUnknownKey) {
		t.Errorf("Open with an unknown key: %v; want config.ErrUnknownKey", err)
	}
	st := config.Defaults()
	st.Cwd, st.Backend = project, "nosuch"
	h, err := corral.Open(corral.Options{Settings: st, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Spec("s"); err == nil || !strings.Contains(err.Error(), `unknown backend "nosuch"`) {
		t.Errorf("Spec with backend nosuch: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := h.Session("s"); !errors.Is(err, session.ErrClosed) {
		t.Errorf("Session after Close: %v; want session.ErrClosed", err)
	}
}

// BenchmarkSpec measures resolving a session command's Spec: through the
// Host (cached settings, kept backend) and as the CLI did before it (the
// settings file read and a bwrap backend built for every command).
func BenchmarkSpec(b *testing.B) {
	project, state, cfg := hostDirs(b)
	writeSettings(b, cfg, "cwd: "+project+"\nprofile: workspace\nroutes:\n  - {sessions: \"tg:*\", profile: restricted}\n")
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env()})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	b.Run("host", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.Spec("tg:1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("load-per-command", func(b *testing.B) {
		for b.Loop() {
			st, err := config.Load(cfg, env())
			if err != nil {
				b.Fatal(err)
			}
			st = st.ForSession("tg:1")
			if _, err := corral.PolicyOf(st); err != nil {
				b.Fatal(err)
			}
			_ = bwrap.New(bwrap.Options{StateDir: state, SecretFiles: []string{st.Path}})
		}
	})
}

// Secrets through a Host (the CLI's and the MCP server's way): the
// variable holds a stand-in of the real value's shape, never the value; the
// certificate authority is made in the state directory. Found by a fresh
// user's trial: the Host's proxy pool had no directory for the CA, so every
// command with a secret was refused.
func TestHostSecrets(t *testing.T) {
	project, state, cfg := hostDirs(t)
	real := "ghp_" + strings.Repeat("Zq9", 12)
	writeSettings(t, cfg, "cwd: "+project+"\nprofile: allowlist\nsecrets: [{name: GITHUB_TOKEN, from: \"env:CORRAL_TEST_GH\", hosts: [api.github.com]}]\n")
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: append(env(), "CORRAL_TEST_GH="+real)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s, err := h.Session("secrets")
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Exec(context.Background(), session.ExecRequest{Command: `printf '%s|%s' "$GITHUB_TOKEN" "${CORRAL_TEST_GH-unset}"`})
	if err != nil {
		t.Fatal(err)
	}
	got, source, _ := strings.Cut(r.Output.Text, "|")
	if r.ExitCode != 0 || len(got) != len(real) || !strings.HasPrefix(got, "ghp_") || got == real || source != "unset" {
		t.Errorf("in the sandbox GITHUB_TOKEN=%q and the source variable %q (exit %d); want a stand-in of %d bytes starting ghp_, and unset", got, source, r.ExitCode, len(real))
	}
	if _, err := os.Stat(filepath.Join(state, "ca")); err != nil {
		t.Errorf("no certificate authority in the state directory: %v", err)
	}
}

// TestHostKubernetes: backend kubernetes gives the kubernetes backend with
// the kubernetes.* settings (a route to it too), without contacting a
// cluster; a command that would run as root is refused naming the key,
// before any cluster is looked for.
func TestHostKubernetes(t *testing.T) {
	project, state, cfg := hostDirs(t)
	writeSettings(t, cfg, "cwd: "+project+"\nroutes:\n  - {sessions: \"k8s:*\", backend: kubernetes}\nkubernetes:\n  namespace: agents\n  memory: 512Mi\n  tolerations: [\"pool=agents:NoSchedule\"]\n  user: \"0:0\"\n")
	_, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env()})
	if err == nil || !strings.Contains(err.Error(), "kubernetes.user") {
		t.Fatalf("Open with kubernetes.user 0:0: %v; want an error naming the key", err)
	}
	writeSettings(t, cfg, "cwd: "+project+"\nroutes:\n  - {sessions: \"k8s:*\", backend: kubernetes}\nkubernetes:\n  namespace: agents\n  memory: 512Mi\n  tolerations: [\"pool=agents:NoSchedule\"]\n")
	h, err := corral.Open(corral.Options{ConfigPath: cfg, StateDir: state, Environ: env()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sp, err := h.Spec("k8s:1")
	if err != nil {
		t.Fatal(err)
	}
	kb, ok := sp.Backend.(*kubernetes.Backend)
	if !ok || kb.Name() != "kubernetes" {
		t.Fatalf("backend %T, want *kubernetes.Backend", sp.Backend)
	}
	if st := kb.Settings(); st.Namespace != "agents" || st.Memory != "512Mi" || len(st.Tolerations) != 1 || st.User != "1000:1000" {
		t.Errorf("settings %+v", st)
	}
	if sp, _ := h.Spec("other"); sp.Backend.Name() != "bwrap" {
		t.Errorf("unrouted session on %s", sp.Backend.Name())
	}
}

func TestBuildInfoString(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		b    corral.BuildInfo
		want string
	}{
		{corral.BuildInfo{Version: "v1.2.3", Revision: rev}, "v1.2.3"},
		{corral.BuildInfo{Version: "dev"}, "dev"},
		{corral.BuildInfo{Version: "dev", Revision: rev}, "dev+0123456789ab"},
		{corral.BuildInfo{Version: "dev", Revision: rev, Modified: true}, "dev+0123456789ab-dirty"},
		{corral.BuildInfo{Version: "dev", Revision: "abc"}, "dev+abc"},
	} {
		if got := tc.b.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.b, got, tc.want)
		}
	}
	if b := corral.Build(); b.Version == "" || !strings.HasPrefix(b.GoVersion, "go") || corral.Version() != b.String() {
		t.Errorf("Build() = %+v, Version() = %q", b, corral.Version())
	}
}

// TestSettingsAgree: the settings registry (config) and the backends
// registered (backend/registry, through corral's one list, backends.go)
// agree: the backend key accepts exactly the registered backends' names;
// a backend has a section of keys (NAME.*, which it declares itself:
// config.RegisterSection) exactly when its driver says how they reach it
// (Driver.Settings); the section's defaults, as the Host reads them, are
// the backend's own; and every field of the backend's settings is the
// field of exactly one of its keys, so none is left without a key or
// set by two.
func TestSettingsAgree(t *testing.T) {
	bk, ok := config.Lookup("backend")
	if !ok {
		t.Fatal("no backend key")
	}
	if got, want := slices.Sorted(slices.Values(bk.Values)), registry.Names(); !slices.Equal(got, want) {
		t.Errorf("the backend key accepts %q; the registered backends are %q", got, want)
	}
	if _, ok := registry.Lookup(config.DefaultBackend()); !ok {
		t.Errorf("the default backend %q is not registered", config.DefaultBackend())
	}
	keys := map[string][]config.Key{}
	for _, k := range config.Keys() {
		if sec, _, ok := strings.Cut(k.Name, "."); ok {
			keys[sec] = append(keys[sec], k)
		}
	}
	for _, d := range registry.Drivers() {
		if (d.Settings != nil) != (len(keys[d.Name]) > 0) {
			t.Errorf("backend %s: %d keys %s.* in config; Driver.Settings set: %v", d.Name, len(keys[d.Name]), d.Name, d.Settings != nil)
			continue
		}
		if d.Settings == nil {
			continue
		}
		st := config.Defaults()
		if got := d.Settings.Of(st); !reflect.DeepEqual(got, d.Settings.Defaults()) {
			t.Errorf("%s.* defaults:\nregistry %+v\nbackend  %+v", d.Name, got, d.Settings.Defaults())
		}
		sec := reflect.ValueOf(st.Section(d.Name))
		if sec.Kind() != reflect.Pointer || sec.Elem().Kind() != reflect.Struct || sec.Elem().Type() != reflect.TypeOf(d.Settings.Defaults()) {
			t.Errorf("backend %s: section %s is %v, want a pointer to its settings (%T)", d.Name, d.Name, sec.Type(), d.Settings.Defaults())
			continue
		}
		owner := map[uintptr]string{} // a field's address -> its key
		for _, k := range keys[d.Name] {
			p := reflect.ValueOf(k.Field(st)).Pointer()
			if prev, dup := owner[p]; dup {
				t.Errorf("%s and %s set the same field", prev, k.Name)
			}
			owner[p] = k.Name
		}
		for i := 0; i < sec.Elem().NumField(); i++ {
			f := sec.Elem().Field(i)
			if _, ok := owner[f.Addr().Pointer()]; !ok {
				t.Errorf("%s's settings field %s has no key %s.*", d.Name, sec.Elem().Type().Field(i).Name, d.Name)
			}
			delete(owner, f.Addr().Pointer())
		}
		for _, k := range owner {
			t.Errorf("key %s sets no field of %s's settings", k, d.Name)
		}
	}
}

// TestLayoutNamesEveryPackage: docs/layout.md, where a reader finds which
// folder holds a behaviour, names every package of the module (bench's
// programs as one row).
func TestLayoutNamesEveryPackage(t *testing.T) {
	// The module's root: this file's directory (CI runs the unprivileged
	// pass elsewhere, where the source may not be readable: that pass
	// skips, the root pass checks).
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Dir(self)
	doc, err := os.ReadFile(filepath.Join(root, "docs/layout.md"))
	if err != nil {
		t.Skipf("the module's source is not readable here: %v", err)
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		p, _ = filepath.Rel(root, p)
		if d.IsDir() {
			if n := d.Name(); p != "." && (strings.HasPrefix(n, ".") || n == "testdata" || p == "bench" || p == "docs") {
				return filepath.SkipDir
			}
			return nil
		}
		dir := filepath.Dir(p)
		if dir == "." || seen[dir] || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		seen[dir] = true
		if !strings.Contains(string(doc), "`"+dir+"`") {
			t.Errorf("docs/layout.md does not name package %s", dir)
		}
		return nil
	})
	if len(seen) < 40 {
		t.Errorf("found only %d packages: %v", len(seen), seen)
	}
	if err != nil {
		t.Fatal(err)
	}
}
