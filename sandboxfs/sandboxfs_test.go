package sandboxfs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

type fix struct {
	home, work, state string
	spec              session.Spec
	s                 *session.Session
	c                 *Client
}

func newFix(t testing.TB) *fix {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap not installed (apt install bubblewrap); CI installs it")
	}
	root := os.Getenv("CORRAL_TEST_DIR")
	if root == "" {
		root = "/var/tmp"
	}
	base, err := os.MkdirTemp(root, "corral-fs-*")
	if err != nil {
		t.Fatal(err)
	}
	base, _ = filepath.EvalSymlinks(base)
	f := &fix{home: filepath.Join(base, "home"), work: filepath.Join(base, "home", "work"), state: filepath.Join(base, "home", ".local", "state", "corral")}
	os.MkdirAll(f.work, 0o755)
	t.Setenv("HOME", f.home)
	be := bwrap.New(bwrap.Options{StateDir: f.state})
	f.spec = session.Spec{Backend: be, Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: f.work, Limits: sandbox.DefaultLimits}, Timeout: time.Minute,
		Env: []string{"HOME=" + f.home, "PATH=/usr/local/bin:/usr/bin:/bin"}}
	m := session.NewManager(session.Options{StateDir: f.state, Resolve: func(string) (*session.Spec, error) { sp := f.spec; return &sp, nil }})
	t.Cleanup(func() { m.Close(); os.RemoveAll(base) })
	f.s, err = m.Open("fs")
	if err != nil {
		t.Fatal(err)
	}
	f.c, err = For(f.s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fix) put(t testing.TB, rel, content string) string {
	p := filepath.Join(f.home, rel)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func kind(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

func TestReadFile(t *testing.T) {
	f := newFix(t)
	ctx := context.Background()
	f.put(t, "work/a.txt", "one\ntwo\nthree\nfour\n")
	r, err := f.c.Read(ctx, "a.txt", 0, 0) // relative to the session cwd
	if err != nil || r.Content != "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n" || r.TotalLines != 4 || r.Truncated {
		t.Fatalf("read: %v %+v", err, r)
	}
	r, _ = f.c.Read(ctx, "a.txt", 2, 2)
	if r.Content != "     2\ttwo\n     3\tthree\n" || !r.Truncated || r.StartLine != 2 {
		t.Errorf("offset/limit: %+v", r)
	}
	f.put(t, "work/bin.dat", "\x00\x01\x02ELF")
	if r, err := f.c.Read(ctx, "bin.dat", 0, 0); err != nil || !r.Binary || r.Content != "" {
		t.Errorf("binary: %v %+v", err, r)
	}
	f.put(t, "work/bad.txt", "ok \xff\xfe\n")
	if r, err := f.c.Read(ctx, "bad.txt", 0, 0); err != nil || !r.InvalidUTF8 || !strings.Contains(r.Content, "ok \uFFFD") {
		t.Errorf("invalid UTF-8: %v %+v", err, r)
	}
	if _, err := f.c.Read(ctx, "missing.txt", 0, 0); kind(err) != ErrNotFound {
		t.Errorf("missing: %v", err)
	}
	if _, err := f.c.Read(ctx, f.work, 0, 0); kind(err) != ErrIsDir {
		t.Errorf("directory: %v", err)
	}
	// The sandbox's view: hidden stores do not exist, credential files are
	// empty, also through a symlink in the workspace.
	f.put(t, ".ssh/id_ed25519", "SSH-KEY-MATERIAL")
	f.put(t, ".cargo/credentials.toml", "CARGO-TOKEN")
	os.Symlink(filepath.Join(f.home, ".ssh/id_ed25519"), filepath.Join(f.work, "key-link"))
	for _, p := range []string{filepath.Join(f.home, ".ssh/id_ed25519"), "key-link"} {
		if r, err := f.c.Read(ctx, p, 0, 0); err == nil && strings.Contains(r.Content, "SSH-KEY") || kind(err) != ErrNotFound {
			t.Errorf("read %s: %v %+v", p, err, r)
		}
	}
	if r, err := f.c.Read(ctx, filepath.Join(f.home, ".cargo/credentials.toml"), 0, 0); err != nil || r.Content != "" || r.Size != 0 {
		t.Errorf("credential file: %v %+v", err, r)
	}
}

func TestWriteAndEdit(t *testing.T) {
	f := newFix(t)
	ctx := context.Background()
	w, err := f.c.Write(ctx, "deep/new/file.go", "package x\n\nfunc A() int { return 1 }\n")
	if err != nil || !w.Created || w.Path != filepath.Join(f.work, "deep/new/file.go") {
		t.Fatalf("write: %v %+v", err, w)
	}
	e, err := f.c.Edit(ctx, "deep/new/file.go", "return 1", "return 2", false)
	if err != nil || e.Replacements != 1 || !strings.Contains(e.Diff, "-func A() int { return 1 }") || !strings.Contains(e.Diff, "+func A() int { return 2 }") {
		t.Fatalf("edit: %v %+v", err, e)
	}
	if b, _ := os.ReadFile(filepath.Join(f.work, "deep/new/file.go")); !strings.Contains(string(b), "return 2") {
		t.Errorf("edit not on disk: %q", b)
	}
	f.put(t, "work/dup.txt", "x\nx\n")
	if _, err := f.c.Edit(ctx, "dup.txt", "x", "y", false); kind(err) != ErrAmbiguous {
		t.Errorf("ambiguous: %v", err)
	}
	if e, err := f.c.Edit(ctx, "dup.txt", "x", "y", true); err != nil || e.Replacements != 2 {
		t.Errorf("replace_all: %v %+v", err, e)
	}
	if _, err := f.c.Edit(ctx, "dup.txt", "zzz", "y", false); kind(err) != ErrNoMatch {
		t.Errorf("no match: %v", err)
	}
	// Outside the writable set: read-only, and symlinks out are refused
	// with the real path named, the outside file untouched.
	outside := f.put(t, "outside.txt", "ORIGINAL")
	os.Symlink(outside, filepath.Join(f.work, "link-out"))
	os.Symlink("/", filepath.Join(f.work, "root"))
	for _, tc := range []struct{ path, real string }{{"link-out", outside}, {"root/etc/passwd", "/etc/passwd"}} {
		_, err := f.c.Write(ctx, tc.path, "PWNED")
		if kind(err) != ErrOutside || !strings.Contains(err.Error(), tc.real) {
			t.Errorf("write %s: %v", tc.path, err)
		}
		_, err = f.c.Edit(ctx, tc.path, "ORIGINAL", "PWNED", false)
		if err == nil {
			t.Errorf("edit %s succeeded", tc.path)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "ORIGINAL" {
		t.Errorf("outside file changed: %q", b)
	}
	if _, err := f.c.Write(ctx, "/etc/corral-fs-test", "x"); kind(err) != ErrReadOnly {
		t.Errorf("write /etc: %v", err)
	}
	// Under restricted nothing is writable.
	f.spec.Profile = sandbox.ProfileRestricted
	if _, err := f.c.Write(ctx, "r.txt", "x"); kind(err) != ErrReadOnly {
		t.Errorf("restricted write: %v", err)
	}
	// A file name that is not UTF-8 cannot travel in JSON: a clear error.
	if _, err := f.c.Write(ctx, "bad\xffname", "x"); err == nil {
		t.Errorf("non-UTF-8 name accepted")
	}
}

func TestSearch(t *testing.T) {
	f := newFix(t)
	ctx := context.Background()
	f.put(t, "work/src/a.go", "package a\n// NEEDLE here\n")
	f.put(t, "work/src/b.txt", "NEEDLE too\n")
	f.put(t, ".aws/credentials", "ONLY-IN-CREDENTIALS")
	f.put(t, ".cargo/credentials.toml", "ONLY-IN-CREDENTIALS")
	r, err := f.c.Search(ctx, "NEEDLE", "", "*.go", "content")
	if err != nil || len(r.Matches) != 1 || !strings.Contains(r.Matches[0], "a.go:2:") {
		t.Fatalf("search: %v %+v", err, r)
	}
	r, _ = f.c.Search(ctx, "NEEDLE", "src", "", "files")
	if len(r.Matches) != 2 {
		t.Errorf("files mode: %+v", r)
	}
	r, err = f.c.Search(ctx, "ONLY-IN-CREDENTIALS", f.home, "", "content")
	if err != nil || len(r.Matches) != 0 {
		t.Errorf("credential token found: %v %+v", err, r)
	}
}

// TestSearchStatus: grep's and rg's status 2 is a bad pattern only when
// the tool said so (file errors are silenced: -s, --no-messages) and
// found nothing; without a message it is files that could not be read,
// and the results stand (a new user's search of /usr, which holds no
// match but unreadable entries, was called a bad regular expression).
func TestSearchStatus(t *testing.T) {
	for _, tc := range []struct {
		name       string
		code       int
		found      bool
		stderr     string
		unreadable bool
		bad        string // in the error, "" for none
	}{
		{"match", 0, true, "", false, ""},
		{"no match", 1, false, "", false, ""},
		{"unreadable files, no match", 2, false, "", true, ""},
		{"unreadable files, matches", 2, true, "", true, ""},
		{"bad pattern (grep)", 2, false, "grep: Unmatched ( or \\(\n", false, "Unmatched ( or"},
		{"bad pattern (rg)", 2, false, "regex parse error:\n    (\n    ^\nerror: unclosed group\n", false, "unclosed group"},
		{"a message with matches", 2, true, "grep: warning: something\n", true, ""},
	} {
		unreadable, err := searchStatus("grep", "(", tc.code, tc.found, tc.stderr)
		if unreadable != tc.unreadable {
			t.Errorf("%s: unreadable = %v, want %v", tc.name, unreadable, tc.unreadable)
		}
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: %v, want no error", tc.name, err)
		case tc.bad != "" && (err == nil || kind(err) != ErrBadRequest || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s: %v, want a bad request that quotes %q", tc.name, err, tc.bad)
		}
	}
}

// TestSearchBadPattern: the search tool's own words for a pattern it
// cannot compile reach the caller.
func TestSearchBadPattern(t *testing.T) {
	f := newFix(t)
	f.put(t, "work/a.txt", "x\n")
	_, err := f.c.Search(context.Background(), "(unclosed", "", "", "content")
	if kind(err) != ErrBadRequest || !strings.Contains(err.Error(), "could not search for") || !strings.Contains(strings.ToLower(err.Error()), "(") {
		t.Errorf("a bad pattern: %v", err)
	}
}

// BenchmarkReadFile10KB measures read_file of a 10 KB file through the
// session's file server (target: 5 ms median through the MCP server).
func BenchmarkReadFile10KB(b *testing.B) {
	f := newFix(b)
	f.put(b, "work/ten.txt", strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz\n", 140))
	ctx := context.Background()
	if _, err := f.c.Read(ctx, "ten.txt", 0, 0); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.c.Read(ctx, "ten.txt", 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAllowlistProfile: under allowlist the file server runs behind the
// proxy forwarder and its trampoline (corral's executable too, with the
// server's variables in its environment): the tools still work, and a
// search runs rg or grep under the filter.
func TestAllowlistProfile(t *testing.T) {
	f := newFix(t)
	f.spec.Profile = sandbox.ProfileAllowlist
	f.spec.Env = append(f.spec.Env, "GORACE=atexit_sleep_ms=0")
	ctx := context.Background()
	f.put(t, "work/a.txt", "one\nNEEDLE\n")
	r, err := f.c.Read(ctx, "a.txt", 0, 0)
	if err != nil || !strings.Contains(r.Content, "NEEDLE") {
		t.Fatalf("read under allowlist: %v %+v", err, r)
	}
	if _, err := f.c.Write(ctx, "b.txt", "written\n"); err != nil {
		t.Fatalf("write under allowlist: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.work, "b.txt")); string(b) != "written\n" {
		t.Errorf("write not on disk: %q", b)
	}
	s, err := f.c.Search(ctx, "NEEDLE", "", "", "files")
	if err != nil || len(s.Matches) != 1 {
		t.Errorf("search under allowlist: %v %+v", err, s)
	}
}
