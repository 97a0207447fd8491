package bwrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/sandbox"
)

// planFix is a fake host tree for BuildPlan, made under /var/tmp (the
// sandbox puts a fresh tmpfs on /tmp, and BuildPlan treats /tmp specially).
//
//	base/
//	  empty                       the EmptyFile
//	  fake.sock                   a MaskFiles entry
//	  data/                       a bind source
//	  work/                       a working directory outside home
//	  work/a/b/.inner-hidden/     a HiddenDirs entry inside that working directory
//	  hidden/                     a HiddenDirs entry outside home (visible, so masked)
//	  hidden/scratch/             the scratch directory
//	  scratch-link -> hidden/scratch
//	  data-link -> data
//	  home/
//	    project/README            a non-dot entry, the default working directory
//	    notes.txt                 a non-dot file
//	    link -> project           a non-dot symlink
//	    .bashrc                   an allowlisted dot file
//	    .cargo/bin/cargo          an allowlisted dot directory ...
//	    .cargo/credentials.toml   ... holding a credential file
//	    .secret-tool/token        a dot entry that is not allowed
//	    .ssh/id_ed25519           a credential store
//	    .config/nvim/init.vim     an allowed child of a nested directory
//	    .config/gh/hosts.yml      a credential store in a nested directory
//	    .config/unlisted/x        a child of a nested directory that is not allowed
//	    .local/share/fonts/a.ttf  an allowed child two levels down
//	    .local/state/corral/      corral's state directory (HiddenDirs)
//	    .tool/sub/x               a path below a hidden dot entry, shown by home_allow ".tool/sub"
type planFix struct {
	base, home, work, hidden, scratch, empty, sock, data, inner, state string
}

func newPlanFix(t *testing.T) *planFix {
	t.Helper()
	base, err := os.MkdirTemp("/var/tmp", "corral-plan-test-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if base, err = filepath.EvalSymlinks(base); err != nil {
		t.Fatal(err)
	}
	f := &planFix{
		base:    base,
		home:    filepath.Join(base, "home"),
		work:    filepath.Join(base, "work"),
		hidden:  filepath.Join(base, "hidden"),
		scratch: filepath.Join(base, "hidden", "scratch"),
		empty:   filepath.Join(base, "empty"),
		sock:    filepath.Join(base, "fake.sock"),
		data:    filepath.Join(base, "data"),
		inner:   filepath.Join(base, "work", "a", "b", ".inner-hidden"),
	}
	f.state = filepath.Join(f.home, ".local", "state", "corral")
	for _, d := range []string{f.work, f.inner, f.scratch, f.data, f.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{
		"project/README", "notes.txt", ".bashrc", ".cargo/bin/cargo", ".cargo/credentials.toml",
		".secret-tool/token", ".ssh/id_ed25519", ".config/nvim/init.vim", ".config/gh/hosts.yml",
		".config/unlisted/x", ".local/share/fonts/a.ttf", ".tool/sub/x",
	} {
		p := filepath.Join(f.home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("project", filepath.Join(f.home, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.scratch, filepath.Join(base, "scratch-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data", filepath.Join(base, "data-link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.empty, f.sock} {
		if err := os.WriteFile(p, nil, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *planFix) host() Host {
	return Host{
		Home:       f.home,
		UID:        os.Getuid(),
		EmptyFile:  f.empty,
		HiddenDirs: []string{f.state, f.hidden, f.inner},
		MaskFiles:  []string{f.sock},
	}
}

func (f *planFix) req(mod func(*sandbox.Request)) *sandbox.Request {
	r := &sandbox.Request{
		Argv:   []string{"/bin/true"},
		Env:    []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		Policy: sandbox.Policy{Workdir: filepath.Join(f.home, "project"), Profile: sandbox.ProfileWorkspace}}
	if mod != nil {
		mod(r)
	}
	return r
}

func (f *planFix) build(t *testing.T, mod func(*sandbox.Request)) *Plan {
	t.Helper()
	plan, err := checkedPlan(t, f.req(mod), f.host())
	if err != nil {
		t.Fatalf("BuildPlan: %v", err)
	}
	return plan
}

// planM formats a mount as bwrap would get it.
func planM(m mount) string {
	kinds := map[mountKind]string{mRoBind: "ro-bind", mBind: "bind", mDevBind: "dev-bind", mTmpfs: "tmpfs", mSymlink: "symlink", mRemountRO: "remount-ro", mDev: "dev", mProc: "proc"}
	if m.Src != "" {
		return fmt.Sprintf("%s %s %s", kinds[m.Kind], m.Src, m.Dest)
	}
	return fmt.Sprintf("%s %s", kinds[m.Kind], m.Dest)
}

func planDump(ms []mount) string {
	var b strings.Builder
	for i, m := range ms {
		fmt.Fprintf(&b, "\n  %2d %s", i, planM(m))
	}
	return b.String()
}

// planFind returns the index of the first mount of kind at dest, or -1.
func planFind(ms []mount, kind mountKind, dest string) int {
	return slices.IndexFunc(ms, func(m mount) bool { return m.Kind == kind && m.Dest == dest })
}

// planAt returns the indexes of every mount whose destination is dest or
// lies below it.
func planAt(ms []mount, dest string) []int {
	var out []int
	for i, m := range ms {
		if within(m.Dest, dest) {
			out = append(out, i)
		}
	}
	return out
}

// checkPlanOrder checks the invariants of mount order that hold for every
// plan: a mount never precedes a (non-remount) mount of one of its parent
// directories, since the later parent would cover it; a remount-ro comes
// after every mount at or below its path, which it would otherwise not seal
// (or would seal too early).
func checkPlanOrder(t *testing.T, ms []mount) {
	t.Helper()
	if len(ms) == 0 || ms[0].Kind != mRoBind || ms[0].Dest != "/" {
		t.Errorf("mounts = %s, want ro-bind / / first", planDump(ms))
	}
	for i, m := range ms {
		for j := i + 1; j < len(ms); j++ {
			n := ms[j]
			if m.Kind == mRemountRO {
				if n.Kind != mRemountRO && within(n.Dest, m.Dest) {
					t.Errorf("mount %d (%s) comes after %d (%s), which seals its parent%s", j, planM(n), i, planM(m), planDump(ms))
				}
				continue
			}
			if n.Kind != mRemountRO && n.Dest != m.Dest && within(m.Dest, n.Dest) {
				t.Errorf("mount %d (%s) comes after %d (%s) below it and covers it%s", j, planM(n), i, planM(m), planDump(ms))
			}
		}
	}
}

func TestPlanOrder(t *testing.T) {
	f := newPlanFix(t)
	for _, tc := range []struct {
		name string
		mod  func(*sandbox.Request)
	}{
		{name: "workdir in home, workspace", mod: nil},
		{name: "workdir is home", mod: func(r *sandbox.Request) { r.Workdir = f.home }},
		{name: "workdir outside home with scratch", mod: func(r *sandbox.Request) {
			r.Workdir = f.work
			r.ScratchDir = f.scratch
		}},
		{name: "restricted with scratch and binds", mod: func(r *sandbox.Request) {
			r.Profile = sandbox.ProfileRestricted
			r.ScratchDir = f.scratch
			r.Binds = []sandbox.Bind{{Src: f.data, ReadOnly: true}, {Src: f.data, Dest: "/tmp/corral-data"}}
		}},
		{name: "network with home_allow", mod: func(r *sandbox.Request) {
			r.Profile = sandbox.ProfileNetwork
			r.HomeAllow = []string{".secret-tool", ".tool/sub"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := f.build(t, tc.mod)
			checkPlanOrder(t, plan.Mounts)

			ms := plan.Mounts
			homeTmpfs := planFind(ms, mTmpfs, f.home)
			if homeTmpfs < 0 {
				t.Fatalf("no tmpfs over home %s%s", f.home, planDump(ms))
			}
			homeSeal := planFind(ms, mRemountRO, f.home)
			if homeSeal < 0 {
				t.Fatalf("no remount-ro of home %s%s", f.home, planDump(ms))
			}
			for _, i := range planAt(ms, f.home) {
				m := ms[i]
				if m.Kind == mRemountRO {
					continue
				}
				if i < homeTmpfs {
					t.Errorf("mount %d (%s) comes before the tmpfs over home at %d%s", i, planM(m), homeTmpfs, planDump(ms))
				}
				if i > homeSeal {
					t.Errorf("mount %d (%s) comes after the remount-ro of home at %d%s", i, planM(m), homeSeal, planDump(ms))
				}
			}
			// Every nested directory is rebuilt on its own tmpfs and sealed.
			for _, rel := range []string{".config", ".local", ".local/share"} {
				d := filepath.Join(f.home, rel)
				tmp, seal := planFind(ms, mTmpfs, d), planFind(ms, mRemountRO, d)
				if tmp < 0 || seal < 0 {
					t.Errorf("%s: tmpfs at %d, remount-ro at %d, want both%s", rel, tmp, seal, planDump(ms))
					continue
				}
				if tmp < homeTmpfs || seal > homeSeal {
					t.Errorf("%s: tmpfs %d / remount-ro %d not inside home's tmpfs %d / remount-ro %d", rel, tmp, seal, homeTmpfs, homeSeal)
				}
			}
			// The credential file is masked after the bind of the
			// directory that holds it.
			cargo := planFind(ms, mRoBind, filepath.Join(f.home, ".cargo"))
			cred := planFind(ms, mRoBind, filepath.Join(f.home, ".cargo", "credentials.toml"))
			if cargo < 0 || cred < 0 || cred < cargo {
				t.Errorf("ro-bind .cargo at %d, mask of .cargo/credentials.toml at %d, want both, the mask last%s", cargo, cred, planDump(ms))
			}
			// The hidden dir outside home is masked, after the base mounts.
			if i := planFind(ms, mTmpfs, f.hidden); i < 0 {
				t.Errorf("no tmpfs mask over the hidden dir %s%s", f.hidden, planDump(ms))
			}
			if i := planFind(ms, mRoBind, f.sock); i < 0 || ms[i].Src != f.empty {
				t.Errorf("mask file %s: mount %d, want ro-bind of %s%s", f.sock, i, f.empty, planDump(ms))
			}
		})
	}
}

// TestPlanOrderScratchInHiddenDir: the scratch directory lives in a hidden
// directory (corral's state); it must be bound after the mask of that
// directory, or the mask would cover it.
func TestPlanOrderScratchInHiddenDir(t *testing.T) {
	f := newPlanFix(t)
	for _, tc := range []struct {
		name     string
		profile  sandbox.Profile
		scratch  string
		wantKind mountKind
	}{
		{name: "workspace", profile: sandbox.ProfileWorkspace, scratch: f.scratch, wantKind: mBind},
		{name: "network via symlink", profile: sandbox.ProfileNetwork, scratch: filepath.Join(f.base, "scratch-link"), wantKind: mBind},
		{name: "restricted", profile: sandbox.ProfileRestricted, scratch: f.scratch, wantKind: mRoBind},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := f.build(t, func(r *sandbox.Request) {
				r.Workdir = f.work
				r.Profile = tc.profile
				r.ScratchDir = tc.scratch
			})
			ms := plan.Mounts
			mask := planFind(ms, mTmpfs, f.hidden)
			s := planFind(ms, tc.wantKind, f.scratch)
			if mask < 0 || s < 0 {
				t.Fatalf("mask of %s at %d, scratch %s at %d, want both%s", f.hidden, mask, planM(mount{Kind: tc.wantKind, Src: f.scratch, Dest: f.scratch}), s, planDump(ms))
			}
			if s < mask {
				t.Errorf("scratch bind at %d comes before the mask of the hidden dir at %d%s", s, mask, planDump(ms))
			}
			if ms[s].Src != f.scratch {
				t.Errorf("scratch bind source = %q, want %q (resolved)", ms[s].Src, f.scratch)
			}
			checkPlanOrder(t, ms)
		})
	}
}

// TestPlanOrderMaskInWorkdir: a hidden directory inside the writable working
// directory is masked after the working directory's bind, and the
// directories between them are pinned before the mask.
func TestPlanOrderMaskInWorkdir(t *testing.T) {
	f := newPlanFix(t)
	for _, tc := range []struct {
		name     string
		profile  sandbox.Profile
		wantPins bool
	}{
		{name: "workspace pins", profile: sandbox.ProfileWorkspace, wantPins: true},
		{name: "restricted needs no pins", profile: sandbox.ProfileRestricted, wantPins: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := f.build(t, func(r *sandbox.Request) { r.Workdir = f.work; r.Profile = tc.profile })
			ms := plan.Mounts
			mask := planFind(ms, mTmpfs, f.inner)
			if mask < 0 {
				t.Fatalf("no tmpfs mask over %s%s", f.inner, planDump(ms))
			}
			if wb := planFind(ms, mBind, f.work); tc.wantPins && (wb < 0 || wb > mask) {
				t.Errorf("workdir bind at %d, mask at %d, want the bind first%s", wb, mask, planDump(ms))
			}
			for _, d := range []string{filepath.Join(f.work, "a"), filepath.Join(f.work, "a", "b")} {
				pin := slices.IndexFunc(ms, func(m mount) bool { return m.Kind == mBind && m.Src == d && m.Dest == d })
				if (pin >= 0) != tc.wantPins {
					t.Errorf("pin of %s at %d, want pinned %v%s", d, pin, tc.wantPins, planDump(ms))
				}
				if pin > mask {
					t.Errorf("pin of %s at %d comes after the mask at %d%s", d, pin, mask, planDump(ms))
				}
			}
			checkPlanOrder(t, ms)
		})
	}
}

// TestPlanHomeEntries checks which home entries get which mount.
func TestPlanHomeEntries(t *testing.T) {
	f := newPlanFix(t)
	const none = mountKind(-1)
	for _, tc := range []struct {
		name    string
		mod     func(*sandbox.Request)
		rel     string
		want    mountKind // none: nothing is mounted at or below rel
		wantSrc string    // "" means the same path as Dest (or not checked for symlinks)
	}{
		{name: "allowed dot file", rel: ".bashrc", want: mRoBind},
		{name: "allowed dot dir", rel: ".cargo", want: mRoBind},
		{name: "dot entry not allowed", rel: ".secret-tool", want: none},
		{name: "dot entry shown by home_allow", rel: ".secret-tool", want: mRoBind,
			mod: func(r *sandbox.Request) { r.HomeAllow = []string{".secret-tool"} }},
		{name: "credential store", rel: ".ssh", want: none},
		{name: "credential store named in home_allow", rel: ".ssh", want: none,
			mod: func(r *sandbox.Request) { r.HomeAllow = []string{".ssh"} }},
		{name: "nested dir", rel: ".config", want: mTmpfs},
		{name: "allowed child of nested dir", rel: ".config/nvim", want: mRoBind},
		{name: "credential store in nested dir", rel: ".config/gh", want: none},
		{name: "child of nested dir not allowed", rel: ".config/unlisted", want: none},
		{name: "allowed grandchild of nested dir", rel: ".local/share/fonts", want: mRoBind},
		{name: "state dir", rel: ".local/state", want: none},
		{name: "non-dot file", rel: "notes.txt", want: mRoBind},
		{name: "non-dot file, home is workdir", rel: "notes.txt", want: mBind,
			mod: func(r *sandbox.Request) { r.Workdir = f.home }},
		{name: "non-dot file, home is workdir, restricted", rel: "notes.txt", want: mRoBind,
			mod: func(r *sandbox.Request) { r.Workdir = f.home; r.Profile = sandbox.ProfileRestricted }},
		{name: "dot file stays read-only when home is workdir", rel: ".bashrc", want: mRoBind,
			mod: func(r *sandbox.Request) { r.Workdir = f.home }},
		{name: "symlink recreated", rel: "link", want: mSymlink, wantSrc: "project"},
		{name: "credential file in an allowed dir reads empty", rel: ".cargo/credentials.toml", want: mRoBind, wantSrc: f.empty},
		{name: "PATH dir below a hidden dot entry", rel: ".tool/sub", want: mRoBind,
			mod: func(r *sandbox.Request) {
				r.Env = []string{"PATH=" + filepath.Join(f.home, ".tool", "sub") + ":/usr/bin"}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := f.build(t, tc.mod)
			ms := plan.Mounts
			dest := filepath.Join(f.home, tc.rel)
			if tc.want == none {
				if at := planAt(ms, dest); len(at) > 0 {
					t.Errorf("mounts at or below %s: %v, want none%s", tc.rel, at, planDump(ms))
				}
				return
			}
			// The last mount at dest is what the sandbox shows there.
			i := -1
			for j, m := range ms {
				if m.Dest == dest && m.Kind != mRemountRO {
					i = j
				}
			}
			if i < 0 {
				t.Fatalf("no mount at %s, want %s%s", tc.rel, planM(mount{Kind: tc.want, Dest: dest}), planDump(ms))
			}
			if ms[i].Kind != tc.want {
				t.Errorf("mount at %s = %s, want %s%s", tc.rel, planM(ms[i]), planM(mount{Kind: tc.want, Dest: dest}), planDump(ms))
			}
			wantSrc := tc.wantSrc
			if wantSrc == "" && tc.want != mTmpfs {
				wantSrc = dest
			}
			if ms[i].Src != wantSrc {
				t.Errorf("mount at %s source = %q, want %q", tc.rel, ms[i].Src, wantSrc)
			}
		})
	}
}

func TestPlanRefusals(t *testing.T) {
	f := newPlanFix(t)
	file := filepath.Join(f.home, "notes.txt")
	for _, tc := range []struct {
		name string
		mod  func(*sandbox.Request)
		want error
	}{
		{name: "workdir /", mod: func(r *sandbox.Request) { r.Workdir = "/" }, want: sandbox.ErrPolicy},
		{name: "workdir /. cleans to /", mod: func(r *sandbox.Request) { r.Workdir = "/./" }, want: sandbox.ErrPolicy},
		{name: "workdir is a hidden dir", mod: func(r *sandbox.Request) { r.Workdir = f.hidden }, want: sandbox.ErrPolicy},
		{name: "workdir inside a hidden dir", mod: func(r *sandbox.Request) { r.Workdir = f.scratch }, want: sandbox.ErrPolicy},
		{name: "workdir is corral's state dir", mod: func(r *sandbox.Request) { r.Workdir = f.state }, want: sandbox.ErrPolicy},
		{name: "workdir via a symlink into a hidden dir", mod: func(r *sandbox.Request) { r.Workdir = filepath.Join(f.base, "scratch-link") }, want: sandbox.ErrPolicy},
		{name: "workdir in a credential store", mod: func(r *sandbox.Request) { r.Workdir = filepath.Join(f.home, ".ssh") }, want: sandbox.ErrPolicy},
		{name: "workdir in a dot entry not allowed", mod: func(r *sandbox.Request) { r.Workdir = filepath.Join(f.home, ".secret-tool") }, want: sandbox.ErrPolicy},
		{name: "workdir is a file", mod: func(r *sandbox.Request) { r.Workdir = file }, want: sandbox.ErrPolicy},
		{name: "workdir relative", mod: func(r *sandbox.Request) { r.Workdir = "project" }, want: sandbox.ErrBadRequest},
		{name: "workdir empty", mod: func(r *sandbox.Request) { r.Workdir = "" }, want: sandbox.ErrBadRequest},
		{name: "nil argv", mod: func(r *sandbox.Request) { r.Argv = nil }, want: sandbox.ErrBadRequest},
		{name: "empty argv", mod: func(r *sandbox.Request) { r.Argv = []string{} }, want: sandbox.ErrBadRequest},
		{name: "empty command name", mod: func(r *sandbox.Request) { r.Argv = []string{""} }, want: sandbox.ErrBadRequest},
		{name: "NUL in command", mod: func(r *sandbox.Request) { r.Argv = []string{"ec\x00ho"} }, want: sandbox.ErrBadRequest},
		{name: "NUL in argument", mod: func(r *sandbox.Request) { r.Argv = []string{"echo", "a", "b\x00c"} }, want: sandbox.ErrBadRequest},
		{name: "unknown profile", mod: func(r *sandbox.Request) { r.Profile = "everything" }, want: sandbox.ErrBadRequest},
		{name: "bind dest missing outside /tmp", mod: func(r *sandbox.Request) {
			r.Binds = []sandbox.Bind{{Src: f.data, Dest: "/corral-test-no-such-dir/data", ReadOnly: true}}
		}, want: sandbox.ErrPolicy},
		{name: "bind dest /", mod: func(r *sandbox.Request) {
			r.Binds = []sandbox.Bind{{Src: f.data, Dest: "/", ReadOnly: true}}
		}, want: sandbox.ErrPolicy},
		{name: "read-only bind source missing", mod: func(r *sandbox.Request) {
			r.Binds = []sandbox.Bind{{Src: filepath.Join(f.base, "no-such"), ReadOnly: true}}
		}, want: sandbox.ErrPolicy},
		{name: "bind source nested in the writable workdir", mod: func(r *sandbox.Request) {
			r.Workdir = f.work
			r.Binds = []sandbox.Bind{{Src: filepath.Join(f.work, "a", "b"), ReadOnly: true}}
		}, want: sandbox.ErrPolicy},
		// errors.go: ErrBadRequest is for "relative paths where absolute
		// ones are needed".
		{name: "relative bind source", mod: func(r *sandbox.Request) {
			r.Binds = []sandbox.Bind{{Src: "data", ReadOnly: true}}
		}, want: sandbox.ErrBadRequest},
		{name: "relative bind dest", mod: func(r *sandbox.Request) {
			r.Binds = []sandbox.Bind{{Src: f.data, Dest: "data", ReadOnly: true}}
		}, want: sandbox.ErrBadRequest},
		{name: "missing scratch dir", mod: func(r *sandbox.Request) { r.ScratchDir = filepath.Join(f.base, "no-such") }, want: sandbox.ErrPolicy},
		{name: "relative scratch dir", mod: func(r *sandbox.Request) { r.ScratchDir = "scratch" }, want: sandbox.ErrBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := checkedPlan(t, f.req(tc.mod), f.host())
			if !errors.Is(err, tc.want) {
				t.Errorf("BuildPlan error = %v, want %v", err, tc.want)
			}
			if err != nil && plan != nil {
				t.Errorf("BuildPlan = %+v with error %v, want a nil plan", plan, err)
			}
		})
	}
}

func TestPlanBindsAccepted(t *testing.T) {
	f := newPlanFix(t)
	dev := "/dev/null"
	for _, tc := range []struct {
		name      string
		bind      sandbox.Bind
		want      *mount // nil: skipped
		wantWarn  bool
		wantRemRO bool
	}{
		{name: "read-only at own path", bind: sandbox.Bind{Src: f.data, ReadOnly: true},
			want: &mount{Kind: mRoBind, Src: f.data, Dest: f.data}},
		{name: "read-write at own path", bind: sandbox.Bind{Src: f.data},
			want: &mount{Kind: mBind, Src: f.data, Dest: f.data}},
		{name: "missing dest under /tmp", bind: sandbox.Bind{Src: f.data, Dest: "/tmp/corral-test/data", ReadOnly: true},
			want: &mount{Kind: mRoBind, Src: f.data, Dest: "/tmp/corral-test/data"}},
		{name: "missing dest under home", bind: sandbox.Bind{Src: f.data, Dest: filepath.Join(f.home, "data"), ReadOnly: true},
			want: &mount{Kind: mRoBind, Src: f.data, Dest: filepath.Join(f.home, "data")}},
		{name: "symlinked source bound at its resolved path", bind: sandbox.Bind{Src: filepath.Join(f.base, "data-link"), ReadOnly: true},
			want: &mount{Kind: mRoBind, Src: f.data, Dest: f.data}},
		{name: "symlinked source resolving into a hidden dir ignored", bind: sandbox.Bind{Src: filepath.Join(f.base, "scratch-link"), Dest: "/tmp/s", ReadOnly: true},
			wantWarn: true},
		{name: "missing read-write source skipped", bind: sandbox.Bind{Src: filepath.Join(f.base, "no-such")},
			wantWarn: true},
		{name: "source in a credential store ignored", bind: sandbox.Bind{Src: filepath.Join(f.home, ".ssh"), Dest: "/tmp/ssh", ReadOnly: true},
			wantWarn: true},
		{name: "read-only device node", bind: sandbox.Bind{Src: dev, ReadOnly: true},
			want: &mount{Kind: mDevBind, Src: dev, Dest: dev}, wantRemRO: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := f.build(t, func(r *sandbox.Request) { r.Workdir = f.work; r.Binds = []sandbox.Bind{tc.bind} })
			ms := plan.Mounts
			if tc.want == nil {
				for _, m := range ms {
					if m.Dest == tc.bind.Target() || m.Src == tc.bind.Src {
						t.Errorf("mount %s for a bind that should be skipped%s", planM(m), planDump(ms))
					}
				}
			} else if !slices.Contains(ms, *tc.want) {
				t.Errorf("mounts lack %s%s", planM(*tc.want), planDump(ms))
			}
			if got := len(plan.Warnings) > 0; got != tc.wantWarn {
				t.Errorf("warnings = %q, want some %v", plan.Warnings, tc.wantWarn)
			}
			if tc.wantRemRO {
				b, r := planFind(ms, tc.want.Kind, tc.want.Dest), planFind(ms, mRemountRO, tc.want.Dest)
				if r < 0 || r < b {
					t.Errorf("dev-bind at %d, remount-ro at %d, want remount-ro after%s", b, r, planDump(ms))
				}
			}
			checkPlanOrder(t, ms)
		})
	}
}

func TestPlanEnv(t *testing.T) {
	f := newPlanFix(t)
	in := []string{"PATH=/usr/bin:/bin", "OPENAI_API_KEY=sk-x", "TMPDIR=/old", "MY_API_KEY=k", "SSH_AUTH_SOCK=/s", "LANG=C", "malformed", "CORRAL_PROFILE=network", "TEMP=/old2"}
	for _, tc := range []struct {
		name    string
		scratch string
		profile sandbox.Profile
		want    []string
	}{
		{name: "scratch dir", scratch: f.scratch,
			want: []string{"PATH=/usr/bin:/bin", "TMPDIR=" + f.scratch, "LANG=C", "TEMP=" + f.scratch, "TMP=" + f.scratch}},
		{name: "scratch dir via symlink is resolved", scratch: filepath.Join(f.base, "scratch-link"),
			want: []string{"PATH=/usr/bin:/bin", "TMPDIR=" + f.scratch, "LANG=C", "TEMP=" + f.scratch, "TMP=" + f.scratch}},
		{name: "no scratch dir", scratch: "",
			want: []string{"PATH=/usr/bin:/bin", "TMPDIR=/tmp", "LANG=C", "TEMP=/tmp", "TMP=/tmp"}},
		// The scratch directory is read-only under restricted: a TMPDIR
		// there would make mktemp, go build and gcc fail.
		{name: "restricted: the fresh /tmp", scratch: f.scratch, profile: sandbox.ProfileRestricted,
			want: []string{"PATH=/usr/bin:/bin", "TMPDIR=/tmp", "LANG=C", "TEMP=/tmp", "TMP=/tmp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := f.build(t, func(r *sandbox.Request) {
				r.Env = in
				r.ScratchDir = tc.scratch
				if tc.profile != "" {
					r.Profile = tc.profile
				}
			})
			if !slices.Equal(plan.Env, tc.want) {
				t.Errorf("Env = %q, want %q", plan.Env, tc.want)
			}
		})
	}
}

func TestPlanProfile(t *testing.T) {
	f := newPlanFix(t)
	for _, tc := range []struct {
		profile      sandbox.Profile
		wantShareNet bool
		wantWritable bool
	}{
		{profile: "", wantShareNet: true, wantWritable: true}, // the default is network
		{profile: sandbox.ProfileRestricted, wantShareNet: false, wantWritable: false},
		{profile: sandbox.ProfileWorkspace, wantShareNet: false, wantWritable: true},
		{profile: sandbox.ProfileNetwork, wantShareNet: true, wantWritable: true},
	} {
		t.Run(string(tc.profile), func(t *testing.T) {
			for _, wd := range []string{f.work, filepath.Join(f.home, "project")} {
				plan := f.build(t, func(r *sandbox.Request) { r.Workdir = wd; r.Profile = tc.profile })
				if plan.ShareNet != tc.wantShareNet {
					t.Errorf("%s: ShareNet = %v, want %v", wd, plan.ShareNet, tc.wantShareNet)
				}
				if plan.Writable != tc.wantWritable {
					t.Errorf("%s: Writable = %v, want %v", wd, plan.Writable, tc.wantWritable)
				}
				if plan.Workdir != wd || plan.Chdir != wd {
					t.Errorf("Workdir, Chdir = %q, %q, want %q", plan.Workdir, plan.Chdir, wd)
				}
				if has := planFind(plan.Mounts, mBind, wd) >= 0; has != tc.wantWritable {
					t.Errorf("%s: read-write bind of the workdir present = %v, want %v%s", wd, has, tc.wantWritable, planDump(plan.Mounts))
				}
				// Nothing else is writable under restricted.
				if !tc.wantWritable {
					for _, m := range plan.Mounts {
						if m.Kind == mBind {
							t.Errorf("%s: read-write mount %s under restricted", wd, planM(m))
						}
					}
				}
				argv := Argv(plan, Features{Perms: true, JSONStatus: true}, -1, []string{"true"})
				if has := slices.Contains(argv, "--unshare-net"); has == tc.wantShareNet {
					t.Errorf("%s: --unshare-net present = %v, want %v", wd, has, !tc.wantShareNet)
				}
			}
		})
	}
}

// TestPlanWorkdirFallbacks: a missing working directory runs read-only in
// its nearest existing parent; a missing or hidden start directory falls
// back to the working directory.
func TestPlanWorkdirFallbacks(t *testing.T) {
	f := newPlanFix(t)
	project := filepath.Join(f.home, "project")
	if err := os.WriteFile(filepath.Join(f.work, "was-a-dir"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		workdir, dir string
		wantWorkdir  string
		wantChdir    string
		wantWritable bool
		wantWarn     bool
	}{
		{name: "missing workdir", workdir: filepath.Join(project, "gone", "deeper"), wantWorkdir: project, wantChdir: project, wantWarn: true},
		{name: "dir elsewhere", workdir: project, dir: f.work, wantWorkdir: project, wantChdir: f.work, wantWritable: true},
		{name: "hidden dir", workdir: project, dir: filepath.Join(f.home, ".ssh"), wantWorkdir: project, wantChdir: project, wantWritable: true, wantWarn: true},
		{name: "missing dir", workdir: project, dir: filepath.Join(f.work, "gone"), wantWorkdir: project, wantChdir: f.work, wantWritable: true, wantWarn: true},
		// A session's cwd replaced by a file on the host (rm -r d; touch d).
		{name: "dir is a file", workdir: project, dir: filepath.Join(f.work, "was-a-dir"), wantWorkdir: project, wantChdir: f.work, wantWritable: true, wantWarn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := f.build(t, func(r *sandbox.Request) { r.Workdir = tc.workdir; r.Dir = tc.dir })
			if plan.Workdir != tc.wantWorkdir || plan.Chdir != tc.wantChdir || plan.Writable != tc.wantWritable {
				t.Errorf("Workdir, Chdir, Writable = %q, %q, %v, want %q, %q, %v",
					plan.Workdir, plan.Chdir, plan.Writable, tc.wantWorkdir, tc.wantChdir, tc.wantWritable)
			}
			if got := len(plan.Warnings) > 0; got != tc.wantWarn {
				t.Errorf("Warnings = %q, want some %v", plan.Warnings, tc.wantWarn)
			}
		})
	}
}

// TestPlanShownPathsUsable: a path the sandbox shows through home_allow or a
// PATH entry below a hidden dot entry is bound (see TestPlanHomeEntries), so
// it must also be accepted as the working or start directory.
func TestPlanShownPathsUsable(t *testing.T) {
	f := newPlanFix(t)
	sub := filepath.Join(f.home, ".tool", "sub")
	for _, tc := range []struct {
		name string
		mod  func(*sandbox.Request)
	}{
		{name: "workdir in home_allow entry", mod: func(r *sandbox.Request) {
			r.HomeAllow = []string{".tool/sub"}
			r.Workdir = sub
		}},
		{name: "start dir in home_allow entry", mod: func(r *sandbox.Request) {
			r.HomeAllow = []string{".tool/sub"}
			r.Dir = sub
		}},
		{name: "start dir in PATH entry", mod: func(r *sandbox.Request) {
			r.Env = []string{"PATH=" + sub + ":/usr/bin"}
			r.Dir = sub
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := checkedPlan(t, f.req(tc.mod), f.host())
			if err != nil {
				t.Fatalf("BuildPlan error = %v, want nil", err)
			}
			if i := planFind(plan.Mounts, mRoBind, sub); i < 0 {
				t.Errorf("no ro-bind of %s%s", sub, planDump(plan.Mounts))
			}
			if plan.Chdir != sub {
				t.Errorf("Chdir = %q, want %q (warnings %q)", plan.Chdir, sub, plan.Warnings)
			}
		})
	}
}

// TestPlanWritableWorkdirNotSealed: when the plan says the working directory
// is writable, no remount-ro may follow its read-write bind at the same
// path (bwrap's --remount-ro acts on the topmost mount there, the bind).
func TestPlanWritableWorkdirNotSealed(t *testing.T) {
	f := newPlanFix(t)
	// A non-dot entry stays writable and is not sealed after its bind.
	wd := filepath.Join(f.home, "project")
	plan := f.build(t, func(r *sandbox.Request) { r.Workdir = wd })
	if !plan.Writable {
		t.Fatalf("Writable = false, want true")
	}
	ms := plan.Mounts
	b := -1
	for i, m := range ms {
		if m.Kind == mBind && m.Dest == wd {
			b = i
		}
	}
	if b < 0 {
		t.Fatalf("no read-write bind of %s%s", wd, planDump(ms))
	}
	for i := b + 1; i < len(ms); i++ {
		if ms[i].Dest == wd {
			t.Errorf("mount %d (%s) follows the read-write bind of the workdir at %d%s", i, planM(ms[i]), b, planDump(ms))
		}
	}
	// Dot entries of home are always read-only, even as working directory:
	// no read-write bind (which would also show their hidden children).
	for _, rel := range []string{".cargo", ".config", ".local", ".local/share", ".config/nvim"} {
		t.Run(rel, func(t *testing.T) {
			wd := filepath.Join(f.home, rel)
			plan := f.build(t, func(r *sandbox.Request) { r.Workdir = wd })
			if plan.Writable || len(plan.Warnings) == 0 {
				t.Errorf("Writable = %v, warnings %q; want read-only with a warning", plan.Writable, plan.Warnings)
			}
			for _, m := range plan.Mounts {
				if m.Kind == mBind && m.Dest == wd {
					t.Errorf("read-write bind of %s%s", wd, planDump(plan.Mounts))
				}
			}
		})
	}
}

// TestPlanAllowlist: under allowlist the command's environment points at
// the forwarder, the sandbox has no network namespace of its own (bwrap is
// started inside the session's egress namespace) and nothing of the proxy
// is mounted; the strict filter applies. Other profiles drop the proxy
// variables a session saved under allowlist.
func TestPlanAllowlist(t *testing.T) {
	f := newPlanFix(t)
	saved := append([]string{"PATH=/usr/bin", "http_proxy=http://proxy.corp:8080"}, egress.Env()...)
	req := f.req(func(r *sandbox.Request) {
		r.Profile = sandbox.ProfileAllowlist
		r.Env = saved
		r.Limits = sandbox.Limits{MemoryMB: 256, CPUSeconds: 30, MaxProcs: 64}
	})
	plan, err := checkedPlan(t, req, f.host())
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Egress || plan.ShareNet || !plan.Writable || !plan.DenyUnixSockets {
		t.Errorf("Egress, ShareNet, Writable, DenyUnixSockets = %v %v %v %v, want true false true true", plan.Egress, plan.ShareNet, plan.Writable, plan.DenyUnixSockets)
	}
	for _, m := range plan.Mounts {
		if strings.Contains(m.Src, "net") && strings.HasSuffix(m.Src, ".sock") || strings.Contains(m.Dest, "corral-net") {
			t.Errorf("the proxy's sockets are mounted: %+v", m)
		}
	}
	for _, want := range egress.Env() {
		if !slices.Contains(plan.Env, want) {
			t.Errorf("Env lacks %q: %q", want, plan.Env)
		}
	}
	argv := Argv(plan, Features{JSONStatus: true}, -1, []string{"true"})
	if slices.Contains(argv, "--unshare-net") || slices.Contains(argv, "--share-net") {
		t.Errorf("allowlist argv: want neither --unshare-net nor --share-net (the caller picks the namespace): %q", argv)
	}

	t.Run("other profiles", func(t *testing.T) {
		for _, p := range []sandbox.Profile{sandbox.ProfileWorkspace, sandbox.ProfileNetwork, sandbox.ProfileRestricted} {
			plan := f.build(t, func(r *sandbox.Request) { r.Profile = p; r.Env = saved; r.Limits = req.Limits })
			if plan.Egress {
				t.Errorf("%s: the plan has the proxy", p)
			}
			if argv := Argv(plan, Features{}, -1, []string{"true"}); slices.Contains(argv, "--unshare-net") == p.HostNetwork() {
				t.Errorf("%s: argv %q: --unshare-net wrong for the profile", p, argv)
			}
			if want := []string{"PATH=/usr/bin", "http_proxy=http://proxy.corp:8080"}; !slices.Equal(plan.Env[:2], want) || slices.ContainsFunc(plan.Env, func(kv string) bool {
				return strings.HasPrefix(kv, "HTTPS_PROXY=") || strings.HasPrefix(kv, "CORRAL_")
			}) {
				t.Errorf("%s: Env = %q, want the saved proxy variables gone and the person's own kept", p, plan.Env)
			}
			if plan.DenyUnixSockets != p.DeniesUnixSockets() {
				t.Errorf("%s: DenyUnixSockets = %v", p, plan.DenyUnixSockets)
			}
		}
	})
}

// TestPlanNodeShim: an allowlist sandbox gets the Node preload's host
// directory bound read-only at egress.NodeShimDir, after the sandbox's own
// /dev, and NODE_OPTIONS naming it; without the directory NODE_OPTIONS is
// left out (it would stop every node) with a warning; other profiles get
// neither.
func TestPlanNodeShim(t *testing.T) {
	f := newPlanFix(t)
	shim := filepath.Join(f.state, "trust", "node")
	host := f.host()
	host.NodeShim = shim
	allow := func(r *sandbox.Request) { r.Profile = sandbox.ProfileAllowlist }
	plan, err := checkedPlan(t, f.req(allow), host)
	if err != nil {
		t.Fatal(err)
	}
	dev, bind := -1, -1
	for i, m := range plan.Mounts {
		switch {
		case m.Kind == mDev && m.Dest == "/dev":
			dev = i
		case m.Dest == egress.NodeShimDir:
			if m.Kind != mRoBind || m.Src != shim || bind >= 0 {
				t.Errorf("mount at %s: %+v, want one read-only bind of %s", egress.NodeShimDir, m, shim)
			}
			bind = i
		}
	}
	if dev < 0 || bind < dev {
		t.Errorf("/dev at step %d, the preload's bind at %d: want the bind after /dev", dev, bind)
	}
	if want := "NODE_OPTIONS=--require=" + egress.NodeShimPath; !slices.Contains(plan.Env, want) {
		t.Errorf("Env lacks %q: %q", want, plan.Env)
	}

	plan, err = checkedPlan(t, f.req(allow), f.host())
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(plan.Env, func(kv string) bool { return strings.HasPrefix(kv, "NODE_OPTIONS=") }) {
		t.Errorf("without the preload's directory Env has NODE_OPTIONS: %q", plan.Env)
	}
	if !slices.ContainsFunc(plan.Warnings, func(w string) bool { return strings.Contains(w, "Node preload") }) {
		t.Errorf("without the preload's directory no warning: %q", plan.Warnings)
	}
	if !slices.Contains(plan.Env, "NODE_USE_ENV_PROXY=1") {
		t.Errorf("without the preload's directory the other proxy variables went too: %q", plan.Env)
	}

	plan, err = checkedPlan(t, f.req(nil), host)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range plan.Mounts {
		if m.Dest == egress.NodeShimDir {
			t.Errorf("workspace profile: the preload is mounted: %+v", m)
		}
	}
}

// TestPlanBindElsewhereOfMaskedFiles: a bind to another path of a directory
// that holds an engine socket (MaskFiles) or a system secret is ignored with
// a warning, since the masks cover those files only at their own paths; at
// its own path the bind is kept and the socket masked inside it.
func TestPlanBindElsewhereOfMaskedFiles(t *testing.T) {
	f := newPlanFix(t)
	run := filepath.Join(f.base, "run")
	sock := filepath.Join(run, "docker.sock")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	host := f.host()
	host.MaskFiles = append(host.MaskFiles, sock)
	for _, tc := range []struct {
		name string
		bind sandbox.Bind
	}{
		{"engine socket's directory", sandbox.Bind{Src: run, Dest: "/tmp/r", ReadOnly: true}},
		{"/etc (shadow)", sandbox.Bind{Src: "/etc", Dest: "/tmp/etc", ReadOnly: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := checkedPlan(t, f.req(func(r *sandbox.Request) { r.Workdir = f.work; r.Binds = []sandbox.Bind{tc.bind} }), host)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range plan.Mounts {
				if within(m.Dest, tc.bind.Dest) {
					t.Errorf("mount %s for a bind that must be ignored%s", planM(m), planDump(plan.Mounts))
				}
			}
			if len(plan.Warnings) == 0 {
				t.Error("no warning")
			}
		})
	}
	t.Run("at its own path", func(t *testing.T) {
		plan, err := checkedPlan(t, f.req(func(r *sandbox.Request) {
			r.Workdir = f.work
			r.Binds = []sandbox.Bind{{Src: run, ReadOnly: true}}
		}), host)
		if err != nil {
			t.Fatal(err)
		}
		b, m := planFind(plan.Mounts, mRoBind, run), planFind(plan.Mounts, mRoBind, sock)
		if b < 0 || m < b || plan.Mounts[m].Src != f.empty {
			t.Errorf("want the bind, then the socket masked by the empty file%s", planDump(plan.Mounts))
		}
	})
}

// TestPlanBindCovers: a bind at its own path of a directory holding
// another person's home is kept, and what the home rules hide in it is
// covered after it (hostview.DecideBind): dot entries that are not allowed
// and credential stores by an empty tmpfs, files by the empty file;
// allowed entries are not covered. Elsewhere the bind is ignored.
func TestPlanBindCovers(t *testing.T) {
	f := newPlanFix(t)
	homes := filepath.Join(f.base, "homes")
	bob := filepath.Join(homes, "bob")
	for _, rel := range []string{".ssh/id_rsa", ".secret", ".bashrc", ".config/gh/hosts.yml", ".config/nvim/init.vim", "project/x"} {
		p := filepath.Join(bob, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := peopleHomes
	peopleHomes = func(exclude string) []string { return append(old(exclude), bob) }
	t.Cleanup(func() { peopleHomes = old })

	plan := f.build(t, func(r *sandbox.Request) { r.Workdir = f.work; r.Binds = []sandbox.Bind{{Src: homes, ReadOnly: true}} })
	ms := plan.Mounts
	b := planFind(ms, mRoBind, homes)
	if b < 0 {
		t.Fatalf("no bind of %s%s", homes, planDump(ms))
	}
	for _, c := range []mount{
		{Kind: mTmpfs, Dest: filepath.Join(bob, ".ssh"), Perms: 0o700, Size: maskSize},
		{Kind: mTmpfs, Dest: filepath.Join(bob, ".config", "gh"), Perms: 0o700, Size: maskSize},
		{Kind: mRoBind, Src: f.empty, Dest: filepath.Join(bob, ".secret")},
	} {
		if i := slices.Index(ms, c); i < b {
			t.Errorf("%s missing or before the bind%s", planM(c), planDump(ms))
		}
	}
	for _, shown := range []string{".bashrc", ".config/nvim", "project"} {
		if at := planAt(ms, filepath.Join(bob, shown)); len(at) > 0 {
			t.Errorf("%s is covered%s", shown, planDump(ms))
		}
	}
	checkPlanOrder(t, ms)

	plan = f.build(t, func(r *sandbox.Request) {
		r.Workdir = f.work
		r.Binds = []sandbox.Bind{{Src: homes, Dest: "/tmp/homes", ReadOnly: true}}
	})
	if len(planAt(plan.Mounts, "/tmp/homes")) > 0 || len(plan.Warnings) == 0 {
		t.Errorf("a bind elsewhere of a directory holding a home: warnings %q%s", plan.Warnings, planDump(plan.Mounts))
	}
}

// TestPlanCABundlesShared: several variables naming one bundle (as a
// machine's CURL_CA_BUNDLE, GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS often do,
// directly or through a symlink) reveal it as each would alone, and
// SSL_CERT_DIR naming the same file is still refused as not a directory.
func TestPlanCABundlesShared(t *testing.T) {
	f := newPlanFix(t)
	bundle := filepath.Join(f.home, ".certs", "corp.pem")
	if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle, []byte("pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(f.base, "bundle-link")
	if err := os.Symlink(bundle, link); err != nil {
		t.Fatal(err)
	}
	reveal := "ro-bind " + bundle + " " + bundle
	has := func(p *Plan, want string) int {
		n := 0
		for _, m := range p.Mounts {
			if planM(m) == want {
				n++
			}
		}
		return n
	}
	for _, v := range []string{"SSL_CERT_FILE=" + bundle, "CURL_CA_BUNDLE=" + link} {
		alone := f.build(t, func(r *sandbox.Request) { r.Env = append(r.Env, v) })
		if has(alone, reveal) == 0 {
			t.Fatalf("%s alone: no %q in %v", v, reveal, alone.Mounts)
		}
	}
	all := f.build(t, func(r *sandbox.Request) {
		r.Env = append(r.Env, "SSL_CERT_FILE="+bundle, "CURL_CA_BUNDLE="+link, "GIT_SSL_CAINFO="+bundle, "SSL_CERT_DIR="+bundle)
	})
	if has(all, reveal) == 0 {
		t.Errorf("shared: no %q in %v", reveal, all.Mounts)
	}
	warned := false
	for _, w := range all.Warnings {
		warned = warned || strings.Contains(w, "SSL_CERT_DIR="+bundle+" ignored: not a directory")
	}
	if !warned {
		t.Errorf("SSL_CERT_DIR naming a file not refused: %q", all.Warnings)
	}
}
