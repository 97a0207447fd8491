package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/atomicfile"
	"github.com/corralhq/corral/sandbox"
)

// TestCwdBecameFile: a session whose cwd was replaced by a file on the
// host goes on in the nearest existing parent, with a note, and is not
// wedged (every later command failed before).
func TestCwdBecameFile(t *testing.T) {
	f := newFixture(t)
	s := f.open("cwd-file")
	f.exec(s, "mkdir d && cd d")
	d := filepath.Join(f.work, "d")
	if err := os.Remove(d); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d, []byte("now a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := f.exec(s, "pwd")
	if strings.TrimSpace(r.Output.Text) != f.work || !strings.Contains(strings.Join(r.Notes, "\n"), "no longer a directory") {
		t.Errorf("after the cwd became a file: %q notes %q", r.Output.Text, r.Notes)
	}
	if r := f.exec(s, "pwd"); strings.TrimSpace(r.Output.Text) != f.work {
		t.Errorf("the next command: %q", r.Output.Text)
	}
}

// TestStateSpecialOrDamaged: a state file that is a fifo, a directory,
// oversized or not JSON is moved aside with a note and the session starts
// afresh; reading never blocks (a fifo held open(2) before).
func TestStateSpecialOrDamaged(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name string
		make func(path string) error
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"directory", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"garbage", func(p string) error { return os.WriteFile(p, []byte("{\"cwd\": \x00\xff"), 0o600) }},
		{"oversized", func(p string) error { return os.WriteFile(p, make([]byte, maxStateFile+1), 0o600) }},
		{"symlink", func(p string) error { return os.Symlink("/dev/zero", p) }},
		// What a crash of the machine may leave of a state written
		// without an fsync (writeState): nothing, or zeros.
		{"empty", func(p string) error { return os.WriteFile(p, nil, 0o600) }},
		{"zeros", func(p string) error { return os.WriteFile(p, make([]byte, 4096), 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := f.open("damaged-" + tc.name)
			f.exec(s, "mkdir -p sub && cd sub")
			path := filepath.Join(s.Dir(), "state.json")
			os.Remove(path)
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			r := f.exec(s, "pwd")
			if strings.TrimSpace(r.Output.Text) != f.work || !strings.Contains(strings.Join(r.Notes, "\n"), "moved to") {
				t.Errorf("a %s state: %q notes %q", tc.name, r.Output.Text, r.Notes)
			}
			if _, err := os.Lstat(path + ".damaged"); err != nil {
				t.Errorf("the damaged state was not kept aside: %v", err)
			}
			if r := f.exec(s, "cd sub && pwd"); strings.TrimSpace(r.Output.Text) != filepath.Join(f.work, "sub") {
				t.Errorf("the session does not go on: %q", r.Output.Text)
			}
		})
	}
}

// TestStateUnreadableIsNotDamaged: a state file corral may not read
// (EACCES; EMFILE takes the same path) fails the command as not run and
// leaves the file as it is: the session's cwd and variables survive.
// Root reads any file, so this runs as the unprivileged user (CI's second
// pass).
func TestStateUnreadableIsNotDamaged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads a mode-000 file; the unprivileged pass runs this")
	}
	f := newFixture(t)
	s := f.open("unreadable")
	f.exec(s, "mkdir -p sub && cd sub && export KEEP=yes")
	path := filepath.Join(s.Dir(), "state.json")
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	_, err := s.Exec(t.Context(), ExecRequest{Command: "touch ran-anyway"})
	if !errors.Is(err, ErrStateUnreadable) {
		t.Fatalf("Exec with an unreadable state: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.work, "sub", "ran-anyway")); err == nil {
		t.Error("the command ran")
	}
	os.Chmod(path, 0o600)
	if r := f.exec(s, `pwd; echo "$KEEP"`); r.Output.Text != filepath.Join(f.work, "sub")+"\nyes\n" {
		t.Errorf("the state was not kept: %q", r.Output.Text)
	}
}

// TestStateHugeVariableOnLoad: a saved state whose variable execve(2)
// would refuse (written by hand, or by another version) does not wedge
// the session: it is dropped with a note when loaded.
func TestStateHugeVariableOnLoad(t *testing.T) {
	f := newFixture(t)
	s := f.open("huge-var")
	f.exec(s, "export SMALL=1")
	path := filepath.Join(s.Dir(), "state.json")
	var st State
	if err := readJSON(path, &st); err != nil {
		t.Fatal(err)
	}
	st.Env = append(st.Env, "HUGE="+strings.Repeat("x", 3<<20))
	if err := writeJSON(path, &st); err != nil {
		t.Fatal(err)
	}
	r := f.exec(s, `echo "$SMALL ${#HUGE}"`)
	if r.ExitCode != 0 || r.Output.Text != "1 0\n" || !strings.Contains(strings.Join(r.Notes, "\n"), "HUGE") {
		t.Errorf("with a 3 MB variable in the state: %d %q notes %q", r.ExitCode, r.Output.Text, r.Notes)
	}
}

// TestStateDiskFullAfterRun: when the state directory is full after the
// command ran, the result comes back with a note (the command ran; its
// cwd and variables were not kept), never as "could not run it".
// Mounting a small tmpfs takes root; the other pass skips it.
func TestStateDiskFullAfterRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs takes root; the root pass runs this")
	}
	f := newFixture(t)
	s := f.open("full")
	f.exec(s, "true")
	if err := syscall.Mount("tmpfs", s.Dir(), "tmpfs", 0, "size=256k,mode=0700"); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(s.Dir(), syscall.MNT_DETACH)
	for _, d := range []string{"scratch", "bg"} {
		os.MkdirAll(filepath.Join(s.Dir(), d), 0o700)
	}
	// Fill it: the next state write finds no space.
	fill, _ := os.Create(filepath.Join(s.Dir(), "fill"))
	buf := make([]byte, 4096)
	for {
		if _, err := fill.Write(buf); err != nil {
			break
		}
	}
	fill.Close()
	r, err := s.Exec(t.Context(), ExecRequest{Command: "cd /tmp; echo made > " + filepath.Join(f.work, "made.txt")})
	if err != nil {
		t.Fatalf("the command ran, but Exec says: %v", err)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "the command ran, but the session's cwd and variables could not be saved") {
		t.Errorf("no note that the state was not saved: %q", r.Notes)
	}
	if b, _ := os.ReadFile(filepath.Join(f.work, "made.txt")); string(b) != "made\n" {
		t.Errorf("the command's file: %q", b)
	}
}

// lostBackend runs a command in its backend, then reports the sandbox
// lost, as docker does when the container is killed under a command.
type lostBackend struct{ sandbox.Backend }

func (b lostBackend) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	if _, err := b.Backend.Run(ctx, req); err != nil {
		return nil, err
	}
	return nil, sandbox.MayHaveRun(fmt.Errorf("%w: the container was removed", sandbox.ErrUnavailable))
}

// TestOutputKeptWhenLost: a command that may have run and whose sandbox
// was lost keeps what it wrote with the error (it was dropped).
func TestOutputKeptWhenLost(t *testing.T) {
	f := newFixture(t)
	f.spec.Backend = lostBackend{f.be}
	f.m = f.manager()
	s := f.open("lost")
	_, err := s.Exec(context.Background(), ExecRequest{Command: "echo started-before-the-loss"})
	var oe *OutputError
	if !errors.Is(err, sandbox.ErrMayHaveRun) || !errors.As(err, &oe) || !strings.Contains(oe.Output, "started-before-the-loss") {
		t.Errorf("Exec: %v (output kept: %v)", err, oe)
	}
}

// TestDamagedTwice: a second damaged state does not overwrite the first
// one kept aside.
func TestDamagedTwice(t *testing.T) {
	f := newFixture(t)
	s := f.open("damaged-twice")
	path := filepath.Join(s.Dir(), "state.json")
	for i, garbage := range []string{"first garbage", "second garbage"} {
		f.exec(s, "true")
		if err := os.WriteFile(path, []byte(garbage), 0o600); err != nil {
			t.Fatal(err)
		}
		f.exec(s, "true")
		aside := path + ".damaged"
		if i > 0 {
			aside += ".1"
		}
		if b, err := os.ReadFile(aside); err != nil || string(b) != garbage {
			t.Errorf("%s: %q %v, want %q", aside, b, err, garbage)
		}
	}
}

// TestStateUnchangedNotRewritten: a command that changes neither cwd nor
// variables leaves state.json as it was (the same file: an atomic rewrite
// makes a new inode); one that changes them rewrites it, and the next
// command sees the change.
func TestStateUnchangedNotRewritten(t *testing.T) {
	f := newFixture(t)
	s := f.open("unchanged")
	f.exec(s, "export A=1")
	path := filepath.Join(s.Dir(), "state.json")
	ino := func() uint64 {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	before := ino()
	f.exec(s, "true")
	if after := ino(); after != before {
		t.Errorf("state.json was rewritten by a command that changed nothing (inode %d -> %d)", before, after)
	}
	f.exec(s, "export B=2; mkdir -p d && cd d")
	if after := ino(); after == before {
		t.Error("state.json was not rewritten after the variables and cwd changed")
	}
	if r := f.exec(s, `echo "$A$B ${PWD##*/}"`); r.Output.Text != "12 d\n" {
		t.Errorf("the next command saw %q", r.Output.Text)
	}
}

// TestStateChangedByAnotherWriter: the state a process keeps from its last
// read is not used once state.json changed under it, whether replaced
// (another corral's command) or rewritten in place (by hand).
func TestStateChangedByAnotherWriter(t *testing.T) {
	f := newFixture(t)
	s := f.open("other-writer")
	f.exec(s, "export A=1")
	path := filepath.Join(s.Dir(), "state.json")
	for _, tc := range []struct {
		name  string
		write func(b []byte) error
	}{
		{"replaced", func(b []byte) error { return atomicfile.Write(path, b, 0o600, false) }},
		{"rewritten in place", func(b []byte) error { return os.WriteFile(path, b, 0o600) }},
	} {
		var st State
		if err := readJSON(path, &st); err != nil {
			t.Fatal(err)
		}
		st.Env = append(st.Env, "FROM_OTHER="+tc.name)
		b, _ := encodeJSON(&st)
		if err := tc.write(b); err != nil {
			t.Fatal(err)
		}
		if r := f.exec(s, `echo "$FROM_OTHER"`); r.Output.Text != tc.name+"\n" {
			t.Errorf("%s: the command saw %q", tc.name, r.Output.Text)
		}
	}
}

// TestStateNonUTF8: a variable and a cwd holding bytes that are not UTF-8
// come back byte for byte in the next command (JSON alone would turn them
// into U+FFFD).
func TestStateNonUTF8(t *testing.T) {
	f := newFixture(t)
	s := f.open("bytes")
	f.exec(s, `export V=$'a\xff\xfeb' W=plain; mkdir -p $'d\xe9' && cd $'d\xe9'`)
	r := f.exec(s, `printf '%s|%s|%s' "$V" "$W" "${PWD##*/}" | od -An -tx1 | tr -d ' \n'`)
	if want := "61fffe627c706c61696e7c64e9"; r.Output.Text != want {
		t.Errorf("the next command saw %q, want %q", r.Output.Text, want)
	}
}

// TestStateOverPipeLimit: a command that leaves more exported variables
// than the state pipe takes (8 MiB) finishes, its output whole: the rest
// of the state is drained, so the wrapper does not block on a full pipe,
// and the result says why the state was not kept.
func TestStateOverPipeLimit(t *testing.T) {
	f := newFixture(t)
	s := f.open("over-limit")
	f.exec(s, "export SMALL=1")
	// Twelve 1 MB variables: each passes execve(2)'s limit for one string
	// (128 KiB is per argument; the state's lines are not arguments).
	r := f.exec(s, `v=$(head -c 1000000 /dev/zero | tr '\0' a); for i in 0 1 2 3 4 5 6 7 8 9 10 11; do export BIG$i="$v"; done; echo done`)
	if r.ExitCode != 0 || r.Output.Text != "done\n" {
		t.Fatalf("with 12 MB of exported variables: %d %q notes %q", r.ExitCode, r.Output.Text, r.Notes)
	}
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "more than 8 MiB") {
		t.Errorf("the note does not say the state was too large: %q", r.Notes)
	}
	if r := f.exec(s, `echo "$SMALL ${#BIG0}"`); r.Output.Text != "1 0\n" {
		t.Errorf("the state before the large one was not kept: %q", r.Output.Text)
	}
}
