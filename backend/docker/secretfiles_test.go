package docker

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/sandbox"
)

// TestSecretFilesDocker: a secret's ~/.netrc (a symlink on the host to a
// file elsewhere in the home) and ~/.npmrc hold the real value; in the
// container they appear at $HOME (/tmp) with the stand-in, read-only and
// immovable, and curl --netrc reaches the secret's host, whose server
// gets the real token. Nothing a command can read holds the real value;
// a changed file gives the session another container.
func TestSecretFilesDocker(t *testing.T) {
	f := newSecretsFixture(t)
	home := dockertest.TestDir(t)
	t.Setenv("HOME", home)
	netrc := "machine api.allowed.test login x-user password " + realToken + "\n"
	npmrc := "//npm.allowed.test/:_authToken=" + realToken + "\n"
	if err := os.MkdirAll(filepath.Join(home, "dotfiles"), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(p, data string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(home, "dotfiles", "netrc"), netrc)
	if err := os.Symlink("dotfiles/netrc", filepath.Join(home, ".netrc")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(home, ".npmrc"), npmrc)
	withFiles := func(r *sandbox.Request) {
		withSecret(r)
		r.Secrets[0].Hosts = append(r.Secrets[0].Hosts, "npm.allowed.test")
		r.Secrets[0].Files = []string{"~/.netrc", "~/.npmrc"}
	}
	script := `echo "home=$HOME"; cat ~/.netrc ~/.npmrc; echo "GT=$GITHUB_TOKEN"
test -L ~/.netrc && echo "netrc is a symlink"
{ echo x >> ~/.netrc; } 2>/dev/null && echo appended
rm -f ~/.netrc 2>/dev/null; mv ~/.npmrc ~/moved 2>/dev/null; ls ~/moved 2>/dev/null && echo moved
echo "curl=$(curl -q -sS --max-time 20 --netrc https://api.allowed.test/netrc)"
grep -rlsF "$REAL" /tmp /etc /run /proc/self/environ 2>/dev/null; echo "real done"
grep -rlsF "$GITHUB_TOKEN" /tmp 2>/dev/null | sort; echo "stand-in done"`
	// The real value reaches the script as an argument of a grep pattern
	// only through a file of the test: written into the workspace, which
	// the grep leaves out.
	res, out := f.run("files", `REAL=$(cat .real); `+script, withFiles, func(r *sandbox.Request) {
		write(filepath.Join(f.ws, ".real"), realToken)
	})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	standIn := ""
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(line, "GT="); ok {
			standIn = v
		}
	}
	if len(standIn) != len(realToken) || standIn == realToken {
		t.Fatalf("no stand-in:\n%s", out)
	}
	for _, want := range []string{
		"home=/tmp\n",
		strings.ReplaceAll(netrc, realToken, standIn),
		strings.ReplaceAll(npmrc, realToken, standIn),
		"curl=hello api.allowed.test\n",
		"real done\n/tmp/.netrc\n/tmp/.npmrc\nstand-in done",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"netrc is a symlink", "appended", "moved\n"} {
		if strings.Contains(out, bad) {
			t.Errorf("output has %q:\n%s", bad, out)
		}
	}
	if before, _, _ := strings.Cut(out, "real done"); strings.Contains(before, "/tmp/") || strings.Contains(before, "/proc/") {
		t.Errorf("files in the container hold the real value:\n%s", out)
	}
	if seen := f.seen(); !strings.Contains(seen, "api.allowed.test auth=Basic "+base64.StdEncoding.EncodeToString([]byte("x-user:"+realToken))) {
		t.Errorf("the server did not get the real token from curl --netrc:\n%s", seen)
	}
	// The copies in corral's state hold stand-ins only.
	copies, _ := filepath.Glob(filepath.Join(f.e.opts.SecretFilesDir, "*"))
	if len(copies) == 0 {
		t.Errorf("no copy in %s", f.e.opts.SecretFilesDir)
	}
	for _, c := range copies {
		if b, _ := os.ReadFile(c); strings.Contains(string(b), realToken) {
			t.Errorf("the copy %s holds the real value", c)
		}
	}
	first := f.containers("files")
	// A changed file: the session gets another container that shows it.
	write(filepath.Join(home, "dotfiles", "netrc"), "machine api.allowed.test login changed password "+realToken+"\n")
	res, out = f.run("files", `cat ~/.netrc`, withFiles)
	if res.ExitCode != 0 || out != "machine api.allowed.test login changed password "+standIn+"\n" {
		t.Errorf("after the change: exit %d %q", res.ExitCode, out)
	}
	if now := f.containers("files"); len(first) != 1 || len(now) != 1 || now[0] == first[0] {
		t.Errorf("containers before %v, after %v: want one, replaced", first, now)
	}
	// As root with a workspace of another owner, the container runs as
	// that uid: it gets a copy of its own (it cannot read root's 0600).
	if os.Getuid() == 0 {
		ws := dockertest.TestDir(t)
		if err := os.Chown(ws, 1001, 1001); err != nil {
			t.Fatal(err)
		}
		res, out = f.run("files-uid", `id -u; cat ~/.netrc`, withFiles, func(r *sandbox.Request) { r.Workdir = ws })
		if res.ExitCode != 0 || out != "1001\nmachine api.allowed.test login changed password "+standIn+"\n" {
			t.Errorf("as uid 1001: exit %d %q", res.ExitCode, out)
		}
		owned, _ := filepath.Glob(filepath.Join(f.e.opts.SecretFilesDir, "*-u1001"))
		if len(owned) != 2 {
			t.Errorf("copies for uid 1001: %q, want the two files'", owned)
		}
		f.b.Release("files-uid")
	}
	// (A missing file's refusal is the conformance suite's secret files
	// case.)
	f.b.Release("files")
	for _, k := range []string{"files", "files-uid"} {
		if n := f.containers(k); len(n) != 0 {
			t.Errorf("left behind (%s): %v", k, n)
		}
	}
}
