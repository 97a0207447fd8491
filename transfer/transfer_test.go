package transfer

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/internal/dirlist"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

func TestRoundTrip(t *testing.T) {
	d := t.TempDir()
	testkit.MakeTree(t, d, 50<<20)
	var buf bytes.Buffer
	ps, err := Pack(&buf, d, "src", "src")
	if err != nil {
		t.Fatal(err)
	}
	if ps.Files != 5 || ps.Symlinks != 3 || ps.Dirs != 3 {
		t.Errorf("packed %+v", ps)
	}
	sum := sha256.Sum256(buf.Bytes())
	dst := t.TempDir()
	us, err := Unpack(bytes.NewReader(buf.Bytes()), dst, Options{Dir: "in", RenameFrom: "src", RenameTo: "copy", WantSHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatal(err)
	}
	if us.Files != 5 || us.Bytes != ps.Bytes || us.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("unpacked %+v, packed %+v", us, ps)
	}
	if a, b := testkit.TreeHash(t, filepath.Join(d, "src")), testkit.TreeHash(t, filepath.Join(dst, "in/copy")); a != b {
		t.Errorf("trees differ:\n%s\n%s", a, b)
	}
	fi, err := os.Lstat(filepath.Join(dst, "in/copy/sub/deeper"))
	if err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o750 {
		t.Errorf("sticky dir: %v %v", fi.Mode(), err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "in/copy/sub/link-out")); l != "/etc/passwd" {
		t.Errorf("link-out %q", l)
	}
}

// tarOf builds an archive of the given headers (regular files get body).
// tarReg, tarDir and tarLink are archive headers of a regular file (tarOf
// writes its body), a directory and a symlink.
func tarReg(n string) *tar.Header { return &tar.Header{Name: n, Typeflag: tar.TypeReg} }
func tarDir(n string) *tar.Header {
	return &tar.Header{Name: n + "/", Typeflag: tar.TypeDir, Mode: 0o755}
}
func tarLink(n, to string) *tar.Header {
	return &tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: to}
}

// heldWhy is what Unpack held back, by path: why.
func heldWhy(st Stats) map[string]string {
	held := map[string]string{}
	for _, r := range st.Held {
		held[r.Path] = r.Why
	}
	return held
}

func tarOf(t *testing.T, hs ...*tar.Header) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 4
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("evil"))
		}
	}
	tw.Close()
	return b.Bytes()
}

func TestHostileEntries(t *testing.T) {
	reg := func(n string) *tar.Header { return &tar.Header{Name: n, Typeflag: tar.TypeReg} }
	for _, tc := range []struct {
		name string
		prep func(dir string)
		hs   []*tar.Header
		want string
	}{
		{"dotdot", nil, []*tar.Header{reg("../escape")}, `a ".." component`},
		{"dotdot inside", nil, []*tar.Header{reg("a/../../escape")}, `a ".." component`},
		{"absolute", nil, []*tar.Header{reg("/tmp/escape")}, "an absolute path"},
		{"through symlink in archive", nil, []*tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, reg("l/escape")}, "below the symlink l"},
		{"bad entry after good ones", nil, []*tar.Header{reg("first"), {Name: "sub", Typeflag: tar.TypeDir}, reg("sub/second"), reg("../escape")}, `a ".." component`},
		{"through symlink inside", nil, []*tar.Header{{Name: "d", Typeflag: tar.TypeDir}, {Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d"}, reg("l/x")}, "below the symlink l"},
		{"through existing symlink", func(d string) { os.Symlink("/tmp", filepath.Join(d, "ex")) }, []*tar.Header{reg("ex/escape")}, "below the symlink ex"},
		{"hard link", nil, []*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}}, "a hard link"},
		{"device", nil, []*tar.Header{{Name: "dev", Typeflag: tar.TypeChar}}, "only files, directories and symlinks"},
		{"protected hook", func(d string) { os.MkdirAll(filepath.Join(d, ".git/hooks"), 0o755) }, []*tar.Header{reg(".git/hooks/pre-commit")}, "protected path"},
		{"dir in the way", func(d string) { os.Mkdir(filepath.Join(d, "dd"), 0o755) }, []*tar.Header{reg("dd")}, "a directory is in the way"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			dir := filepath.Join(top, "ws")
			os.Mkdir(dir, 0o755)
			if tc.prep != nil {
				tc.prep(dir)
			}
			before := listing(t, dir)
			// A spooled archive (a seeker) is refused before any entry is
			// written; a plain stream at its bad entry.
			_, err := Unpack(bytes.NewReader(tarOf(t, tc.hs...)), dir, Options{Protected: sandbox.DefaultProtected})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
			if after := listing(t, dir); !slices.Equal(before, after) {
				t.Errorf("a refused spooled archive wrote %q (before %q)", after, before)
			}
			_, err = Unpack(io.MultiReader(bytes.NewReader(tarOf(t, tc.hs...))), dir, Options{Protected: sandbox.DefaultProtected})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("stream: err %v, want %q", err, tc.want)
			}
			for _, p := range []string{filepath.Join(top, "escape"), "/tmp/escape", filepath.Join(dir, "d/x")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
		})
	}
}

// listing returns every path below dir, sorted.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil && p != dir {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestSymlinkBecomesDir: an archive that replaces the destination's
// symlink with a directory and writes below it is fine (precheck follows
// the archive, not the disk, for paths the archive names); the symlink's
// target is untouched.
func TestSymlinkBecomesDir(t *testing.T) {
	top := t.TempDir()
	victim := filepath.Join(top, "victim")
	os.Mkdir(victim, 0o755)
	ws := filepath.Join(top, "ws")
	os.Mkdir(ws, 0o755)
	os.Symlink(victim, filepath.Join(ws, "trap"))
	ar := tarOf(t, &tar.Header{Name: "trap", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "trap/x", Typeflag: tar.TypeReg})
	if _, err := Unpack(bytes.NewReader(ar), ws, Options{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "trap")); err != nil || !fi.IsDir() {
		t.Errorf("trap: %v %v", fi, err)
	}
	if got := listing(t, victim); len(got) != 0 {
		t.Errorf("written through the symlink: %q", got)
	}
}

// TestReplaceSymlink: a file entry where a symlink is replaces the
// symlink; the file it pointed to is untouched.
func TestReplaceSymlink(t *testing.T) {
	top := t.TempDir()
	os.WriteFile(filepath.Join(top, "victim"), []byte("safe"), 0o644)
	ws := filepath.Join(top, "ws")
	os.Mkdir(ws, 0o755)
	os.Symlink("../victim", filepath.Join(ws, "f"))
	if _, err := Unpack(bytes.NewReader(tarOf(t, &tar.Header{Name: "f", Typeflag: tar.TypeReg})), ws, Options{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(top, "victim")); string(b) != "safe" {
		t.Errorf("victim %q", b)
	}
	if fi, _ := os.Lstat(filepath.Join(ws, "f")); !fi.Mode().IsRegular() {
		t.Errorf("f is %v", fi.Mode())
	}
}

// TestDelete: Delete removes what the archive lacks (never a protected
// path), and only when the hash matches: a cut-short stream deletes
// nothing.
func TestDelete(t *testing.T) {
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "old"), []byte("o"), 0o644)
	os.MkdirAll(filepath.Join(ws, ".git/hooks"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git/HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.MkdirAll(filepath.Join(ws, ".git/objects"), 0o755)
	os.MkdirAll(filepath.Join(ws, ".git/refs"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git/config"), []byte("[core]\n"), 0o644)
	ar := tarOf(t, &tar.Header{Name: "new", Typeflag: tar.TypeReg})
	if _, err := Unpack(bytes.NewReader(ar), ws, Options{Delete: true}); err == nil {
		t.Error("Delete without a hash accepted")
	}
	if _, err := Unpack(bytes.NewReader(ar[:512]), ws, Options{Delete: true, WantSHA256: hashOf(ar)}); err == nil {
		t.Error("a cut-short stream accepted")
	}
	if _, err := os.Stat(filepath.Join(ws, "old")); err != nil {
		t.Errorf("a cut-short stream deleted: %v", err)
	}
	st, err := Unpack(bytes.NewReader(ar), ws, Options{Delete: true, WantSHA256: hashOf(ar), Protected: sandbox.DefaultProtected})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "old")); err == nil || len(st.Deleted) == 0 {
		t.Errorf("old kept; deleted %q", st.Deleted)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/config")); err != nil {
		t.Errorf("a protected path was deleted: %v (deleted %q)", err, st.Deleted)
	}
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestUnpackFromPipe: an *os.File that is a pipe (the pod side's stdin)
// is an io.ReadSeeker whose Seek fails: Unpack reads it as a stream.
func TestUnpackFromPipe(t *testing.T) {
	ws := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ar := tarOf(t, &tar.Header{Name: "d", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644})
	go func() {
		w.Write(ar)
		w.Close()
	}()
	st, err := Unpack(r, ws, Options{WantSHA256: hashOf(ar)})
	r.Close()
	if err != nil || st.Files != 1 {
		t.Fatalf("Unpack from a pipe: %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "d/f")); err != nil {
		t.Error(err)
	}
}

// TestOutsideTop: a forged helper's archive for `corral cp S:out DEST`
// that holds entries beside out/ (a sibling file, a .bashrc, a .git/hooks
// of DEST's parent) is refused whole, before anything is written, both
// when DEST is new (renamed) and when it is an existing directory.
func TestOutsideTop(t *testing.T) {
	reg := func(n string) *tar.Header { return &tar.Header{Name: n, Typeflag: tar.TypeReg} }
	for _, extra := range []*tar.Header{reg("sibling.txt"), reg(".bashrc"), reg("outx/y"), {Name: ".git/hooks/", Typeflag: tar.TypeDir}} {
		for _, existing := range []bool{false, true} {
			parent := t.TempDir()
			os.WriteFile(filepath.Join(parent, ".bashrc"), []byte("mine"), 0o644)
			if existing {
				os.Mkdir(filepath.Join(parent, "dest"), 0o755)
			}
			before := listing(t, parent)
			ar := tarOf(t, &tar.Header{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755}, reg("out/a"), extra, reg("out/b"))
			_, err := Unpack(bytes.NewReader(ar), parent, Options{Dest: "dest", Top: "out", Gate: &handback.Policy{}})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "outside") {
				t.Errorf("%s (existing %v): err %v", extra.Name, existing, err)
			}
			if after := listing(t, parent); !slices.Equal(before, after) {
				t.Errorf("%s (existing %v): wrote %q", extra.Name, existing, after)
			}
			if b, _ := os.ReadFile(filepath.Join(parent, ".bashrc")); string(b) != "mine" {
				t.Errorf(".bashrc is %q", b)
			}
		}
	}
}

// TestGate: what the host's policy calls risky is held back and listed,
// at any depth, in a git directory of another name that the archive makes,
// unless included; what the destination already holds as it is goes
// unlisted; with Delete, a risky path the archive lacks stays.
func TestGate(t *testing.T) {
	body := func(n, s string) (*tar.Header, string) {
		return &tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(s))}, s
	}
	type ent struct {
		h *tar.Header
		s string
	}
	mk := func(es ...ent) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, e := range es {
			tw.WriteHeader(e.h)
			tw.Write([]byte(e.s))
		}
		tw.Close()
		return b.Bytes()
	}
	e := func(n, s string) ent { h, s := body(n, s); return ent{h, s} }
	d := func(n string) ent { return ent{&tar.Header{Name: n + "/", Typeflag: tar.TypeDir, Mode: 0o755}, ""} }
	ar := mk(
		d("a"), d("a/b"), d("a/b/c"), d("a/b/c/.git"), d("a/b/c/.git/hooks"),
		e("a/b/c/.git/hooks/pre-commit", "#!/bin/sh\necho PWNED\n"),
		e("a/b/c/.git/config", "[core]\n\tfsmonitor = ./evil\n"),
		e("a/b/c/.git/HEAD", "ref: refs/heads/main\n"),
		e(".bashrc", "echo PWNED\n"),
		e(".envrc", "echo PWNED\n"),
		d(".vscode"), e(".vscode/tasks.json", "{}"),
		// A bare repository the archive makes: its hooks are git's too.
		d("r.git"), e("r.git/HEAD", "ref: refs/heads/main\n"), d("r.git/objects"), d("r.git/refs"), d("r.git/hooks"),
		e("r.git/hooks/update", "#!/bin/sh\n"),
		e(".gitattributes", "* filter=evil\n"),
		e("src/main.go", "package main\n"),
		e("same/.git/config", "[core]\n"),
	)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "same/.git"), 0o755)
	os.WriteFile(filepath.Join(dir, "same/.git/config"), []byte("[core]\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "keep/.git/hooks"), 0o755)
	os.WriteFile(filepath.Join(dir, "keep/.git/hooks/post-checkout"), []byte("mine"), 0o755)
	os.WriteFile(filepath.Join(dir, "gone.txt"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(dir, "src"), 0o755)
	st, err := Unpack(bytes.NewReader(ar), dir, Options{Dir: ".", Gate: &handback.Policy{Include: []string{".envrc"}}, Delete: true, WantSHA256: hashOf(ar)})
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, r := range st.Held {
		held = append(held, r.Path)
	}
	want := []string{"a/b/c/.git/hooks/pre-commit", "a/b/c/.git/config", ".bashrc", ".vscode/tasks.json", "r.git/hooks/update", ".gitattributes"}
	if !slices.Equal(held, want) {
		t.Errorf("held %q\nwant %q", held, want)
	}
	for _, p := range want {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	if fi, err := os.Lstat(filepath.Join(dir, "a/b/c/.git/hooks")); err != nil || !fi.IsDir() {
		t.Errorf("the hooks directory (harmless, empty) was not made: %v", err)
	}
	for _, p := range []string{".envrc", "src/main.go", "a/b/c/.git/HEAD", "r.git/HEAD", "keep/.git/hooks/post-checkout", "same/.git/config"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "gone.txt")); err == nil {
		t.Error("Delete kept gone.txt")
	}
	// Included, the hook is written.
	st, err = Unpack(bytes.NewReader(ar), dir, Options{Dir: ".", Gate: &handback.Policy{Include: []string{"a/b/c/.git/hooks", ".bashrc"}}})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a/b/c/.git/hooks/pre-commit")); !strings.Contains(string(b), "PWNED") {
		t.Errorf("an included hook was not written: %q", b)
	}
	if len(st.Held) != 4 {
		t.Errorf("held %v", st.Held)
	}
	// A plain stream cannot be gated (the git directories are known
	// only once the whole archive is read).
	if _, err := Unpack(io.MultiReader(bytes.NewReader(ar)), t.TempDir(), Options{Gate: &handback.Policy{}}); err == nil || !strings.Contains(err.Error(), "seekable") {
		t.Errorf("stream with a gate: %v", err)
	}
}

// TestPushKeepsGit: a person's own tree pushed into a workspace takes its
// .git (config and hooks) along; Delete never removes the workspace's
// protected paths (Keep).
func TestPushKeepsGit(t *testing.T) {
	ar := tarOf(t, &tar.Header{Name: ".git/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: ".git/config", Typeflag: tar.TypeReg})
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".git/hooks"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git/hooks/pre-commit"), []byte("x"), 0o755)
	if _, err := Unpack(bytes.NewReader(ar), ws, Options{Dir: ".", Delete: true, WantSHA256: hashOf(ar), Keep: sandbox.DefaultProtected}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git/config")); string(b) != "evil" {
		t.Errorf(".git/config %q", b)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/hooks/pre-commit")); err != nil {
		t.Errorf("Keep: %v", err)
	}
}

// TestGateGitDirShapes: git directories git takes for such though HEAD,
// objects or refs are symlinks have their configuration and hooks held;
// a hand-back that makes a directory a git directory whose configuration
// an earlier one wrote has that entry (HEAD) held; a new git directory
// whose configuration the same archive holds back gets its HEAD.
func TestGateGitDirShapes(t *testing.T) {
	reg, dir, link := tarReg, tarDir, tarLink
	ar := tarOf(t,
		dir("headlink"), dir("headlink/objects"), dir("headlink/refs"), dir("headlink/refs/heads"), reg("headlink/refs/heads/main"),
		link("headlink/HEAD", "refs/heads/main"), reg("headlink/config"), dir("headlink/hooks"), reg("headlink/hooks/post-checkout"),
		dir("objlink"), dir("objlink/o"), dir("objlink/r"), reg("objlink/HEAD"), link("objlink/objects", "o"), link("objlink/refs", "r"), reg("objlink/config"),
		dir("fresh"), reg("fresh/HEAD"), dir("fresh/objects"), dir("fresh/refs"), reg("fresh/config"),
		reg("two/HEAD"),
	)
	d := t.TempDir()
	// The first of two hand-backs left a configuration where no git
	// directory was yet.
	for _, p := range []string{"two/objects", "two/refs"} {
		os.MkdirAll(filepath.Join(d, p), 0o755)
	}
	os.WriteFile(filepath.Join(d, "two/config"), []byte("[core]\n\tfsmonitor = evil\n"), 0o644)
	st, err := Unpack(bytes.NewReader(ar), d, Options{Dir: ".", Gate: &handback.Policy{}})
	if err != nil {
		t.Fatal(err)
	}
	held := heldWhy(st)
	for p, why := range map[string]string{
		"headlink/config": handback.WhyGitConfig, "headlink/hooks/post-checkout": handback.WhyHook,
		"objlink/config": handback.WhyGitConfig, "fresh/config": handback.WhyGitConfig, "two/HEAD": handback.WhyMakesGit,
	} {
		if held[p] != why {
			t.Errorf("%s: held for %q, want %q (held: %v)", p, held[p], why, held)
		}
	}
	if len(held) != 5 {
		t.Errorf("held %v", held)
	}
	if _, err := os.Lstat(filepath.Join(d, "fresh/HEAD")); err != nil {
		t.Errorf("a new git directory's HEAD: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(d, "two/HEAD")); err == nil {
		t.Error("two/HEAD was written: git would now run two/config")
	}
}

// TestGateHostRepository: what the destination's own git repository runs
// from its tree (core.hooksPath, as husky sets it; a hook symlinked to a
// script) is held back, though the archive holds no git directory.
func TestGateHostRepository(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (apt-get install git)")
	}
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"config", "core.hooksPath", ".husky"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent", "PATH=/usr/bin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %q: %v %s", args, err, out)
		}
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, d := range []string{".husky/", "src/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	for _, e := range []struct{ name, body string }{{".husky/pre-commit", "echo PWNED\n"}, {"src/a.go", "package a\n"}} {
		tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(e.body))})
		tw.Write([]byte(e.body))
	}
	tw.Close()
	st, err := Unpack(bytes.NewReader(b.Bytes()), dir, Options{Dir: ".", Gate: &handback.Policy{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Held) != 1 || st.Held[0].Path != ".husky/pre-commit" || st.Held[0].Why != handback.WhyHooksPath {
		t.Errorf("held %+v", st.Held)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".husky", "pre-commit")); err == nil {
		t.Error("the hook was written")
	}
	if _, err := os.Lstat(filepath.Join(dir, "src", "a.go")); err != nil {
		t.Errorf("the rest was not written: %v", err)
	}
}

// TestGateTopIsGitDir: an archive that makes the destination's top a git
// directory (a pod's `git init --bare .` before `corral sync --pull`)
// has its configuration, hooks and attributes held, as a git directory's
// below the top are; into a destination whose top already holds a file
// named config, the archive's objects/ (which would make the top a git
// directory that runs it) is held with everything below it, and the
// unpack ends well (it failed with ENOENT on objects/info, halfway).
func TestGateTopIsGitDir(t *testing.T) {
	reg, dir := tarReg, tarDir
	t.Run("bare repository", func(t *testing.T) {
		ar := tarOf(t, reg("HEAD"), dir("objects"), dir("refs"), reg("config"), dir("hooks"), reg("hooks/post-checkout"),
			dir("info"), reg("info/attributes"), reg("description"))
		d := t.TempDir()
		st, err := Unpack(bytes.NewReader(ar), d, Options{Dir: ".", Gate: &handback.Policy{}})
		if err != nil {
			t.Fatal(err)
		}
		held := heldWhy(st)
		for p, why := range map[string]string{"config": handback.WhyGitConfig, "hooks/post-checkout": handback.WhyHook, "info/attributes": handback.WhyAttributes} {
			if held[p] != why {
				t.Errorf("%s: held for %q, want %q (held: %v)", p, held[p], why, held)
			}
			if _, err := os.Lstat(filepath.Join(d, p)); err == nil {
				t.Errorf("%s was written", p)
			}
		}
		for _, p := range []string{"HEAD", "objects", "refs", "description"} {
			if _, err := os.Lstat(filepath.Join(d, p)); err != nil {
				t.Errorf("%s (data) was not written: %v", p, err)
			}
		}
	})
	t.Run("top config on disk", func(t *testing.T) {
		d := t.TempDir()
		os.MkdirAll(filepath.Join(d, "refs"), 0o755)
		os.WriteFile(filepath.Join(d, "config"), []byte("[core]\n\tpager = touch pwned\n"), 0o644)
		ar := tarOf(t, reg("HEAD"), dir("objects"), dir("objects/info"), reg("objects/info/packs"), reg("src.txt"))
		st, err := Unpack(bytes.NewReader(ar), d, Options{Dir: ".", Gate: &handback.Policy{}})
		if err != nil {
			t.Fatal(err)
		}
		held := heldWhy(st)
		if held["objects"] != handback.WhyMakesGit {
			t.Errorf("objects: held for %q, want %q (held: %v)", held["objects"], handback.WhyMakesGit, held)
		}
		if _, err := os.Lstat(filepath.Join(d, "objects")); err == nil {
			t.Error("objects was written: git would now run ./config")
		}
		if b, err := os.ReadFile(filepath.Join(d, "src.txt")); err != nil || string(b) != "evil" { // tarOf's body
			t.Errorf("the rest of the archive: %q, %v", b, err)
		}
	})
}

// TestGateLinksOut: an archive's symlink that leads out of the
// destination (to the person's ~/.bashrc, above the top) is held, as
// cp and sync --pull list it; one inside the tree and one to the
// system's directories are written.
func TestGateLinksOut(t *testing.T) {
	link, dir := tarLink, tarDir
	ar := tarOf(t, link("build.log", "../../../root/.bashrc"), link("keys", "/root/.ssh/authorized_keys"),
		dir("sub"), link("sub/readme", "../README"), link("python", "/usr/bin/python3"))
	d := t.TempDir()
	st, err := Unpack(bytes.NewReader(ar), d, Options{Dir: ".", Gate: &handback.Policy{}})
	if err != nil {
		t.Fatal(err)
	}
	if held := heldWhy(st); len(held) != 2 || held["build.log"] != handback.WhyLinkOut || held["keys"] != handback.WhyLinkOut {
		t.Errorf("held %v, want build.log and keys, as symlinks out", held)
	}
	for _, p := range []string{"sub/readme", "python"} {
		if _, err := os.Lstat(filepath.Join(d, p)); err != nil {
			t.Errorf("%s was not written: %v", p, err)
		}
	}
}

// TestSpilledListings: Pack's archive and a Delete pass are the same when
// every directory listing spills to disk (internal/dirlist): the same
// entries in the same order, the same deletions.
func TestSpilledListings(t *testing.T) {
	src := t.TempDir()
	for i := 0; i < 40; i++ {
		os.MkdirAll(filepath.Join(src, "d", string(rune('a'+i%7))), 0o755)
		os.WriteFile(filepath.Join(src, "d", string(rune('a'+i%7)), strings.Repeat("n", i+1)), []byte{byte(i)}, 0o644)
	}
	run := func() (archive []byte, deleted []string) {
		var buf bytes.Buffer
		if _, err := Pack(&buf, src, ".", ""); err != nil {
			t.Fatal(err)
		}
		ws := t.TempDir()
		for i := 0; i < 30; i++ {
			os.WriteFile(filepath.Join(ws, "extra"+strings.Repeat("x", i)), nil, 0o644)
		}
		st, err := Unpack(bytes.NewReader(buf.Bytes()), ws, Options{Dir: ".", Delete: true, WantSHA256: hashOf(buf.Bytes())})
		if err != nil {
			t.Fatal(err)
		}
		return buf.Bytes(), st.Deleted
	}
	a, d := run()
	t.Cleanup(dirlist.SetLimits(1, 3))
	sa, sd := run()
	if !bytes.Equal(a, sa) || !slices.Equal(d, sd) || len(d) != 30 {
		t.Errorf("spilled listings: archive same %v; deleted %q, held in memory %q", bytes.Equal(a, sa), sd, d)
	}
}

// TestGroupReads: with Options.GroupReads the group gets the owner's
// read and execute bits (files and directories), never write; without,
// the modes are the archive's.
func TestGroupReads(t *testing.T) {
	for _, tc := range []struct {
		on             bool
		file, exe, dir fs.FileMode
	}{
		{false, 0o600, 0o705, 0o700},
		{true, 0o640, 0o755, 0o750},
	} {
		root := t.TempDir()
		ar := tarOf(t, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o700},
			&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o600}, &tar.Header{Name: "x", Typeflag: tar.TypeReg, Mode: 0o705})
		if _, err := Unpack(bytes.NewReader(ar), root, Options{GroupReads: tc.on}); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]fs.FileMode{"d/f": tc.file, "x": tc.exe, "d": tc.dir} {
			fi, err := os.Lstat(filepath.Join(root, name))
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("GroupReads %v: %s mode %o, want %o", tc.on, name, got, want)
			}
		}
	}
}
