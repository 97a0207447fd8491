// Package hometest plants people's home directories for the tests of the
// home rules and the bind policy on every backend (bwrap, docker): one
// fixture, so both backends are held to the same cases.
package hometest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// PersonHome plants a person's home at dir: things the home rules show
// (BOB-PROJECT, BOB-RC) and things they hide (the markers of Secrets).
func PersonHome(t *testing.T, dir string) {
	t.Helper()
	for rel, body := range map[string]string{
		"project/readme":        "BOB-PROJECT",
		".bashrc":               "BOB-RC",
		".docker/config.json":   "DOCKER-CONFIG-SECRET",
		".ssh/id_rsa":           "SSH-KEY-SECRET",
		".secret":               "DOT-SECRET",
		".config/gh/hosts.yml":  "GH-TOKEN-SECRET",
		".cargo/credentials":    "CARGO-SECRET",
		".local/share/app/data": "APP-DATA-SECRET",
	} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Secrets are the markers of PersonHome no sandbox may show.
var Secrets = []string{"DOCKER-CONFIG-SECRET", "SSH-KEY-SECRET", "DOT-SECRET", "GH-TOKEN-SECRET", "CARGO-SECRET", "APP-DATA-SECRET"}

// CatHome is a shell script printing every file of PersonHome as it
// appears at dir in a sandbox, then "done".
func CatHome(dir string) string {
	return `cd '` + dir + `' 2>/dev/null && for f in project/readme .bashrc .docker/config.json .ssh/id_rsa .secret .config/gh/hosts.yml .cargo/credentials .local/share/app/data; do cat "$f" 2>/dev/null; echo; done; echo done`
}

// RandHex returns 12 random hexadecimal digits.
func RandHex(t testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// RealUser adds a user to /etc/passwd (useradd) whose home directory is a
// new directory under parent, removed again at the end of the test; it
// skips unless the test runs as root with useradd (CI's root pass does).
func RealUser(t *testing.T, parent string) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("adding a user to /etc/passwd needs root (CI's root run does it)")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("useradd missing (passwd package)")
	}
	name := "corralbt" + RandHex(t)[:8]
	home := filepath.Join(parent, name)
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("useradd", "--no-create-home", "--home-dir", home, "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	return home
}

// PlantSocket listens on a Unix socket at a random path below dir (made
// 0755 on the way) with mode 0600, as a service keeps an API only its
// owner may use, and closes it when the test ends. It returns the socket's
// path.
func PlantSocket(t *testing.T, dir string) string {
	t.Helper()
	sock := filepath.Join(dir, RandHex(t)[:6], "api.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}
	return sock
}
