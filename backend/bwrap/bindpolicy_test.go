package bwrap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// personHome plants a person's home at dir: things the home rules show
// (BOB-PROJECT, BOB-RC) and things they hide (the other markers).
func personHome(t *testing.T, dir string) {
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

// personSecrets are the markers of personHome the sandbox must not show.
var personSecrets = []string{"DOCKER-CONFIG-SECRET", "SSH-KEY-SECRET", "DOT-SECRET", "GH-TOKEN-SECRET", "CARGO-SECRET", "APP-DATA-SECRET"}

// catHome is a script printing every file of personHome as it appears
// at dir in the sandbox.
func catHome(dir string) string {
	return `cd '` + dir + `' 2>/dev/null && for f in project/readme .bashrc .docker/config.json .ssh/id_rsa .secret .config/gh/hosts.yml .cargo/credentials .local/share/app/data; do cat "$f" 2>/dev/null; echo; done; echo done`
}

// TestBindPolicyHomes: a bind of another person's home, of a directory
// holding one (as /home holds them) or of root's home, at its own path or
// elsewhere, never shows their dot entries and credential stores, which
// the home rules hide (sandbox.DecideBind): at its own path they are
// covered, elsewhere the bind is ignored.
func TestBindPolicyHomes(t *testing.T) {
	e := newEnv(t)
	homes := filepath.Join(e.base, "homes")
	bob := filepath.Join(homes, "bob")
	personHome(t, bob)
	// Bob is a person of this machine, as /etc/passwd would say.
	old := peopleHomes
	peopleHomes = func(exclude string) []string { return append(old(exclude), bob) }
	t.Cleanup(func() { peopleHomes = old })

	for _, tc := range []struct {
		name      string
		bind      sandbox.Bind
		at        string // where Bob's home appears, "" when the bind is ignored
		wantWarns bool
	}{
		{"the home at its own path", sandbox.Bind{Src: bob, ReadOnly: true}, bob, false},
		{"its parent (as /home) at its own path", sandbox.Bind{Src: homes, ReadOnly: true}, bob, false},
		{"the home elsewhere", sandbox.Bind{Src: bob, Dest: "/tmp/bob", ReadOnly: true}, "", true},
		{"its parent elsewhere", sandbox.Bind{Src: homes, Dest: "/tmp/homes", ReadOnly: true}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.at
			if dir == "" {
				dir = filepath.Join(tc.bind.Dest, strings.TrimPrefix(bob, tc.bind.Src))
			}
			o := e.sh(catHome(dir), func(r *sandbox.Request) { r.Binds = []sandbox.Bind{tc.bind} })
			mustNotContain(t, o, personSecrets...)
			mustContain(t, o, "done")
			if tc.at != "" {
				mustContain(t, o, "BOB-PROJECT", "BOB-RC")
			}
			if got := len(o.res.Warnings) > 0; got != tc.wantWarns {
				t.Errorf("warnings %q, want some: %v", o.res.Warnings, tc.wantWarns)
			}
		})
	}
	t.Run("read-write", func(t *testing.T) {
		_, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Env: e.envv, Workdir: e.work, Profile: sandbox.ProfileWorkspace,
			Binds: []sandbox.Bind{{Src: homes}}})
		if !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), "plant") {
			t.Errorf("read-write bind of a directory holding a home: %v, want ErrPolicy", err)
		}
	})

	t.Run("root's home", func(t *testing.T) {
		if os.Getuid() != 0 {
			// As anyone else, /root is root's alone: the sandbox (this
			// uid) cannot read it, bound or not.
			o := e.sh(`cat /root/.bashrc /root/.profile 2>/dev/null; echo done`, func(r *sandbox.Request) { r.Binds = []sandbox.Bind{{Src: "/root", ReadOnly: true}} })
			mustContain(t, o, "done")
			if strings.TrimSpace(o.stdout) != "done" {
				t.Errorf("root's files read by another uid:\n%s", o)
			}
			return
		}
		marker := filepath.Join("/root", ".corral-bindtest-"+randHex(t))
		if err := os.WriteFile(marker, []byte("ROOT-DOT-SECRET"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(marker) })
		for _, b := range []sandbox.Bind{{Src: "/root", ReadOnly: true}, {Src: "/root", Dest: "/tmp/r", ReadOnly: true}} {
			var so strings.Builder
			res, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"/bin/sh", "-c", "cat " + marker + " /tmp/r/" + filepath.Base(marker) + " 2>/dev/null; echo done"},
				Env: e.envv, Workdir: e.work, Profile: sandbox.ProfileWorkspace, Binds: []sandbox.Bind{b}, Stdout: &so, Stderr: &so})
			if err == nil && strings.Contains(so.String(), "ROOT-DOT-SECRET") {
				t.Errorf("bind %+v shows root's dot file: %q %v", b, so.String(), res.Warnings)
			}
		}
	})

	t.Run("a real user of /etc/passwd", func(t *testing.T) {
		home := realUser(t, filepath.Join(e.base, "realhomes"))
		personHome(t, home)
		parent := filepath.Dir(home)
		for _, b := range []sandbox.Bind{{Src: parent, ReadOnly: true}, {Src: home, Dest: "/tmp/h", ReadOnly: true}} {
			dir := home
			if b.Dest != "" {
				dir = "/tmp/h"
			}
			o := e.sh(catHome(dir), func(r *sandbox.Request) {
				r.Binds = []sandbox.Bind{b}
			})
			mustNotContain(t, o, personSecrets...)
			if b.Dest == "" {
				mustContain(t, o, "BOB-PROJECT")
			}
		}
	})
}

// TestBindPolicySockets: a Unix socket that only its owner (here: the
// test's uid, root when CI runs as root) may connect to, planted at a
// random path inside a bind source, makes the bind refused, naming the
// socket, at its own path and elsewhere; a world-writable one does not.
func TestBindPolicySockets(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.base, "srv-"+randHex(t))
	sock := filepath.Join(src, randHex(t)[:6], "api.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, b := range []sandbox.Bind{{Src: src, ReadOnly: true}, {Src: src, Dest: "/tmp/srv", ReadOnly: true}, {Src: sock, ReadOnly: true}} {
		_, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Env: e.envv, Workdir: e.work, Profile: sandbox.ProfileNetwork, Binds: []sandbox.Bind{b}})
		if !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), sock) {
			t.Errorf("bind %+v of an owner-only socket: %v, want ErrPolicy naming %s", b, err, sock)
		}
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	o := e.sh(`test -S `+sock+` && echo SOCK-SEEN`, func(r *sandbox.Request) { r.Binds = []sandbox.Bind{{Src: src, ReadOnly: true}} })
	mustContain(t, o, "SOCK-SEEN")
}

func randHex(t testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// realUser adds a user to /etc/passwd (useradd) whose home directory is a
// new directory under parent, removed again at the end of the test; it
// skips unless the test runs as root with useradd.
func realUser(t *testing.T, parent string) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("adding a user to /etc/passwd needs root (CI's root run does it)")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("useradd missing (passwd package)")
	}
	name := "corralbt" + randHex(t)[:8]
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
