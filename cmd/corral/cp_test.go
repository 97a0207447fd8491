package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/testkit"
)

// TestCpSyncBwrap: corral cp puts a tree (modes, symlinks, a binary, a
// 50 MiB file) into a bwrap session's workspace, where its commands see
// it, and brings it back identical; sync pushes with --delete and pulls;
// paths outside the workspace, protected paths and a missing session are
// refused by name.
func TestCpSyncBwrap(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	if code, _, se := c.run(nil, "run", "--session", "w", "--", "echo old > stale"); code != 0 {
		t.Fatalf("first command: %d %s", code, se)
	}
	host := filepath.Join(filepath.Dir(c.home), "host")
	testkit.MakeTree(t, host, 50<<20)
	if code, _, se := c.run(nil, "cp", filepath.Join(host, "src"), "w:in"); code != 0 || !strings.Contains(se, "5 files") {
		t.Fatalf("cp in: %d %s", code, se)
	}
	code, so, se := c.run(nil, "run", "--session", "w", "--", `stat -c '%A %n' in/run.sh in/secret; readlink in/sub/link-out; wc -c < in/big`)
	if code != 0 || so != "-rwxr-xr-x in/run.sh\n-rw------- in/secret\n/etc/passwd\n52428800\n" {
		t.Errorf("in the sandbox: %d %q %s", code, so, se)
	}
	back := filepath.Join(filepath.Dir(c.home), "back")
	if code, _, se := c.run(nil, "cp", "--session", "w", ":in", back); code != 0 {
		t.Fatalf("cp out: %d %s", code, se)
	}
	if a, b := testkit.TreeHash(t, filepath.Join(host, "src")), testkit.TreeHash(t, back); a != b {
		t.Errorf("round trip differs")
	}
	if code, _, se := c.run(nil, "sync", "--session", "w", "--delete", filepath.Join(host, "src/sub")); code != 0 || !strings.Contains(se, "deleted") {
		t.Fatalf("sync --delete: %d %s", code, se)
	}
	if _, err := os.Stat(filepath.Join(c.work, "stale")); err == nil {
		t.Error("sync --delete kept stale")
	}
	pulled := filepath.Join(filepath.Dir(c.home), "pulled")
	if code, _, se := c.run(nil, "sync", "--session", "w", "--pull", pulled); code != 0 {
		t.Fatalf("sync --pull: %d %s", code, se)
	}
	if a, b := testkit.TreeHash(t, filepath.Join(host, "src/sub")), testkit.TreeHash(t, pulled); a != b {
		t.Errorf("sync round trip differs")
	}
	os.MkdirAll(filepath.Join(host, "hooks"), 0o755)
	os.WriteFile(filepath.Join(host, "hooks/pre-commit"), []byte("#!/bin/sh\n"), 0o755)
	os.MkdirAll(filepath.Join(c.work, ".git/hooks"), 0o755)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cp", filepath.Join(host, "src/run.sh"), "w:/etc/x"}, "outside session w's workspace"},
		{[]string{"cp", filepath.Join(host, "hooks"), "w:.git"}, "protected path"},
		{[]string{"cp", filepath.Join(host, "src/run.sh"), "nope:x"}, `no session "nope"`},
		{[]string{"cp", "a", "b"}, "one of SRC and DST must be"},
		{[]string{"sync", "x"}, "--session is required"},
	} {
		code, _, se := c.run(nil, tc.args...)
		if code == 0 || !strings.Contains(se, tc.want) {
			t.Errorf("%q: %d %s, want %q", tc.args, code, se, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(c.work, ".git/hooks/pre-commit")); err == nil {
		t.Error("a protected hook was written")
	}
}
