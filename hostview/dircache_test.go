package hostview

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/dircache"
	"github.com/corralhq/corral/sandbox"
)

// settled is a listing cache whose clock runs an hour ahead: it keeps the
// listings of directories a test has just made, so the scans below take
// them from it.
func settled() *dircache.Cache {
	return dircache.New(func() time.Time { return time.Now().Add(time.Hour) })
}

// TestFindProtectedInCache: through a cache that keeps every listing, the
// scan finds after each change to the tree what a scan without one finds
// (a repository made, its hooks made, one nested deeper, a .git replaced
// by a gitfile, a directory replaced by a symlink, a settings file).
func TestFindProtectedInCache(t *testing.T) {
	root := mkTree(t, "src/main.go", "a/b/")
	c := settled()
	scan := func(step string) {
		t.Helper()
		want, wcut, werr := FindProtectedErr(root, sandbox.DefaultProtected)
		got, gcut, gerr := FindProtectedIn(root, sandbox.DefaultProtected, c, nil)
		if fmt.Sprint(got, gcut, gerr) != fmt.Sprint(want, wcut, werr) {
			t.Errorf("%s: through the cache %v %v %v; afresh %v %v %v", step, got, gcut, gerr, want, wcut, werr)
		}
	}
	scan("first")
	scan("again, unchanged")
	steps := []struct {
		name string
		do   func() error
	}{
		{"a repository made", func() error { return os.MkdirAll(filepath.Join(root, ".git", "objects"), 0o755) }},
		{"its HEAD", func() error {
			return os.WriteFile(filepath.Join(root, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
		}},
		{"its hooks", func() error { return os.Mkdir(filepath.Join(root, ".git", "hooks"), 0o755) }},
		{"a nested repository", func() error { return os.MkdirAll(filepath.Join(root, "a", "b", ".git", "hooks"), 0o755) }},
		{"its config", func() error { return os.WriteFile(filepath.Join(root, "a", "b", ".git", "config"), nil, 0o644) }},
		{"a .git replaced by a gitfile", func() error {
			os.RemoveAll(filepath.Join(root, "a", "b", ".git"))
			return os.WriteFile(filepath.Join(root, "a", "b", ".git"), []byte("gitdir: "+filepath.Join(root, ".git")+"\n"), 0o644)
		}},
		{"a directory replaced by a symlink", func() error {
			os.RemoveAll(filepath.Join(root, "src"))
			return os.Symlink(filepath.Join(root, "a"), filepath.Join(root, "src"))
		}},
		{"a settings file", func() error { return os.MkdirAll(filepath.Join(root, ".vscode"), 0o755) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatal(s.name, err)
		}
		scan(s.name)
		scan(s.name + ", again")
	}
}

// TestCredentialTargetsInCache: the same for the credential stores' walk:
// a symlink made inside a store, deeper, retargeted, and a new store.
func TestCredentialTargetsInCache(t *testing.T) {
	home := t.TempDir()
	home, _ = filepath.EvalSymlinks(home)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, nil, 0o600)
	os.MkdirAll(filepath.Join(home, ".aws", "sub"), 0o700)
	c := settled()
	check := func(step string) {
		t.Helper()
		want, ww := credentialTargetsIn(home, nil, func(string) bool { return true }, nil)
		got, gw := CredentialTargetsIn(home, c, nil)
		if !slices.Equal(got, want) || !slices.Equal(gw, ww) {
			t.Errorf("%s: through the cache %q %q; each name lstat'ed %q %q", step, got, gw, want, ww)
		}
		got, gw = CredentialTargets(home)
		if !slices.Equal(got, want) || !slices.Equal(gw, ww) {
			t.Errorf("%s: listed afresh %q %q; each name lstat'ed %q %q", step, got, gw, want, ww)
		}
	}
	check("first")
	steps := []struct {
		name string
		do   func() error
	}{
		{"a symlink in a store", func() error { return os.Symlink(secret, filepath.Join(home, ".aws", "link")) }},
		{"one deeper", func() error { return os.Symlink(filepath.Dir(secret), filepath.Join(home, ".aws", "sub", "deep")) }},
		{"retargeted", func() error {
			os.Remove(filepath.Join(home, ".aws", "link"))
			return os.Symlink(filepath.Dir(secret), filepath.Join(home, ".aws", "link"))
		}},
		{"a store made", func() error { return os.MkdirAll(filepath.Join(home, ".ssh"), 0o700) }},
		{"a symlink in it", func() error { return os.Symlink(secret, filepath.Join(home, ".ssh", "id_ed25519")) }},
		// Names two levels down (.config/gh, .local/share/keyrings), found
		// through their parents' listings.
		{"a store two levels down", func() error { return os.MkdirAll(filepath.Join(home, ".config", "gh"), 0o700) }},
		{"a file three levels down", func() error {
			os.MkdirAll(filepath.Join(home, ".local", "share", "uv", "credentials"), 0o700)
			return os.WriteFile(filepath.Join(home, ".local", "share", "uv", "credentials", "credentials.toml"), nil, 0o600)
		}},
		// A parent that is a symlink: its listing is not read through it.
		{"a parent that is a symlink", func() error {
			elsewhere := t.TempDir()
			os.MkdirAll(filepath.Join(elsewhere, "gcloud"), 0o700)
			os.RemoveAll(filepath.Join(home, ".config"))
			return os.Symlink(elsewhere, filepath.Join(home, ".config"))
		}},
		{"a dangling store symlink", func() error { return os.Symlink("/nonexistent/corral", filepath.Join(home, ".kube")) }},
		{"a store removed", func() error { return os.RemoveAll(filepath.Join(home, ".aws")) }},
		// A home that can be entered but not listed (mode 0711): each name
		// is lstat'ed.
		{"a home that cannot be listed", func() error {
			t.Cleanup(func() { os.Chmod(home, 0o700) })
			return os.Chmod(home, 0o311)
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatal(s.name, err)
		}
		check(s.name)
		check(s.name + ", again")
	}
}
