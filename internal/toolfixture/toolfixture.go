// Package toolfixture writes the tiny projects and packages that corral's
// tests build and install with real toolchains inside a sandbox, with no
// network: an npm package, a Python wheel, Go modules (one with a
// dependency served by a file:// GOPROXY or found in a module cache), cargo
// crates, a one-class Java program, a C program with its Makefile and a
// bare git repository. It also finds the tools in the system's
// directories, never in a home directory (the unprivileged test user
// cannot reach root's ~/.cargo). For tests only.
//
// A missing tool skips the test, except where CORRAL_REQUIRE_TOOLS=1 (set
// by .ci/run for both of its passes): there it fails the test, naming the
// package that brings it, since CI installs them all.
package toolfixture

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
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
	"time"
)

// SystemPath is the PATH the tests give sandboxed toolchains: Go's
// official location and the system's directories.
const SystemPath = "/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin"

// packages names the Debian package that brings each tool.
var packages = map[string]string{
	"go": "golang (or Go in /usr/local/go)", "npm": "npm", "node": "nodejs",
	"python3": "python3 and python3-venv", "cargo": "cargo",
	"java": "openjdk-17-jdk-headless", "javac": "openjdk-17-jdk-headless",
}

// RequireEnv is the variable that turns a missing tool from a skip into a
// failure ("1"); .ci/run sets it.
const RequireEnv = "CORRAL_REQUIRE_TOOLS"

// Required reports whether a missing tool must fail the test
// (CORRAL_REQUIRE_TOOLS=1) rather than skip it.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Missing skips the test with msg, or fails it where Required.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if Required() {
		t.Fatal(msg + "; " + RequireEnv + "=1 forbids skipping")
	}
	t.Skip(msg)
}

// Tool returns the absolute path of name in SystemPath's directories, or
// skips the test naming the package to install (fails it where Required).
// CI installs them all.
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
	Missing(t, name+" is not installed in "+SystemPath+" (apt-get install "+pkg+"; .ci/run installs it)")
	return ""
}

// RequireVenv skips (fails where Required) unless python3 can make a
// virtual environment with pip (Debian's python3-venv).
func RequireVenv(t testing.TB) {
	t.Helper()
	py := Tool(t, "python3")
	if err := exec.Command(py, "-c", "import venv, ensurepip").Run(); err != nil {
		Missing(t, "python3 cannot make a venv with pip (apt-get install python3-venv; .ci/run installs it)")
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

// NpmTarball writes tiny-1.0.0.tgz in dir, the package NpmPackage
// describes as `npm pack` would make it (a gzipped tar whose entries lie
// under package/), without npm, and returns its path.
func NpmTarball(t testing.TB, dir string) string {
	t.Helper()
	files := map[string]string{
		"package/package.json": `{"name": "tiny", "version": "1.0.0", "main": "index.js", "license": "MIT"}` + "\n",
		"package/index.js":     "module.exports = 42;\n",
	}
	p := filepath.Join(dir, "tiny-1.0.0.tgz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, name := range sortedKeys(files) {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), ModTime: time.Unix(499162500, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[name])); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
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

// PlainCrate writes the binary crate "plain" in dir, without
// dependencies: `cargo build --offline` makes target/debug/plain, which
// prints 42.
func PlainCrate(t testing.TB, dir string) {
	Write(t, dir, map[string]string{
		"Cargo.toml":  "[package]\nname = \"plain\"\nversion = \"0.1.0\"\nedition = \"2018\"\n",
		"src/main.rs": "fn main() {\n    println!(\"{}\", 6 * 7);\n}\n",
	})
}

// JavaClass writes Hello.java in dir, one class whose main prints 42.
func JavaClass(t testing.TB, dir string) {
	Write(t, dir, map[string]string{
		"Hello.java": "public class Hello {\n    public static void main(String[] args) {\n        System.out.println(6 * 7);\n    }\n}\n",
	})
}

// CProgram writes hello.c (a program that prints 42) and a Makefile whose
// default target builds it as hello with $(CC) in dir.
func CProgram(t testing.TB, dir string) {
	Write(t, dir, map[string]string{
		"hello.c":  "#include <stdio.h>\n\nint main(void) {\n    printf(\"%d\\n\", 6 * 7);\n    return 0;\n}\n",
		"Makefile": "hello: hello.c\n\t$(CC) -o $@ hello.c\n",
	})
}

// GitRepo makes the bare repository dir (a directory that does not exist
// yet, named like repo.git) with the host's git: one commit on main
// holding the file answer, whose content is "42\n". Everything in it is
// readable by everyone. It needs git.
func GitRepo(t testing.TB, dir string) {
	t.Helper()
	git := Tool(t, "git")
	src := dir + ".src"
	Write(t, src, map[string]string{"answer": "42\n"})
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=corral", "GIT_AUTHOR_EMAIL=corral@example.test",
		"GIT_COMMITTER_NAME=corral", "GIT_COMMITTER_EMAIL=corral@example.test", "GIT_AUTHOR_DATE=2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2024-01-01T00:00:00Z")
	for _, args := range [][]string{
		{"-C", src, "init", "-q", "-b", "main"},
		{"-C", src, "add", "answer"},
		{"-C", src, "commit", "-q", "-m", "the answer"},
		{"clone", "-q", "--bare", src, dir},
	} {
		cmd := exec.Command(git, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
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
