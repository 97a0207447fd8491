package corral_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/backend/registry"
)

// modulePath is corral's module path.
const modulePath = "github.com/corralhq/corral"

// theList is the one file outside the backends' folders that imports
// them: the list of corral's backends.
const theList = "backends.go"

// backendImport returns the backend whose folder holds the package imp
// (backend/NAME or below it), or "" for any other package.
func backendImport(imp string, backends []string) string {
	rest, ok := strings.CutPrefix(imp, modulePath+"/backend/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	if slices.Contains(backends, name) {
		return name
	}
	return ""
}

// boundaryViolations returns "file imports pkg" for each import of a
// backend's package (backends: their names) by a file (path relative to
// the module's root, slash-separated) outside that backend's folder,
// other than theList (pure).
func boundaryViolations(file string, imports, backends []string) []string {
	var out []string
	for _, imp := range imports {
		name := backendImport(imp, backends)
		if name == "" || file == theList {
			continue
		}
		if strings.HasPrefix(file, "backend/"+name+"/") {
			continue
		}
		out = append(out, file+" imports "+imp)
	}
	return out
}

func TestBoundaryViolations(t *testing.T) {
	bs := []string{"bwrap", "docker", "kubernetes", "local"}
	for _, tc := range []struct {
		file    string
		imports []string
		want    []string
	}{
		{"corral.go", []string{modulePath + "/backend/registry", modulePath + "/sandbox"}, nil},
		{"corral.go", []string{modulePath + "/backend/docker"}, []string{"corral.go imports " + modulePath + "/backend/docker"}},
		{"backends.go", []string{modulePath + "/backend/docker", modulePath + "/backend/bwrap"}, nil},
		{"cmd/corral/doctor.go", []string{modulePath + "/backend/bwrap"}, []string{"cmd/corral/doctor.go imports " + modulePath + "/backend/bwrap"}},
		{"wscopy/wscopy.go", []string{modulePath + "/backend/kubernetes/kubeval"}, []string{"wscopy/wscopy.go imports " + modulePath + "/backend/kubernetes/kubeval"}},
		{"backend/docker/driver.go", []string{modulePath + "/backend/docker/sub", modulePath + "/backend/registry"}, nil},
		{"backend/docker/driver.go", []string{modulePath + "/backend/kubernetes"}, []string{"backend/docker/driver.go imports " + modulePath + "/backend/kubernetes"}},
		{"backend/bwrapx/x.go", []string{modulePath + "/backend/bwrap"}, []string{"backend/bwrapx/x.go imports " + modulePath + "/backend/bwrap"}},
		{"x/y.go", []string{modulePath + "/backend/bwrapx", modulePath + "/backend/internal/scopes"}, nil},
		{"config/registry.go", []string{modulePath + "/backend/kubernetes/kubeval"}, []string{"config/registry.go imports " + modulePath + "/backend/kubernetes/kubeval"}},
	} {
		if got := boundaryViolations(tc.file, tc.imports, bs); !slices.Equal(got, tc.want) {
			t.Errorf("boundaryViolations(%s, %q) = %q, want %q", tc.file, tc.imports, got, tc.want)
		}
	}
}

// TestBackendBoundary (issue 28, "a new backend touches one folder"): no
// file of the module outside a backend's folder (backend/NAME) imports
// that backend's packages, except the one list of backends (backends.go,
// which registers them with backend/registry). Tests, bench's programs
// and testdata are left out: they may build a backend directly. corral,
// doctor, cleanup and cp reach backends through the registry alone.
func TestBackendBoundary(t *testing.T) {
	backends := registry.Names()
	if len(backends) < 4 {
		t.Fatalf("registered backends %q: the list (%s) lost some", backends, theList)
	}
	// The module's root: this file's directory (CI's unprivileged pass
	// runs the test binary where the source may not be readable: it
	// skips there, the root pass checks).
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Dir(self)
	if _, err := os.ReadFile(filepath.Join(root, theList)); err != nil {
		t.Skipf("the module's source is not readable here: %v", err)
	}
	fset := token.NewFileSet()
	files, listed := 0, false
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if n := d.Name(); rel != "." && (strings.HasPrefix(n, ".") || n == "testdata" || rel == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		var imports []string
		for _, im := range f.Imports {
			s, _ := strconv.Unquote(im.Path.Value)
			imports = append(imports, s)
			if rel == theList && backendImport(s, backends) != "" {
				listed = true
			}
		}
		for _, v := range boundaryViolations(rel, imports, backends) {
			t.Errorf("%s: reach a backend through backend/registry (corral.Host.Engine, registry.Lookup); only %s lists the backends", v, theList)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 || !listed {
		t.Errorf("walked %d files under %s; %s imports a backend: %v", files, root, theList, listed)
	}
}
