package dockertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// The toolchains image: the test image's files plus this machine's own
// toolchains, for tests that run real builds in containers (the defaults
// matrix of cmd/corral): node and npm, Go, a JDK (java, javac), python3's
// venv with pip, cargo and rustc, gcc with binutils and the C library's
// headers, make. Like the test image it is a `docker import` of host files
// (nothing is pulled), tagged by a hash of what goes in, so it is built
// once per machine and again when a package upgrade changes a file.
//
// What goes in, beyond the test image:
//   - the programs node, npm, npx, go, java, javac, cargo, rustc, gcc, cc,
//     as, ld, make, mktemp (each symlink on the way kept: /usr/bin/java ->
//     /etc/alternatives/java -> the JDK's);
//   - whole trees: npm's package, Go's root (less its tests, test data,
//     documents, its commands' sources and the tools a build does not
//     run), the JDK's home (less
//     jmods, sources and manuals), python's ensurepip and the wheels it
//     installs (Debian's /usr/share/python-wheels), rustc's target
//     libraries (/usr/lib/rustlib);
//   - the files of the Debian packages that hold gcc's driver, cc1,
//     libgcc, the assembler and linker, the C library's headers and
//     startup files, and the kernel's headers (dpkg -L);
//   - the shared libraries ldd names for every program and library among
//     them, and the targets of symlinks that lead out of a tree;
//   - not gcc's link-time optimizer (lto1, lto-dump) nor the sanitizers'
//     runtimes.
//
// PATH in the image puts Go's bin directory first when it is not a system
// directory (/usr/local/go/bin).

// ToolsNeeded are the programs ToolchainImage puts in the image; each
// must be on this machine (in toolfixture.SystemPath's directories).
var ToolsNeeded = []string{"node", "npm", "go", "java", "javac", "python3", "cargo", "rustc", "gcc", "make", "git"}

// ErrMissingTool is wrapped by ToolchainImage's error when a toolchain is
// not on this machine (the caller skips, or fails where tools are
// required).
var ErrMissingTool = errors.New("a toolchain of the toolchains image is not installed here")

var (
	toolsOnce sync.Once
	toolsRef  string
	toolsErr  error
	toolsNote string
)

// ToolchainImage returns the reference of the toolchains image, importing
// it on first use in this process (once per machine: an image with the
// same tag is reused). It returns an error wrapping ErrMissingTool when a
// toolchain is not installed, naming it; other errors are failures to
// build. The first call's build time and size are logged.
func ToolchainImage(t testing.TB, cli *client.Client) (string, error) {
	t.Helper()
	toolsOnce.Do(func() { toolsRef, toolsNote, toolsErr = buildToolchainImage(cli) })
	if toolsNote != "" {
		t.Log(toolsNote)
		toolsNote = ""
	}
	return toolsRef, toolsErr
}

// toolSearchPath is where the toolchains are looked for: Go's official
// location and the system's directories (never a home directory, whose
// toolchains the unprivileged test user cannot reach). It is
// toolfixture.SystemPath.
var toolSearchPath = []string{"/usr/local/go/bin", "/usr/local/bin", "/usr/bin", "/bin"}

func findTool(name string) (string, error) {
	for _, d := range toolSearchPath {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not in %s", ErrMissingTool, name, strings.Join(toolSearchPath, ":"))
}

func buildToolchainImage(cli *client.Client) (ref, note string, err error) {
	t0 := time.Now()
	base, err := CollectRootfs()
	if err != nil {
		return "", "", err
	}
	fset := newFileSet()
	for _, f := range base.files {
		fset.set[f] = true
	}
	goBin, err := addToolchains(fset)
	if err != nil {
		return "", "", err
	}
	if err := fset.addLibs(); err != nil {
		return "", "", err
	}
	files := fset.list()
	path := "/usr/local/bin:/usr/bin:/bin"
	if goBin != "/usr/bin" && goBin != "/bin" && goBin != "/usr/local/bin" {
		path = goBin + ":" + path
	}
	changes := []string{`ENV PATH=` + path, `CMD ["/bin/bash"]`}
	h := sha256.New()
	fmt.Fprintf(h, "%q\n", changes)
	var size int64
	for _, f := range files {
		st, err := os.Lstat(f)
		if err != nil {
			return "", "", err
		}
		size += st.Size()
		fmt.Fprintf(h, "%s %d %d\n", f, st.Size(), st.ModTime().Unix())
	}
	ref = "corral-test-tools:" + hex.EncodeToString(h.Sum(nil))[:12]
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, fmt.Sprintf("toolchains image %s already here (%d files listed in %s)", ref, len(files), time.Since(t0).Round(time.Millisecond)), nil
	}
	collected := time.Since(t0)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeRootfs(pw, files)) }()
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: pr, SourceName: "-"}, ref, client.ImageImportOptions{Changes: changes})
	if err != nil {
		pr.CloseWithError(err)
		return "", "", fmt.Errorf("docker import of the toolchains image: %w", err)
	}
	msg, _ := io.ReadAll(res)
	res.Close()
	pr.Close()
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", "", fmt.Errorf("imported toolchains image %s not found: %w\n%s", ref, err, bytes.TrimSpace(msg))
	}
	return ref, fmt.Sprintf("toolchains image %s built in %s (files listed in %s): %d files, %d MiB", ref,
		time.Since(t0).Round(time.Millisecond), collected.Round(time.Millisecond), len(files), size>>20), nil
}

// addToolchains adds the toolchains' programs, trees and packages to s and
// returns the directory Go's go program is in.
func addToolchains(s *fileSet) (goBin string, err error) {
	found := map[string]string{}
	for _, name := range ToolsNeeded {
		p, err := findTool(name)
		if err != nil {
			return "", err
		}
		found[name] = p
	}
	goReal, err := filepath.EvalSymlinks(found["go"])
	if err != nil {
		return "", err
	}
	goRoot := filepath.Dir(filepath.Dir(goReal))
	javaReal, err := filepath.EvalSymlinks(found["java"])
	if err != nil {
		return "", err
	}
	javaHome := filepath.Dir(filepath.Dir(javaReal))
	s.skip = toolSkip(goRoot, javaHome)
	// Programs, with every symlink on the way.
	for _, name := range []string{"node", "npm", "npx", "java", "javac", "cargo", "rustc", "gcc", "cc", "as", "ld", "ld.bfd", "make", "mktemp"} {
		p, err := findTool(name)
		if err != nil {
			if name == "npx" || name == "cc" || name == "ld.bfd" {
				continue
			}
			return "", err
		}
		if err := s.addPath(p); err != nil {
			return "", err
		}
	}
	// npm's package (and Debian's shared node modules when npm is
	// Debian's).
	npmRoot, err := packageRoot(found["npm"], "npm")
	if err != nil {
		return "", err
	}
	if err := s.addTree(npmRoot); err != nil {
		return "", err
	}
	if filepath.Dir(npmRoot) == "/usr/share/nodejs" {
		for _, d := range []string{"/usr/share/nodejs", "/usr/lib/nodejs"} {
			if isDir(d) {
				if err := s.addTree(d); err != nil {
					return "", err
				}
			}
		}
	}
	// Go: its root, and go's link in the search path.
	if err := s.addPath(found["go"]); err != nil {
		return "", err
	}
	if err := s.addTree(goRoot); err != nil {
		return "", err
	}
	// The JDK's home.
	if err := s.addTree(javaHome); err != nil {
		return "", err
	}
	// python3's venv: ensurepip (the test image leaves it out) and the
	// wheels Debian's ensurepip installs from.
	out, err := exec.Command(found["python3"], "-c", "import ensurepip, os; print(os.path.dirname(ensurepip.__file__))").Output()
	if err != nil {
		return "", fmt.Errorf("%w: python3 has no ensurepip (apt-get install python3-venv)", ErrMissingTool)
	}
	if err := s.addTree(strings.TrimSpace(string(out))); err != nil {
		return "", err
	}
	if isDir("/usr/share/python-wheels") {
		if err := s.addTree("/usr/share/python-wheels"); err != nil {
			return "", err
		}
	}
	// rustc's target libraries.
	out, err = exec.Command(found["rustc"], "--print", "sysroot").Output()
	if err != nil {
		return "", fmt.Errorf("rustc --print sysroot: %w", err)
	}
	rustlib := filepath.Join(strings.TrimSpace(string(out)), "lib", "rustlib")
	if !isDir(rustlib) {
		return "", fmt.Errorf("%w: rustc's %s is missing (apt-get install rustc)", ErrMissingTool, rustlib)
	}
	if err := s.addTree(rustlib); err != nil {
		return "", err
	}
	// gcc: the packages of its driver, cc1, libgcc, the assembler and
	// linker, and the C library's and the kernel's headers.
	anchors := []string{}
	for _, q := range []string{"-print-prog-name=cc1", "-print-libgcc-file-name"} {
		out, err := exec.Command(found["gcc"], q).Output()
		if err != nil {
			return "", fmt.Errorf("gcc %s: %w", q, err)
		}
		anchors = append(anchors, strings.TrimSpace(string(out)))
	}
	for _, name := range []string{"gcc", "as", "ld"} {
		p, err := findTool(name)
		if err != nil {
			return "", err
		}
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			return "", err
		}
		anchors = append(anchors, r)
	}
	anchors = append(anchors, "/usr/include/stdio.h", "/usr/include/linux/limits.h")
	pkgs := map[string]bool{}
	for _, a := range anchors {
		pkg, err := dpkgOwner(a)
		if err != nil {
			return "", err
		}
		pkgs[pkg] = true
	}
	for _, pkg := range sortedSet(pkgs) {
		if err := s.addPackage(pkg); err != nil {
			return "", err
		}
	}
	return filepath.Dir(found["go"]), nil
}

// packageRoot returns the directory of the node package named name that
// holds the script prog leads to (its package.json names it).
func packageRoot(prog, name string) (string, error) {
	r, err := filepath.EvalSymlinks(prog)
	if err != nil {
		return "", err
	}
	for d := filepath.Dir(r); d != "/"; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "package.json"))
		if err != nil {
			continue
		}
		var pj struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(data, &pj) == nil && pj.Name == name {
			return d, nil
		}
	}
	return "", fmt.Errorf("no package.json naming %s above %s", name, r)
}

// dpkgOwner returns the Debian package that holds path.
func dpkgOwner(path string) (string, error) {
	out, err := exec.Command("dpkg", "-S", path).Output()
	if err != nil {
		return "", fmt.Errorf("dpkg -S %s: %w (the toolchains image takes gcc and the C headers from their Debian packages)", path, err)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.HasPrefix(line, "diversion by") {
			continue
		}
		if pkg, _, ok := strings.Cut(line, ": "); ok {
			return strings.TrimSpace(strings.Split(pkg, ", ")[0]), nil
		}
	}
	return "", fmt.Errorf("dpkg -S %s: no package in %q", path, out)
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// toolSkip returns what stays out of the image: documents, manuals,
// translations and Python's byte code anywhere; in Go's root (goRoot),
// its tests, test data, documents, the sources of its commands and the
// tools a build, a test or vet never runs; in the JDK's home (javaHome), its jmods, sources, manuals
// and demos.
func toolSkip(goRoot, javaHome string) func(string) bool {
	return func(p string) bool {
		for _, s := range []string{"/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/locale/", "/usr/share/lintian/",
			"/usr/share/bug/", "/usr/share/gdb/", "/__pycache__/"} {
			if strings.Contains(p+"/", s) {
				return true
			}
		}
		// gcc's link-time optimizer and its dump tool, and the sanitizers'
		// runtimes: 80 MiB no plain build uses.
		base := filepath.Base(p)
		if base == "lto1" || strings.Contains(base, "lto-dump") {
			return true
		}
		for _, san := range []string{"libasan.", "libtsan.", "liblsan.", "libubsan.", "libhwasan."} {
			if strings.HasPrefix(base, san) {
				return true
			}
		}
		if rest, ok := strings.CutPrefix(p, goRoot+"/"); ok {
			if strings.HasSuffix(p, "_test.go") || strings.Contains(p+"/", "/testdata/") {
				return true
			}
			for _, d := range []string{"test/", "doc/", "api/", "misc/", "src/cmd/"} {
				if strings.HasPrefix(rest+"/", d) {
					return true
				}
			}
			if tool, ok := strings.CutPrefix(rest, "pkg/tool/"); ok {
				if _, name, ok := strings.Cut(tool, "/"); ok {
					switch name {
					case "asm", "buildid", "cgo", "compile", "cover", "link", "pack", "test2json", "vet":
					default:
						return true
					}
				}
			}
		}
		if rest, ok := strings.CutPrefix(p, javaHome+"/"); ok {
			for _, d := range []string{"jmods/", "man/", "demo/", "sample/", "lib/src.zip/"} {
				if strings.HasPrefix(rest+"/", d) {
					return true
				}
			}
		}
		return false
	}
}

// fileSet is the host files of an image (paths as they are on the host,
// symlinks kept as symlinks), and the dynamically linked programs and
// libraries among them, whose libraries addLibs adds.
type fileSet struct {
	set  map[string]bool
	elfs []string
	skip func(string) bool
	seen map[string]bool // trees walked
}

func newFileSet() *fileSet {
	return &fileSet{set: map[string]bool{}, skip: func(string) bool { return false }, seen: map[string]bool{}}
}

// mergedUsr are the top-level symlinks of a merged-/usr system, which the
// image has already (writeRootfs).
var mergedUsr = map[string]bool{"/bin": true, "/lib": true, "/lib64": true, "/sbin": true}

// addPath adds the file p: every symlink met on the way to it (in its
// directories too), and what it finally is: a regular file, or a
// directory's tree.
func (s *fileSet) addPath(p string) error { return s.addPathDepth(filepath.Clean(p), 0) }

func (s *fileSet) addPathDepth(p string, depth int) error {
	if depth > 40 {
		return fmt.Errorf("too many symlinks at %s", p)
	}
	dir, err := s.realDir(filepath.Dir(p), depth+1)
	if err != nil {
		return err
	}
	q := filepath.Join(dir, filepath.Base(p))
	if s.skip(q) {
		return nil
	}
	st, err := os.Lstat(q)
	if err != nil {
		return nil // a dangling link stays dangling in the image too
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		s.set[q] = true
		target, err := os.Readlink(q)
		if err != nil {
			return err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		return s.addPathDepth(filepath.Clean(target), depth+1)
	case st.Mode().IsRegular():
		s.addFile(q)
	case st.IsDir():
		return s.addTree(q)
	}
	return nil
}

// realDir returns the real path of the directory d, adding every symlink
// on the way to it (but the merged-/usr ones).
func (s *fileSet) realDir(d string, depth int) (string, error) {
	if d == "/" {
		return d, nil
	}
	if depth > 40 {
		return "", fmt.Errorf("too many symlinks at %s", d)
	}
	parent, err := s.realDir(filepath.Dir(d), depth)
	if err != nil {
		return "", err
	}
	q := filepath.Join(parent, filepath.Base(d))
	st, err := os.Lstat(q)
	if err != nil || st.Mode()&fs.ModeSymlink == 0 {
		return q, nil
	}
	if !mergedUsr[q] {
		s.set[q] = true
	}
	target, err := os.Readlink(q)
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(parent, target)
	}
	return s.realDir(filepath.Clean(target), depth+1)
}

func (s *fileSet) addFile(p string) {
	if s.set[p] {
		return
	}
	s.set[p] = true
	if isDynamicELF(p) {
		s.elfs = append(s.elfs, p)
	}
}

// addTree adds every file and symlink below root (real path), less what
// skip leaves out; a symlink that leads out of the tree brings its target.
func (s *fileSet) addTree(root string) error {
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	if s.seen[root] {
		return nil
	}
	s.seen[root] = true
	var links []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if s.skip(p) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			s.set[p] = true
			links = append(links, p)
		case d.Type().IsRegular():
			s.addFile(p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range links {
		target, err := os.Readlink(l)
		if err != nil {
			continue
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(l), target)
		}
		if target = filepath.Clean(target); !strings.HasPrefix(target+"/", root+"/") {
			if err := s.addPath(target); err != nil {
				return err
			}
		}
	}
	return nil
}

// addPackage adds the files of the installed Debian package pkg.
func (s *fileSet) addPackage(pkg string) error {
	out, err := exec.Command("dpkg", "-L", pkg).Output()
	if err != nil {
		return fmt.Errorf("dpkg -L %s: %w", pkg, err)
	}
	for p := range strings.SplitSeq(string(out), "\n") {
		if p = strings.TrimSpace(p); p == "" || p == "/." {
			continue
		}
		st, err := os.Lstat(p)
		if err != nil || st.IsDir() {
			continue // a directory's files are listed too
		}
		if err := s.addPath(p); err != nil {
			return err
		}
	}
	return nil
}

// addLibs adds the shared libraries ldd names for every dynamically
// linked file of the set (and theirs: ldd lists the whole closure).
func (s *fileSet) addLibs() error {
	for _, e := range s.elfs {
		out, err := exec.Command("ldd", e).Output()
		if err != nil {
			continue // not a program ldd can load (a plugin of another architecture, say)
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					if err := s.addPath(f); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// list returns the set's files, sorted.
func (s *fileSet) list() []string {
	out := make([]string, 0, len(s.set))
	for f := range s.set {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}
