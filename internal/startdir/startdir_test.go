package startdir

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLeave: after Leave the process is in the safe directory, and Get and
// Abs still answer for the directory it was started in. (Leave changes the
// process's directory, so this package's tests are this one alone.)
func TestLeave(t *testing.T) {
	start := t.TempDir()
	t.Chdir(start)
	if got, err := Abs("a/b"); err != nil || got != filepath.Join(start, "a/b") {
		t.Fatalf("Abs before Leave = %q, %v", got, err)
	}
	safe := t.TempDir()
	if err := Leave(safe); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if wd != safe {
		t.Errorf("the process is in %s, want %s", wd, safe)
	}
	if got, err := Get(); err != nil || got != start {
		t.Errorf("Get = %q, %v; want %s", got, err, start)
	}
	if got, _ := Abs("x/../y"); got != filepath.Join(start, "y") {
		t.Errorf("Abs = %q", got)
	}
	if got, _ := Abs("/abs//p"); got != "/abs/p" {
		t.Errorf("Abs of an absolute path = %q", got)
	}
	// Again: the first record stays.
	if err := Leave("/"); err != nil {
		t.Fatal(err)
	}
	if got, _ := Get(); got != start {
		t.Errorf("Get after a second Leave = %q, want %s", got, start)
	}
	if err := Leave("relative"); err == nil {
		t.Error("Leave of a relative path succeeded")
	}
	_ = os.Chdir(start) // t.Chdir restores the rest
}
