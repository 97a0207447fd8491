package backendtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestImportedOnlyByTests: no file of the module but a _test.go one
// imports this package, so corral's executable links no test support.
func TestImportedOnlyByTests(t *testing.T) {
	// The module's root, found by this file's path (CI's unprivileged
	// pass runs elsewhere, where the source may not be readable: that
	// pass skips, the root pass checks).
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Skipf("the module's source is not readable here: %v", err)
	}
	const me = "github.com/corralhq/corral/backend/backendtest"
	files := 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == me {
				t.Errorf("%s imports %s, which only tests may", p, me)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("looked at only %d files", files)
	}
}
