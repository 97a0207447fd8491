package bwrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/hometest"
	"github.com/corralhq/corral/sandbox"
)

// TestBindPolicyHomes: a bind of another person's home, of a directory
// holding one (as /home holds them) or of root's home, at its own path or
// elsewhere, never shows their dot entries and credential stores, which
// the home rules hide (hostview.DecideBind): at its own path they are
// covered, elsewhere the bind is ignored.
func TestBindPolicyHomes(t *testing.T) {
	e := newEnv(t)
	homes := filepath.Join(e.base, "homes")
	bob := filepath.Join(homes, "bob")
	hometest.PersonHome(t, bob)
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
			o := e.sh(hometest.CatHome(dir), func(r *sandbox.Request) { r.Binds = []sandbox.Bind{tc.bind} })
			mustNotContain(t, o, hometest.Secrets...)
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
		_, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Binds: []sandbox.Bind{{Src: homes}}}})
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
		marker := filepath.Join("/root", ".corral-bindtest-"+hometest.RandHex(t))
		if err := os.WriteFile(marker, []byte("ROOT-DOT-SECRET"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(marker) })
		for _, b := range []sandbox.Bind{{Src: "/root", ReadOnly: true}, {Src: "/root", Dest: "/tmp/r", ReadOnly: true}} {
			var so strings.Builder
			res, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"/bin/sh", "-c", "cat " + marker + " /tmp/r/" + filepath.Base(marker) + " 2>/dev/null; echo done"},
				Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileWorkspace, Binds: []sandbox.Bind{b}}, Stdout: &so, Stderr: &so})
			if err == nil && strings.Contains(so.String(), "ROOT-DOT-SECRET") {
				t.Errorf("bind %+v shows root's dot file: %q %v", b, so.String(), res.Warnings)
			}
		}
	})

	t.Run("a real user of /etc/passwd", func(t *testing.T) {
		home := hometest.RealUser(t, filepath.Join(e.base, "realhomes"))
		hometest.PersonHome(t, home)
		parent := filepath.Dir(home)
		for _, b := range []sandbox.Bind{{Src: parent, ReadOnly: true}, {Src: home, Dest: "/tmp/h", ReadOnly: true}} {
			dir := home
			if b.Dest != "" {
				dir = "/tmp/h"
			}
			o := e.sh(hometest.CatHome(dir), func(r *sandbox.Request) {
				r.Binds = []sandbox.Bind{b}
			})
			mustNotContain(t, o, hometest.Secrets...)
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
	src := filepath.Join(e.base, "srv-"+hometest.RandHex(t))
	sock := hometest.PlantSocket(t, src)
	for _, b := range []sandbox.Bind{{Src: src, ReadOnly: true}, {Src: src, Dest: "/tmp/srv", ReadOnly: true}, {Src: sock, ReadOnly: true}} {
		_, err := e.backend.Run(context.Background(), &sandbox.Request{Argv: []string{"true"}, Env: e.envv, Policy: sandbox.Policy{Workdir: e.work, Profile: sandbox.ProfileNetwork, Binds: []sandbox.Bind{b}}})
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
