// Package toolfixture writes the tiny projects and packages that corral's
// tests build and install with real toolchains inside a sandbox, with no
// network: an npm package, a Python wheel, Go modules (one with a
// dependency served by a file:// GOPROXY or found in a module cache) and a
// cargo crate with a vendored path dependency. It also finds the tools in
// the system's directories, never in a home directory (the unprivileged
// test user cannot reach root's ~/.cargo). For tests only.
package toolfixture

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// SystemPath is the PATH the tests give sandboxed toolchains: Go's
// official location and the system's directories.
const SystemPath = "/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin"

// packages names the Debian package that brings each tool.
var packages = map[string]string{
	"go": "golang (or Go in /usr/local/go)", "npm": "npm", "node": "nodejs",
	"python3": "python3 and python3-venv", "cargo": "cargo",
}

// Tool returns the absolute path of name in SystemPath's directories, or
// skips the test naming the package to install. CI installs them all.
func Tool(t testing.TB, name string) string {
	t.Helper()
	for _, d := range filepath.SplitList(SystemPath) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	pkg := packages[name]
	if pkg == "" {
		pkg = name
	}
	t.Skipf("%s is not installed in %s (apt-get install %s; .ci/run installs it)", name, SystemPath, pkg)
	return ""
}

// RequireVenv skips unless python3 can make a virtual environment with pip
// (Debian's python3-venv).
func RequireVenv(t testing.TB) {
	t.Helper()
	py := Tool(t, "python3")
	if err := exec.Command(py, "-c", "import venv, ensurepip").Run(); err != nil {
		t.Skip("python3 cannot make a venv with pip (apt-get install python3-venv; .ci/run installs it)")
	}
}

// Write creates the files of files (relative path to content) under dir,
// readable by everyone (a root caller's sandbox holds an unprivileged
// identity).
func Write(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// NpmPackage writes the package "tiny" 1.0.0 in dir (package.json,
// index.js exporting 42), for `npm pack DIR`.
func NpmPackage(t testing.TB, dir string) {
	Write(t, dir, map[string]string{
		"package.json": `{"name": "tiny", "version": "1.0.0", "main": "index.js", "license": "MIT"}` + "\n",
		"index.js":     "module.exports = 42;\n",
	})
}

// Wheel writes tinywheel-1.0-py3-none-any.whl in dir and returns its
// path: the module tinywheel, whose VALUE is 42.
func Wheel(t testing.TB, dir string) string {
	t.Helper()
	files := map[string]string{
		"tinywheel/__init__.py":                 "VALUE = 42\n",
		"tinywheel-1.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: tinywheel\nVersion: 1.0\n",
		"tinywheel-1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: corral-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"tinywheel-1.0.dist-info/top_level.txt": "tinywheel\n",
	}
	var record strings.Builder
	for _, name := range sortedKeys(files) {
		sum := sha256.Sum256([]byte(files[name]))
		// RECORD's hashes are urlsafe base64 without padding; pip accepts
		// entries without them too, but checks what is there.
		record.WriteString(name + ",sha256=" + b64(sum[:]) + "," + itoa(len(files[name])) + "\n")
	}
	record.WriteString("tinywheel-1.0.dist-info/RECORD,,\n")
	files["tinywheel-1.0.dist-info/RECORD"] = record.String()
	p := filepath.Join(dir, "tinywheel-1.0-py3-none-any.whl")
	writeZip(t, p, files)
	return p
}

// GoDep is the module the Go fixtures depend on.
const (
	GoDep        = "example.com/dep"
	GoDepVersion = "v1.0.0"
)

// GoProxy writes example.com/dep v1.0.0 (package dep, func Answer() int
// returning 42) in the layout of a GOPROXY, which is also the layout of a
// module cache's cache/download directory: dir/example.com/dep/@v/{list,
// v1.0.0.info, v1.0.0.mod, v1.0.0.zip}.
func GoProxy(t testing.TB, dir string) {
	t.Helper()
	v := filepath.Join(dir, GoDep, "@v")
	Write(t, v, map[string]string{
		"list":                 GoDepVersion + "\n",
		GoDepVersion + ".info": `{"Version":"` + GoDepVersion + `","Time":"2024-01-01T00:00:00Z"}` + "\n",
		GoDepVersion + ".mod":  "module " + GoDep + "\n\ngo 1.21\n",
	})
	prefix := GoDep + "@" + GoDepVersion + "/"
	writeZip(t, filepath.Join(v, GoDepVersion+".zip"), map[string]string{
		prefix + "go.mod": "module " + GoDep + "\n\ngo 1.21\n",
		prefix + "dep.go": "package dep\n\n// Answer is the answer.\nfunc Answer() int { return 42 }\n",
	})
}

// GoModule writes a module in dir with a main package and a test: without
// withDep it imports only the standard library; with it, it imports
// example.com/dep (see GoProxy), required in go.mod, with no go.sum (the
// tests run with GOFLAGS=-mod=mod and GOSUMDB=off).
func GoModule(t testing.TB, dir string, withDep bool) {
	files := map[string]string{
		"go.mod":       "module example.com/hello\n\ngo 1.21\n",
		"main.go":      "package main\n\nfunc answer() int { return 42 }\n\nfunc main() { println(answer()) }\n",
		"main_test.go": "package main\n\nimport \"testing\"\n\nfunc TestAnswer(t *testing.T) {\n\tif answer() != 42 {\n\t\tt.Fatal(answer())\n\t}\n}\n",
	}
	if withDep {
		files["go.mod"] += "\nrequire " + GoDep + " " + GoDepVersion + "\n"
		files["main.go"] = "package main\n\nimport \"" + GoDep + "\"\n\nfunc answer() int { return dep.Answer() }\n\nfunc main() { println(answer()) }\n"
	}
	Write(t, dir, files)
}

// CargoConfig is a cargo configuration that makes CargoCrate's program
// print CargoConfigMark (it sets the cfg flag corral_user_config), so a
// test sees whether cargo read it.
const (
	CargoConfig     = "[build]\nrustflags = [\"--cfg\", \"corral_user_config\"]\n"
	CargoConfigMark = "the user's cargo configuration was read"
)

// CargoCrate writes the binary crate "hello" in dir with the path
// dependency "dep" vendored in dir/vendor/dep; `cargo run --offline`
// prints 42, after CargoConfigMark when CargoConfig is in force.
func CargoCrate(t testing.TB, dir string) {
	Write(t, dir, map[string]string{
		"Cargo.toml":            "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2018\"\n\n[dependencies]\ndep = { path = \"vendor/dep\" }\n",
		"src/main.rs":           "fn main() {\n    #[cfg(corral_user_config)]\n    println!(\"" + CargoConfigMark + "\");\n    println!(\"{}\", dep::answer());\n}\n",
		"vendor/dep/Cargo.toml": "[package]\nname = \"dep\"\nversion = \"0.1.0\"\nedition = \"2018\"\n",
		"vendor/dep/src/lib.rs": "pub fn answer() -> i32 {\n    42\n}\n",
	})
}

// TreeHash returns a digest of everything at or below root (names, kinds,
// modes, symlink targets and file contents, not times), leaving out the
// paths of skip and anything below them; a missing root hashes as such.
func TreeHash(t testing.TB, root string, skip ...string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			h.Write([]byte("error " + p + "\n"))
			return nil
		}
		for _, s := range skip {
			if p == s {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		h.Write([]byte(p + " " + info.Mode().String() + "\n"))
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			h.Write([]byte("-> " + target + "\n"))
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			h.Write(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeZip(t testing.TB, path string, files map[string]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for _, name := range sortedKeys(files) {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(files[name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func itoa(n int) string { return strconv.Itoa(n) }
