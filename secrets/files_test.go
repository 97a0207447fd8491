package secrets

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

func TestExpandFilePath(t *testing.T) {
	tests := []struct {
		in, home, want, why string
	}{
		{"~/.netrc", "/home/u", "/home/u/.netrc", ""},
		{"~/x/../.npmrc", "/home/u", "/home/u/.npmrc", ""},
		{"/etc//docker/config.json", "/home/u", "/etc/docker/config.json", ""},
		{".netrc", "/home/u", "", "is not an absolute path or ~/path"},
		{"~bob/.netrc", "/home/u", "", "is not an absolute path or ~/path"},
		{"~/.netrc", "", "", "caller's home directory is unknown"},
		{"~/", "/home/u", "", "is a directory"},
		{"/", "/home/u", "", "is a directory"},
		{"/a\x00b", "/home/u", "", "NUL"},
	}
	for _, tc := range tests {
		got, why := ExpandFilePath(tc.in, tc.home)
		if got != tc.want || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("ExpandFilePath(%q, %q) = %q, %q; want %q, %q", tc.in, tc.home, got, why, tc.want, tc.why)
		}
	}
}

func TestReplaceValues(t *testing.T) {
	gh := Secret{Name: "GH", Value: "ghp_REALREALREAL", StandIn: "ghp_StandInStand"}
	npm := Secret{Name: "NPM", Value: "npm_realtokenvalue", StandIn: "npm_xxxxxxxxxxxxxx"}
	// A value that holds another must be replaced whole.
	long := Secret{Name: "L", Value: "ghp_REALREALREAL_more", StandIn: "ghp_LongStandIn_abcde"}
	aws := Secret{Name: "AK", Kind: KindAWS, Value: "AKIAREALREALREAL1234", StandIn: "AKIASTANDSTANDST5678", SecretValue: "secret/REAL+key", SecretStandIn: "secret/FAKE+key"}
	tests := []struct {
		name, in, want string
		secs           []Secret
	}{
		{"netrc", "machine github.test login x password ghp_REALREALREAL\n", "machine github.test login x password ghp_StandInStand\n", []Secret{gh}},
		{"npmrc", "//registry.test/:_authToken=npm_realtokenvalue\nfoo=bar\n", "//registry.test/:_authToken=npm_xxxxxxxxxxxxxx\nfoo=bar\n", []Secret{gh, npm}},
		{"every occurrence", "a ghp_REALREALREAL b ghp_REALREALREAL", "a ghp_StandInStand b ghp_StandInStand", []Secret{gh}},
		{"no value", "nothing here\n", "nothing here\n", []Secret{gh}},
		{"longest first", "x=ghp_REALREALREAL_more y=ghp_REALREALREAL", "x=" + long.StandIn + " y=ghp_StandInStand", []Secret{gh, long}},
		{"aws pair", "[default]\naws_access_key_id = AKIAREALREALREAL1234\naws_secret_access_key = secret/REAL+key\n", "[default]\naws_access_key_id = AKIASTANDSTANDST5678\naws_secret_access_key = secret/FAKE+key\n", []Secret{aws}},
		{"empty", "", "", []Secret{gh}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			got := ReplaceValues(in, tc.secs)
			if string(got) != tc.want {
				t.Errorf("ReplaceValues = %q, want %q", got, tc.want)
			}
			if string(in) != tc.in {
				t.Errorf("ReplaceValues changed its input to %q", in)
			}
			if holdsValue(got, tc.secs) {
				t.Errorf("the result %q holds a real value", got)
			}
		})
	}
}

func TestCredentialFiles(t *testing.T) {
	home := t.TempDir()
	state := filepath.Join(t.TempDir(), "secretfiles")
	gh := Secret{Name: "GH", Value: "ghp_REALREALREAL", StandIn: "ghp_StandInStand"}
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(home, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(".netrc", "machine github.test login x password ghp_REALREALREAL\n")
	spec := sandbox.Secret{Name: "GH", Files: []string{"~/.netrc"}}
	got, err := CredentialFiles(state, home, []sandbox.Secret{spec}, []Secret{gh})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Path != filepath.Join(home, ".netrc") || got[0].Secret != "GH" {
		t.Fatalf("CredentialFiles = %+v", got)
	}
	b, err := os.ReadFile(got[0].Copy)
	if err != nil || string(b) != "machine github.test login x password ghp_StandInStand\n" {
		t.Fatalf("copy = %q, %v", b, err)
	}
	for p, want := range map[string]os.FileMode{got[0].Copy: 0o600, state: 0o700} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, st.Mode().Perm(), err, want)
		}
	}
	// Again, unchanged: the same copy. Changed: a new one.
	again, err := CredentialFiles(state, home, []sandbox.Secret{spec}, []Secret{gh})
	if err != nil || again[0].Copy != got[0].Copy {
		t.Errorf("unchanged source: copy %v (%v), want %s", again, err, got[0].Copy)
	}
	write(".netrc", "machine other.test password ghp_REALREALREAL\n")
	changed, err := CredentialFiles(state, home, []sandbox.Secret{spec}, []Secret{gh})
	if err != nil || changed[0].Copy == got[0].Copy {
		t.Fatalf("changed source: copy %v (%v), want a new one", changed, err)
	}
	if b, _ := os.ReadFile(changed[0].Copy); string(b) != "machine other.test password ghp_StandInStand\n" {
		t.Errorf("changed copy = %q", b)
	}

	if err := os.WriteFile(filepath.Join(home, "big"), make([]byte, MaxCredentialFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(home, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("hosts.yml", "github.com:\n  oauth_token: ghp_REALREALREAL\n")
	write(".pypirc", "password = ghp_REALREALREAL\n")
	bad := []struct{ file, want string }{
		{"~/hosts.yml", `GH files[0] "~/hosts.yml": corral cannot parse this kind of file`},
		{"~/.pypirc", `GH files[0] "~/.pypirc" (read as pypirc): .pypirc line 1 is not a [section]`},
		{"relative/.netrc", `GH files[0] "relative/.netrc": is not an absolute path`},
		{"~/missing", `GH files[0] "~/missing": cannot open the file`},
		{"~/dir", `GH files[0] "~/dir": is not a regular file`},
		{"~/big", `GH files[0] "~/big": is larger than 1048576 bytes`},
	}
	for _, tc := range bad {
		_, err := CredentialFiles(state, home, []sandbox.Secret{{Name: "GH", Files: []string{tc.file}}}, []Secret{gh})
		if !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want an ErrBadRequest with %q", tc.file, err, tc.want)
		}
	}
}

func TestStale(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		used time.Time
		want bool
	}{
		{now.Add(-2 * time.Hour), true},
		{now.Add(-CopyLease - time.Second), true},
		{now.Add(-CopyLease), false},
		{now.Add(-time.Minute), false},
		{now.Add(time.Hour), false}, // a clock set back: kept
	} {
		if got := Stale(c.used, CopyLease, now); got != c.want {
			t.Errorf("Stale(%v) = %v, want %v", c.used, got, c.want)
		}
	}
}

// TestPruneCopies: copies unused for longer than the lease go; a copy
// used again (CredentialFiles renews it) and a recent one stay, and a
// removed copy's content stays readable through a descriptor opened
// before (as through a bind mount: the inode lives on).
func TestPruneCopies(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(t.TempDir(), "secretfiles")
	if err := os.WriteFile(filepath.Join(home, ".netrc"), []byte("machine m.test password ghp_REALREALREAL\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	specs := []sandbox.Secret{{Name: "GH", Files: []string{"~/.netrc"}}}
	secs := []Secret{{Name: "GH", Value: "ghp_REALREALREAL", StandIn: "ghp_StandInStand"}}
	cs, err := CredentialFiles(dir, home, specs, secs)
	if err != nil || len(cs) != 1 {
		t.Fatalf("CredentialFiles = %v, %v", cs, err)
	}
	used := cs[0].Copy
	old := filepath.Join(dir, "0123456789abcdef0123-netrc")
	tmp := old + "-u1000.tmp"
	for _, p := range []string{old, tmp} {
		if err := os.WriteFile(p, []byte("password ghp_OldStandIn1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "subdir"), 0o700); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-3 * CopyLease)
	for _, p := range []string{used, old, tmp, filepath.Join(dir, "subdir")} {
		if err := os.Chtimes(p, long, long); err != nil {
			t.Fatal(err)
		}
	}
	held, err := os.Open(old)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// The next command renews the copy it uses.
	if cs, err = CredentialFiles(dir, home, specs, secs); err != nil || cs[0].Copy != used {
		t.Fatalf("CredentialFiles again = %v, %v", cs, err)
	}
	removed, err := PruneCopies(dir, CopyLease, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{old, tmp}; !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	for _, p := range []string{used, filepath.Join(dir, "subdir")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v (want it kept)", p, err)
		}
	}
	if b, err := io.ReadAll(held); err != nil || string(b) != "password ghp_OldStandIn1\n" {
		t.Errorf("a removed copy read through an open descriptor: %q, %v", b, err)
	}
	if r, err := PruneCopies(filepath.Join(dir, "missing"), CopyLease, time.Now()); err != nil || r != nil {
		t.Errorf("missing dir: %v, %v", r, err)
	}
}

// TestOwnCopy (root): a copy for uid 1000 is owned by it, 0600, reused
// and renewed when unchanged.
func TestOwnCopy(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("OwnCopy gives files away (chown): needs root")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "abc-netrc")
	if err := os.WriteFile(src, []byte("stand-in\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	own, err := OwnCopy(src, 1000, 1000)
	if err != nil || own != src+"-u1000" {
		t.Fatalf("OwnCopy = %q, %v", own, err)
	}
	st, err := os.Stat(own)
	if err != nil || !ownedBy(st, 1000) || st.Mode().Perm() != 0o600 {
		t.Fatalf("own copy: %v %v", st, err)
	}
	long := time.Now().Add(-3 * CopyLease)
	_ = os.Chtimes(own, long, long)
	if again, err := OwnCopy(src, 1000, 1000); err != nil || again != own {
		t.Fatalf("OwnCopy again = %q, %v", again, err)
	}
	if st, _ := os.Stat(own); Stale(st.ModTime(), CopyLease, time.Now()) {
		t.Errorf("reuse did not renew the copy")
	}
}

// BenchmarkCredentialFiles is a command's cost of one unchanged
// credential file: read, substitute, hash, compare and renew the copy.
func BenchmarkCredentialFiles(b *testing.B) {
	home := b.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".netrc"), []byte("machine github.test login x password ghp_REALREALREAL\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(b.TempDir(), "secretfiles")
	specs := []sandbox.Secret{{Name: "GH", Files: []string{"~/.netrc"}}}
	secs := []Secret{{Name: "GH", Value: "ghp_REALREALREAL", StandIn: "ghp_StandInStand"}}
	for b.Loop() {
		if _, err := CredentialFiles(dir, home, specs, secs); err != nil {
			b.Fatal(err)
		}
	}
}

func TestHomeDest(t *testing.T) {
	for _, c := range []struct {
		given, home, homeReal, want string
		inHome                      bool
	}{
		{"/home/u/.netrc", "/home/u", "/home/u", "/tmp/.netrc", true},
		{"/home/u/.config/gh/hosts.yml", "/home/u", "/home/u", "/tmp/.config/gh/hosts.yml", true},
		// A home reached through a symlink: either spelling maps.
		{"/data/u/.npmrc", "/home/u", "/data/u", "/tmp/.npmrc", true},
		{"/etc/npmrc", "/home/u", "/home/u", "/etc/npmrc", false},
		{"/home/user2/.netrc", "/home/u", "/home/u", "/home/user2/.netrc", false},
		{"/home/u/.netrc", "", "", "/home/u/.netrc", false},
	} {
		if got, in := HomeDest(c.given, c.home, c.homeReal, "/tmp"); got != c.want || in != c.inHome {
			t.Errorf("HomeDest(%q, %q, %q) = %q, %v, want %q, %v", c.given, c.home, c.homeReal, got, in, c.want, c.inHome)
		}
	}
}
