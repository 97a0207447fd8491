package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/owner"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/layer"
	"github.com/corralhq/corral/sandbox"
)

func TestOverlayOptions(t *testing.T) {
	for _, tc := range []struct {
		name         string
		lowers       []string
		upper, work  string
		want, errHas string
	}{
		{"rw", []string{"/w/p"}, "/s/l/upper", "/s/l/work", "lowerdir=/w/p,upperdir=/s/l/upper,workdir=/s/l/work,userxattr", ""},
		{"ro two lowers", []string{"/s/l/upper/.git/hooks", "/w/p/.git/hooks/"}, "", "", "ro,lowerdir=/s/l/upper/.git/hooks:/w/p/.git/hooks,userxattr", ""},
		{"comma", []string{"/w/a,b"}, "/u", "/k", "", "cannot carry"},
		{"colon", []string{"/w/p"}, "/s:x/upper", "/s:x/work", "", "cannot carry"},
		{"backslash", []string{`/w/a\b`}, "/u", "/k", "", "cannot carry"},
		{"relative", []string{"w/p"}, "/u", "/k", "", "not absolute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := overlayOptions(tc.lowers, tc.upper, tc.work)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("overlayOptions = %q, %v; want an error with %q", got, err, tc.errHas)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("overlayOptions = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// lookupMerged follows overlayfs's rules on real directories: whiteouts,
// opaque directories, a file over a directory and the other way round.
func TestLookupMerged(t *testing.T) {
	base := t.TempDir()
	up, low := filepath.Join(base, "upper"), filepath.Join(base, "lower")
	mk := func(root string, dirs []string, files ...string) {
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(root, f), []byte(f), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk(low, []string{"both/.git/hooks", "low/.git/hooks", "gone/.git/hooks", "opq/.git/hooks", "f2d"}, "both/.git/config", "low/.git/config", "d2f", "f2d/x")
	mk(up, []string{"both/.git/hooks", "up/.git/hooks", "gone", "opq/.git", "d2f/.git/hooks"}, "both/.git/config", "f2d")
	if err := unix.Mknod(filepath.Join(up, "gone/.git"), unix.S_IFCHR, 0); err != nil {
		t.Skipf("cannot make a whiteout here (mknod of a character device 0/0): %v", err)
	}
	if err := unix.Setxattr(filepath.Join(up, "opq/.git"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("user xattrs unsupported here: %v", err)
	}
	os.Symlink("both", filepath.Join(up, "link"))
	for _, tc := range []struct {
		rel  string
		want mergedEntry
		ok   bool
	}{
		{"both/.git/hooks", mergedEntry{InUpper: true, InLower: true, Dir: true}, true},
		{"both/.git/config", mergedEntry{InUpper: true}, true},
		{"low/.git/hooks", mergedEntry{InLower: true, Dir: true}, true},
		{"low/.git/config", mergedEntry{InLower: true}, true},
		{"up/.git/hooks", mergedEntry{InUpper: true, Dir: true}, true},
		{"gone/.git/hooks", mergedEntry{}, false},
		{"gone/.git", mergedEntry{}, false},
		{"opq/.git/hooks", mergedEntry{}, false},
		{"opq/.git", mergedEntry{InUpper: true, Dir: true}, true},
		{"d2f/.git/hooks", mergedEntry{InUpper: true, Dir: true}, true},
		{"f2d/x", mergedEntry{}, false},
		{"link/.git/hooks", mergedEntry{}, false},
		{"none/.git", mergedEntry{}, false},
	} {
		got, ok := lookupMerged(up, low, tc.rel)
		if ok != tc.ok || got != tc.want {
			t.Errorf("lookupMerged(%s) = %+v %v, want %+v %v", tc.rel, got, ok, tc.want, tc.ok)
		}
	}
}

// git runs git on the host in dir.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=A", "GIT_AUTHOR_EMAIL=a@b.c", "GIT_COMMITTER_NAME=A", "GIT_COMMITTER_EMAIL=a@b.c", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// volumesOf lists the volumes labelled with layer directory dir.
func volumesOf(t testing.TB, cli *client.Client, dir string) []string {
	t.Helper()
	res, err := cli.VolumeList(context.Background(), client.VolumeListOptions{Filters: client.Filters{}.Add("label", LabelLayer+"="+dir)})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range res.Items {
		out = append(out, v.Name)
	}
	return out
}

// TestReviewOnDocker: under workspace_mode review a session's container
// writes its working directory (create, modify, delete, rename, chmod,
// symlink, binary file, git commit), the host's tree stays byte for byte
// as it was, the layer holds the changes in package layer's format (its
// Changes and Diff read them), protected paths stay read-only in the layer,
// and apply of a subset, a conflict, and discard behave as on bwrap, each
// generation getting a new container; the overlay volume goes with the
// container.
func TestReviewOnDocker(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed on the host (apt install git)")
	}
	f := newFixture(t, nil)
	ws := f.ws
	for name, data := range map[string]string{"a.txt": "one\ntwo\n", "b.txt": "bee\n", "sub/c.txt": "sea\n", "run.sh": "#!/bin/sh\necho run\n", "bin.dat": "\x00\x01old"} {
		os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755)
		if err := os.WriteFile(filepath.Join(ws, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, ws, "init", "-q", ".")
	git(t, ws, "add", "-A")
	git(t, ws, "commit", "-qm", "host")
	head := git(t, ws, "rev-parse", "HEAD")
	before := testkit.TreeHash(t, ws)
	layerDir := filepath.Join(dockertest.TestDir(t), "layer")
	review := func(r *sandbox.Request) { r.LayerDir = layerDir }

	res, out := f.run("rev", `set -e
echo three >> a.txt; rm b.txt; mv sub/c.txt sub/d.txt; chmod 755 run.sh; ln -s a.txt link
printf '\000\002new' > bin.dat; echo fresh > new.txt; mkdir -p deep/er; echo x > deep/er/y
git -c user.name=B -c user.email=b@c.d add -A
git -c user.name=B -c user.email=b@c.d commit -qm in-container
{ echo evil > .git/hooks/pre-commit; } 2>/dev/null && echo HOOK-WRITTEN || echo hook-refused
{ echo '[core]' >> .git/config; } 2>/dev/null && echo CONFIG-WRITTEN || echo config-refused
id -u; cat a.txt`, review)
	if res.ExitCode != 0 || !strings.Contains(out, "hook-refused\nconfig-refused\n") || !strings.HasSuffix(out, "one\ntwo\nthree\n") {
		t.Fatalf("review command: exit %d:\n%s", res.ExitCode, out)
	}
	if got := testkit.TreeHash(t, ws); got != before {
		t.Fatal("the host's tree changed under review mode")
	}
	if h := git(t, ws, "rev-parse", "HEAD"); h != head {
		t.Errorf("the host's HEAD moved: %s", h)
	}
	l, err := layer.Open(layerDir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(l.Upper(), "new.txt")); err != nil {
		t.Fatalf("new.txt is not in the layer: %v", err)
	} else if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Getuid() && os.Getuid() != 0 {
		t.Errorf("new.txt in the layer is uid %d's, want %d", uid, os.Getuid())
	}
	// Every file and directory the container made in the layer (its root
	// too) is the caller's on the host: keep-id on rootless Podman, the
	// caller's uid elsewhere. Whiteouts (character devices 0/0) are the
	// kernel's, made with the mounter's credentials (root's under a
	// rootful engine); they are markers, never applied as files.
	if os.Getuid() != 0 {
		filepath.WalkDir(l.Upper(), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Error(err)
				return nil
			}
			if st, err := os.Lstat(p); err == nil && st.Mode()&fs.ModeCharDevice == 0 && int(st.Sys().(*syscall.Stat_t).Uid) != os.Getuid() {
				t.Errorf("%s in the layer is uid %d's, want %d", p, st.Sys().(*syscall.Stat_t).Uid, os.Getuid())
			}
			return nil
		})
	}
	changes, err := layer.Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range changes {
		paths = append(paths, c.Path+":"+string(c.Kind))
	}
	for _, want := range []string{"a.txt:", "b.txt:", "sub/c.txt:", "sub/d.txt:", "run.sh:", "link:", "bin.dat:", "new.txt:", "deep/er/y:"} {
		if !slices.ContainsFunc(paths, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("layer.Changes lacks %s: %v", strings.TrimSuffix(want, ":"), paths)
		}
	}
	if !slices.ContainsFunc(paths, func(p string) bool { return strings.HasPrefix(p, ".git/") }) {
		t.Errorf("the container's commit is not in the layer: %v", paths)
	}
	if slices.ContainsFunc(paths, func(p string) bool { return strings.HasPrefix(p, ".git/hooks") || strings.HasPrefix(p, ".git/config") }) {
		t.Errorf("a protected path changed in the layer: %v", paths)
	}
	var diff bytes.Buffer
	if err := layer.Diff(&diff, changes, layer.DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"diff --git a/a.txt b/a.txt", "+three", "deleted file mode 100644", "old mode 100644\nnew mode 100755", "new file mode 120000", "Binary files a/bin.dat and b/bin.dat differ", "+fresh"} {
		if !strings.Contains(diff.String(), want) {
			t.Errorf("Diff lacks %q:\n%s", want, diff.String())
		}
	}

	// The next command sees the layer, in the same container.
	first := f.containers("rev")
	if _, out := f.run("rev", `cat new.txt; git log --format=%s | head -1; test -e b.txt || echo no-b`, review); out != "fresh\nin-container\nno-b\n" {
		t.Errorf("the next command sees %q", out)
	}
	if vs := volumesOf(t, f.cli, layerDir); len(vs) != 1 {
		t.Errorf("overlay volumes of the layer: %v, want one", vs)
	}

	// Apply of a subset: new.txt reaches the host, nothing else.
	if _, err := layer.Apply(l, []string{"new.txt"}, layer.ApplyOptions{}); err != nil {
		t.Fatalf("apply new.txt: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "new.txt")); string(b) != "fresh\n" {
		t.Errorf("host new.txt after apply: %q", b)
	}
	if st, err := os.Lstat(filepath.Join(ws, "new.txt")); err != nil || int(st.Sys().(*syscall.Stat_t).Uid) != os.Getuid() {
		t.Errorf("host new.txt after apply: %v, %v; want uid %d's", st, err, os.Getuid())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "one\ntwo\n" {
		t.Errorf("host a.txt changed by applying new.txt: %q", b)
	}
	// A new generation: a new container, which still sees the rest.
	if _, out := f.run("rev", `cat new.txt a.txt`, review); out != "fresh\none\ntwo\nthree\n" {
		t.Errorf("after apply the session sees %q", out)
	}
	if second := f.containers("rev"); len(second) != 1 || slices.Equal(first, second) {
		t.Errorf("containers before and after the apply: %v %v; want a new one", first, second)
	}

	// A file the host changed since is a conflict: nothing is written.
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("host edit\n"), 0o644)
	if r, err := layer.Apply(l, []string{"a.txt"}, layer.ApplyOptions{}); !errors.Is(err, layer.ErrConflict) || !slices.Equal(r.Conflicts, []string{"a.txt"}) {
		t.Errorf("apply over a host change: %v, conflicts %v", err, r.Conflicts)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "host edit\n" {
		t.Errorf("host a.txt after the refused apply: %q", b)
	}

	// Discard: the session sees the host's tree again.
	if err := layer.Discard(l, nil); err != nil {
		t.Fatal(err)
	}
	if _, out := f.run("rev", `cat a.txt b.txt; ls sub`, review); out != "host edit\nbee\nc.txt\n" {
		t.Errorf("after discard the session sees %q", out)
	}
	if ch, err := layer.Changes(l, nil); err != nil || len(ch) != 0 {
		t.Errorf("changes after discard: %v %v", ch, err)
	}

	// Release removes the container and its overlay volume. While the
	// container runs its mount is seen (so layerMounts can see one).
	if ms := layerMounts(t, l.Upper()); len(ms) == 0 {
		t.Errorf("no mount of the layer seen while its container runs")
	}
	f.b.Release("rev")
	if got := f.containers("rev"); len(got) != 0 {
		t.Errorf("containers after Release: %v", got)
	}
	if vs := volumesOf(t, f.cli, layerDir); len(vs) != 0 {
		t.Errorf("overlay volumes after Release: %v", vs)
	}
	if ms := layerMounts(t, l.Upper()); len(ms) != 0 {
		t.Errorf("the layer is still mounted after Release: %q", ms)
	}
}

// layerMounts returns the mounts whose options name upper, in every
// mount namespace of a process this test may read (this process's, where
// a rootful engine's mounts propagate; a rootless Podman's, in its user
// namespace; the containers'), each namespace read once.
func layerMounts(t *testing.T, upper string) []string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("the mounts: %v", err)
	}
	infos := map[string][]byte{"self": self}
	if ns, err := os.Readlink("/proc/self/ns/mnt"); err == nil {
		infos = map[string][]byte{ns: self}
	}
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		ns, err := os.Readlink(p + "/ns/mnt")
		if _, seen := infos[ns]; err != nil || seen {
			continue
		}
		if b, err := os.ReadFile(p + "/mountinfo"); err == nil { // a process gone meanwhile has none
			infos[ns] = b
		}
	}
	var out []string
	for ns, b := range infos {
		for line := range strings.Lines(string(b)) {
			for opt := range strings.SplitSeq(strings.TrimSpace(line[strings.LastIndexByte(line, ' ')+1:]), ",") {
				if opt == "upperdir="+upper {
					out = append(out, ns+": "+strings.TrimSpace(line))
				}
			}
		}
	}
	return out
}

// Review mode is refused where its promise cannot be kept, before any
// container is made.
func TestReviewRefusals(t *testing.T) {
	f := newFixture(t, nil)
	layerDir := filepath.Join(dockertest.TestDir(t), "layer")
	shared := f.e.Backend(func() Settings { s := f.b.Settings(); s.Scope = ScopeShared; return s }())
	for _, tc := range []struct {
		name string
		b    *Backend
		mod  func(*sandbox.Request)
	}{
		{"no session", f.b, func(r *sandbox.Request) { r.Session = "" }},
		{"restricted", f.b, func(r *sandbox.Request) { r.Profile = sandbox.ProfileRestricted }},
		{"shared scope", shared, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &sandbox.Request{Argv: []string{"true"}, Policy: sandbox.Policy{Workdir: f.ws, Profile: sandbox.ProfileWorkspace}, Session: "refused", LayerDir: layerDir}
			if tc.mod != nil {
				tc.mod(req)
			}
			_, err := tc.b.Run(context.Background(), req)
			if !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), "workspace_mode review") {
				t.Errorf("want a policy refusal naming workspace_mode review, got %v", err)
			}
		})
	}
	if got := f.containers(""); len(got) != 0 {
		t.Errorf("containers left: %v", got)
	}
}

// Protected paths keep their rules in the layer: what the layer holds of
// one when the container is made is read-only (here .git/hooks, both in
// the host's tree and in the layer: a read-only overlay of the two), and
// one a command makes in the layer is removed after it.
func TestReviewProtected(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed on the host (apt install git)")
	}
	f := newFixture(t, nil)
	git(t, f.ws, "init", "-q", ".")
	layerDir := filepath.Join(dockertest.TestDir(t), "layer")
	l := layer.New(layerDir, f.ws)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	// A hook the layer already holds (as a layer made before could).
	if err := os.MkdirAll(filepath.Join(l.Upper(), ".git/hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(l.Upper(), ".git/hooks/pre-commit"), []byte("layer hook\n"), 0o755)
	review := func(r *sandbox.Request) { r.LayerDir = layerDir }
	res, out := f.run("prot", `cat .git/hooks/pre-commit; ls .git/hooks | grep -c sample
{ echo x >> .git/hooks/pre-commit; } 2>/dev/null && echo HOOK-WRITTEN || echo hook-refused
{ echo x > .git/hooks/post-commit; } 2>/dev/null && echo HOOK-MADE || echo hook-not-made
mkdir nested && cd nested && git init -q . && echo evil > .git/hooks/pre-push && git remote add origin https://example.com/n.git && git config core.fsmonitor evil && echo nested-made`, review)
	if res.ExitCode != 0 || !strings.HasPrefix(out, "layer hook\n") || !strings.Contains(out, "hook-refused\nhook-not-made\nnested-made\n") || strings.Contains(out, "\n0\n") {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "nested/.git/hooks") && strings.Contains(w, "removed") }) {
		t.Errorf("no warning about the removed nested/.git/hooks: %q", res.Warnings)
	}
	if _, err := os.Lstat(filepath.Join(l.Upper(), "nested/.git/hooks")); err == nil {
		t.Error("nested/.git/hooks stayed in the layer")
	}
	if b, err := os.ReadFile(filepath.Join(l.Upper(), "nested/.git/config")); err != nil || !strings.Contains(string(b), "https://example.com/n.git") || strings.Contains(string(b), "evil") {
		t.Errorf("nested/.git/config in the layer (%v), want its safe part:\n%s", err, b)
	}
	if _, err := os.Lstat(filepath.Join(f.ws, "nested")); err == nil {
		t.Error("nested was made on the host")
	}
	if _, out := f.run("prot", `ls nested/.git/hooks 2>&1 | head -1; cat nested/.git/hooks/pre-push 2>&1 | head -1`, review); strings.Contains(out, "evil") {
		t.Errorf("the nested hook survived: %q", out)
	}
	// corral cleanup while the session's container runs keeps its
	// volumes and reports none (Podman 4.3's volume list ORs its
	// filters, so volumes in use come back as dangling ones too).
	left, err := f.e.Cleanup(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, lo := range left {
		if lo.State == "volume" {
			t.Errorf("cleanup reported a volume of a live container: %+v", lo)
		}
	}
	if vs := volumesOf(t, f.cli, layerDir); len(vs) == 0 {
		t.Error("cleanup removed the live container's volumes")
	}
	// The session's end takes the volumes, and on Podman the read-only
	// overlay's throwaway upper (podmanVolumes), with the container.
	f.b.Release("prot")
	if vs := volumesOf(t, f.cli, layerDir); len(vs) != 0 {
		t.Errorf("volumes left after the session: %q", vs)
	}
	if ents, err := os.ReadDir(f.e.opts.ReviewDir); err == nil && len(ents) != 0 {
		t.Errorf("scratch directories left in %s: %v", f.e.opts.ReviewDir, ents)
	}
}

// Review mode combines with the allowlist profile on docker (the overlay
// volume and the proxy are independent parts of the container).
func TestReviewAllowlist(t *testing.T) {
	f := newFixture(t, nil)
	layerDir := filepath.Join(dockertest.TestDir(t), "layer")
	res, out := f.run("revallow", `echo made > made.txt && echo "$HTTPS_PROXY"`, func(r *sandbox.Request) {
		r.LayerDir = layerDir
		r.Profile = sandbox.ProfileAllowlist
		r.NetworkAllow = []string{"example.com"}
	})
	if res.ExitCode != 0 || !strings.Contains(out, "127.0.0.1") {
		t.Fatalf("exit %d: %q", res.ExitCode, out)
	}
	if _, err := os.Lstat(filepath.Join(f.ws, "made.txt")); err == nil {
		t.Error("made.txt reached the host")
	}
	if b, err := os.ReadFile(filepath.Join(layer.New(layerDir, f.ws).Upper(), "made.txt")); err != nil || string(b) != "made\n" {
		t.Errorf("made.txt in the layer: %q %v", b, err)
	}
}

// Two containers never mount one layer: a session's container of another
// engine (another corral) still holding the layer at an older generation
// makes the command fail, naming it, until it is gone.
func TestReviewOneMount(t *testing.T) {
	f := newFixture(t, nil)
	layerDir := filepath.Join(dockertest.TestDir(t), "layer")
	review := func(r *sandbox.Request) { r.LayerDir = layerDir }
	if res, out := f.run("one", "echo a > a", review); res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	if err := layer.New(layerDir, f.ws).Bump(); err != nil {
		t.Fatal(err)
	}
	e2 := NewEngine(f.e.opts)
	defer e2.Close()
	b2 := e2.Backend(f.b.Settings())
	req := &sandbox.Request{Argv: []string{"cat", "a"}, Policy: sandbox.Policy{Workdir: f.ws, Profile: sandbox.ProfileWorkspace}, Session: "one", LayerDir: layerDir}
	_, err := b2.Run(context.Background(), req)
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "still mounted by container") {
		t.Fatalf("a second mount of the layer: %v", err)
	}
	f.b.Release("one")
	var out bytes.Buffer
	req.Stdout = &out
	if res, err := b2.Run(context.Background(), req); err != nil || res.ExitCode != 0 || out.String() != "a\n" {
		t.Fatalf("after the first container went: %v %v %q", err, res, out.String())
	}
}

// rootlessPodman reports whether f's engine is rootless Podman.
func (f *fixture) rootlessPodman() bool {
	f.t.Helper()
	fl, err := f.e.flavor(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return fl.Podman && fl.Rootless
}

// TestRootlessReviewRefusal: review mode on rootless Podman runs only
// where Podman's chown of the volume's root keeps the layer the
// caller's: keep-id, the caller's own uid:gid, a target the image lacks.
func TestRootlessReviewRefusal(t *testing.T) {
	for _, c := range []struct {
		name, user, userns, held, want string
	}{
		{"default", "1001:1001", "keep-id", "", ""},
		{"keep-id with options", "1001:1001", "keep-id:uid=1001,gid=1001", "", ""},
		{"other user namespace", "1001:1001", "auto", "", "not keep-id"},
		{"no user namespace option", "1001:1001", "", "", "not keep-id"},
		{"host user namespace", "1001:1001", "host", "", "not keep-id"},
		{"image's user", "", "keep-id", "", "not yours (1001:1001)"},
		{"root in the container", "0:0", "keep-id", "", "not yours"},
		{"another gid", "1001:0", "keep-id", "", "not yours"},
		{"path in the image", "1001:1001", "keep-id", "/home", "the image holds /home"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := rootlessReviewRefusal(c.user, c.userns, 1001, 1001, c.held)
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			if got != "" && !strings.Contains(got, "docker.workdir") {
				t.Errorf("the refusal names no fix: %q", got)
			}
		})
	}
}

// TestReviewWorkdirInImage: with the workspace at a path the image holds
// (docker.workdir /home, root's and 0755 in the test image) the
// container's workspace root is the layer's own, as on Docker: Podman
// gives a named volume's root the image directory's owner, mode and
// times at its first mount, which corral sets back (restoreRoot). On
// rootless Podman that owner is a subordinate uid corral could not set
// back: refused, the layer untouched.
func TestReviewWorkdirInImage(t *testing.T) {
	f := newFixture(t, func(st *Settings) { st.Workdir = "/home" })
	layerDir := filepath.Join(dockertest.TestDir(t), "layer")
	l := layer.New(layerDir, f.ws)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(l.Upper(), 0o750); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(l.Upper(), old, old); err != nil {
		t.Fatal(err)
	}
	review := func(r *sandbox.Request) { r.LayerDir = layerDir }
	if f.rootlessPodman() {
		// Rootless: refused before any volume or container is made, the
		// layer's root left as it was (Podman's chown would have given it
		// to a subordinate uid: rootlessReviewRefusal).
		req := &sandbox.Request{Argv: []string{"sh", "-c", "echo ran > ran.txt"}, Policy: sandbox.Policy{Workdir: f.ws, Profile: sandbox.ProfileWorkspace}, Session: "wd", LayerDir: layerDir, Timeout: time.Minute}
		_, err := f.b.Run(context.Background(), req)
		if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "the image holds /home") {
			t.Fatalf("review at a path the image holds on rootless Podman: %v, want the refusal", err)
		}
		st, err := os.Stat(l.Upper())
		if err != nil || st.Mode().Perm() != 0o750 || !st.ModTime().Equal(old) || int(st.Sys().(*syscall.Stat_t).Uid) != os.Getuid() {
			t.Errorf("the layer's root after the refusal: %v, %v; want yours, 0750, of %v", st, err, old)
		}
		if ents, _ := os.ReadDir(l.Upper()); len(ents) != 0 {
			t.Errorf("the refused command wrote the layer: %v", ents)
		}
		if vs := volumesOf(t, f.cli, layerDir); len(vs) != 0 {
			t.Errorf("volumes left of the refused review: %q", vs)
		}
		return
	}
	res, out := f.run("wd", `pwd; stat -c '%a %Y' .; cat README; echo new > made.txt && echo wrote`, review)
	if want := fmt.Sprintf("/home\n750 %d\nworkspace\nwrote\n", old.Unix()); res.ExitCode != 0 || out != want {
		t.Fatalf("exit %d: %q, want %q", res.ExitCode, out, want)
	}
	if _, err := os.Lstat(filepath.Join(f.ws, "made.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command wrote the host's workspace: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(l.Upper(), "made.txt")); err != nil || string(b) != "new\n" {
		t.Errorf("made.txt in the layer: %q, %v", b, err)
	}
	if st, err := os.Stat(l.Upper()); err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("the layer's root after the command: %v, %v; want mode 0750", st, err)
	}
}

// TestCleanupVolumesByOwner: `corral cleanup` removes a review volume
// left without a container by a corral that is gone (killed between
// making the volume and its container, as on Podman: podmanVolumes),
// with its scratch directory, and leaves alone one whose corral still
// runs (its container may be being made) and that one's scratch.
func TestCleanupVolumesByOwner(t *testing.T) {
	f := newFixture(t, nil)
	self := owner.Self()
	dead := self
	dead.Start++ // the same pid, another process: gone
	ctx := context.Background()
	vols := map[string]string{randomName() + "-v0": dead.String(), randomName() + "-v0": self.String()}
	layerDir := filepath.Join(dockertest.TestDir(t), "layer")
	for name, o := range vols {
		if err := os.MkdirAll(filepath.Join(f.e.opts.ReviewDir, name, "upper"), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := f.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Driver: "local",
			Labels: map[string]string{LabelEnv: "1", LabelLayer: layerDir, LabelContainer: strings.TrimSuffix(name, "-v0"), LabelOwner: o}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.cli.VolumeRemove(context.Background(), name, client.VolumeRemoveOptions{}) })
	}
	left, err := f.e.Cleanup(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	reported := map[string]Leftover{}
	for _, lo := range left {
		if lo.State == "volume" {
			reported[lo.Name] = lo
		}
	}
	for name, o := range vols {
		_, scratchErr := os.Stat(filepath.Join(f.e.opts.ReviewDir, name))
		_, inspectErr := f.cli.VolumeInspect(ctx, name, client.VolumeInspectOptions{})
		if o == dead.String() {
			if lo := reported[name]; !lo.Removed || lo.Key != layerDir {
				t.Errorf("the dead corral's volume %s: reported %+v, want removed", name, lo)
			}
			if inspectErr == nil || !errors.Is(scratchErr, os.ErrNotExist) {
				t.Errorf("the dead corral's volume %s (%v) or its scratch (%v) is left", name, inspectErr, scratchErr)
			}
			continue
		}
		if lo, ok := reported[name]; ok {
			t.Errorf("the live corral's volume %s was reported: %+v", name, lo)
		}
		if inspectErr != nil || scratchErr != nil {
			t.Errorf("the live corral's volume %s (%v) or its scratch (%v) was removed", name, inspectErr, scratchErr)
		}
	}
}
