package docker

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/hometest"
	"github.com/corralhq/corral/sandbox"
)

// runBinds runs script in a container of its own with docker.binds set to
// binds.
func (f *fixture) runBinds(binds []sandbox.Bind, script string) (*sandbox.Result, string, error) {
	f.t.Helper()
	st := f.b.Settings()
	st.Binds = binds
	var out bytes.Buffer
	res, err := f.e.Backend(st).Run(context.Background(), &sandbox.Request{
		Argv: []string{"bash", "-c", script}, Policy: sandbox.Policy{Workdir: f.ws, Profile: sandbox.ProfileWorkspace}, Stdout: &out, Stderr: &out, Timeout: time.Minute, Env: []string{"PATH=/usr/bin:/bin"},
	})
	return res, out.String(), err
}

// TestBindPolicyHomes: a docker.binds entry of another person's home, of a
// directory holding one (as /home holds them) or of root's home, at its
// own path or elsewhere, never shows their dot entries and credential
// stores (hostview.DecideBind): at its own path the container gets an empty
// tmpfs or the empty file over each, elsewhere the bind is ignored with a
// warning. The container runs as the test's uid: root in CI's root run,
// which reads every file.
func TestBindPolicyHomes(t *testing.T) {
	f := newFixture(t, nil)
	homes := filepath.Join(dockertest.TestDir(t), "homes")
	bob := filepath.Join(homes, "bob")
	hometest.PersonHome(t, bob)
	// Bob is a person of this machine, as /etc/passwd would say.
	f.e.peopleHomes = func(exclude string) []string { return append(hostview.PeopleHomes(exclude), bob) }

	for _, tc := range []struct {
		name   string
		bind   sandbox.Bind
		at     string // where Bob's home appears, "" when the bind is ignored
		ignore bool
	}{
		{"the home at its own path", sandbox.Bind{Src: bob, ReadOnly: true}, bob, false},
		{"its parent (as /home) at its own path", sandbox.Bind{Src: homes, ReadOnly: true}, bob, false},
		{"the home elsewhere", sandbox.Bind{Src: bob, Dest: "/mnt/bob", ReadOnly: true}, "/mnt/bob", true},
		{"its parent elsewhere", sandbox.Bind{Src: homes, Dest: "/mnt/homes", ReadOnly: true}, "/mnt/homes/bob", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, out, err := f.runBinds([]sandbox.Bind{tc.bind}, hometest.CatHome(tc.at))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range hometest.Secrets {
				if strings.Contains(out, s) {
					t.Errorf("%s is readable in the container:\n%s", s, out)
				}
			}
			if tc.ignore != (len(res.Warnings) > 0) || !tc.ignore && !strings.Contains(out, "BOB-PROJECT\nBOB-RC") {
				t.Errorf("ignored %v: warnings %q, output\n%s", tc.ignore, res.Warnings, out)
			}
		})
	}
	t.Run("read-write", func(t *testing.T) {
		if _, _, err := f.runBinds([]sandbox.Bind{{Src: homes}}, "true"); !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), "plant") {
			t.Errorf("read-write bind of a directory holding a home: %v, want ErrPolicy", err)
		}
	})

	t.Run("root's home", func(t *testing.T) {
		if os.Getuid() != 0 {
			// As anyone else, the container runs as this uid, and /root is
			// root's alone.
			_, out, err := f.runBinds([]sandbox.Bind{{Src: "/root", ReadOnly: true}}, `cat /root/.bashrc /root/.profile 2>/dev/null; ls -A /root 2>/dev/null; echo done`)
			if err != nil || out != "done\n" {
				t.Errorf("root's home read by uid %d: %v\n%s", os.Getuid(), err, out)
			}
			return
		}
		marker := filepath.Join("/root", ".corral-bindtest-"+hometest.RandHex(t))
		if err := os.WriteFile(marker, []byte("ROOT-DOT-SECRET"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(marker) })
		for _, b := range []sandbox.Bind{{Src: "/root", ReadOnly: true}, {Src: "/root", Dest: "/mnt/r", ReadOnly: true}} {
			_, out, err := f.runBinds([]sandbox.Bind{b}, "cat "+marker+" /mnt/r/"+filepath.Base(marker)+" 2>/dev/null; echo done")
			if err == nil && strings.Contains(out, "ROOT-DOT-SECRET") {
				t.Errorf("bind %+v shows root's dot file:\n%s", b, out)
			}
		}
	})

	t.Run("a real user of /etc/passwd", func(t *testing.T) {
		home := hometest.RealUser(t, filepath.Join(filepath.Dir(homes), "realhomes"))
		hometest.PersonHome(t, home)
		for _, b := range []sandbox.Bind{{Src: filepath.Dir(home), ReadOnly: true}, {Src: home, Dest: "/mnt/h", ReadOnly: true}} {
			dir := home
			if b.Dest != "" {
				dir = "/mnt/h"
			}
			_, out, err := f.runBinds([]sandbox.Bind{b}, hometest.CatHome(dir))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range hometest.Secrets {
				if strings.Contains(out, s) {
					t.Errorf("bind %+v: %s is readable:\n%s", b, s, out)
				}
			}
			if b.Dest == "" && !strings.Contains(out, "BOB-PROJECT") {
				t.Errorf("bind %+v: the home's own files are not shown:\n%s", b, out)
			}
		}
	})
}

// TestBindPolicySockets: a Unix socket only its owner may connect to (the
// test's uid: root in CI's root run), planted at a random path inside a
// docker.binds source, makes the bind refused, naming it, at its own path
// and elsewhere; once world-writable it is bound.
func TestBindPolicySockets(t *testing.T) {
	f := newFixture(t, nil)
	src := filepath.Join(dockertest.TestDir(t), "srv-"+hometest.RandHex(t))
	sock := hometest.PlantSocket(t, src)
	for _, b := range []sandbox.Bind{{Src: src, ReadOnly: true}, {Src: src, Dest: "/mnt/srv", ReadOnly: true}, {Src: sock, ReadOnly: true}} {
		if _, _, err := f.runBinds([]sandbox.Bind{b}, "true"); !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), sock) {
			t.Errorf("bind %+v of an owner-only socket: %v, want ErrPolicy naming %s", b, err, sock)
		}
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, out, err := f.runBinds([]sandbox.Bind{{Src: src, ReadOnly: true}}, "test -S "+sock+" && echo SOCK-SEEN"); err != nil || out != "SOCK-SEEN\n" {
		t.Errorf("world-writable socket: %v %q", err, out)
	}
}
