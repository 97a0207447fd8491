package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// hostOnly are the functions only corral.Host may call (issue 28, "one
// backend boundary"): a backend or engine built in a verb would have other
// options than the ones commands run with, and settings read there would
// be read apart from the Host's. Keyed by import path, then function.
var hostOnly = map[string][]string{
	"github.com/corralhq/corral/backend/bwrap":      {"New"},
	"github.com/corralhq/corral/backend/docker":     {"NewEngine"},
	"github.com/corralhq/corral/backend/kubernetes": {"NewEngine"},
	"github.com/corralhq/corral/backend/local":      {"New"},
	"github.com/corralhq/corral/config":             {"Load"},
}

// hostOnlyCalls returns "pkg.Func" for each call or reference in src (one
// Go file) to a function of hostOnly, whatever name the file imports its
// package under, in order of appearance.
func hostOnlyCalls(fset *token.FileSet, name, src string) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	local := map[string]string{} // the file's name of a package -> its path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if _, ok := hostOnly[p]; !ok {
			continue
		}
		n := path.Base(p)
		if im.Name != nil {
			n = im.Name.Name
		}
		local[n] = p
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		if p, ok := local[id.Name]; ok && slices.Contains(hostOnly[p], sel.Sel.Name) {
			out = append(out, path.Base(p)+"."+sel.Sel.Name)
		}
		return true
	})
	return out, nil
}

func TestHostOnlyCalls(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"none", `package p
import "github.com/corralhq/corral/config"
func f() { _ = config.Defaults() }`, nil},
		{"each", `package p
import (
	"github.com/corralhq/corral/backend/bwrap"
	"github.com/corralhq/corral/backend/docker"
	"github.com/corralhq/corral/backend/kubernetes"
	"github.com/corralhq/corral/backend/local"
	"github.com/corralhq/corral/config"
)
func f() {
	bwrap.New(bwrap.Options{})
	docker.NewEngine(docker.Options{})
	kubernetes.NewEngine(kubernetes.Options{})
	local.New(nil)
	config.Load("", nil)
}`, []string{"bwrap.New", "docker.NewEngine", "kubernetes.NewEngine", "local.New", "config.Load"}},
		{"renamed import", `package p
import cfg "github.com/corralhq/corral/config"
func f() { cfg.Load("", nil) }`, []string{"config.Load"}},
		{"a reference, not a call", `package p
import "github.com/corralhq/corral/config"
var load = config.Load`, []string{"config.Load"}},
		{"another package's New", `package p
import "errors"
func f() { errors.New("x") }`, nil},
		{"a method of the same name", `package p
import "github.com/corralhq/corral/backend/bwrap"
type h struct{}
func (h) New() {}
var bwrapx h
func f(b *bwrap.Backend) { bwrapx.New() }`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hostOnlyCalls(token.NewFileSet(), "x.go", tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("hostOnlyCalls = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestVerbsUseTheHost: no file of the CLI builds a backend or an engine,
// or reads the settings, itself: corral.Host does, with the options every
// command runs with (doctor, cleanup, cp, serve included).
func TestVerbsUseTheHost(t *testing.T) {
	// This package's source, found by this file's path: CI's unprivileged
	// pass runs the test binary elsewhere, where the source may not be
	// readable (that pass skips; the root pass checks).
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Dir(self)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Skipf("the package's source is not readable here: %v", err)
	}
	fset := token.NewFileSet()
	files := 0
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Skipf("the package's source is not readable here: %v", err)
		}
		files++
		calls, err := hostOnlyCalls(fset, n, string(src))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range calls {
			t.Errorf("%s calls %s: build backends and read settings through corral.Host (corral.go)", n, c)
		}
	}
	if files < 10 {
		t.Errorf("found only %d source files in %s", files, dir)
	}
}
