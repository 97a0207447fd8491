package hostview

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// scanFullTableEnv makes the test binary, started again by
// TestFindProtectedFullTable, scan its root with a full descriptor table.
const scanFullTableEnv = "CORRAL_SANDBOX_SCAN_FULL_TABLE"

// TestFindProtectedFullTable: a scan that cannot open the directories it
// must read (too many open files) is not a scan of an empty tree. It used
// to report nothing found and nothing cut, so a command ran with the
// repository's hooks writable; FindProtected now reports it truncated
// (the command is refused) and FindProtectedErr names the passing cause.
func TestFindProtectedFullTable(t *testing.T) {
	if root := os.Getenv(scanFullTableEnv); root != "" {
		// The child: a table full below a low limit, then the scan.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 64, Max: 64}); err != nil {
			fmt.Println("setrlimit:", err)
			os.Exit(0)
		}
		var held []*os.File
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				break
			}
			held = append(held, f)
		}
		found, cut := FindProtected(root, sandbox.DefaultProtected)
		_, _, err := FindProtectedErr(root, sandbox.DefaultProtected)
		fmt.Printf("found=%d cut=%v transient=%v err=%v\n", len(found), cut, sandbox.IsTransient(err), err)
		for _, f := range held {
			f.Close()
		}
		os.Exit(0)
	}
	root := t.TempDir()
	for _, d := range []string{".git/hooks", ".git/objects", ".git/refs"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if found, cut := FindProtected(root, sandbox.DefaultProtected); cut || len(found) == 0 {
		t.Fatalf("with descriptors to spare: %d found, cut %v", len(found), cut)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestFindProtectedFullTable$")
	cmd.Env = append(os.Environ(), scanFullTableEnv+"="+root)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	if !strings.HasPrefix(got, "found=0 cut=true transient=true err=open "+root+": too many open files") {
		t.Errorf("the scan with a full descriptor table: %s", got)
	}
}
