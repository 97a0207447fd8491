package hostview

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// listenUnix makes a listening Unix socket at p with mode perm.
func listenUnix(t *testing.T, p string, perm fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
}

func sockPaths(socks []Socket) []string {
	var out []string
	for _, s := range socks {
		out = append(out, s.Path)
	}
	slices.Sort(out)
	return out
}

// TestScanSockets: sockets are found by type at any depth within the
// bounds, with their mode and owner; symlinks are not followed; a tree
// deeper or wider than the bounds is reported cut.
func TestScanSockets(t *testing.T) {
	outside := mkTree(t, "x/")
	listenUnix(t, filepath.Join(outside, "x", "out.sock"), 0o600)
	root := mkTree(t, "a/b/c/", "plain.txt := x", "link -> "+outside)
	listenUnix(t, filepath.Join(root, "a", "b", "c", "api.sock"), 0o600)
	listenUnix(t, filepath.Join(root, "pub.sock"), 0o777)
	socks, unread, cut := ScanSockets(root)
	if want := []string{filepath.Join(root, "a/b/c/api.sock"), filepath.Join(root, "pub.sock")}; !slices.Equal(sockPaths(socks), want) || cut || len(unread) > 0 {
		t.Fatalf("ScanSockets = %q unread %q cut %v, want %q (the symlink not followed)", sockPaths(socks), unread, cut, want)
	}
	for _, s := range socks {
		want := fs.FileMode(0o600)
		if filepath.Base(s.Path) == "pub.sock" {
			want = 0o777
		}
		if s.Mode.Perm() != want || s.Mode&fs.ModeSocket == 0 || s.UID != uint32(os.Getuid()) {
			t.Errorf("%s: mode %v uid %d, want socket %v uid %d", s.Path, s.Mode, s.UID, want, os.Getuid())
		}
	}

	t.Run("a socket as the root", func(t *testing.T) {
		socks, _, cut := ScanSockets(filepath.Join(root, "pub.sock"))
		if len(socks) != 1 || cut {
			t.Errorf("ScanSockets(socket) = %+v cut %v", socks, cut)
		}
	})
	t.Run("deeper than the bound", func(t *testing.T) {
		deep := mkTree(t, strings.Repeat("d/", ScanSocketDepth+1))
		if _, _, cut := ScanSockets(deep); !cut {
			t.Error("a tree deeper than ScanSocketDepth is not reported cut")
		}
		ok := mkTree(t, strings.Repeat("d/", ScanSocketDepth))
		if _, _, cut := ScanSockets(ok); cut {
			t.Error("a tree exactly ScanSocketDepth deep is reported cut")
		}
	})
	t.Run("more directories than the bound", func(t *testing.T) {
		wide := mkTree(t)
		for i := range ScanSocketDirs {
			if err := os.Mkdir(filepath.Join(wide, fmt.Sprint(i)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, cut := ScanSockets(wide); !cut {
			t.Error("a tree of more than ScanSocketDirs directories is not reported cut")
		}
	})
	t.Run("a directory it cannot list", func(t *testing.T) {
		if os.Getuid() == 0 {
			t.Skip("root lists every directory; run as an unprivileged user (CI does) to check this")
		}
		closed := mkTree(t, "closed/")
		os.Chmod(filepath.Join(closed, "closed"), 0)
		t.Cleanup(func() { os.Chmod(filepath.Join(closed, "closed"), 0o755) })
		if _, unread, _ := ScanSockets(closed); !slices.Equal(unread, []string{filepath.Join(closed, "closed")}) {
			t.Errorf("unread = %q", unread)
		}
	})
}

// TestInspectBindSource: the facts read for a source that holds a
// person's home are those the policy covers by, and with them DecideBind
// covers the home's credential stores and dot entries.
func TestInspectBindSource(t *testing.T) {
	base := mkTree(t,
		"homes/bob/.ssh/id_rsa := KEY", "homes/bob/.docker/config.json := {}", "homes/bob/.bashrc := x",
		"homes/bob/.secret := x", "homes/bob/.config/nvim/init.vim := x", "homes/bob/.config/gh/hosts.yml := x",
		"homes/bob/project/a.go := x", "data/f := x", "link -> homes")
	bob := filepath.Join(base, "homes", "bob")
	h := &BindHost{OtherHomes: []string{bob}, Allow: slices.Concat(DefaultHomeAllow, DefaultNestedAllow)}
	GatherBindHost(h)
	if !slices.Contains(h.CredentialTargets, filepath.Join(bob, ".ssh")) || !slices.Contains(h.CredentialTargets, filepath.Join(bob, ".docker")) {
		t.Fatalf("credential targets %q lack Bob's stores", h.CredentialTargets)
	}
	s := InspectBindSource(sandbox.Bind{Src: filepath.Join(base, "link"), ReadOnly: true}, h)
	if s.Err != nil || s.Resolved != filepath.Join(base, "homes") || !s.Mode.IsDir() {
		t.Fatalf("source %+v", s)
	}
	if names := s.Listings[bob]; !slices.Contains(names, ".ssh") || !slices.Contains(names, "project") {
		t.Errorf("listing of Bob's home %q", names)
	}
	if k, ok := s.Kinds[filepath.Join(bob, ".config", "gh")]; !ok || !k.IsDir() {
		t.Errorf("kind of .config/gh: %v %v", k, ok)
	}
	d, err := DecideBind(sandbox.Bind{Src: filepath.Join(base, "link"), ReadOnly: true}, h, s)
	if err != nil || !d.Mount || d.Dest != s.Resolved {
		t.Fatalf("DecideBind = %+v, %v", d, err)
	}
	wantHide := []string{filepath.Join(bob, ".config/gh"), filepath.Join(bob, ".docker"), filepath.Join(bob, ".ssh")}
	if !slices.Equal(d.HideDirs, wantHide) || !slices.Equal(d.EmptyFiles, []string{filepath.Join(bob, ".secret")}) {
		t.Errorf("covers %q %q, want %q and .secret", d.HideDirs, d.EmptyFiles, wantHide)
	}

	missing := InspectBindSource(sandbox.Bind{Src: filepath.Join(base, "no-such")}, h)
	if !os.IsNotExist(missing.Err) {
		t.Errorf("missing source: %v", missing.Err)
	}
}

// BenchmarkScanSockets measures a scan that reaches ScanSocketDirs (the
// most a bind's scan costs before each command) and one of the module
// cache (GOMODCACHE, when set), a large tree people bind.
func BenchmarkScanSockets(b *testing.B) {
	wide := b.TempDir()
	for i := range ScanSocketDirs {
		d := filepath.Join(wide, fmt.Sprint(i/64), fmt.Sprint(i%64))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "f"), nil, 0o644)
	}
	b.Run("bound", func(b *testing.B) {
		for b.Loop() {
			if _, _, cut := ScanSockets(wide); !cut {
				b.Fatal("not cut")
			}
		}
	})
	if mc := os.Getenv("GOMODCACHE"); mc != "" {
		b.Run("modcache", func(b *testing.B) {
			for b.Loop() {
				ScanSockets(mc)
			}
		})
	}
}

// Symlinks inside a person's credential store hide their targets; those
// inside corral's own state directory (a sandbox writes its tool cache and
// scratch there) do not, so one sandbox cannot hide a path from the next.
func TestCredentialTargetsOwnStoresNotWalked(t *testing.T) {
	home := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{".aws", ".local/state/corral/cache/go-build", ".cache/corral"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	stow := filepath.Join(outside, "stow")
	planted := filepath.Join(outside, "planted")
	for _, d := range []string{stow, planted} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(stow, filepath.Join(home, ".aws", "credentials")))
	must(os.Symlink(planted, filepath.Join(home, ".local/state/corral/cache/go-build", "evil")))
	must(os.Symlink(planted, filepath.Join(home, ".cache/corral", "evil")))
	targets, _ := CredentialTargets(home)
	if !slices.Contains(targets, stow) {
		t.Errorf("a symlink in ~/.aws: its target %s not hidden: %q", stow, targets)
	}
	if slices.Contains(targets, planted) {
		t.Errorf("a symlink in corral's own state: its target %s hidden: %q", planted, targets)
	}
	for _, own := range OwnStores {
		if p := filepath.Join(home, own); exists(p) && !slices.Contains(targets, p) {
			t.Errorf("%s itself not hidden: %q", p, targets)
		}
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }
