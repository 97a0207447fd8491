package layer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsureRecordsBaseOnce(t *testing.T) {
	lower := t.TempDir()
	os.WriteFile(filepath.Join(lower, "a.txt"), []byte("alpha"), 0o644)
	os.Mkdir(filepath.Join(lower, "d"), 0o755)
	os.Symlink("a.txt", filepath.Join(lower, "d", "l"))
	l := New(filepath.Join(t.TempDir(), "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	base, err := Scan(lower)
	if err != nil || len(base) != 3 || base[0].Path != "a.txt" || base[0].Size != 5 || base[2].Type != "symlink" || base[2].Target != "a.txt" {
		t.Fatalf("scan: %v %+v", err, base)
	}
	before, _ := os.ReadFile(l.BasePath())
	os.WriteFile(filepath.Join(lower, "b.txt"), []byte("beta"), 0o644)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(l.BasePath()); string(after) != string(before) {
		t.Error("a second Ensure rewrote the base")
	}
	if err := New(l.Dir, t.TempDir()).Ensure(); !errors.Is(err, ErrOtherLower) {
		t.Errorf("another lower: %v", err)
	}
	if g, err := l.Generation(); g != 0 || err != nil {
		t.Errorf("generation %d %v", g, err)
	}
	l.Bump()
	if g, err := l.Generation(); g != 1 || err != nil {
		t.Errorf("generation %d %v", g, err)
	}
}

func TestEscapeOption(t *testing.T) {
	for in, want := range map[string]string{
		"/var/tmp/s/layer/upper":  "/var/tmp/s/layer/upper",
		"/a b/c,d/e\\f\tg\nh=i#j": `/a\040b/c\054d/e\134f\011g\012h=i#j`,
	} {
		if got := escapeOption(in); got != want {
			t.Errorf("escapeOption(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMountsLayer(t *testing.T) {
	info := "36 35 98:0 / /mnt rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"40 36 0:50 / /work/p rw,relatime - overlay overlay rw,lowerdir=/work/p,upperdir=/s/a\\054b/upper,workdir=/s/a\\054b/work,userxattr\n"
	if !mountsLayer([]byte(info), "upperdir="+escapeOption("/s/a,b/upper"), "/work/p") {
		t.Error("the overlay of /s/a,b/upper not found")
	}
	if mountsLayer([]byte(info), "upperdir="+escapeOption("/s/a"), "/work/p") {
		t.Error("a prefix of another layer's upper matched")
	}
	if mountsLayer([]byte("36 35 98:0 / /mnt rw - ext4 upperdir=/s/a/upper rw\n"), "upperdir=/s/a/upper", "/mnt") {
		t.Error("a non-overlay mount matched")
	}
	// The same mount where propagation carried it into a host namespace
	// (the engine's volume directory) is not a session's view.
	engine := "50 36 0:50 / /var/lib/docker/volumes/x/_data rw - overlay overlay rw,lowerdir=/work/p,upperdir=/s/a\\054b/upper,userxattr\n"
	if mountsLayer([]byte(engine), "upperdir="+escapeOption("/s/a,b/upper"), "/work/p") {
		t.Error("the engine's volume mount counted as a session's view")
	}
	if got := escapeMountPoint("/a b\\c"); got != `/a\040b\134c` {
		t.Errorf("escapeMountPoint = %q", got)
	}
}

// TestEnsureRefusesLayerInsideLower: a layer inside its own working
// directory (state directory under a $HOME working directory) is refused
// with the fix, before anything is made.
func TestEnsureRefusesLayerInsideLower(t *testing.T) {
	lower := t.TempDir()
	link := filepath.Join(t.TempDir(), "ln")
	if err := os.Symlink(lower, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{
		filepath.Join(lower, ".local", "state", "corral", "sessions", "s", "layer"),
		filepath.Join(link, "state", "layer"), // through a symlink
		lower,
	} {
		err := New(dir, lower).Ensure()
		if !errors.Is(err, ErrInsideLower) || !strings.Contains(err.Error(), "XDG_STATE_HOME") {
			t.Errorf("Ensure of %s: %v", dir, err)
		}
		if _, serr := os.Stat(filepath.Join(dir, "upper")); serr == nil {
			t.Errorf("%s: upper made", dir)
		}
	}
	if err := New(filepath.Join(t.TempDir(), "layer"), lower).Ensure(); err != nil {
		t.Errorf("a layer beside the working directory: %v", err)
	}
}
