package bwrap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// TestSecretFilesEndToEnd gives a secret a ~/.netrc and a ~/.npmrc that
// hold the real value: curl --netrc in the sandbox reaches the secret's
// host with the real token (the proxy swaps the stand-in back), while
// the files, the environment and every file the command can read under
// the home, /tmp and /etc hold only the stand-in.
func TestSecretFilesEndToEnd(t *testing.T) {
	e := newEnv(t)
	requireTool(t, "curl", "apt-get install curl")
	w := newSecretsWorld(t, e)
	netrc := "machine api.allowed.test login x-user password " + realGH + "\n"
	npmrc := "//npm.allowed.test/:_authToken=" + realGH + "\nregistry=https://npm.allowed.test/\n"
	e.write(".netrc", netrc)
	e.write(".npmrc", npmrc)
	withFiles := func(files ...string) func(*sandbox.Request) {
		return func(r *sandbox.Request) {
			allowlist(r)
			r.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.allowed.test", "npm.allowed.test"}, Files: files}}
		}
	}
	on := withFiles("~/.netrc", "~/.npmrc")

	o := e.sh(`cat ~/.netrc ~/.npmrc; echo "GT=$GITHUB_TOKEN"`, on)
	var standIn string
	for _, l := range strings.Split(o.stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "GT="); ok {
			standIn = v
		}
	}
	if len(standIn) != len(realGH) || standIn == realGH {
		t.Fatalf("no stand-in in the sandbox's environment:\n%s", o)
	}
	mustContain(t, o, strings.ReplaceAll(netrc, realGH, standIn), strings.ReplaceAll(npmrc, realGH, standIn))
	mustNotContain(t, o, realGH)

	mark := w.mark()
	o = e.sh(`curl -q -sS --max-time 20 --netrc https://api.allowed.test/netrc`, on)
	mustContain(t, o, "hello host=api.allowed.test path=/netrc")
	if seen := w.seenSince(mark); !strings.Contains(seen, "(basic x-user:"+realGH+")") {
		t.Errorf("the server did not get the real token from curl --netrc:\n%s", seen)
	}

	// Nothing the command can read holds the real value, and the copy
	// cannot be written.
	// The same grep finds the stand-in (so it does search the files).
	o = e.sh(`grep -rlsF "$1" ~ /tmp /etc /proc/self/environ 2>/dev/null; echo "real done"
grep -rlsF "$2" ~ 2>/dev/null; echo "stand-in done"
echo x >> ~/.netrc 2>/dev/null && echo appended`, on, func(r *sandbox.Request) {
		r.Argv = append(r.Argv, "sh", realGH, standIn)
	})
	mustContain(t, o, "real done\n", "/.netrc\n", "/.npmrc\n", "stand-in done")
	mustNotContain(t, o, "appended")
	if before, _, _ := strings.Cut(o.stdout, "real done"); strings.Contains(before, "/") {
		t.Errorf("files in the sandbox hold the real value:\n%s", o)
	}
	// The host's file is unchanged, and no copy in corral's state holds
	// the real value.
	if b, _ := os.ReadFile(filepath.Join(e.home, ".netrc")); string(b) != netrc {
		t.Errorf("the host's .netrc changed: %q", b)
	}
	_ = filepath.WalkDir(filepath.Join(e.state, "secretfiles"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), realGH) {
				t.Errorf("the copy %s holds the real value", p)
			}
			if st, _ := d.Info(); st != nil && st.Mode().Perm() != 0o600 {
				t.Errorf("the copy %s has mode %v, want 0600", p, st.Mode().Perm())
			}
		}
		return nil
	})

	// Refused: a file in the writable working directory, a relative
	// path. Nothing runs. (A changed file and a missing one are the
	// conformance suite's secret files case.)
	e.write("project/.netrc", netrc)
	for _, tc := range []struct{ file, want string }{
		{filepath.Join(e.work, ".netrc"), "which the sandbox can write"},
		{"relative", "is not an absolute path or ~/path"},
	} {
		err := e.shErr(`echo ran`, withFiles(tc.file))
		if !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), realGH) {
			t.Errorf("files %q: error %v, want an ErrBadRequest with %q", tc.file, err, tc.want)
		}
	}
}

// TestSecretFilesSymlinkAndSource: a ~/.netrc that is a symlink (to a
// file elsewhere in the home, and to one outside it) shows the stand-in
// at ~/.netrc and at the link's target, never the real value (before the
// copy was bound at the entry too, ~/.netrc was missing: the home's view
// leaves credential files out); a path that
// is both a secret's file: source and in its files shows the copy (the
// stand-in), not the real value and not an empty file.
func TestSecretFilesSymlinkAndSource(t *testing.T) {
	e := newEnv(t)
	newSecretsWorld(t, e)
	netrc := "machine api.allowed.test login x-user password " + realGH + "\n"
	e.write("dotfiles/netrc", netrc)
	if err := os.Symlink("dotfiles/netrc", filepath.Join(e.home, ".netrc")); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(e.base, "elsewhere", "npmrc")
	if err := os.MkdirAll(filepath.Dir(outside), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, []byte("//npm.allowed.test/:_authToken="+realGH+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.home, ".npmrc")); err != nil {
		t.Fatal(err)
	}
	on := func(r *sandbox.Request) {
		allowlist(r)
		r.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.allowed.test"}, Files: []string{"~/.netrc", "~/.npmrc"}}}
	}
	o := e.sh(`echo "GT=$GITHUB_TOKEN"; cat ~/.netrc; echo ---; cat ~/dotfiles/netrc; echo ---; cat ~/.npmrc; echo ---; cat "$1"; echo ---
grep -rlsF "$2" ~ "$(dirname "$1")" 2>/dev/null; echo "real done"`, on, func(r *sandbox.Request) { r.Argv = append(r.Argv, "sh", outside, realGH) })
	standIn := ""
	for _, l := range strings.Split(o.stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "GT="); ok {
			standIn = v
		}
	}
	if len(standIn) != len(realGH) || standIn == realGH {
		t.Fatalf("no stand-in:\n%s", o)
	}
	sn := strings.ReplaceAll(netrc, realGH, standIn)
	sp := "//npm.allowed.test/:_authToken=" + standIn + "\n"
	mustNotContain(t, o, realGH)
	mustContain(t, o, sn+"---\n"+sn+"---\n"+sp+"---\n"+sp+"---\nreal done\n")
	// (The grep found nothing: "---" is followed by "real done".)

	// A file: source that is in files too.
	src := e.write("tokens/gh", realGH+"\n")
	both := func(r *sandbox.Request) {
		allowlist(r)
		r.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "file:" + src, Hosts: []string{"api.allowed.test"}, Files: []string{src}}}
	}
	o = e.sh(`echo "GT=$GITHUB_TOKEN"; echo "file=$(cat "$1")"; grep -rlsF "$2" ~ 2>/dev/null; echo "real done"`, both, func(r *sandbox.Request) { r.Argv = append(r.Argv, "sh", src, realGH) })
	for _, l := range strings.Split(o.stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "GT="); ok {
			standIn = v
		}
	}
	mustContain(t, o, "file="+standIn+"\nreal done\n")
	mustNotContain(t, o, realGH)
	if len(standIn) != len(realGH) {
		t.Errorf("no stand-in:\n%s", o)
	}
}
