package pathres

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// tree makes a directory tree with every kind of symlink EvalSymlinks
// must walk and returns its root (resolved).
func tree(t *testing.T) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a/b/c", "x/y", "noexec/inner"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "a/file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"rel":          "a/b",             // relative target
		"a/b/up":       "../..",           // ".." in the target
		"a/b/c/abs":    root + "/x/y",     // absolute target
		"chain1":       "chain2",          // a chain
		"chain2":       "chain3",          //
		"chain3":       "a/b/c",           //
		"loop1":        "loop2",           // a loop
		"loop2":        "loop1",           //
		"self":         "self",            //
		"dangling":     "nowhere/at/all",  // dangling
		"danglingabs":  root + "/missing", //
		"tofile":       "a/file",          // a link to a file
		"dotdotlink":   "a/b/c/../../b",   // ".." through real directories
		"linkdotdot":   "rel/..",          // ".." after a link (physical parent)
		"x/y/back":     "../../a",         //
		"x/y/empty":    "",                // readlink of an empty target
		"a/b/c/slash":  "/",               //
		"a/b/c/dots":   "./././.",         //
		"a/b/c/upmany": "../../../../../../../../..",
	}
	for name, target := range links {
		if target == "" {
			continue // symlink(2) refuses an empty target
		}
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	// 255 links are allowed, 256 are too many.
	for _, n := range []int{255, 256} {
		dir := filepath.Join(root, fmt.Sprintf("long%d", n))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			target := fmt.Sprintf("l%d", i+1)
			if i == n-1 {
				target = root + "/a"
			}
			if err := os.Symlink(target, filepath.Join(dir, fmt.Sprintf("l%d", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func paths(root string) []string {
	rel := []string{
		"", ".", "a", "a/", "a//b///c", "a/./b/.", "a/b/..", "a/b/../../..", "a/file", "a/file/", "a/file/x",
		"a/file/..", "missing", "missing/x", "a/missing/..", "rel", "rel/c", "rel/c/abs", "rel/c/abs/back",
		"rel/c/abs/back/file", "a/b/up", "a/b/up/rel/up/x", "rel/up/..", "chain1", "chain1/abs/back/b",
		"loop1", "loop1/x", "self", "dangling", "dangling/x", "danglingabs", "tofile", "tofile/", "tofile/x",
		"dotdotlink", "linkdotdot", "linkdotdot/b/c", "a/b/c/slash", "a/b/c/slash/tmp/..", "a/b/c/dots",
		"a/b/c/upmany", "a/b/c/upmany/..", "long255/l0", "long255/l0/b", "long256/l0", "long256/l0/b",
		"noexec/inner", "noexec/inner/x", "x/y/back/b/c/abs",
	}
	out := []string{"/", "//", "/..", "/../..", "/./", root + "/../" + filepath.Base(root) + "/a"}
	for _, p := range rel {
		out = append(out, root+"/"+p)
	}
	return out
}

// check compares r.EvalSymlinks(p) with filepath.EvalSymlinks(p): the
// same path, or errors of the same text.
func check(t *testing.T, r *Resolver, p string) {
	t.Helper()
	want, werr := filepath.EvalSymlinks(p)
	got, gerr := r.EvalSymlinks(p)
	if got != want || (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
		t.Errorf("EvalSymlinks(%q) = %q, %v; filepath.EvalSymlinks gives %q, %v", p, got, gerr, want, werr)
	}
}

// TestEvalSymlinksAgrees holds Resolver.EvalSymlinks to
// filepath.EvalSymlinks on every case of tree: fresh for each path, one
// Resolver for all (and twice, the second time from its memo), and nil.
func TestEvalSymlinksAgrees(t *testing.T) {
	root := tree(t)
	shared := New()
	for _, p := range paths(root) {
		check(t, New(), p)
		check(t, shared, p)
		check(t, nil, p)
	}
	for _, p := range paths(root) {
		check(t, shared, p)
	}
	// Relative paths go through the walk without the memo.
	t.Chdir(root)
	for _, p := range []string{".", "a/b", "rel/c/abs/back", "loop1", "a/file/x", "../" + filepath.Base(root) + "/chain1", "dangling"} {
		check(t, shared, p)
		check(t, New(), p)
	}
}

// TestEvalSymlinksUnreadable: a directory that cannot be entered gives
// the same error (run as a user other than root, who passes anyway).
func TestEvalSymlinksUnreadable(t *testing.T) {
	root := tree(t)
	if err := os.Chmod(filepath.Join(root, "noexec"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "noexec"), 0o755) })
	for _, p := range []string{root + "/noexec/inner", root + "/noexec/inner/x", root + "/noexec"} {
		check(t, New(), p)
	}
}

// TestStatAgrees holds Stat, Lstat, IsDir and Readlink to the os
// functions on the same paths, before and after EvalSymlinks filled the
// memo.
func TestStatAgrees(t *testing.T) {
	root := tree(t)
	r := New()
	for pass := 0; pass < 2; pass++ {
		for _, p := range append(paths(root), "/proc/self/exe", "/proc/self/fd/0") {
			for _, f := range []struct {
				name string
				got  func(string) (os.FileInfo, error)
				want func(string) (os.FileInfo, error)
			}{{"Stat", r.Stat, os.Stat}, {"Lstat", r.Lstat, os.Lstat}} {
				g, gerr := f.got(p)
				w, werr := f.want(p)
				if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
					t.Errorf("%s(%q): error %v, os gives %v", f.name, p, gerr, werr)
				}
				if gerr == nil && werr == nil && (g.Name() != w.Name() || g.Mode() != w.Mode() || g.Size() != w.Size() || !os.SameFile(g, w)) {
					t.Errorf("%s(%q) = %v %v, os gives %v %v", f.name, p, g.Mode(), g.Size(), w.Mode(), w.Size())
				}
			}
			st, err := os.Stat(p)
			if got, want := r.IsDir(p), err == nil && st.IsDir(); got != want {
				t.Errorf("IsDir(%q) = %v, want %v", p, got, want)
			}
			gl, gerr := r.Readlink(p)
			wl, werr := os.Readlink(p)
			if gl != wl || (gerr == nil) != (werr == nil) {
				t.Errorf("Readlink(%q) = %q, %v; os gives %q, %v", p, gl, gerr, wl, werr)
			}
			r.EvalSymlinks(p)
		}
	}
}

// TestOneInstant: a Resolver keeps what it saw (one plan is one instant
// of the host), and a new one sees a symlink swapped since.
func TestOneInstant(t *testing.T) {
	root := tree(t)
	link := filepath.Join(root, "swap")
	if err := os.Symlink("a", link); err != nil {
		t.Fatal(err)
	}
	r := New()
	if got, _ := r.EvalSymlinks(link + "/b"); got != root+"/a/b" {
		t.Fatalf("before: %q", got)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("x", link); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.EvalSymlinks(link + "/b"); got != root+"/a/b" {
		t.Errorf("same resolver after the swap: %q, want the first answer", got)
	}
	if got, err := New().EvalSymlinks(link + "/y"); err != nil || got != root+"/x/y" {
		t.Errorf("new resolver after the swap: %q, %v, want %q", got, err, root+"/x/y")
	}
}

// TestLookupsOnce: walking paths that share prefixes lstat's each prefix
// once.
func TestLookupsOnce(t *testing.T) {
	root := tree(t)
	r := New()
	for _, p := range []string{"a/b/c", "a/b/c/abs", "rel/c", "a/b"} {
		r.EvalSymlinks(root + "/" + p)
	}
	// Components of root, then a, a/b, a/b/c, a/b/c/abs, x, x/y, rel.
	want := countComponents(root) + 7
	if got := len(r.lstat); got != want {
		t.Errorf("%d paths lstat'ed, want %d: %v", got, want, r.lstat)
	}
}

func countComponents(p string) int {
	n := 0
	for d := p; d != "/"; d = filepath.Dir(d) {
		n++
	}
	return n
}

// TestGlobAgrees holds Glob to filepath.Glob, patterns with meta
// characters and without.
func TestGlobAgrees(t *testing.T) {
	root := tree(t)
	r := New()
	for _, pat := range []string{root + "/a", root + "/a/file", root + "/missing", root + "/dangling", root + "/a/file/x",
		root + "/ch*", root + "/a/[bf]*", root + "/[", root + `/a\/b`, "/etc/shadow", "/etc/ssh/ssh_host_*_key"} {
		for pass := 0; pass < 2; pass++ {
			got, gerr := r.Glob(pat)
			want, werr := filepath.Glob(pat)
			if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Errorf("Glob(%q) = %q, %v; filepath.Glob gives %q, %v", pat, got, gerr, want, werr)
			}
		}
	}
}

// TestReadDirOnce: a directory is listed once per Resolver, by every
// caller; nil lists each time.
func TestReadDirOnce(t *testing.T) {
	root := tree(t)
	calls := 0
	list := func(d string) ([]os.DirEntry, error) { calls++; return os.ReadDir(d) }
	r := New()
	for i := 0; i < 3; i++ {
		ents, err := r.ReadDir(root+"/a", list)
		if err != nil || len(ents) != 2 {
			t.Fatalf("ReadDir: %v, %v", ents, err)
		}
		if _, err := r.ReadDir(root+"/missing", list); err == nil {
			t.Fatal("ReadDir of a missing directory: no error")
		}
	}
	if calls != 2 {
		t.Errorf("%d listings, want 2", calls)
	}
	var none *Resolver
	none.ReadDir(root+"/a", list)
	none.ReadDir(root+"/a", list)
	if calls != 4 {
		t.Errorf("nil Resolver: %d listings in all, want 4", calls)
	}
}
